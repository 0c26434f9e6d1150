// troupe's public C++ API: one include for scripting distributed training
// without touching actors or sockets.
//
//   #include <troupe/troupe.hpp>      // link troupe_api and troupe_backends (the backend plug)
//
// It wraps what troupe already has (models::Trainer's configuration, the
// actor runtime actors::Job, the local collective, checkpoints) in the shape
// of TensorFlow's tf.distribute API:
//
//   TensorFlow                                 troupe
//   tf.distribute.MirroredStrategy()           troupe::MirroredStrategy strategy;          (local devices, sync)
//   tf.distribute.ParameterServerStrategy      troupe::ParameterServerStrategy ps("async"); (local devices, async /
//   ssp:N) MultiWorkerMirroredStrategy (TF_CONFIG)    troupe::MultiWorkerMirroredStrategy mw;      (a cluster spec,
//   $TROUPE_CLUSTER) strategy.num_replicas_in_sync              strategy.num_replicas_in_sync() model.fit(ds, epochs,
//   callbacks=[...])     strategy.fit(config, {callbacks...}) -> History LearningRateScheduler(decay) config.schedule =
//   "piecewise:3=1e-4,7=1e-5" ModelCheckpoint / BackupAndRestore         config.checkpoint_dir (+ config.resume)
//   CSVLogger, PrintLR (the tutorial's)        troupe::CsvLogger, troupe::PrintLR
//   TensorBoard(log_dir)                       troupe::TensorBoard(dir)
//   strategy.run(train_step) + reduce(SUM,.)   strategy.run(step_fn), strategy.reduce(ReduceOp::SUM, losses)
//   tf.nn.compute_average_loss(l, global_bs)   ctx.compute_average_loss(logits)
//   model.save / tf.keras.models.load_model    troupe::save_model / troupe::load_model
//   model.evaluate(ds)                          troupe::evaluate(model, data.test)
//
// Threads. fit() blocks; callbacks run on the runtime's coordinator thread,
// one at a time. Strategy::switch_mode, status and stop may be called from
// any other thread while fit() runs. A mode switch always lands at a step
// boundary; no gradient is lost or applied twice (docs/ARCHITECTURE.md).
//
// Errors: configuration errors (unknown model, dataset, schedule, mode, bad
// device list, unwritable checkpoint directory) throw std::invalid_argument
// or std::runtime_error naming what was wrong, before any training starts;
// a failure while training throws std::runtime_error from fit().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/tensor.hpp"
#include "models/data/epoch_plan.hpp"
#include "models/data/load.hpp"
#include "models/model.hpp"
#include "models/model_builder.hpp"
#include "models/optimizer.hpp"
#include "models/tensorboard.hpp"
#include "models/trainer.hpp"

namespace troupe::actors {
class Job;
struct JobConfig;
}  // namespace troupe::actors
namespace troupe::net {
class Collective;
}

namespace troupe {

// ---- vocabulary -------------------------------------------------------------

using kernels::Device;
using kernels::Shape;
using kernels::Tensor;
namespace ops = kernels::ops;  // the numeric ops, for code that glues models together
using data::Dataset;           // one split in host memory
using data::Splits;            // train + test
using models::EpochResult;     // test loss / accuracy / top-5, lr, step, seconds
using models::Model;           // a model graph on one device (forward, backward, flat buffers)
using models::ModelSpec;       // a model as text (models/spec.hpp)
// A model graph in C++, Keras-functional style: each call adds a layer and
// returns its output; spec() gives the ModelSpec (models/model_builder.hpp
// shows a residual block written as a function).
using models::ModelBuilder;
using models::OptimizerConfig;  // name ("sgd", "adam", "nadam") and hyper-parameters

// "cpu:0,cpu:1" or "cuda:0,cuda:1". Throws std::invalid_argument naming the bad item.
std::vector<Device> parse_devices(const std::string& text);
// Every GPU when there are any, else cpu:0 and cpu:1 (cpu:0 alone on one core).
std::vector<Device> default_devices();
// How many CUDA devices this machine has (0 without a GPU or CUDA build).
int cuda_device_count();
// CPU threads the calling thread's kernels may use (BLAS, oneDNN).
void set_cpu_threads(int threads);

// A dataset by name ("fashion-mnist", "linreg", "wordnet") or path (.csv, IDX dir).
Splits load_data(const std::string& name_or_path, const data::LoadOptions& options = {});
// Writes the first max_train / max_test examples of an image dataset (f32
// [N, 1, H, W] in [0, 1], at most 256 classes; Fashion-MNIST) as an IDX
// directory in the MNIST layout, which FitConfig::data can name: a small
// subset for quick runs. Returns `dir`. Throws std::runtime_error naming
// the file, std::invalid_argument for data that is not such images.
std::string write_idx_subset(const Splits& splits, const std::string& dir, std::int64_t max_train,
                             std::int64_t max_test);
// A zoo model ("linreg", "mlp", "cnn", "textcnn") or spec file, sized for `dataset`.
ModelSpec model_spec(const std::string& name_or_path, const Dataset& dataset);

// ---- saving, loading, evaluating (no strategy needed) -------------------------

// Writes `model` (its spec and parameters) to `path` as a troupe checkpoint
// file, atomically. Throws checkpoint::CheckpointError naming the path.
void save_model(const Model& model, const std::string& path);
// Rebuilds a model from any checkpoint file (one save_model wrote, or one of
// a checkpoint directory) on `device`: no data, strategy or optimizer needed.
std::unique_ptr<Model> load_model(const std::string& path, Device device = Device::cpu());
// The newest complete checkpoint in `dir` (tf.train.latest_checkpoint).
std::optional<std::string> latest_checkpoint(const std::string& dir);
// Test loss, accuracy and top-5 accuracy of `model` on every example of `dataset`.
EpochResult evaluate(Model& model, const Dataset& dataset, std::int64_t batch = 1000);

// ---- callbacks (Keras-style) ------------------------------------------------

// One step as the runtime counts it: the global step (updates applied, 1-based),
// the step within the epoch, the last reported batch's mean loss, samples/s
// this epoch.
// The step, the epoch's mean loss and training accuracy so far (NaN:
// regression), samples/s so far this epoch, the step's learning rate: what
// the runtime's own hook hears (models/trainer.hpp).
using StepLogs = models::StepEnd;

struct History;

// Override what you need. In fit(), steps run concurrently on the replicas,
// several ahead of the coordinator's count: on_step_begin(s) is called when
// step s - 1 has been counted (or the epoch began), a bookkeeping point, not
// the moment a replica starts computing. In the custom loop it is exact.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin() {}
  virtual void on_epoch_begin(std::int64_t /*epoch*/, float /*lr*/) {}
  virtual void on_step_begin(std::int64_t /*step*/) {}
  virtual void on_step_end(const StepLogs& /*logs*/) {}
  // Epoch end, with the test-set evaluation of that moment.
  virtual void on_epoch_end(const EpochResult& /*result*/) {}
  // Every evaluation: epoch ends and every config.eval_every global steps;
  // result.seconds = training time so far (evaluations excluded).
  virtual void on_evaluate(const EpochResult& /*result*/) {}
  virtual void on_checkpoint(const std::string& /*path*/, std::int64_t /*step*/) {}
  virtual void on_train_end(const History& /*history*/) {}
};
using CallbackList = std::vector<std::shared_ptr<Callback>>;

// The tutorial's PrintLR: "Learning rate for epoch 4 is 0.0001" at each epoch end.
class PrintLR : public Callback {
 public:
  void on_epoch_end(const EpochResult& r) override;
};

// Keras' CSVLogger: one row per epoch (epoch,step,train_loss,train_accuracy,
// test_loss,test_accuracy,test_top5,test_mae,lr,seconds,samples_per_s;
// empty where not measured). With
// `every_evaluation`, one row per evaluation instead (kind = epoch|eval).
// Throws std::runtime_error naming the file when it cannot be created.
class CsvLogger : public Callback {
 public:
  explicit CsvLogger(const std::string& path, bool every_evaluation = false);
  ~CsvLogger() override;
  void on_epoch_end(const EpochResult& r) override;
  void on_evaluate(const EpochResult& r) override;

 private:
  struct File;
  std::unique_ptr<File> file_;
  bool every_evaluation_;
};

// Keras' TensorBoard callback: TensorBoard event files in `dir`
// (events.out.tfevents.<time>.<host>.<pid>; `tensorboard --logdir dir`).
// Scalars train/loss, train/samples_per_s, train/learning_rate every
// `log_every` steps and at epoch ends, train/accuracy at epoch ends, test/loss,
// test/accuracy, test/top5 at every evaluation, job/mode (sync 0, async 1,
// ssp:N 2 + N) and job/world_size, and a text summary job/config
// (models/tensorboard.hpp). Strategy::fit gives it the job's text, mode and
// replicas; mode switches are written at the end of fit, each at its step.
// Throws std::runtime_error naming the folder or file it cannot create.
class TensorBoard : public Callback {
 public:
  explicit TensorBoard(const std::string& dir, std::int64_t log_every = 100);
  ~TensorBoard() override;
  void on_epoch_begin(std::int64_t epoch, float lr) override;
  void on_step_end(const StepLogs& logs) override;
  void on_epoch_end(const EpochResult& r) override;
  void on_evaluate(const EpochResult& r) override;
  void on_train_end(const History& history) override;
  // The event file's path.
  std::string path() const;
  // Called by Strategy::fit before training.
  void set_job(const std::string& config_text, const std::string& mode, std::int64_t replicas);

 private:
  std::unique_ptr<models::TensorBoardLog> log_;
};

// One line per epoch: "epoch 2/10  loss 0.31  acc 0.887  test 0.871 ...";
// with log_every > 0 also every log_every steps.
class ProgressLogger : public Callback {
 public:
  explicit ProgressLogger(std::int64_t log_every = 0) : log_every_(log_every) {}
  void on_step_end(const StepLogs& logs) override;
  void on_epoch_end(const EpochResult& r) override;

 private:
  std::int64_t log_every_;
};

// A callback made of lambdas, for one-off hooks.
struct LambdaCallback : Callback {
  std::function<void(std::int64_t, float)> epoch_begin;
  std::function<void(const StepLogs&)> step_end;
  std::function<void(const EpochResult&)> epoch_end, evaluate;
  std::function<void(const std::string&, std::int64_t)> checkpoint;
  void on_epoch_begin(std::int64_t e, float lr) override {
    if (epoch_begin) epoch_begin(e, lr);
  }
  void on_step_end(const StepLogs& l) override {
    if (step_end) step_end(l);
  }
  void on_epoch_end(const EpochResult& r) override {
    if (epoch_end) epoch_end(r);
  }
  void on_evaluate(const EpochResult& r) override {
    if (evaluate) evaluate(r);
  }
  void on_checkpoint(const std::string& p, std::int64_t s) override {
    if (checkpoint) checkpoint(p, s);
  }
};

// ---- fit ---------------------------------------------------------------------

// Everything of models::TrainConfig (model, data, epochs, batch PER REPLICA,
// max_steps, optimizer, lr, schedule, warmup_steps, seed, checkpoint_dir,
// checkpoint_every, checkpoint_each_epoch, keep_last, resume, eval_every,
// eval_batch; `device` is ignored: the strategy names the devices), plus:
struct FitConfig : models::TrainConfig {
  // Planned mode switches at global steps: "500:async,1500:sync".
  std::string switches;
  int threads_per_device = 1;  // CPU threads of each CPU replica
  int prefetch = 2;            // batches each replica's data loader keeps ready
  // The parameter server of async / ssp in shards, each owning part of the
  // parameters and optimizer state (TF's ps tasks with a
  // variable_partitioner): whole layers round-robin, a layer of more than
  // ps_split_above floats split across every shard (MinSizePartitioner).
  // 1 is the single server. Every shard runs in this process for now.
  int ps_shards = 1;
  std::int64_t ps_split_above = std::int64_t{1} << 20;
};

struct History {
  std::vector<EpochResult> epochs;       // one per completed epoch
  std::vector<EpochResult> evaluations;  // every evaluation (epoch ends and eval_every)
  EpochResult final;                     // the last evaluation
  std::int64_t steps = 0;                // global steps (updates applied)
  std::int64_t sync_steps = 0, pushes = 0;
  double train_seconds = 0, wall_seconds = 0, samples_per_s = 0;
  std::vector<std::string> mode_history;  // "sync@0", "async@300", ...
  std::string final_mode;
  bool stopped_early = false;
  // True when fit() ran on a worker node of a MultiWorkerMirroredStrategy:
  // the coordinator ran the job, so everything above is empty / zero
  // except wall_seconds.
  bool worker = false;
  // The trained model (replica 0 at the end; in async / ssp it holds the
  // server's parameters, which the final evaluation used), on the CPU.
  // Null on a worker node.
  std::shared_ptr<Model> model;
};

// A mode-switch (or stop) answer: HTTP-style status (200 done, 202 queued,
// 400 bad mode, 409 not running) and a message.
struct ControlReply {
  int status = 0;
  std::string message;
  bool ok() const { return status == 200 || status == 202; }
};

// ---- strategies ---------------------------------------------------------------

// What every strategy shares: its devices, an update mode, fit() and control
// of the running job. Not used directly: pick one of the strategies below.
class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  const std::vector<Device>& devices() const { return devices_; }
  int num_replicas_in_sync() const { return static_cast<int>(devices_.size()); }
  // The mode fit() starts in: "sync", "async" or "ssp:N".
  std::string mode() const;

  // Keras' model.fit: trains config.model on config.data with every replica
  // on its device, in this strategy's mode (plus config.switches), with
  // callbacks, checkpoints (config.checkpoint_dir) and the LR schedule.
  // Blocks until done; throws on a configuration error or a failed job.
  History fit(const FitConfig& config, const CallbackList& callbacks = {});

  // While fit() runs, from another thread: switch to "sync", "async" or
  // "ssp:N" at the next step boundary; blocks until it happened (a few
  // seconds at most). Called from inside a callback (the coordinator's
  // thread, which must keep running for the switch to happen) it does not
  // block: it queues the switch and returns status 202. 409 when no fit()
  // is running.
  ControlReply switch_mode(const std::string& mode);
  // While fit() runs: the job's status as JSON (step, epoch, mode, loss,
  // samples/s, ...); "{"state":"not running"}" otherwise.
  std::string status();
  // While fit() runs: stop at the next step boundary (checkpoint if configured).
  ControlReply stop();

 protected:
  Strategy(std::vector<Device> devices, const std::string& mode);
  // For strategies over a cluster: fills the job's cluster hooks
  // (JobConfig::cluster) before fit() builds the job.
  virtual void configure_job(actors::JobConfig& /*job*/) {}
  // True when this process is a worker node: fit() calls fit_as_worker
  // instead of running a job.
  virtual bool is_worker_node() const { return false; }
  virtual History fit_as_worker(const FitConfig& config);

 private:
  std::vector<Device> devices_;
  std::string mode_;
  std::mutex mutex_;                  // guards job_ and pending_
  std::shared_ptr<actors::Job> job_;  // the running fit()'s job
  std::vector<std::thread> pending_;  // switches queued from callbacks
  std::atomic<bool> stop_requested_{false};
};

// tf.distribute.MirroredStrategy: one replica per local device, synchronous
// all-reduce of the gradients; every replica applies the same update.
// The global batch is config.batch x num_replicas_in_sync().
//
// It also runs custom training loops (TF's strategy.run / strategy.reduce):
//
//   troupe::MirroredStrategy strategy(troupe::parse_devices("cpu:0,cpu:1"));
//   auto data = troupe::load_data("fashion-mnist");
//   strategy.create_replicas(troupe::model_spec("cnn", data.train), {"adam"}, /*seed=*/0);
//   strategy.distribute(data.train, /*global_batch=*/128, /*seed=*/0);
//   for (int s = 0; s < strategy.steps_per_epoch(); ++s) {
//     troupe::PerReplica losses = strategy.run([](troupe::ReplicaContext& ctx) {
//       const troupe::Tensor& logits = ctx.model.forward(ctx.features, /*training=*/true);
//       double loss = ctx.compute_average_loss(logits);  // sum of losses / GLOBAL batch
//       ctx.model.backward(ctx.output_gradient());
//       return loss;
//     }, /*lr=*/1e-3f);
//     double loss = strategy.reduce(troupe::ReduceOp::SUM, losses);   // mean over the global batch
//   }
class MirroredStrategy;

// What a step function sees on its replica (its own thread).
struct ReplicaContext {
  int replica_id = 0;  // replica_id_in_sync_group
  int num_replicas = 1;
  std::int64_t step = 0;          // 0-based custom-loop step
  std::int64_t global_batch = 0;  // examples of this step over all replicas
  std::int64_t examples = 0;      // examples in this replica's batch (may be fewer at an epoch end)
  Model& model;                   // this replica's model, on `device`
  Device device;
  const Tensor& features;  // [examples, ...] on `device`
  const Tensor& labels;    // i32 [examples] (classification) or f32 targets

  // tf.nn.compute_average_loss: the SUM of this replica's per-example losses
  // divided by the GLOBAL batch (not by `examples`), so that adding the
  // replicas' values gives the mean over the global batch, and adding their
  // gradients (the all-reduce) gives the gradient of that mean. Also fills
  // output_gradient() with d(returned loss)/d(output).
  double compute_average_loss(const Tensor& output);
  const Tensor& output_gradient() const;

  // Set by the strategy.
  struct Internals;
  Internals* internals = nullptr;
};

// One value per replica, in replica order (TF's PerReplica).
struct PerReplica {
  std::vector<double> values;
};

enum class ReduceOp { SUM, MEAN };

using StepFn = std::function<double(ReplicaContext&)>;

class MirroredStrategy : public Strategy {
 public:
  // No devices: default_devices().
  explicit MirroredStrategy(std::vector<Device> devices = {});
  ~MirroredStrategy() override;

  // ---- custom training loop ----
  // strategy.scope(): one replica of `spec` per device, each with its own
  // optimizer, all initialised from `seed` (identical).
  void create_replicas(const ModelSpec& spec, const OptimizerConfig& optimizer, std::uint64_t seed);
  // experimental_distribute_dataset: each step, replica r gets its shard of
  // global batch t (tf.data's auto-shard by data; data::EpochPlan).
  // global_batch must be a multiple of num_replicas_in_sync().
  void distribute(const Dataset& train, std::int64_t global_batch, std::uint64_t seed, bool shuffle = true);
  std::int64_t steps_per_epoch() const;
  std::int64_t epoch() const;  // the epoch the next run() reads from

  // strategy.run: calls `step_fn` on every replica at once (a thread each)
  // with that replica's batch; step_fn fills the model's gradients
  // (model.backward) and returns a value (its loss). Then the gradients are
  // summed across replicas with the local collective (all-reduce) and every
  // replica's optimizer applies the same update with learning rate `lr`.
  // An exception in any replica's step_fn aborts the step on every replica
  // and is rethrown here.
  PerReplica run(const StepFn& step_fn, float lr);
  // strategy.reduce: SUM or MEAN of the per-replica values.
  static double reduce(ReduceOp op, const PerReplica& values);

  Model& replica(int r);  // replica r's model (they are identical after each step)

 private:
  struct Loop;
  std::unique_ptr<Loop> loop_;
};

// tf.distribute.experimental.ParameterServerStrategy (and TF1's ps/worker
// between-graph replication) on local devices: each replica pushes its
// gradient to a parameter server, which applies it at once ("async"), or
// lets no replica run more than N steps ahead of the slowest ("ssp:N").
class ParameterServerStrategy : public Strategy {
 public:
  // mode: "async" or "ssp:N". Throws std::invalid_argument for anything else.
  explicit ParameterServerStrategy(const std::string& mode = "async", std::vector<Device> devices = {});
};

// ---- MultiWorkerMirroredStrategy: several hosts (or processes) ------------
//
// tf.distribute.MultiWorkerMirroredStrategy on troupe's cluster runtime (the
// same as `troupe node`, cluster/node.hpp). Every process of the cluster
// builds the strategy and calls fit() with the same FitConfig; TF_CONFIG's
// role is played by a cluster spec in its shape (net/cluster/cluster_spec.hpp):
//
//   TROUPE_CLUSTER='{"cluster":{"worker":["127.0.0.1:7000","127.0.0.1:7001"]},
//                    "task":{"type":"worker","index":1}}'
//   troupe::MultiWorkerMirroredStrategy strategy;   // reads $TROUPE_CLUSTER
//   troupe::History h = strategy.fit(config, callbacks);
//   if (h.worker) ...                                // this process was a worker
//
// Task 0 (the chief, else worker[0]) is the coordinator: its fit() runs the
// job (callbacks, checkpoints, evaluations, the parameter server in
// async / ssp, switch_mode / status / stop) exactly as MirroredStrategy does,
// over the replicas of every node, once all nodes of the spec have joined.
// Every other task is a worker node: its fit() joins the coordinator,
// receives the job (its own FitConfig's model/data/... are NOT used: the
// coordinator's are; only threads_per_device and prefetch apply), trains
// until the coordinator ends the job, and returns a History with
// worker = true and only wall_seconds filled; its callbacks are not called.
// A worker whose job failed, was refused or lost the coordinator throws
// std::runtime_error from fit() (the reason is logged on stderr).
//
// Batches: config.batch is per replica (per device); with one device per
// node the global batch is config.batch x num_workers().
struct ClusterOptions {
  // One of: a TF_CONFIG-shaped spec file, or its JSON text, or neither and
  // then $TROUPE_CLUSTER; or instead (no spec at all) listen / join below.
  std::string cluster_spec_file;
  std::string cluster_spec_json;
  std::string listen;           // coordinator: accept nodes at HOST:PORT
  std::string join;             // worker: join the coordinator at HOST:PORT
  int min_nodes = 1;            // with listen: nodes before training, this one included
  std::vector<Device> devices;  // this node's (default: default_devices())
  // The coordinator's update mode: "sync" (MultiWorkerMirroredStrategy) or
  // "async" / "ssp:N" (TF's ParameterServerStrategy on a cluster; the
  // parameter-server shards run on the spec's ps tasks, see
  // serve_parameter_server, else on the coordinator). Ignored on a worker.
  std::string mode = "sync";
  // This node's data-plane address HOST[:PORT] (default: with a spec, a
  // worker's own entry; else chosen by the runtime, a free port).
  std::string data_address;
  std::string secret_file;  // else $TROUPE_SECRET, else none (loopback peers only)
  // `troupe node --insecure`, for a network trusted as much as the hosts:
  // nodes still prove the secret (one is required: std::invalid_argument
  // without), but their links are left unsealed after the handshake
  // (plaintext ring speed, NCCL between GPU nodes). Every node must agree.
  bool insecure = false;
  double join_timeout_s = 30;   // worker: reaching the coordinator
  double wait_timeout_s = 600;  // waiting for the nodes / for the job to start
  double timeout_s = 60;        // any one collective or remote request
  // worker and ps task (serve_parameter_server): after losing the
  // coordinator, keep trying to join it again for this long, so that a
  // chief restarted with resume = true goes on with this process (`troupe
  // node` defaults to 120 s); 0: return at once.
  double rejoin_timeout_s = 0;
};

class MultiWorkerMirroredStrategy : public Strategy {
 public:
  // Throws std::invalid_argument naming what is wrong: no spec and no
  // listen/join, both, a malformed address, a task index out of range, a
  // "ps" task (that one calls serve_parameter_server instead). With a spec
  // that has ps entries, the coordinator waits for that many ps tasks and
  // places the parameter-server shards on them.
  explicit MultiWorkerMirroredStrategy(ClusterOptions options = {});
  ~MultiWorkerMirroredStrategy() override;

  bool is_coordinator() const { return coordinator_; }
  int task_index() const { return task_index_; }    // rank: 0 is the coordinator
  int num_workers() const { return num_workers_; }  // nodes of the cluster (min_nodes with listen)

 protected:
  void configure_job(actors::JobConfig& job) override;
  bool is_worker_node() const override { return !coordinator_; }
  History fit_as_worker(const FitConfig& config) override;

 private:
  ClusterOptions options_;
  bool coordinator_ = false;
  int task_index_ = 0, num_workers_ = 1;
  int ps_tasks_ = 0;  // the spec's ps entries (the coordinator waits for them)
};

// TF1's `tf.train.Server(cluster, job_name="ps", ...).join()`: a ps task.
// The cluster spec (options as for MultiWorkerMirroredStrategy; its task
// must be of type "ps") names the chief to join and this task's own
// address, where it serves the replicas' pushes; or, without a spec,
// `join` and `data_address`. Hosts the parameter-server shards the chief
// places on it and returns when the job is over: 0 when it completed, 1
// when it failed or the chief was lost (the reason is logged). Throws
// std::invalid_argument for a spec whose task is not a ps task.
int serve_parameter_server(ClusterOptions options);
// Whether the cluster spec of `options` (or $TROUPE_CLUSTER) makes this
// process a ps task.
bool is_ps_task(const ClusterOptions& options);

}  // namespace troupe
