// What a push carries, in memory: the gradient part a replica sends a
// shard, and what the shard gives back. The push link (push_link.hpp) moves
// them between processes in its own frames; inside one process the device
// actor hands them to a shard's core directly, and the CAF messages of
// actors/messages.hpp carry the same GradientPush (serialised there).
// Nothing of CAF here.
#pragma once

#include <cstdint>
#include <utility>

#include "kernels/tensor.hpp"

namespace troupe::net::push {

using kernels::Tensor;

// One replica's gradient part for one shard, at one step.
struct GradientPush {
  std::uint32_t view = 0;  // a push from an older view is dropped, never applied
  int rank = 0;
  std::int64_t clock = 0;  // the replica's clock after this step
  Tensor gradient;         // a copy: the replica reuses its buffer
};

// What the server's `apply` gives back for one push: the part's fresh
// parameters and, where the shard measures it, the push's staleness
// (actors/ps/shard.hpp). A Tensor converts to one without a staleness.
struct AppliedPush {
  AppliedPush() = default;
  AppliedPush(Tensor fresh_, std::int64_t staleness_ = -1)
      : fresh(std::move(fresh_)), staleness(staleness_) {}  // NOLINT: implicit on purpose
  Tensor fresh;
  std::int64_t staleness = -1;
};

}  // namespace troupe::net::push
