// The parameter server's protocol, as a CAF 0.17 typed interface the
// compiler checks on both sides. A shard (shard.hpp) and the front over
// the shards (parameter_server.hpp) speak the same one: the front answers
// as one shard owning the whole buffer would, so the coordinator does not
// know how many shards there are.
//   push, GradientPush          -> Tensor         apply a gradient; the fresh parameters
//   get_state                   -> ReplicaState   a copy of the state (a shard: its part)
//   set_state, ReplicaState     -> ok             replace it (mode switches, views)
//   position, Position, clocks  -> ok             where training resumes
//   counters                    -> ServerCounters accounting, staleness
//   view_clocks, view, clocks   -> ok             enter a membership view at these
//                                                 replica clocks (by rank)
//
// A ps task's shards reach the coordinator as plain caf::actor handles
// (a node's message carries them) and are cast to ps_actor_t where they
// arrive: the remote proxy checks nothing, the interface is what both sides
// compile against.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <vector>

#include "actors/messages.hpp"
#include "net/push/frames.hpp"  // GradientPush

namespace troupe::actors::ps {

using ps_actor_t =
    caf::typed_actor<caf::replies_to<push_atom, GradientPush>::with<Tensor>,
                     caf::replies_to<get_state_atom>::with<ReplicaState>,
                     caf::replies_to<set_state_atom, ReplicaState>::with<caf::ok_atom>,
                     caf::replies_to<position_atom, Position, std::vector<std::int64_t>>::with<caf::ok_atom>,
                     caf::replies_to<counters_atom>::with<ServerCounters>,
                     caf::replies_to<view_clocks_atom, std::uint32_t, std::vector<std::int64_t>>::with<caf::ok_atom>>;

inline std::vector<ps_actor_t> to_ps_actors(const std::vector<caf::actor>& handles) {
  std::vector<ps_actor_t> out;
  out.reserve(handles.size());
  for (const auto& h : handles) out.push_back(caf::actor_cast<ps_actor_t>(h));
  return out;
}
inline std::vector<caf::actor> to_actors(const std::vector<ps_actor_t>& shards) {
  std::vector<caf::actor> out;
  out.reserve(shards.size());
  for (const auto& s : shards) out.push_back(caf::actor_cast<caf::actor>(s));
  return out;
}

}  // namespace troupe::actors::ps
