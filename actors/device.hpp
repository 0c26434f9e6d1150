// Device actor: owns one model replica on one device (cpu:N or cuda:N) and
// runs its training steps. Spawned detached, so its compute runs on its own
// thread and never blocks CAF's scheduler.
//
// Protocol: actors/device_protocol.hpp (device_actor_t: what it accepts;
// device_reports_t: what it reports to the coordinator).
//
// One step: ask the data loader for the next batch, forward and backward
// (the gradient lands in the model's flat gradient buffer), then
//   sync:        all-reduce the gradient buffer with the other replicas
//                (net::Collective) and apply the same optimizer step as every
//                other replica;
//   async, ssp:  pack the gradient into one staging buffer in the parameter
//                server's shard layout (actors/ps/partition.hpp), push each
//                shard its part (a view of it) and copy the fresh parts it
//                returns into the parameters; the step ends when every
//                shard has answered (on a GPU the gradient leaves and the
//                parameters return through pinned host buffers with
//                asynchronous copies: host_staging.hpp).
// After each step it reports StepReport to the coordinator and continues
// while its grant allows. Any error is reported as `failed` with the reason,
// and aborts the collective so that no other replica waits for this one.
//
// Elastic (cluster jobs): a sync step whose all-reduce fails (a member was
// lost; the coordinator node aborts every collective of the view) is not a
// failure: the device reports `step_aborted, view, rank, clock, why` and
// waits for the next view, with nothing of the failed step applied. The
// view starts at the newest step a survivor completed; a survivor that had
// not completed it takes the state of one that had (roll forward,
// actors/coordinator/view_start.hpp): survivors stay bitwise identical, no disk read,
// and no per-step copy of the state. Grants of another view are dropped and
// counted.
#pragma once

#include <caf/all.hpp>

#include <map>
#include <memory>
#include <optional>

#include "actors/data_loader.hpp"
#include "actors/device_protocol.hpp"
#include "actors/gradient_sink.hpp"
#include "actors/host_staging.hpp"
#include "actors/messages.hpp"
#include "actors/ps/partition.hpp"
#include "actors/ps/shard.hpp"
#include "models/data/dataset.hpp"
#include "models/loss.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/schedule.hpp"
#include "net/collective/collective.hpp"
#include "net/push/push_routes.hpp"
#include "util/timeline.hpp"

namespace troupe::actors {

struct DeviceConfig {
  int rank = 0;
  kernels::Device device;
  models::ModelSpec spec;
  models::OptimizerConfig optimizer;
  std::shared_ptr<const models::LrSchedule> schedule;
  std::uint64_t seed = 0;
  int threads = 1;
  kernels::ops::MatmulPrecision precision = kernels::ops::MatmulPrecision::fp32;  // --precision (Model::set_precision)
  double initial_loss_scale = models::LossScale::kInitial;                        // fp16 (models/loss_scale.hpp)
  float sync_grad_scale = 1.0f;                                                   // 1 / global batch
  std::int64_t sync_batch = 0;  // the global batch, batch x world; a Batch with fewer global_examples is partial
  bool elastic = false;         // membership may change: keep the committed state, survive aborts
  std::uint32_t view = 0;
  std::shared_ptr<net::Collective> collective;
  std::shared_ptr<const data::Dataset> test;
  // The loss: mean squared error for regression data, else cross-entropy.
  // From the training data: only rank 0 has `test`.
  bool regression = false;
  float label_smoothing = 0.0f;  // cross-entropy's; 0: none
  std::int64_t eval_batch = 1000;
  std::chrono::milliseconds timeout{60000};
  data_loader_actor loader;
  // The parameter server (async, ssp): its shards by index in `partition`,
  // as CAF actors in this process. A replica whose pushes go on the data
  // plane (push_routes: a worker node's, or any with ps tasks) has none.
  std::vector<ps::ps_actor_t> shards;
  // The same shards' cores when they run in this process (shard.hpp): a
  // push is then applied on the device's own thread, no message to the
  // shard's actor and back. Empty: through `shards`.
  std::vector<std::shared_ptr<ps::ShardCore>> shard_cores;
  std::shared_ptr<const ps::Partition> partition;
  // Shards on ps tasks: each shard's part goes on the data plane
  // to its ps task's address (net/push/push_routes.hpp), not to `shards`. Null: CAF.
  std::shared_ptr<const net::push::PushRoutes> push_routes;
  device_reports_t coordinator;        // learnt from the first grant
  std::shared_ptr<Timeline> timeline;  // --timeline: this replica's spans (null: none)
  int track = 0;                       // its track there: the replica's place on its node
};

struct DeviceState {
  DeviceConfig config;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<models::Optimizer> optimizer;
  std::unique_ptr<models::Loss> loss;
  Tensor x_dev, y_dev, dout;
  Tensor staging;  // async, ssp: the gradient in the shards' packed layout (host)
  // A GPU replica's way to and from the host (host_staging.hpp), and the
  // host copy of its parameters the shards' answers are unpacked into.
  std::unique_ptr<HostStaging> host_staging;
  Tensor host_parameters;
  // Where async and ssp gradients go (gradient_sink.hpp): made at the first
  // push of a view from the config (data plane, shards' cores or shard
  // actors), dropped when a view places the shards anew.
  std::shared_ptr<GradientSink> sink;
  std::int64_t clock = 0;
  Grant grant;
  bool step_queued = false;
  bool failed = false;
  std::string failure;  // why, kept until the coordinator is known
  bool classification = true;
  models::Metrics metrics;        // per step: top-1 correct for the training accuracy
  std::int64_t stale_grants = 0;  // grants of another view, dropped
  // Since when the replica has run every step it was granted (timeline:
  // the "grant wait" span); unset while it has steps to run.
  std::optional<net::Clock::time_point> idle_since;
  static inline const char* name = "device";
};

// Spawned detached (job/job.cpp): its steps run on its own thread.
device_actor_t::behavior_type device_actor(device_actor_t::stateful_pointer<DeviceState> self, DeviceConfig config);

}  // namespace troupe::actors
