// The parameter server of async and ssp modes: N shard actors (shard.hpp),
// each owning a part of the flat parameter buffer and its optimizer state
// (partition.hpp), and one parameter_server actor in front of them that
// speaks for the whole.
//
//   coordinator ──get_state / set_state / position / counters / view_clocks──► parameter_server
//                                                                             │ asks every shard,
//   replica on this process ──push (its part)──► shard 0 … shard N-1  ◄───────┘ gathers / scatters
//   replica on another node ──push (its part, data plane)──► the coordinator's PushServer ──► shard i
//
// Replicas in the coordinator's process push straight to the shards' cores:
// one staging buffer in the packed layout, each shard getting a view of
// its part (no copy per shard; actors/gradient_sink.hpp). Replicas on other
// nodes push each part on the data plane (net/push/), to the coordinator's
// PushServer or to the ps task hosting the shard. The front actor's own
// `push` (the whole gradient, packed here and pushed to every shard) serves
// a caller that has no partition.
//
// The parameter_server actor answers exactly as a single shard owning the
// whole buffer would, so the coordinator does not know how many shards
// there are:
//   push, GradientPush        -> Tensor        every shard applies its part; the fresh whole
//   get_state                 -> ReplicaState  the shards' parts gathered into one state
//   set_state, ReplicaState   -> ok            the state scattered into the shards' parts
//   position / view_clocks    -> ok            to every shard
//   counters                  -> ServerCounters the least `applied`, the largest lead and
//                                              drop count, and each shard's `applied`
// The coordinator asks for the state only at step boundaries, when no push
// is in flight, so the parts it gathers are of one consistent state: every
// shard has applied the same pushes (shard.hpp). SSP clocks and grants stay
// with the coordinator.
//
// With one shard (ps_shards = 1, the default) the shard owns the whole
// buffer in one range and the result is bit for bit the single parameter
// server troupe had before shards (tests/actors/test_ps_shards.cpp).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <vector>

#include "actors/messages.hpp"
#include "actors/ps/partition.hpp"
#include "actors/ps/shard.hpp"  // ShardCore
#include "models/optimizer.hpp"
#include "models/schedule.hpp"
#include "models/spec.hpp"

namespace troupe::actors {

class JobMetrics;  // actors/job_metrics.hpp

namespace ps {

struct ParameterServerConfig {
  std::shared_ptr<const Partition> partition;  // without empty shards
  models::OptimizerConfig optimizer;
  // Where weight decay applies in the whole flat buffer
  // (Model::decayed_ranges); each shard gets its part (Partition::ranges_in).
  models::FlatRanges decayed;
  std::shared_ptr<const models::LrSchedule> schedule;
  int replicas = 1;
  std::shared_ptr<JobMetrics> metrics;       // staleness, recorded by shard 0
  std::chrono::milliseconds timeout{60000};  // each question to a shard
};

// What a job holds: the front actor for the coordinator and remote nodes,
// and the shards for the replicas of its own process. The front is linked
// to every shard: an exit of one ends all.
struct ParameterServer {
  ps_actor_t front;
  std::vector<ps_actor_t> shards;  // by index in `partition`
  // The shards' cores when they run in this process (shards[i]'s is
  // cores[i]), for a PushServer; empty when they run on ps tasks.
  std::vector<std::shared_ptr<ShardCore>> cores;
  std::shared_ptr<const Partition> partition;
};

ParameterServer spawn_parameter_server(caf::actor_system& system, const ParameterServerConfig& config);

// The front over shards that run elsewhere (on ps tasks: shards[i] is shard
// i of config.partition, spawned there by the task, ps_node.cpp). The front
// is linked to each: losing a ps task ends it.
ParameterServer front_over(caf::actor_system& system, const ParameterServerConfig& config,
                           std::vector<ps_actor_t> shards);

// The partition of `spec`'s flat parameters for `shards` shards (whole
// layers round-robin, layers over `split_above` floats split), without the
// shards that would own nothing. Every node computes the same one from the
// job (the coordinator, workers and ps tasks).
Partition partition_for(const models::ModelSpec& spec, int shards, std::int64_t split_above);

// Shard s's packed part of a whole state (parameters and every optimizer
// buffer; scalars, clocks as they are), and the part put back into a whole
// state (whose tensors are allocated on the first part).
ReplicaState state_part(const Partition& partition, int shard, const ReplicaState& whole);
void put_state_part(const Partition& partition, int shard, const ReplicaState& part, ReplicaState& whole);

}  // namespace ps
}  // namespace troupe::actors
