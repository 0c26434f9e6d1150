// A loopback port for a test's server (util/loopback_port.hpp: one that was
// free a moment ago, below the kernel's ephemeral range).
#pragma once

#include "util/loopback_port.hpp"

namespace troupe::testing {
using util::free_loopback_port;
}  // namespace troupe::testing
