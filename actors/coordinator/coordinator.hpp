// Coordinator actor: owns the job's progress. It grants steps to the device
// actors, counts steps and epochs, and at step boundaries runs evaluation,
// checkpoints and mode switches. The job's "chief".
//
// Grants. A device may run steps until its clock (steps it completed)
// reaches its grant. The coordinator extends grants as reports arrive:
//   sync   the same grant for every replica (they meet in the all-reduce);
//   async  each replica independently, a few steps ahead;
//   ssp:N  like async, but never beyond the slowest replica's clock + N + 1,
//          so a replica begins a step only while it is at most N steps ahead.
// Grants never cross the next event: an epoch end (every replica's clock at
// a multiple of the batches per epoch), a scheduled switch, a checkpoint
// interval, the step limit, or a pending request. When every clock equals
// its grant the job is quiescent: no step is running and no gradient is in
// flight. A stop, or a switch or checkpoint someone asked for, does not wait
// for the grants handed out: every replica is halted after the step it is
// running (grants.cpp, hurry; in sync all at one clock). That is the step
// boundary where actions run:
//
//   running --(event reached / request queued)--> pausing
//   pausing --(all clocks == grants)--> quiescent: run actions in order
//       epoch end: evaluate, report, checkpoint each epoch
//       evaluation every `eval_every` global steps (Callbacks::on_evaluate)
//       switch:    sync -> async/ssp: the server takes replica 0's parameters
//                  and optimizer state; async/ssp -> sync: every replica
//                  takes the server's (no update is lost or applied twice)
//       checkpoint, stop
//   quiescent --(actions done)--> running (new grants) or finished
//
// Membership views (cluster jobs, elastic = true). Membership is a numbered
// view; every grant, step report and push carries its view, and anything
// from an older one is dropped and counted. Nodes that join, leave (drain)
// or are lost change the view at the next step boundary, in this order
// after an epoch end and an evaluation and before a mode switch:
//   lost node   its ranks leave the slowest-clock computation at once; in
//               sync the job's thread aborts every collective of the view,
//               and each survivor reports `step_aborted`; the boundary is
//               reached when every survivor is idle. The new view starts at
//               the survivors' newest clock: a survivor whose all-reduce
//               did not complete takes the state of one that did (roll
//               forward, view_start.hpp), so at most the lost node's own
//               step is lost. In async and ssp the survivors first catch
//               up to the most advanced one (their grants).
//   join, drain at the next boundary; no step is lost.
//   ps task     (shards on ps tasks) lost, or a push failed in async/ssp:
//               the shards' state is not whole. The next view places every
//               shard anew on the ps tasks left and every replica and shard
//               takes the rollback point (the newest checkpoint this actor
//               wrote, or the job's start), each replica its clock and data
//               position in it; the coordinator's position goes back too.
//               In sync mode the shards are only placed anew.
//   ps leaving  its shards' state is gathered at the boundary, kept as the
//               rollback point and restored after the placement: no step
//               is lost. With no ps task left training pauses until one
//               joins (a spare), as below --min-nodes.
// The coordinator sends `form_view, ViewPlan` to the listener (the job's
// thread, which talks to the nodes) and goes on with `FormedView`: every
// replica starts the view at the same clock, and the rest of the epoch is
// split among the new world (models/data/epoch_plan.hpp, 5.). Below
// --min-nodes nodes training pauses; after --wait-timeout paused the job
// stops with a checkpoint.
//
// Protocol:
//   start                           begin (from the job)
//   member, MemberEvent             a node joined, is draining or was lost
//   step_aborted, view, rank, clock, why  a sync step's all-reduce failed
//   view_formed, FormedView         the job's thread formed the view asked for
//   step_done, StepReport           a device finished a step
//   failed, rank, message           a device failed: the job ends with the error
//   status                  -> std::string (JSON)
//   mode, text              -> ControlReply   switch at the next step boundary
//   checkpoint              -> ControlReply   write one at the next step boundary
//   stop                    -> ControlReply   checkpoint (if configured), finish
//   drain, node             -> ControlReply   troupe ctl drain: the node leaves at the next boundary
//   watch_stop                                (from itself) look at should_stop again
//   halt, pause id                            (from itself) stop if still paused since then
// A formed view comes back as the answer to its `form_view` request.
// When the job ends it sends `JobResult` to the listener.
// coordinator_actor_t below is this protocol, as the typed interface the
// compiler checks at every sender (the devices' reports are
// device_reports_t, actors/device_protocol.hpp).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <deque>
#include <memory>

#include "actors/coordinator/resume.hpp"
#include "actors/device_protocol.hpp"
#include "actors/messages.hpp"
#include "actors/ps/ps_protocol.hpp"
#include "models/checkpoint/checkpoint.hpp"

namespace troupe::actors {

class JobMetrics;  // actors/job_metrics.hpp
class Timeline;    // util/timeline.hpp

struct ControlReply {
  int status = 200;  // HTTP-style: 200 done, 400 bad request, 409 not possible now
  std::string message;
};

struct JobResult {
  std::vector<models::EpochResult> epochs;
  models::EpochResult final;
  std::int64_t steps = 0;       // global steps (updates applied)
  std::int64_t sync_steps = 0;  // of which synchronous
  std::int64_t pushes = 0;      // gradients the replicas pushed to the server
  ServerCounters server;        // what the server applied, and staleness seen
  std::int64_t examples = 0;
  double train_seconds = 0, wall_seconds = 0, samples_per_s = 0;
  std::vector<std::string> mode_history;  // "sync@0", "async@500", ...
  // Membership views after the first: "view 2 at step 340: 3 replicas on 2 nodes".
  std::vector<std::string> view_history;
  std::int64_t stale_reports = 0;   // step reports of an ended view, dropped
  std::int64_t rolled_forward = 0;  // survivors that took a completed step's state at a view change (sync)
  // Shards on ps tasks placed anew while the job ran (a ps task lost or
  // leaving), each restoring a consistent state: "rolled back to step 800
  // (ckpt-800.troupe) at step 853: ...". pushes, sync_steps and `server`
  // count from the last one (the state the shards started from).
  std::vector<std::string> rollbacks;
  std::int64_t counted_from_step = 0;  // the global step those counts start at
  Mode final_mode;
  bool stopped_early = false;
  // Resumed from a checkpoint of a job that had already trained every epoch
  // (or reached max_steps): nothing was trained.
  bool already_finished = false;
  std::string resumed_from;  // the checkpoint resumed from, if any
  // Sync with several replicas: SHA-256 (hex) of the parameters and optimizer
  // state every replica held at the end (the coordinator compared them).
  std::string replica_digest;
  std::string error;  // empty on success
};

// What the coordinator accepts: the devices' reports and the protocol above.
using coordinator_actor_t = device_reports_t::extend<
    caf::reacts_to<start_atom>, caf::reacts_to<member_atom, MemberEvent>, caf::reacts_to<watch_stop_atom>,
    caf::reacts_to<halt_atom, std::uint32_t>, caf::replies_to<status_atom>::with<std::string>,
    caf::replies_to<drain_atom, std::string>::with<ControlReply>,
    caf::replies_to<mode_atom, std::string>::with<ControlReply>, caf::replies_to<checkpoint_atom>::with<ControlReply>,
    caf::replies_to<stop_atom>::with<ControlReply>>;

struct CoordinatorConfig {
  int replicas = 1;
  std::int64_t batches_per_epoch = 1;
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;  // global steps; 0: no limit
  std::int64_t global_batch = 1;
  Mode mode;
  std::vector<ScheduledSwitch> switches;
  std::int64_t window = 16;  // steps a grant runs ahead
  std::vector<device_actor_t> devices;
  std::vector<NodeInfo> nodes;      // a cluster's nodes (empty on one host)
  std::string links;                // a cluster's link protection, for the status (ClusterHooks::links)
  ps::ps_actor_t parameter_server;  // actors/ps/parameter_server.hpp: the front of its shards
  caf::actor listener;
  std::shared_ptr<checkpoint::Directory> checkpoints;  // null: none
  std::int64_t checkpoint_every = 0;                   // global steps
  bool checkpoint_each_epoch = true;
  std::int64_t eval_every = 0;  // global steps between evaluations (0: epoch ends only)
  std::string model_name, model_spec;
  // Values of model state (BatchNorm's running statistics) each replica
  // keeps; 0: none. The coordinator averages them over the replicas before
  // an evaluation and a checkpoint, so that those see one estimate.
  std::int64_t model_state_count = 0;
  models::OptimizerConfig optimizer;
  std::shared_ptr<const models::LrSchedule> schedule;
  std::uint64_t seed = 0;
  Position start;  // global step and epoch to start from
  // Each replica's clock at the start (by rank; empty: all 0). On resume the
  // replicas were moved to these clocks and data positions beforehand.
  std::vector<std::int64_t> start_clocks;
  // The data segment the start epoch continues in, and what that epoch
  // trained before (a resume; default: the start epoch's beginning).
  DataStart start_data;
  // Checkpoint at the next step boundary once this much time has passed
  // since the last one (0: never by time). Bounds what a crash loses.
  std::chrono::milliseconds checkpoint_interval{0};
  bool classification = true;  // training accuracy is measured (else NaN)
  // Predictions scored per example: 1, or a text window's T (a report's
  // `correct` counts positions; accuracy is per token).
  std::int64_t positions_per_example = 1;
  std::chrono::milliseconds timeout{120000};
  models::Callbacks callbacks;
  // Elastic membership (cluster jobs; see "Membership views" above).
  bool elastic = false;
  // Non-empty: the job cannot leave sync (fp16's loss scale), and a request
  // to switch is refused with this reason.
  std::string sync_only;
  std::int64_t dataset_examples = 0;  // n, for splitting the rest of an epoch
  std::int64_t batch = 1;             // per replica at the start
  bool drop_remainder = false;
  bool fixed_global_batch = false;                 // elastic_batch = "global"
  int min_nodes = 1;                               // pause below this many nodes
  std::uint32_t first_view = 0;                    // 0, or more when members were lost while the first tries formed
  std::chrono::milliseconds wait_timeout{600000};  // stop after this long paused
  std::shared_ptr<JobMetrics> metrics;             // /metrics: each accepted report's timings (null: none)
  std::shared_ptr<Timeline> timeline;              // --timeline: instants for switches, evaluations, checkpoints, views
  // Shards on ps tasks: a ps task may be lost or leave, and its
  // shards are placed anew on the others. The coordinator then restores
  // the newest consistent state it knows (its rollback point: the newest
  // checkpoint it wrote, or the job's start, or the state gathered when a
  // ps task left) on every replica and shard, as a resume would.
  bool ps_tasks = false;
  bool shuffle = true;  // the data plan, for placing the replicas at the rollback point
};

// Spawns the coordinator (its state, actors/coordinator/state.hpp, stays private to that folder).
coordinator_actor_t spawn_coordinator(caf::actor_system& system, CoordinatorConfig config);

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ControlReply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::JobResult)
