// One replica of a job: a data loader and the device actor it feeds. The
// single-host Job and a cluster worker node (actors/node.hpp) spawn replicas
// the same way; only where their ranks, collective and server come from
// differs.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>

#include "actors/messages.hpp"
#include "actors/timeline.hpp"
#include "models/data/dataset.hpp"
#include "models/schedule.hpp"
#include "models/spec.hpp"
#include "net/collective/collective.hpp"

namespace troupe::actors {

struct ReplicaPlan {
  int rank = 0, world = 1;                       // global rank, replicas in the whole job
  kernels::Device device;
  models::TrainConfig train;                     // batch (per replica), optimizer, seed, ...
  models::ModelSpec spec;
  std::shared_ptr<const data::Dataset> train_data;
  std::shared_ptr<const data::Dataset> test_data;  // rank 0 evaluates; null elsewhere
  std::shared_ptr<const models::LrSchedule> schedule;
  std::shared_ptr<net::Collective> collective;   // sync all-reduce
  caf::actor reducer;                            // the parameter server (async, ssp)
  data::Cursor start;                            // where the data order resumes
  int prefetch = 2, threads = 1;
  std::chrono::milliseconds timeout{60000};
  bool elastic = false;                          // a cluster job: membership may change
  std::uint32_t view = 0;
  std::shared_ptr<Timeline> timeline;            // --timeline (null: none)
  int track = 0;                                 // the replica's place on its node (its timeline track)
};

struct ReplicaActors {
  caf::actor loader, device;
};

// Spawns both actors detached (actors/job.hpp says why).
ReplicaActors spawn_replica(caf::actor_system& system, const ReplicaPlan& plan);

// The actor-system settings every troupe process uses: CAF's work-stealing
// workers poll for work and would steal the device threads' cores, so every
// job actor runs detached and one worker remains, polling gently.
void configure_actor_system(caf::actor_system_config& config);

}  // namespace troupe::actors
