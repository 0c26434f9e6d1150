// Reducer actor in its parameter-server role (async and ssp modes): holds
// the master parameters and the optimizer state, applies each pushed
// gradient as it arrives, and returns fresh parameters to the pusher. In
// sync mode it is idle: replicas all-reduce among themselves (net::Collective)
// and apply identical updates.
//
// Protocol:
//   push, GradientPush        -> Tensor (fresh parameters)   apply one gradient
//   get_state                 -> ReplicaState                a copy of the master state
//   set_state, ReplicaState   -> ok                          replace it (mode switches)
//   position, Position, clocks-> ok                          where training resumes
//   counters                  -> ServerCounters              accounting, staleness
//   reconfig, view, clocks    -> ok                          a new membership view (its
//                                                            replicas' clocks, by rank)
// A push from another view is dropped (counted, answered with an error).
//
// Every push is applied exactly once and counted (`applied`). The staleness
// bound of ssp is enforced by the coordinator's grants; the reducer measures
// it independently: for each push it records how far the pusher's starting
// clock was ahead of the slowest replica's clock as the server has seen it.
// For /metrics it also records each push's staleness: the updates it applied
// between the pusher's receiving parameters and this push (JobMetrics).
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/messages.hpp"
#include "models/optimizer.hpp"
#include "models/schedule.hpp"

namespace troupe::actors {

class JobMetrics;  // actors/job_metrics.hpp

struct ReducerConfig {
  std::int64_t parameter_count = 0;
  models::OptimizerConfig optimizer;
  std::shared_ptr<const models::LrSchedule> schedule;
  int replicas = 1;
  std::shared_ptr<JobMetrics> metrics;  // null: no staleness recorded
};

struct ReducerState {
  ReducerConfig config;
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
  static inline const char* name = "reducer";
};

caf::behavior reducer_actor(caf::stateful_actor<ReducerState>* self, ReducerConfig config);

}  // namespace troupe::actors
