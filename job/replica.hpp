// One replica of a job: a data loader and the device actor it feeds. The
// single-host Job and a cluster worker node (cluster/node.hpp) spawn replicas
// the same way; only where their ranks, collective and server come from
// differs.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>

#include "actors/data_loader.hpp"
#include "actors/device_protocol.hpp"
#include "actors/messages.hpp"
#include "actors/ps/partition.hpp"
#include "actors/ps/shard.hpp"  // ShardCore
#include "models/data/dataset.hpp"
#include "models/schedule.hpp"
#include "models/spec.hpp"
#include "net/collective/collective.hpp"
#include "net/push/push_routes.hpp"
#include "util/timeline.hpp"

namespace troupe::actors {

struct ReplicaPlan {
  int rank = 0, world = 1;  // global rank, replicas in the whole job
  kernels::Device device;
  models::TrainConfig train;  // batch (per replica), optimizer, seed, ...
  models::ModelSpec spec;
  std::shared_ptr<const data::Dataset> train_data;
  std::shared_ptr<const data::Dataset> test_data;  // rank 0 evaluates; null elsewhere
  std::shared_ptr<const models::LrSchedule> schedule;
  std::shared_ptr<net::Collective> collective;  // sync all-reduce
  // The parameter server (async, ssp): its shards and their partition
  // (actors/ps/parameter_server.hpp), or one relay to it and no partition.
  std::vector<ps::ps_actor_t> shards;
  std::vector<std::shared_ptr<ps::ShardCore>> shard_cores;  // in this process: applied directly
  std::shared_ptr<const ps::Partition> partition;
  // Shards on ps tasks: pushes on the data plane (net/push/push_routes.hpp); null: CAF.
  std::shared_ptr<const net::push::PushRoutes> push_routes;
  data::Cursor start;  // where the data order resumes
  int prefetch = 2, threads = 1;
  std::chrono::milliseconds timeout{60000};
  bool elastic = false;  // a cluster job: membership may change
  std::uint32_t view = 0;
  std::shared_ptr<Timeline> timeline;  // --timeline (null: none)
  int track = 0;                       // the replica's place on its node (its timeline track)
};

struct ReplicaActors {
  data_loader_actor loader;
  device_actor_t device;
};

// Spawns both actors detached (job/job.hpp says why).
ReplicaActors spawn_replica(caf::actor_system& system, const ReplicaPlan& plan);

// The actor-system settings every troupe process uses: CAF's work-stealing
// workers poll for work and would steal the device threads' cores, so every
// job actor runs detached and one worker remains, polling gently.
void configure_actor_system(caf::actor_system_config& config);

// Shutting an actor system down with a deadline. ~actor_system waits,
// without one, until every actor it ran on a private thread (every troupe
// actor: they are detached) has been destroyed, and CAF 0.17 can keep a
// finished actor referenced: seen once in 60 chaos trials, the parameter
// server of an ssp job whose joined node had left again, still referenced
// after the job had ended and every node had gone; the coordinator hung in
// await_detached_threads forever. CAF also expects the system to be
// destroyed on the thread that made it (destroyed on another, even a
// clean shutdown hangs), so the whole of `body` runs on a thread of its
// own: it makes the system through `slot`, and when it returns the thread
// destroys the system. The caller gets body's outcome (its exception
// rethrown) as soon as body returns, and waits at most `limit` for the
// shutdown; past it the thread and the system are left behind, said on
// stderr and counted (troupe's CLI then exits with _Exit: a normal exit
// would run static destructors under the stuck threads).
class ActorSystemSlot {
 public:
  ActorSystemSlot() = default;
  ActorSystemSlot(const ActorSystemSlot&) = delete;
  ActorSystemSlot& operator=(const ActorSystemSlot&) = delete;
  ~ActorSystemSlot() { reset(); }
  // Makes the system (once), its config set up by `configure`.
  caf::actor_system& create(const std::function<void(caf::actor_system_config&)>& configure);
  void reset();  // ~actor_system, then the config
  // Actors of the system that have not ended yet (0 without a system).
  std::size_t running_actors() const;

 private:
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
};

void run_with_bounded_shutdown(const std::function<void(ActorSystemSlot&)>& body,
                               std::chrono::milliseconds limit = std::chrono::seconds(15));

// Actor systems left behind by run_with_bounded_shutdown in this process.
int abandoned_actor_systems();

}  // namespace troupe::actors
