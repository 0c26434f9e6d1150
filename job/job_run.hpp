// One run of a Job (Job::run), on the thread that owns the job's actor
// system: what lives from the first view to the job's end (this host's
// replicas, the parameter-server shards, the collectives) and the run's
// phases, a file each:
//
//   job_start.cpp   the first view: the nodes gathered, the shards placed,
//                   this host's replicas spawned, the first state sent to
//                   every replica; tried again without a member lost while
//                   it formed (FirstViewLost).
//   job_run.cpp     the coordinator actor spawned, the receive loop that
//                   hands the membership's events to it, the job's end.
//   job_views.cpp   a view the coordinator asked for, formed (elastic
//                   membership: the nodes' data plane, new collectives,
//                   the newcomers' state).
//
// Private to job/: job.cpp makes one per run.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/coordinator/coordinator.hpp"
#include "actors/coordinator/resume.hpp"
#include "actors/ps/parameter_server.hpp"
#include "job/job.hpp"

namespace troupe::actors {

class JobRun {
 public:
  // `resumed`: the checkpoint the job resumes from (job.cpp found and
  // checked it), with its path; `start` its position.
  JobRun(Job& job, const models::Callbacks& callbacks, caf::actor_system& system,
         std::optional<checkpoint::State> resumed, std::string resumed_path, Position start);

  // Starts, trains and ends the job; stops everything it spawned on every
  // way out, and tells the nodes.
  JobResult run();

 private:
  // job_start.cpp
  // The first view with everything it needs; on an error, stops what it
  // spawned, tells the nodes and throws.
  void start();
  // One try at the first view for the world `remote_counts` gives.
  void start_world(const std::vector<int>& remote_counts);
  // What a try that lost a member of its view started, undone.
  void undo_start(const std::string& why);

  // job_run.cpp
  CoordinatorConfig coordinator_config();
  // The receive loop until the coordinator's result; returns it.
  JobResult train(const coordinator_actor_t& coordinator);
  // A ps task asked to leave; what happens, "" when `index` is none.
  std::string ps_task_leaves(const coordinator_actor_t& coordinator, int index, const std::string& why);
  void node_lost(const coordinator_actor_t& coordinator, int index, const std::string& what);
  void node_ready(const coordinator_actor_t& coordinator, const ReadyNode& node);
  // Every actor of the run told to exit (a device blocked in a push first
  // has its push failed).
  void shutdown(const std::string& why = "the job is over");

  // job_views.cpp
  FormedView form_view(const ViewPlan& plan);
  // The newcomers' replicas, and survivors a step behind the view's clock,
  // take the state of a replica at that clock; "" or why not.
  std::string hand_on_state(const ViewPlan& plan, const FormedView& f);

  Job& job_;
  // The Job's own fields, by reference: the phases read and set them as
  // one function did before they were split.
  JobConfig& config_;
  const data::Splits& data_;
  const models::ModelSpec& spec_;
  const std::int64_t parameter_count_, state_count_;
  const models::FlatRanges& decayed_;
  std::shared_ptr<const ps::Partition>& partition_;
  std::int64_t& batches_per_epoch_;
  const std::shared_ptr<checkpoint::Directory>& checkpoints_;

  const models::TrainConfig& t;
  const models::Callbacks& callbacks;
  const int local;              // this host's replicas
  ClusterHooks* const cluster;  // null: a single-host job
  const std::shared_ptr<const data::Dataset> train_data, test_data;
  const std::shared_ptr<const models::LrSchedule> schedule;
  const std::optional<checkpoint::State> resumed;
  const std::string resumed_path;
  const Position start_at;

  caf::actor_system& system;
  caf::scoped_actor self;

  // Made by start(), changed by views.
  ps::ParameterServer server;
  std::shared_ptr<const net::push::PushRoutes> push_routes;  // shards on ps tasks: pushes on the data plane
  std::vector<std::shared_ptr<net::Collective>> collectives;
  std::vector<data_loader_actor> loaders;
  std::vector<device_actor_t> devices, all_devices;  // this host's; every replica in rank order
  int world = 0;
  std::vector<std::int64_t> start_clocks;   // by rank; empty: every replica starts at 0
  std::vector<data::Cursor> start_cursors;  // by rank; empty: every replica starts at the beginning
  DataStart data_start;                     // the segment training starts in (a resume)
  ps::ParameterServerConfig pc;             // the shards' optimizer, schedule and partition (a new placement reuses it)
  int ps_wanted = 0;                        // shards on ps tasks: the shard count the partition was asked for

  data::Cursor start_cursor(std::size_t r) const {
    return r < start_cursors.size() ? start_cursors[r] : data::Cursor{};
  }
};

}  // namespace troupe::actors
