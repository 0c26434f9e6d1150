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
#include "actors/ps/shard.hpp"  // ShardCore
#include "job/collective_choice.hpp"
#include "models/trainer.hpp"
#include "net/collective/collective.hpp"
#include "net/push/push_routes.hpp"
#include "util/timeline.hpp"

namespace troupe::actors {

// A member of the first view was lost while the view formed: the job
// starts without it (ClusterHooks::form, regather).
struct FirstViewLost : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a cluster adds to a job on its coordinator node (cluster/coordinator_node.cpp
// implements it; a single-host job has none). Job::run calls these in this
// order, all on run()'s thread.
class ClusterHooks {
 public:
  virtual ~ClusterHooks() = default;
  // Before the actor system starts: remoting, heartbeats, message types.
  virtual void configure(caf::actor_system_config& config) = 0;
  // Admits nodes until the job can start; returns each other node's number
  // of replicas, in node order (their ranks follow this host's).
  virtual std::vector<int> gather(caf::scoped_actor& self) = 0;
  // Asks every node to connect the data plane and spawn its replicas, and
  // returns the collectives of this host's `local` replicas (ranks 0..local-1).
  // Throws FirstViewLost when a member was lost while the view formed and
  // the job may start without it (regather, then everything that depends
  // on the world again, then form again).
  virtual std::vector<std::shared_ptr<net::Collective>> form(caf::scoped_actor& self, int local, int world,
                                                             const data::Cursor& start) = 0;
  // After FirstViewLost (from form(), remote_devices(), or the job's first
  // state sent to the replicas): the nodes left (and any that joined meanwhile),
  // waiting for --min-nodes of them (and the ps tasks) if need be; returns
  // each other node's number of replicas as gather() does. The next form()
  // tries the next view number (first_view()).
  // `why`: what was lost, for the log; the nodes still in the view that
  // did not form are told (abort_view).
  virtual std::vector<int> regather(caf::scoped_actor& /*self*/, const std::string& /*why*/) {
    throw std::logic_error("regather: this job cannot start again without a lost node");
  }
  // Whether a first view lost now could be tried again (FirstViewLost).
  virtual bool may_start_again() const { return false; }
  // The node (membership index; 0: this host) whose replica has global
  // rank `rank` in the current view, and whether a node is gone.
  virtual int node_of_rank(int /*rank*/) const { return 0; }
  virtual bool node_gone(int /*index*/) const { return false; }
  // The number of the job's first view: 0, or more when members were lost
  // while earlier ones formed. Every replica, shard and the coordinator
  // start in it.
  virtual std::uint32_t first_view() const { return 0; }
  // The other nodes' device actors, in rank order.
  virtual std::vector<device_actor_t> remote_devices(caf::scoped_actor& self) = 0;
  virtual std::vector<NodeInfo> nodes() const = 0;
  // How the links between nodes are protected, for the status ("sealed
  // (AES-256-GCM)", "NOT sealed (--insecure)", ...); empty: not said.
  virtual std::string links() const { return {}; }
  // Tells every node the job is over (error empty: done; else why it failed).
  virtual void finish(caf::scoped_actor& self, const std::string& error) = 0;

  // ---- elastic membership, while the job runs ----
  // run()'s actor hears from the membership actor: (ready, ReadyNode) for
  // a node that joined, (node_lost, index, what), (drain, index, why); it
  // turns them into MemberEvents for the coordinator actor, and forms the
  // views the coordinator asks for.
  // A worker that joined after the start, kept until a view includes it.
  virtual void add_joiner(const ReadyNode& node) = 0;
  // A node is gone (lost, or told to leave): never asked anything again.
  // Says whether it was in the current view.
  virtual bool forget(int index) = 0;
  // Tells the nodes of the current view to abort their collectives (run()
  // aborts this host's): every survivor's pending all-reduce fails at once.
  virtual void abort_view(caf::scoped_actor& self, const std::string& why) = 0;
  // Forms `plan`'s view: the data plane of its nodes, this host's `local`
  // replicas' new collectives (into `collectives`), and the nodes' replicas
  // entering it. Returns the other nodes' devices (ranks local.. in order),
  // every node and the per-replica batch, or why it failed (and which nodes
  // were found gone meanwhile).
  virtual FormedView reform(caf::scoped_actor& self, const ViewPlan& plan, int local,
                            std::vector<std::shared_ptr<net::Collective>>& collectives) = 0;
  // The nodes that entered the last view formed (they take the state).
  virtual std::vector<int> newcomers() const = 0;
  // Membership events the hooks received while they waited.
  virtual std::vector<MemberEvent> take_events() = 0;

  // ---- ps tasks ----
  // A node that hosts parameter-server shards and runs no replica.
  struct PsTask {
    int index = 0;        // the membership's number
    std::string name;     // "ps/HOST/pid N"
    std::string address;  // its push server (data plane)
    caf::actor handle;    // takes (host_shards, indices, sizes, replicas)
  };
  // The ps tasks the job starts with (gather waited for them), in join order.
  virtual std::vector<PsTask> ps_tasks() const { return {}; }
  virtual bool is_ps_task(int /*index*/) const { return false; }
  // Where the shards run: every view sent to the nodes from now on carries
  // `addresses` (by shard) so that their replicas push on the data plane.
  // Returns the routes of this host's replicas (the cluster's handshake,
  // the job's push id), or null when the hooks cannot route pushes.
  virtual std::shared_ptr<const net::push::PushRoutes> place_shards(const std::vector<std::string>& /*addresses*/,
                                                                    int /*partition_shards*/) {
    return nullptr;
  }
  // Without ps tasks: serves the shards of this process (by index) on the
  // data plane, so that the other nodes' replicas push each its part there
  // (this host's replicas push to them in process). Every view sent from
  // now on carries the address. Stopped by finish().
  virtual void serve_shards(const std::map<int, std::shared_ptr<ps::ShardCore>>& /*shards*/,
                            const ps::Partition& /*partition*/, int /*partition_shards*/) {}

  // ---- ps tasks lost, leaving or joining while the job runs ----
  // Where every shard runs after a new placement, or why there is none.
  struct Placement {
    std::vector<caf::actor> handles;     // by shard: its new actor
    std::vector<std::string> addresses;  // by shard: its ps task's push server
    std::string error;                   // empty: placed
    bool waiting_for_ps = false;         // no ps task is left (error says so)
    std::vector<int> lost;               // ps tasks found gone while placing
  };
  // Places every shard of `partition`, shard i on the i mod P-th of the P
  // ps tasks there are (in join order, without `leaving`, which are let go
  // first): at the start, and anew when a ps task was lost or leaves; each
  // task ends the shards it hosted and starts its new ones, empty.
  // `replicas`: the world the shards count clocks for; `decayed`: where
  // weight decay applies in the whole flat buffer (Model::decayed_ranges),
  // each shard told its part (Partition::ranges_in).
  virtual Placement replace_shards(caf::scoped_actor& /*self*/, const ps::Partition& /*partition*/, int /*replicas*/,
                                   const std::vector<int>& /*leaving*/, const models::FlatRanges& /*decayed*/) {
    Placement p;
    p.error = "this job cannot place its shards anew";
    return p;
  }
  // A ps task that joined after the start: a spare (told to stand by),
  // used by the next placement.
  virtual void add_spare_ps(caf::scoped_actor& /*self*/, int /*index*/, const std::string& /*name*/,
                            const std::string& /*address*/, const caf::actor& /*handle*/) {}
  // A ps task is gone: forgotten. Says whether it hosted shards.
  virtual bool ps_gone(int /*index*/) { return false; }
  // Whether the ps task hosts shards now (a spare does not).
  virtual bool hosts_shards(int /*index*/) const { return false; }
  // Lets a ps task go now (it hosts no shard): it exits 0.
  virtual void release_ps(caf::scoped_actor& /*self*/, int /*index*/, const std::string& /*why*/) {}
  // Tells every node to fail its pushes in flight at once (a ps task was
  // lost): none waits for its push's timeout.
  virtual void abort_pushes(caf::scoped_actor& /*self*/, const std::string& /*why*/) {}
};

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
  // Answers every pending control request with `why` and accepts no more.
  void close_control(const std::string& why);
  std::deque<ControlRequestPtr> control_requests_;
  control_front_t control_front_;  // while running_
};

}  // namespace troupe::actors
