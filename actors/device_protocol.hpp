// The device actor's protocol (actors/device.hpp), as CAF 0.17 typed
// interfaces the compiler checks on both sides: what a device accepts
// (device_actor_t), and what it tells the coordinator that granted its steps
// (device_reports_t, a part of the coordinator's interface).
//
// Kept apart from device.hpp so that what a device uses (the gradient
// sink, which sends its requests as the device) can name the device's
// handle without the device's state.
//
// Across nodes a device's handle travels as a plain caf::actor (formed
// and FormedView carry them) and is cast to device_actor_t where it
// arrives: the remote proxy checks nothing either way, and the interfaces
// here are what both sides compile against.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "models/trainer.hpp"

namespace troupe::actors {

// What a device accepts. From the coordinator unless noted:
//   grant, Grant              run steps until clock == grant.up_to, in grant.mode
//   step                      (from itself) run one step if the grant allows
//   get_state                 -> ReplicaState   parameters, optimizer state, running statistics
//   set_state, ReplicaState   -> ok             replace them (mode switches, views)
//   set_state, ReplicaState, ReplicaPosition
//                             -> ok             and move to that clock and data position
//   model_state               -> Tensor         the running statistics alone (BatchNorm)
//   model_state, Tensor       -> ok             replace them
//   digest                    -> string         SHA-256 (hex) of the state
//   halt                      -> clock          no step beyond the one in progress
//   reconfig, ViewAssignment  -> ok             enter a new membership view
//   evaluate                  -> EpochResult    the replica on the test split
using device_actor_t = caf::typed_actor<
    caf::reacts_to<grant_atom, Grant>, caf::reacts_to<step_atom>, caf::replies_to<get_state_atom>::with<ReplicaState>,
    caf::replies_to<digest_atom>::with<std::string>, caf::replies_to<set_state_atom, ReplicaState>::with<caf::ok_atom>,
    caf::replies_to<set_state_atom, ReplicaState, ReplicaPosition>::with<caf::ok_atom>,
    caf::replies_to<model_state_atom>::with<Tensor>, caf::replies_to<model_state_atom, Tensor>::with<caf::ok_atom>,
    caf::replies_to<halt_atom>::with<std::int64_t>, caf::replies_to<reconfig_atom, ViewAssignment>::with<caf::ok_atom>,
    caf::replies_to<evaluate_atom>::with<models::EpochResult>>;

// What a device reports to the coordinator, which it learns from the
// sender of its first grant:
//   step_done, StepReport                       a step is done (applied)
//   failed, rank, why                           the replica failed; the job fails
//   step_aborted, view, rank, clock, why        a step's all-reduce or push was
//                                               interrupted (elastic): nothing of it
//                                               applied, the replica waits for a view
using device_reports_t =
    caf::typed_actor<caf::reacts_to<step_done_atom, StepReport>, caf::reacts_to<failed_atom, int, std::string>,
                     caf::reacts_to<step_aborted_atom, std::uint32_t, int, std::int64_t, std::string>>;

// Between nodes a list of devices travels as plain handles (CAF knows
// std::vector<caf::actor>); these convert at either end.
inline std::vector<caf::actor> to_actors(const std::vector<device_actor_t>& devices) {
  std::vector<caf::actor> out;
  out.reserve(devices.size());
  for (const auto& d : devices) out.push_back(caf::actor_cast<caf::actor>(d));
  return out;
}
inline std::vector<device_actor_t> to_devices(const std::vector<caf::actor>& handles) {
  std::vector<device_actor_t> out;
  out.reserve(handles.size());
  for (const auto& h : handles) out.push_back(caf::actor_cast<device_actor_t>(h));
  return out;
}

}  // namespace troupe::actors
