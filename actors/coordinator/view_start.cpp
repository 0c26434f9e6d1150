#include "actors/coordinator/view_start.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace troupe::actors {

namespace {

ReplicaRef ref_of(const std::vector<NodeInfo>& nodes, std::size_t rank) {
  for (const auto& n : nodes)
    if (static_cast<int>(rank) >= n.first_rank && static_cast<int>(rank) < n.first_rank + n.replicas)
      return ReplicaRef{n.index, static_cast<int>(rank) - n.first_rank};
  throw std::logic_error("view start: rank " + std::to_string(rank) + " belongs to no node of the view");
}

}  // namespace

ViewStart plan_view_start(const ViewEnd& end) {
  ViewStart out;
  const std::size_t world = end.clocks.size();
  bool any = false;
  for (std::size_t r = 0; r < world; ++r) {
    if (r >= end.alive.size() || !end.alive[r]) continue;
    if (!any || end.clocks[r] > out.clock) {
      out.clock = end.clocks[r];
      out.source = ref_of(end.nodes, r);
    }
    any = true;
  }
  if (!any) {  // nobody left to train: the clock of the slowest, nothing to hand over
    out.clock = world ? *std::min_element(end.clocks.begin(), end.clocks.end()) : 0;
    return out;
  }
  for (std::size_t r = 0; r < world; ++r) {
    const bool alive = r < end.alive.size() && end.alive[r];
    if (alive && end.clocks[r] < out.clock) {
      if (end.clocks[r] < out.clock - 1)
        throw std::logic_error("replica " + std::to_string(r) + " is at step " + std::to_string(end.clocks[r]) +
                               " and another at step " + std::to_string(out.clock) +
                               ": synchronous replicas can be one step apart at most");
      out.behind.push_back(ref_of(end.nodes, r));
    }
    if (!alive && end.clocks[r] > out.clock) {
      if (end.clocks[r] > out.clock + 1)
        throw std::logic_error("lost replica " + std::to_string(r) + " reported step " + std::to_string(end.clocks[r]) +
                               " but no survivor is past step " + std::to_string(out.clock));
      out.undone.push_back(r);
      continue;
    }
    // Steps completed (someone is at out.clock) whose report for rank r
    // never came: its batches were in the sum all the same.
    const data::Shard shard{static_cast<int>(r), static_cast<int>(world)};
    for (std::int64_t c = std::max(end.clocks[r], end.segment_clock) + 1; c <= out.clock; ++c) {
      out.unreported_examples += data::batch_examples(end.data, shard, end.segment_offset, c - 1 - end.segment_clock);
      ++out.unreported_batches;
    }
  }
  return out;
}

}  // namespace troupe::actors
