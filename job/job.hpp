// Job: one training job on the devices of this host, run by a troupe of
// actors (docs/ARCHITECTURE.md, "One job: who does what").
//
//   coordinator ── grants steps, runs evaluation / checkpoints / switches
//     │ grant, step_done
//   device 0 ... device W-1   (detached: each computes on its own thread)
//     │ next_batch               │ push (async, ssp)      ║ all-reduce (sync)
//   data loader 0 ... W-1      parameter server (shards)   ║ net::Collective: local or nccl
//                                                          ║ (collective_choice.hpp)
//
// run() blocks until the job completes, fails or is stopped. The control
// functions are thread-safe and may be called while run() is in progress
// (the HTTP control endpoint and signal handlers call them).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/control_front.hpp"
#include "actors/coordinator/coordinator.hpp"
#include "actors/job_metrics.hpp"
#include "actors/mode.hpp"
#include "actors/ps/partition.hpp"
#include "actors/ps/shard.hpp"    // ShardCore
#include "job/cluster_hooks.hpp"  // ClusterHooks: ClusterStart, ClusterViews, ClusterShards
#include "job/collective_choice.hpp"
#include "models/trainer.hpp"
#include "net/collective/collective.hpp"
#include "net/push/push_routes.hpp"
#include "util/timeline.hpp"

namespace troupe::actors {

struct JobConfig {
  models::TrainConfig train;  // model, data, epochs, per-replica batch, optimizer, ...
  std::vector<kernels::Device> devices;
  Mode mode;
  std::vector<ScheduledSwitch> switches;
  int prefetch = 2;  // batches each data loader keeps ready
  int threads_per_device = 1;
  // The parameter server of async and ssp (actors/ps/): its shards, and the
  // size above which a layer is split across all of them (floats). One
  // shard is the single server, bit for bit.
  int ps_shards = 1;
  std::int64_t ps_split_above = ps::default_split_above;
  std::chrono::milliseconds timeout{60000};  // any single wait between actors
  bool collect_replica_parameters = false;   // fill JobResult-side copies (tests)
  std::shared_ptr<ClusterHooks> cluster;     // null: this host only
  // Elastic membership (cluster jobs): "replica" keeps the per-replica
  // batch (the global batch follows the world size, like Horovod); "global"
  // keeps the global batch (the per-replica batch is global / world).
  std::string elastic_batch = "replica";
  int min_nodes = 1;                               // training pauses below this many nodes
  std::chrono::milliseconds wait_timeout{600000};  // ... and stops after this long paused
  // TensorBoard event files go here (job file key `tensorboard`; the CLI's
  // --tensorboard wins). Where the coordinator writes, not part of the job
  // the nodes train: left out of the job text and its fingerprint.
  std::string tensorboard_dir;
  // What GET /metrics reports (the CLI makes one with --control): the
  // coordinator, the parameter server and this job's thread feed it. Null:
  // nothing recorded.
  std::shared_ptr<JobMetrics> metrics;
  // --timeline: every local replica's step spans and the coordinator's
  // instants (util/timeline.hpp). Null: none.
  std::shared_ptr<Timeline> timeline;
};

// The devices troupe uses when none are named: every GPU when there are
// any, otherwise two CPU devices on a machine with at least two cores
// (default_devices_for, collective_choice.hpp).
std::vector<kernels::Device> default_devices();
// "cpu:0,cpu:1" -> devices. Throws std::invalid_argument naming the item.
// A GPU may be named more than once: "cuda:0,cuda:0" is two logical
// replicas on cuda:0 (a CPU device may not: cpu:0,cpu:1 are logical already).
std::vector<kernels::Device> parse_devices(const std::string& text);

class ActorSystemSlot;  // job/replica.hpp

class Job {
 public:
  // Loads the data, builds the model once to validate it, checks the
  // checkpoint directory: configuration errors surface here.
  explicit Job(JobConfig config);
  ~Job();

  JobResult run(const models::Callbacks& callbacks = {});

  std::string status();  // JSON
  // `wait`: how long the asker waits (troupe ctl's Troupe-Wait); one not
  // done by then is answered 202, pending (control_front.hpp). None: the
  // answer comes when it is done, or 504 after kControlAnswerSeconds.
  using Wait = std::optional<std::chrono::milliseconds>;
  ControlReply request_mode(const std::string& mode, Wait wait = std::nullopt);
  ControlReply request_checkpoint(Wait wait = std::nullopt);
  ControlReply request_stop(Wait wait = std::nullopt);
  // A cluster node leaves at the next step boundary (its index or name).
  ControlReply request_drain(const std::string& node);

  // Each replica's parameters at the end of run() (collect_replica_parameters).
  const std::vector<std::vector<float>>& replica_parameters() const { return replica_parameters_; }
  const JobConfig& config() const { return config_; }
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const models::ModelSpec& spec() const { return spec_; }
  // The data this host loaded (a cluster's workers load their own).
  const data::Splits& data() const { return data_; }
  // The backend that reduces this host's replicas, and why (collective_choice.hpp).
  const CollectiveChoice& collective_choice() const { return collective_choice_; }

 private:
  // run() on the thread that owns the job's actor system (made through `slot`).
  JobResult run_here(const models::Callbacks& callbacks, ActorSystemSlot& slot);
  // A control request from another thread: handed to the job's control
  // front (actors/control_front.hpp), which asks the coordinator at once;
  // before the front exists (the job is starting) it waits in
  // control_requests_.
  ControlReply ask(ControlRequest::Kind kind, const std::string& argument, ControlReply fallback,
                   Wait wait = std::nullopt);

  JobConfig config_;
  data::Splits data_;
  models::ModelSpec spec_;
  std::int64_t parameter_count_ = 0;
  // Where weight decay applies (Model::decayed_ranges).
  std::vector<std::pair<std::int64_t, std::int64_t>> decayed_;
  std::int64_t state_count_ = 0;                    // the model's running statistics (BatchNorm)
  std::shared_ptr<const ps::Partition> partition_;  // the parameter server's shards
  std::int64_t batches_per_epoch_ = 0;
  std::shared_ptr<checkpoint::Directory> checkpoints_;
  std::vector<std::vector<float>> replica_parameters_;
  CollectiveChoice collective_choice_;

  std::mutex control_mutex_;
  // starting: run() has begun (nodes gathering, replicas spawning); control
  // requests then wait for training to start instead of being refused, so a
  // `troupe ctl mode async` sent right after launching a job is not lost.
  bool starting_ = false, running_ = false;
  // The coordinator is running: control requests go to a control front
  // over it (those waiting go first).
  void open_control(caf::actor_system& system, const coordinator_actor_t& coordinator, const caf::actor& listener);
  // Answers every pending control request with `why` and accepts no more.
  void close_control(const std::string& why);
  friend class JobRun;  // job_run.hpp: one run's phases
  std::deque<ControlRequestPtr> control_requests_;
  control_front_t control_front_;  // while running_
};

}  // namespace troupe::actors
