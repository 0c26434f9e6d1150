// Trainer: single-replica training, evaluation and checkpointing — what
// `troupe train` runs on one device, and the step that device actors run
// on each replica.
//
// One step: gather the next batch of this replica's shard (data::BatchIterator),
// forward, loss gradient scaled by 1 / global batch, backward into the model's
// flat gradient buffer, then one fused optimizer update with the scheduled
// learning rate. Everything that decides the next step is in the checkpoint
// (parameters, optimizer buffers and scalars, data cursor, global step; the
// dropout seed is a function of the job seed and the step), so a resumed run
// on the CPU reaches the same parameters as an uninterrupted one.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/checkpoint/checkpoint.hpp"
#include "models/data/epoch_plan.hpp"
#include "models/data/load.hpp"
#include "models/loss.hpp"
#include "models/loss_scale.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/schedule.hpp"

namespace troupe::checkpoint {
class Directory;
struct State;
}  // namespace troupe::checkpoint

namespace troupe::models {

struct TrainConfig {
  std::string model = "cnn";           // zoo name or spec file
  ZooSizes zoo;                        // a zoo transformer's sizes (--layers --heads --width)
  std::string data = "fashion-mnist";  // dataset name or path
  data::LoadOptions data_options;
  std::int64_t epochs = 1;
  std::int64_t batch = 64;     // per replica
  std::int64_t max_steps = 0;  // stop after this many global steps (0: no limit)
  OptimizerConfig optimizer;
  float lr = 1e-3f;
  std::string schedule = "constant";
  std::int64_t warmup_steps = 0;
  // Warm-up in epochs (the anchors' "one epoch"), turned into warmup_steps
  // by resolve_training_length(); give one of the two.
  double warmup_epochs = 0;
  // The warm-up came from a zoo model's recipe (apply_recipe), not from a
  // flag: a training shorter than it (a smoke test's --steps 20) then warms
  // up over a tenth of the training instead of being refused, and
  // warmup_note says so (the CLI prints it).
  bool warmup_from_recipe = false;
  std::string warmup_note;
  float label_smoothing = 0.0f;  // cross-entropy's (models/loss.hpp); 0: none
  // Image augmentation, "crop:2,flip" (models/data/augment.hpp); empty: none.
  std::string augment;
  // --standardize: the model's first layer standardizes the features with
  // the training split's mean and deviation per feature (per channel of
  // images), a `standardize` line in its spec (training_model below), so
  // the checkpoint, eval, predict and the export apply them too.
  bool standardize = false;
  // The matmuls' precision: "fp32", or "bf16" (Model::set_precision;
  // mixed precision as PyTorch's autocast: fp32 master weights, optimizer
  // state, gradients on the wire and checkpoints). parse_precision checks it.
  std::string precision = "fp32";
  // fp16's first loss scale (PyTorch's GradScaler init_scale); it halves on
  // every overflow from there (loss_scale.hpp). A resume keeps the saved one.
  double initial_loss_scale = LossScale::kInitial;
  std::uint64_t seed = 0;
  bool shuffle = true;
  bool drop_remainder = true;  // as the PyTorch anchor: full batches only
  Device device = Device::cpu();

  std::string checkpoint_dir;         // empty: no checkpoints
  std::int64_t checkpoint_every = 0;  // steps between checkpoints (0: epoch ends only)
  bool checkpoint_each_epoch = true;
  std::size_t keep_last = 3;
  bool resume = false;  // continue from the newest checkpoint in checkpoint_dir
  // With resume: start from step 0 when the directory holds no checkpoint
  // (without it, that is an error: a typo in the path must not silently
  // restart a long job).
  bool resume_or_start = false;
  // With a checkpoint_dir: also checkpoint when this many minutes have
  // passed since the last one (0: never by time). Young's rule for the
  // interval that loses least: sqrt(2 x mean time between failures x time
  // to save one), e.g. 10 minutes for a 3-day MTBF and a 1 s save.
  double checkpoint_minutes = 10;
  std::string update_mode = "sync";  // recorded in checkpoints

  std::int64_t eval_batch = 1000;
  // Evaluate on the test split every this many global steps as well as at
  // epoch ends (0: epoch ends only). The actor runtime (actors::Job) honours
  // it; each result goes to Callbacks::on_evaluate.
  std::int64_t eval_every = 0;
};

// "fp32" or "bf16"; anything else is an std::invalid_argument saying what
// is there (fp16 needs a GPU and dynamic loss scaling, not built yet).
kernels::ops::MatmulPrecision parse_precision(const std::string& text);

// Makes the settings that follow the training's length concrete, once the
// steps of an epoch are known (the data loaded, the replicas counted):
// warmup_epochs becomes warmup_steps (rounded to the nearest step, at least
// one), and a cosine schedule that ends with the training
// (models/schedule.hpp) ends at its last step: epochs x steps_per_epoch, or
// max_steps when that comes first. Trainer and actors::Job call it; what
// they store (checkpoints, the job's text) is the concrete form. Throws
// std::invalid_argument when both warm-up forms are given.
void resolve_training_length(TrainConfig& config, std::int64_t steps_per_epoch);

// An epoch's figures, or one evaluation's. What was not measured is NaN,
// never 0 (a 0 reads as a result): every test figure when the job has no
// test data (test_examples 0), accuracy and top-5 in regression, the mean
// absolute error in classification. In regression test_loss is the mean
// squared error.
struct EpochResult {
  std::int64_t epoch = 0;  // 0-based
  std::int64_t step = 0;   // global steps done
  double train_loss = 0, train_accuracy = 0;
  double test_loss = std::nan(""), test_accuracy = std::nan(""), test_top5 = std::nan("");
  double test_mae = std::nan("");  // regression: the mean absolute error over every target
  std::int64_t test_examples = 0;
  bool regression = false;  // the data's task (evaluate_model sets it, with test data or without)
  bool has_test() const { return test_examples > 0; }
  float lr = 0;
  double samples_per_s = 0;  // this epoch's training throughput
  double seconds = 0;
};

// What Callbacks::on_step_end hears after each global step.
struct StepEnd {
  std::int64_t step = 0;           // the global step just counted (1-based)
  std::int64_t step_in_epoch = 0;  // its place in the epoch
  // The epoch's mean loss so far (Keras' running average, so a progress bar
  // and the epoch's summary line agree) and its top-1 training accuracy so
  // far (NaN where it is not measured: regression).
  double loss = 0;
  double accuracy = 0;
  double samples_per_s = 0;  // so far this epoch
  float lr = 0;              // the learning rate of this step (the schedule at its global step)
};

// Hooks around training, as Keras callbacks. All optional.
struct Callbacks {
  std::function<void(const Model&, const data::Splits&)> on_train_begin;
  std::function<void(std::int64_t epoch, std::int64_t steps_in_epoch, float lr)> on_epoch_begin;
  // After each global step (StepEnd above).
  std::function<void(const StepEnd&)> on_step_end;
  std::function<void(const EpochResult&)> on_epoch_end;
  // Every evaluation of the actor runtime, mid-epoch ones (eval_every) and
  // epoch ends alike: step, epoch, test metrics, lr, and `seconds` = training
  // time so far (evaluations and other step-boundary work excluded).
  std::function<void(const EpochResult&)> on_evaluate;
  std::function<void(const std::string& path, std::int64_t step)> on_checkpoint;
  // The actor runtime switched the update mode ("sync", "async", "ssp:N")
  // at a step boundary; `step` is the global step the new mode starts at.
  std::function<void(std::int64_t step, const std::string& mode)> on_mode_switch;
  // A cluster's membership changed (actor runtime, elastic): the new view's
  // number and world size (replicas), from the given global step on, and
  // the steps the current epoch now has in all (its batches follow the
  // world size).
  std::function<void(std::int64_t step, int view, int world, std::int64_t steps_in_epoch)> on_view_change;
  // Looked at after every step (the actor runtime's coordinator also looks
  // every 50 ms while no step ends); returning true stops training at the
  // next step boundary (after a checkpoint when a directory is configured).
  // Called from the training's own thread: it must not block.
  std::function<bool()> should_stop;
};

struct TrainResult {
  std::vector<EpochResult> epochs;
  std::int64_t steps = 0;
  double wall_seconds = 0;
  double samples_per_s = 0;  // over all training steps
  EpochResult final;         // the last evaluation
  bool stopped_early = false;
  std::string resumed_from;  // checkpoint path, when resumed
  // Resumed from a checkpoint of a job that had already trained every epoch
  // (or reached max_steps): nothing was trained.
  bool already_finished = false;
  // --precision fp16: the loss scale at the end and the steps its overflows
  // skipped (over the whole run, resumes included); 0 and 0 otherwise.
  double loss_scale = 0;
  std::int64_t skipped_steps = 0;
};

class Trainer {
 public:
  // Loads the data, builds and initialises the model, checks the checkpoint
  // directory is writable, and resumes when asked: every configuration
  // error surfaces here, before any training.
  explicit Trainer(TrainConfig config);
  ~Trainer();

  TrainResult run(const Callbacks& callbacks = {});

  // Evaluates the model on the test split (or `dataset`), in batches.
  EpochResult evaluate(const data::Dataset* dataset = nullptr);

  // Writes a checkpoint now; returns its path.
  std::string save_checkpoint();

  Model& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  const data::Splits& data() const { return data_; }
  const TrainConfig& config() const { return config_; }
  std::int64_t global_step() const { return step_; }
  bool classification() const;

  // The checkpoint state of this trainer / restoring from one.
  checkpoint::State state() const;
  void restore(const checkpoint::State& state, const std::string& path);

 private:
  TrainConfig config_;
  data::Splits data_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule schedule_;
  Loss loss_;
  std::unique_ptr<checkpoint::Directory> checkpoints_;
  std::int64_t step_ = 0;
  std::int64_t last_saved_step_ = -1;
  data::Cursor cursor_;
  std::string resumed_from_;
};

// The checkpoint a resume starts from: the newest in `dir` that fully
// verifies. Each newer file that does not is named on stderr with the
// reason ("resume: skipping ... : ..."), so a corrupt newest checkpoint falls
// back to an older good one. None only when `or_start` allows starting from
// step 0; otherwise a directory without a usable checkpoint throws
// std::invalid_argument naming it.
std::optional<checkpoint::Directory::Loaded> find_resume_checkpoint(const checkpoint::Directory& dir, bool or_start);

// Throws CheckpointError unless `state` can continue a job of this model
// (same architecture and parameter count), optimizer and seed.
void check_resumable(const checkpoint::State& state, const std::string& path, const ModelSpec& spec,
                     std::int64_t parameter_count, const std::string& optimizer, std::uint64_t seed);

// True when a job resumed at `global_step` after `epochs_done` epochs has
// nothing left to train under `config` (epochs, max_steps).
bool training_finished(const TrainConfig& config, std::int64_t epochs_done, std::int64_t global_step);

// A host batch as a tensor of `device`: the tensor itself when it is
// already there, a view when `device` shares host memory (another CPU
// device), else a copy into `staging`, which is reused from call to call.
const Tensor& on_device(const Tensor& host, Tensor& staging, const Device& device);

// Evaluates `model` on every example of `dataset`, `batch` at a time:
// mean loss, accuracy and top-5 accuracy (classification).
EpochResult evaluate_model(Model& model, const data::Dataset& dataset, std::int64_t batch = 1000);

// The model's DataShape for a dataset (input shape and dtype, classes,
// regression outputs, vocabulary size).
DataShape data_shape_of(const data::Dataset& dataset);

// The model a job trains: config.model (a zoo name or a spec file) for the
// training split's shape, first standardizing the features when
// config.standardize (standardize_first), checked against the split's input
// (check_model_input). Trainer, the actor Job and every cluster node call
// it, so that all build the same spec text from the same data.
ModelSpec training_model(const TrainConfig& config, const data::Dataset& train);

// Rebuilds a model from a checkpoint alone (spec, parameters and state), on `device`.
std::unique_ptr<Model> load_model(const checkpoint::State& state, const std::string& path, Device device);
// Copies the checkpoint's model state (running statistics) into `model`;
// throws checkpoint::CheckpointError naming `path` when its size is not the
// model's (a checkpoint without the statistics its model keeps).
void restore_model_state(Model& model, const checkpoint::State& state, const std::string& path);

// Peak resident memory of this process so far, in MiB.
double peak_memory_mib();

}  // namespace troupe::models
