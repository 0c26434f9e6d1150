// Parameter-server shard (async and ssp modes): owns one part of the master
// parameters and the optimizer state of that part (actors/ps/partition.hpp,
// packed: its pieces of the flat buffer one after the other), applies each
// pushed gradient part as it arrives, and returns its fresh parameters to
// the pusher. With one shard it is the whole buffer: the single parameter
// server troupe had before issue 17, bit for bit. In sync mode shards are
// idle: replicas all-reduce among themselves (net::Collective) and apply
// identical updates.
//
// Protocol (the coordinator talks to the shards through the
// parameter_server actor, parameter_server.hpp; replicas push to each shard):
//   push, GradientPush        -> Tensor (fresh parameters)   apply one gradient part
//   get_state                 -> ReplicaState                a copy of this part's state
//   set_state, ReplicaState   -> ok                          replace it (mode switches)
//   position, Position, clocks-> ok                          where training resumes
//   counters                  -> ServerCounters              accounting, staleness
//   reconfig, view, clocks    -> ok                          a new membership view (its
//                                                            replicas' clocks, by rank)
// A push from another view is dropped (counted, answered with an error).
//
// Every push is applied exactly once and counted (`applied`): every shard
// applies every push, each in the order its own mailbox received them, so
// at a step boundary (no push in flight) all shards have applied the same
// pushes. The staleness bound of ssp is enforced by the coordinator's
// grants; each shard measures it independently: for each push it records
// how far the pusher's starting clock was ahead of the slowest replica's
// clock as the shard has seen it. For /metrics one shard (the one given
// `metrics`) also records each push's staleness: the updates it applied
// between the pusher's receiving parameters and this push (JobMetrics).
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/messages.hpp"
#include "models/optimizer.hpp"
#include "models/schedule.hpp"

namespace troupe::actors {

class JobMetrics;  // actors/job_metrics.hpp

namespace ps {

struct ShardConfig {
  int index = 0;                 // in the partition
  std::int64_t size = 0;         // floats it owns (Partition::size)
  models::OptimizerConfig optimizer;
  std::shared_ptr<const models::LrSchedule> schedule;
  int replicas = 1;
  std::shared_ptr<JobMetrics> metrics;  // null: no staleness recorded (every shard but one)
};

struct ShardState {
  ShardConfig config;
  Tensor master;
  std::unique_ptr<models::Optimizer> optimizer;
  Position position;
  std::int64_t applied_since_position = 0;
  std::vector<std::int64_t> clocks;
  // By rank: `counters.applied` when the replica last received parameters
  // (a push's answer, or the state every replica shares after a switch to
  // async), for staleness.
  std::vector<std::int64_t> pulled_at;
  std::uint32_t view = 0;
  ServerCounters counters;
  static inline const char* name = "ps_shard";
};

caf::behavior shard_actor(caf::stateful_actor<ShardState>* self, ShardConfig config);

}  // namespace ps
}  // namespace troupe::actors
