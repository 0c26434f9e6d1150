// The clock and the deadline that bound every wait in troupe's networking:
// a collective's wait, a socket read or write, a handshake, a push. Its own
// header, so that the socket layer (net/transport/) and whatever travels on
// it (the gate, the push link, the control client) need not include the
// collective interface, and with it the kernels' Tensor, to name a time.
#pragma once

#include <chrono>

namespace troupe::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

}  // namespace troupe::net
