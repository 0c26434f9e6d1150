// Parameter-server shard (async and ssp modes): owns one part of the master
// parameters and the optimizer state of that part (actors/ps/partition.hpp,
// packed: its pieces of the flat buffer one after the other), applies each
// pushed gradient part as it arrives, and returns its fresh parameters to
// the pusher. With one shard it is the whole buffer: the single parameter
// server troupe had before the shards, bit for bit. In sync mode shards are
// idle: replicas all-reduce among themselves (net::Collective) and apply
// identical updates.
//
// Two parts: ShardCore, the shard itself (its part of the parameters, the
// optimizer state, the clocks and the counters, behind one mutex), and
// shard_actor, the CAF face the coordinator talks to. Pushes reach the
// core directly, never through the actor: a PushServer (net/push/push_link.hpp)
// applies a push from another node on the connection's thread (shard_apply
// below), and a replica of the shard's own process on its device actor's
// thread (DeviceConfig::shard_cores). No message to an actor and back, so a
// push costs no thread switch beyond the link's own (the push round
// trip; docs/BENCHMARKS.md, "Parameter-server shards on ps tasks"). The
// actor still answers a push message (a replica given only the actors).
//
// Protocol of the actor (the coordinator talks to the shards through the
// parameter_server actor, parameter_server.hpp; replicas push to each shard):
//   push, GradientPush        -> Tensor (fresh parameters)   apply one gradient part
//   get_state                 -> ReplicaState                a copy of this part's state
//   set_state, ReplicaState   -> ok                          replace it (mode switches)
//   position, Position, clocks-> ok                          where training resumes
//   counters                  -> ServerCounters              accounting, staleness
//   view_clocks, view, clocks -> ok                          a new membership view (its
//                                                            replicas' clocks, by rank)
// A push from another view is dropped (counted, answered with an error).
//
// Every push is applied exactly once and counted (`applied`): every shard
// applies every push, each in the order its pushes take the core's mutex,
// so at a step boundary (no push in flight) all shards have applied the
// same pushes. The staleness bound of ssp is enforced by the coordinator's
// grants; each shard measures it independently: for each push it records
// how far the pusher's starting clock was ahead of the slowest replica's
// clock as the shard has seen it. For /metrics one shard (the one given
// `record_staleness`) also records each push's staleness: the updates it applied
// between the pusher's receiving parameters and this push (JobMetrics).
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/messages.hpp"
#include "actors/ps/ps_protocol.hpp"
#include "models/optimizer.hpp"
#include "models/schedule.hpp"
#include "net/push/frames.hpp"  // GradientPush, AppliedPush

namespace troupe::actors {

namespace ps {

using net::push::AppliedPush;

struct ShardConfig {
  int index = 0;          // in the partition
  std::int64_t size = 0;  // floats it owns (Partition::size)
  models::OptimizerConfig optimizer;
  // Where weight decay applies in this shard's packed buffer
  // (Partition::ranges_in of Model::decayed_ranges); empty: nowhere, unless
  // optimizer.decay_all.
  models::FlatRanges decayed;
  std::shared_ptr<const models::LrSchedule> schedule;
  int replicas = 1;
  // Called with each applied push's staleness (view, rank, updates), under
  // the shard's mutex; empty: none recorded (every shard but one; a job
  // gives shard 0 JobMetrics::record_push_staleness).
  std::function<void(std::uint32_t view, int rank, std::int64_t updates)> record_staleness;
};

// The shard: every member function takes the mutex, so pushes from
// PushServer threads and the actor's messages may come from any thread.
class ShardCore {
 public:
  explicit ShardCore(ShardConfig config);
  ShardCore(const ShardCore&) = delete;
  ShardCore& operator=(const ShardCore&) = delete;

  const ShardConfig& config() const { return config_; }
  // Applies one gradient part and returns a copy of the fresh part with the
  // push's staleness. Throws std::runtime_error saying why when the push is
  // dropped (another view, a rank out of range, another size): nothing
  // applied, `dropped` counted.
  AppliedPush apply(const GradientPush& push);
  // The same, with no copy of the fresh part: `read_fresh` reads it under
  // the mutex (a replica of this process unpacks it into its model), and
  // the push's staleness is returned.
  std::int64_t apply(const GradientPush& push, const std::function<void(const Tensor& fresh)>& read_fresh);
  ReplicaState state() const;  // a copy (clock, parameters, optimizer buffers, clocks)
  void set_state(const ReplicaState& state);
  void set_position(const Position& position, const std::vector<std::int64_t>& clocks);
  void reconfig(std::uint32_t view, const std::vector<std::int64_t>& clocks);
  ServerCounters counters() const;
  // From here on every apply() is refused with `why` (the shard's actor
  // ended: the job is over or failed, and what the core holds is no longer
  // gathered or checkpointed, so a push applied to it would be lost).
  void close(std::string why);
  std::string closed() const;  // why apply() refuses; empty while open

 private:
  // Staleness counts from here for every replica (under mutex_).
  void everyone_pulled();

  const ShardConfig config_;
  mutable std::mutex mutex_;
  Tensor master_;
  std::unique_ptr<models::Optimizer> optimizer_;
  Position position_;
  std::int64_t applied_since_position_ = 0;
  std::vector<std::int64_t> clocks_;
  // By rank: `counters_.applied` when the replica last received parameters
  // (a push's answer, or the state every replica shares after a switch to
  // async), for staleness.
  std::vector<std::int64_t> pulled_at_;
  std::uint32_t view_ = 0;
  ServerCounters counters_;
  std::string closed_;  // why apply() refuses; empty while open
};

struct ShardState {
  std::shared_ptr<ShardCore> core;
  static inline const char* name = "ps_shard";
};

// ---- shard_actor.cpp: the CAF face (the rest needs no actor system) ----

// The actor over `core`. When it ends, it closes the core.
ps_actor_t::behavior_type shard_actor(ps_actor_t::stateful_pointer<ShardState> self, std::shared_ptr<ShardCore> core);

// A shard of this process: its actor (for CAF) and its core (for the
// PushServer).
struct LocalShard {
  ps_actor_t actor;
  std::shared_ptr<ShardCore> core;
};

// Where the shard's actor runs.
enum class ShardThread {
  // A thread of its own: the coordinator's shards. Their pushes are applied
  // to the cores on the pushing device's (or the PushServer's) thread; the
  // actor answers state, positions and views, and on a thread of its own
  // it takes none of CAF's workers, which would poll the replicas' cores.
  detached,
  // CAF's scheduler: a ps task's shards, whose pushes arrive on the data
  // plane and are applied on the PushServer's threads, so that the actor
  // only answers the coordinator's control requests. CAF 0.17 may keep a
  // count on an ended actor that answered remote requests, and
  // ~actor_system waits for every detached actor's object to go but not
  // for a scheduled one's (docs/ARCHITECTURE.md, "Ending").
  scheduled,
};
LocalShard spawn_shard(caf::actor_system& system, ShardConfig config, ShardThread thread = ShardThread::detached);

// The `apply` of a PushServer (net/push/push_link.hpp) hosting `shards` (by index):
// applies each push on the calling connection's thread. A shard's refusal
// ("push from replica 0 of view 3 dropped: the job is in view 4") is the
// exception, whose text the client sees.
std::function<AppliedPush(int shard, GradientPush push)> shard_apply(std::map<int, std::shared_ptr<ShardCore>> shards);

}  // namespace ps
}  // namespace troupe::actors
