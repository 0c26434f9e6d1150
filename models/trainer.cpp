#include "models/trainer.hpp"

#include "models/step.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "models/checkpoint/checkpoint.hpp"
#include "models/data/augment.hpp"
#include "models/data/epoch_plan.hpp"
#include "models/warm_up.hpp"

namespace troupe::models {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

data::PlanOptions plan_options(const TrainConfig& c, const data::Dataset& train) {
  return data::plan_options(train, c.batch, c.shuffle, c.seed, c.drop_remainder);
}

void check_config(const TrainConfig& c) {
  if (c.epochs < 1) throw std::invalid_argument("--epochs must be at least 1, got " + std::to_string(c.epochs));
  if (c.batch < 1) throw std::invalid_argument("--batch must be at least 1, got " + std::to_string(c.batch));
  if (c.max_steps < 0) throw std::invalid_argument("--steps must be >= 0");
  parse_precision(c.precision);
  if (c.checkpoint_every < 0) throw std::invalid_argument("--checkpoint-every must be >= 0");
  if (c.resume && c.checkpoint_dir.empty())
    throw std::invalid_argument("--resume needs --checkpoint-dir to resume from");
}

// The schedule of `c` once resolve_training_length() made it concrete with
// the steps of one epoch on one replica (at least 1, so that a data set
// smaller than a batch reaches the clearer error of the constructor's
// body). One function, so that the warm-up is read after it is resolved.
LrSchedule resolved_schedule(TrainConfig& c, const data::Dataset& train) {
  resolve_training_length(c, std::max<std::int64_t>(1, data::batches_per_epoch(plan_options(c, train), {0, 1})));
  return LrSchedule(c.schedule, c.lr, c.warmup_steps);
}

}  // namespace

void resolve_training_length(TrainConfig& c, std::int64_t steps_per_epoch) {
  if (c.warmup_epochs < 0 || !std::isfinite(c.warmup_epochs))
    throw std::invalid_argument("--warmup-epochs must be >= 0, got " + std::to_string(c.warmup_epochs));
  if (c.warmup_epochs > 0) {
    if (c.warmup_steps > 0)
      throw std::invalid_argument("--warmup (" + std::to_string(c.warmup_steps) + " steps) and --warmup-epochs (" +
                                  std::to_string(c.warmup_epochs) + ") both set the warm-up; give one");
    c.warmup_steps = std::max<std::int64_t>(1, std::llround(c.warmup_epochs * static_cast<double>(steps_per_epoch)));
    c.warmup_epochs = 0;
  }
  std::int64_t total = c.epochs * steps_per_epoch;
  if (c.max_steps > 0) total = std::min(total, c.max_steps);
  total = std::max<std::int64_t>(1, total);
  if (c.warmup_from_recipe && c.warmup_steps > total) {
    const std::int64_t cut = total / 10;
    c.warmup_note = "the recipe's warm-up (" + std::to_string(c.warmup_steps) +
                    " steps) is longer than the training (" + std::to_string(total) + " steps): warming up over " +
                    std::to_string(cut) + " steps instead, a tenth of it (--warmup-epochs sets it)";
    c.warmup_steps = cut;
  }
  if (schedule_ends_with_training(c.schedule)) c.schedule = schedule_with_length(c.schedule, total);
}

const Tensor& on_device(const Tensor& host, Tensor& staging, const Device& device) {
  if (device == host.device()) return host;
  if (device.same_memory(host.device())) {
    // Another CPU device: the same memory, seen as that device's tensor.
    staging = Tensor::view(host.raw(), host.shape(), host.dtype(), device);
    return staging;
  }
  if (!staging.defined() || staging.raw() == nullptr || staging.shape() != host.shape() ||
      staging.dtype() != host.dtype())
    staging = Tensor::empty(host.shape(), host.dtype(), device);
  staging.copy_from(host);
  return staging;
}

kernels::ops::MatmulPrecision parse_precision(const std::string& text) {
  if (text == "fp32") return kernels::ops::MatmulPrecision::fp32;
  if (text == "bf16") return kernels::ops::MatmulPrecision::bf16;
  if (text == "fp16") return kernels::ops::MatmulPrecision::fp16;
  throw std::invalid_argument("--precision '" + text + "': expected fp32, bf16 or fp16");
}

DataShape data_shape_of(const data::Dataset& d) {
  DataShape s;
  s.input = d.feature_shape();
  s.input_dtype = d.features.dtype();
  if (d.task == data::Task::classification) {
    s.classes = d.num_classes;
  } else {
    Shape label = d.label_shape();
    s.outputs = label.rank() == 0 ? 1 : label.numel();
  }
  s.vocab = static_cast<std::int64_t>(d.vocabulary.size());
  return s;
}

ModelSpec training_model(const TrainConfig& config, const data::Dataset& train) {
  ModelSpec spec = with_vocabulary(resolve_model(config.model, data_shape_of(train), config.zoo), train);
  if (config.standardize) spec = standardize_first(spec, train);
  check_model_input(spec, train);
  return spec;
}

Trainer::Trainer(TrainConfig config)
    : config_((check_config(config), std::move(config))),
      data_(data::load_dataset(config_.data, config_.data_options)),
      schedule_(resolved_schedule(config_, data_.train)),
      loss_(data_.train.task == data::Task::classification ? LossKind::sparse_categorical_crossentropy
                                                           : LossKind::mean_squared_error,
            config_.label_smoothing) {
  if (data_.train.size() == 0) throw std::invalid_argument("dataset " + config_.data + " has no training examples");
  data::Augmentation::parse(config_.augment).check_images(data_.train.feature_shape(), data_.train.features.dtype());
  model_ = std::make_unique<Model>(training_model(config_, data_.train), config_.device);
  model_->set_precision(parse_precision(config_.precision));
  model_->initialize(config_.seed);
  optimizer_ = make_optimizer(config_.optimizer, model_->parameters(), model_->decayed_ranges());
  if (model_->precision() == kernels::ops::MatmulPrecision::fp16) {
    optimizer_->loss_scale().enable();
    optimizer_->loss_scale().set("loss_scale", config_.initial_loss_scale);
  }
  // An epoch must hold at least one full step, or training would spin.
  data::batches_per_epoch(plan_options(config_, data_.train), {0, 1}) > 0
      ? void()
      : throw std::invalid_argument("dataset " + config_.data + " has " + std::to_string(data_.train.size()) +
                                    " training examples, fewer than one batch of " + std::to_string(config_.batch));
  if (!config_.checkpoint_dir.empty()) {
    checkpoints_ = std::make_unique<checkpoint::Directory>(config_.checkpoint_dir, config_.keep_last);
    if (config_.resume) {
      if (auto found = find_resume_checkpoint(*checkpoints_, config_.resume_or_start))
        restore(found->state, found->path);
    }
  }
}

Trainer::~Trainer() = default;

bool Trainer::classification() const { return data_.train.task == data::Task::classification; }

TrainResult Trainer::run(const Callbacks& cb) {
  TrainResult result;
  result.resumed_from = resumed_from_;
  if (cb.on_train_begin) cb.on_train_begin(*model_, data_);

  const data::Dataset& train = data_.train;
  data::BatchIterator batches(plan_options(config_, train), {0, 1}, cursor_);
  Tensor x_host = train.make_feature_batch(config_.batch);
  const data::Augmentation augment = data::Augmentation::parse(config_.augment);
  Tensor y_host = train.make_label_batch(config_.batch);
  Tensor x_dev, y_dev, dout;
  Metrics epoch_metrics;

  if (!resumed_from_.empty() && training_finished(config_, cursor_.epoch, step_)) {
    result.already_finished = true;
    result.steps = step_;
    if (optimizer_->loss_scale().enabled()) {
      result.loss_scale = optimizer_->loss_scale().scale();
      result.skipped_steps = optimizer_->loss_scale().skipped();
    }
    return result;
  }

  // A GPU's libraries load here, outside the timed steps (warm_up.hpp).
  warm_up_device(model_->spec(), config_.device, config_.batch, config_.eval_batch, !classification());
  const auto t_all = Clock::now();
  auto t_checkpoint = Clock::now();
  const auto checkpoint_interval = std::chrono::duration<double>(config_.checkpoint_minutes * 60.0);
  double train_seconds = 0;
  std::int64_t trained_examples = 0;
  auto t_epoch = Clock::now();
  std::int64_t epoch_examples = 0;
  bool epoch_open = false;

  while (cursor_.epoch < config_.epochs && (config_.max_steps == 0 || step_ < config_.max_steps)) {
    if (cb.should_stop && cb.should_stop()) {
      result.stopped_early = true;
      break;
    }
    const float lr = schedule_.at(step_, cursor_.epoch);
    if (!epoch_open) {
      epoch_open = true;
      t_epoch = Clock::now();
      epoch_examples = 0;
      epoch_metrics.reset();
      if (cb.on_epoch_begin) cb.on_epoch_begin(cursor_.epoch, batches.batches_per_epoch(), lr);
    }
    const auto t_step = Clock::now();
    data::BatchIterator::Batch batch = batches.next();
    const std::int64_t n = train.gather(batch.indices, x_host, y_host);
    augment.apply(x_host, n, batch.indices, config_.seed, batch.cursor.epoch);
    Tensor xb = x_host.slice(0, batched(n, train.feature_shape()));
    Tensor yb = y_host.slice(0, batched(n, train.label_shape()));
    const Tensor& x = on_device(xb, x_dev, config_.device);
    const Tensor& y = on_device(yb, y_dev, config_.device);

    // The step every driver takes (step.hpp): this is replica 0 of one.
    model_->set_step_seed(step_seed(config_.seed, 0, step_));
    LossScale& loss_scale = optimizer_->loss_scale();
    const StepResult stepped =
        forward_backward(*model_, loss_, x, y, loss_scale.factor() / static_cast<float>(n), dout);
    // A diverged step is never applied: the parameters stay the last finite
    // ones, which the checkpoint below keeps, and training stops. Under fp16
    // an overflowing gradient only skips the step (loss_scale.hpp).
    bool apply = true;
    try {
      check_loss_finite(stepped.loss_sum, step_ + 1);
      if (loss_scale.enabled())
        apply = loss_scale.unscale(model_->gradients(), step_ + 1);
      else
        check_gradient_finite(model_->gradients(), step_ + 1);
    } catch (const NonFiniteError& e) {
      std::string message = e.what();
      if (checkpoints_ && last_saved_step_ != step_) message += "; the last finite state is in " + save_checkpoint();
      throw std::runtime_error(message);
    }
    if (apply) {
      clip_gradient_norm(model_->gradients(), config_.optimizer.clip_norm);
      optimizer_->step(model_->parameters(), model_->gradients(), lr);
    }
    ++step_;
    cursor_ = batches.cursor();
    const double loss_sum = stepped.loss_sum;
    epoch_metrics.add(*stepped.output, y, loss_sum, classification());

    const double dt = seconds_since(t_step);
    train_seconds += dt;
    trained_examples += n;
    epoch_examples += n;
    const double epoch_elapsed = seconds_since(t_epoch);
    if (cb.on_step_end) {
      StepEnd e;
      e.step = step_;
      e.step_in_epoch = batch.cursor.batch + 1;
      e.loss = epoch_metrics.mean_loss();
      e.accuracy = classification() ? epoch_metrics.accuracy() : std::nan("");
      e.samples_per_s = epoch_elapsed > 0 ? double(epoch_examples) / epoch_elapsed : 0.0;
      e.lr = lr;
      cb.on_step_end(e);
    }

    const bool due_by_time = config_.checkpoint_minutes > 0 && Clock::now() - t_checkpoint >= checkpoint_interval;
    if (checkpoints_ && ((config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0) || due_by_time)) {
      t_checkpoint = Clock::now();
      std::string path = save_checkpoint();
      if (cb.on_checkpoint) cb.on_checkpoint(path, step_);
    }

    if (batch.last_in_epoch) {
      EpochResult r = evaluate();
      r.epoch = batch.cursor.epoch;
      r.step = step_;
      r.train_loss = epoch_metrics.mean_loss();
      r.train_accuracy = classification() ? epoch_metrics.accuracy() : std::nan("");
      r.lr = lr;
      r.seconds = seconds_since(t_epoch);
      r.samples_per_s = r.seconds > 0 ? double(epoch_examples) / r.seconds : 0;
      result.epochs.push_back(r);
      epoch_open = false;
      if (checkpoints_ && config_.checkpoint_each_epoch && last_saved_step_ != step_) {
        std::string path = save_checkpoint();
        if (cb.on_checkpoint) cb.on_checkpoint(path, step_);
      }
      if (cb.on_epoch_end) cb.on_epoch_end(r);
    }
  }

  if (checkpoints_ && (result.stopped_early || epoch_open) && last_saved_step_ != step_) {
    std::string path = save_checkpoint();
    if (cb.on_checkpoint) cb.on_checkpoint(path, step_);
  }
  result.steps = step_;
  if (optimizer_->loss_scale().enabled()) {
    result.loss_scale = optimizer_->loss_scale().scale();
    result.skipped_steps = optimizer_->loss_scale().skipped();
  }
  result.wall_seconds = seconds_since(t_all);
  result.samples_per_s = train_seconds > 0 ? double(trained_examples) / train_seconds : 0;
  if (!result.epochs.empty() && !epoch_open && !result.stopped_early) {
    result.final = result.epochs.back();
  } else {
    result.final = evaluate();
    result.final.step = step_;
    result.final.epoch = cursor_.epoch;
  }
  return result;
}

EpochResult Trainer::evaluate(const data::Dataset* dataset) {
  EpochResult r = evaluate_model(*model_, dataset ? *dataset : data_.test, config_.eval_batch);
  r.step = step_;
  return r;
}

EpochResult evaluate_model(Model& model, const data::Dataset& d, std::int64_t batch) {
  EpochResult r;
  const bool classification = d.task == data::Task::classification;
  r.regression = !classification;
  if (d.size() == 0) return r;
  Loss loss(classification ? LossKind::sparse_categorical_crossentropy : LossKind::mean_squared_error);
  Metrics metrics;
  // A text's windows evaluate at most 16,384 tokens a batch: a whole
  // eval batch of 1000 windows of 64 would hold every layer's activations
  // for 64,000 positions (GBs for the gpt).
  if (d.window > 0) batch = std::min<std::int64_t>(batch, std::max<std::int64_t>(1, 16384 / d.window));
  const std::int64_t b = std::max<std::int64_t>(1, std::min<std::int64_t>(batch, d.size()));
  Tensor x_host = d.make_feature_batch(b), y_host = d.make_label_batch(b), x_dev, y_dev;
  std::vector<std::int64_t> indices;
  for (std::int64_t start = 0; start < d.size(); start += b) {
    indices.clear();
    for (std::int64_t i = start; i < std::min(start + b, d.size()); ++i) indices.push_back(d.tile(i));
    const std::int64_t n = d.gather(indices, x_host, y_host);
    const Tensor xb = x_host.slice(0, batched(n, d.feature_shape()));
    const Tensor yb = y_host.slice(0, batched(n, d.label_shape()));
    const Tensor& x = on_device(xb, x_dev, model.device());
    const Tensor& y = on_device(yb, y_dev, model.device());
    const Tensor& out = model.forward(x, /*training=*/false);
    metrics.add(out, y, loss.sum(out, y, Tensor(), 1.0f), classification);
  }
  r.test_loss = metrics.mean_loss();
  if (classification) {
    r.test_accuracy = metrics.accuracy();
    r.test_top5 = metrics.top5_accuracy();
  } else {
    r.test_mae = metrics.mean_absolute_error();
  }
  r.test_examples = metrics.examples();
  return r;
}

checkpoint::State Trainer::state() const {
  checkpoint::State s;
  s.model.name = model_->spec().name;
  s.model.spec = model_->spec().text();
  s.parameters = model_->parameters().to_vector();
  s.model_state = model_->state().to_vector();
  s.optimizer.name = config_.optimizer.name;
  s.optimizer.spec = config_.optimizer.text();
  for (const auto& [name, buffer] : optimizer_->buffers()) s.optimizer.buffers.push_back({name, buffer.to_vector()});
  for (const auto& [name, value] : optimizer_->scalars()) s.optimizer.scalars[name] = value;
  s.position.global_step = static_cast<std::uint64_t>(step_);
  s.position.epoch = static_cast<std::uint64_t>(cursor_.epoch);
  s.position.cursor.epoch = static_cast<std::uint64_t>(cursor_.epoch);
  s.position.cursor.batch_in_epoch = static_cast<std::uint64_t>(cursor_.batch);
  s.position.cursor.shuffle_seed = config_.seed;
  s.schedule.spec = schedule_.spec();
  s.schedule.evaluated_at_step = static_cast<std::uint64_t>(step_);
  s.schedule.evaluated_at_epoch = static_cast<std::uint64_t>(cursor_.epoch);
  s.schedule.learning_rate = schedule_.at(step_, cursor_.epoch);
  s.rng.seed = config_.seed;
  s.rng.counter = static_cast<std::uint64_t>(step_);
  s.update_mode = config_.update_mode;
  return s;
}

std::optional<checkpoint::Directory::Loaded> find_resume_checkpoint(const checkpoint::Directory& dir, bool or_start) {
  std::vector<checkpoint::Directory::Skipped> skipped;
  std::optional<checkpoint::Directory::Loaded> found = dir.newest_valid(&skipped);
  for (const auto& s : skipped) std::fprintf(stderr, "resume: skipping %s: %s\n", s.path.c_str(), s.reason.c_str());
  if (found) {
    if (!skipped.empty()) std::fprintf(stderr, "resume: using the newest good checkpoint, %s\n", found->path.c_str());
    return found;
  }
  if (or_start) {
    std::fprintf(stderr, "resume: no usable checkpoint in %s; starting from step 0 (--resume-or-start)\n",
                 dir.dir().c_str());
    return std::nullopt;
  }
  throw std::invalid_argument(
      "--resume: " + dir.dir() +
      (skipped.empty() ? std::string(" holds no checkpoint")
                       : " holds no checkpoint that verifies (" + std::to_string(skipped.size()) + " skipped, above)") +
      "; use --resume-or-start to start from step 0 when there is none");
}

void check_resumable(const checkpoint::State& s, const std::string& path, const ModelSpec& spec,
                     std::int64_t parameter_count, const std::string& optimizer, std::uint64_t seed) {
  checkpoint::check_model(s, path, spec.name, static_cast<std::uint64_t>(parameter_count));
  if (s.model.spec != spec.text())
    throw checkpoint::CheckpointError(path, "was written for a model with another architecture:\n" + s.model.spec);
  if (s.optimizer.name != optimizer)
    throw checkpoint::CheckpointError(
        path, "holds optimizer '" + s.optimizer.name + "' state, but '" + optimizer + "' was requested");
  if (s.position.cursor.shuffle_seed != seed)
    throw checkpoint::CheckpointError(path, "was written with --seed " +
                                                std::to_string(s.position.cursor.shuffle_seed) +
                                                "; resume with the same seed to continue the same data order");
}

bool training_finished(const TrainConfig& c, std::int64_t epochs_done, std::int64_t global_step) {
  return epochs_done >= c.epochs || (c.max_steps > 0 && global_step >= c.max_steps);
}

void Trainer::restore(const checkpoint::State& s, const std::string& path) {
  check_resumable(s, path, model_->spec(), model_->parameter_count(), config_.optimizer.name, config_.seed);
  model_->parameters().copy_from(Tensor::view(const_cast<float*>(s.parameters.data()), model_->parameters().shape(),
                                              kernels::DType::f32, Device::cpu()));
  restore_model_state(*model_, s, path);
  for (const auto& [name, buffer] : optimizer_->buffers()) {
    const checkpoint::NamedBuffer* saved = nullptr;
    for (const auto& b : s.optimizer.buffers)
      if (b.name == name) saved = &b;
    if (!saved || static_cast<std::int64_t>(saved->values.size()) != buffer.numel())
      throw checkpoint::CheckpointError(
          path, "lacks optimizer state '" + name + "' of " + std::to_string(buffer.numel()) + " values");
    Tensor b = buffer;
    b.copy_from(
        Tensor::view(const_cast<float*>(saved->values.data()), buffer.shape(), kernels::DType::f32, Device::cpu()));
  }
  for (const auto& [name, value] : s.optimizer.scalars) optimizer_->set_scalar(name, value);
  step_ = static_cast<std::int64_t>(s.position.global_step);
  cursor_.epoch = static_cast<std::int64_t>(s.position.cursor.epoch);
  cursor_.batch = static_cast<std::int64_t>(s.position.cursor.batch_in_epoch);
  if (s.position.replica_clocks.size() > 1) {
    // Written by W replicas: the cursor counts W-replica global batches.
    // One replica continues at the same fraction of the epoch; the data
    // order within it differs, so say so.
    const auto plan = plan_options(config_, data_.train);
    const std::int64_t from = data::batches_per_epoch(plan, {0, static_cast<int>(s.position.replica_clocks.size())});
    const std::int64_t to = data::batches_per_epoch(plan, {0, 1});
    if (from > 0) cursor_.batch = cursor_.batch * to / from;
    std::fprintf(stderr,
                 "resume: %s was written by %zu replicas, resuming on 1: continuing at batch %lld of epoch %lld "
                 "in the 1-replica data order (some examples of this epoch may be seen twice or not at all)\n",
                 path.c_str(), s.position.replica_clocks.size(), static_cast<long long>(cursor_.batch),
                 static_cast<long long>(cursor_.epoch + 1));
  }
  resumed_from_ = path;
}

std::string Trainer::save_checkpoint() {
  if (!checkpoints_) throw std::logic_error("save_checkpoint: no --checkpoint-dir configured");
  std::string path = checkpoints_->save(state());
  last_saved_step_ = step_;
  return path;
}

std::unique_ptr<Model> load_model(const checkpoint::State& state, const std::string& path, Device device) {
  ModelSpec spec;
  try {
    spec = ModelSpec::parse(state.model.spec, path + " (model spec)");
  } catch (const std::exception& e) {
    throw checkpoint::CheckpointError(path, std::string("holds an unusable model spec: ") + e.what());
  }
  auto model = std::make_unique<Model>(spec, device);
  if (static_cast<std::int64_t>(state.parameters.size()) != model->parameter_count())
    throw checkpoint::CheckpointError(path, "has " + std::to_string(state.parameters.size()) +
                                                " parameters, but its model spec needs " +
                                                std::to_string(model->parameter_count()));
  model->parameters().copy_from(Tensor::view(const_cast<float*>(state.parameters.data()), model->parameters().shape(),
                                             kernels::DType::f32, Device::cpu()));
  restore_model_state(*model, state, path);
  return model;
}

void restore_model_state(Model& model, const checkpoint::State& state, const std::string& path) {
  if (static_cast<std::int64_t>(state.model_state.size()) != model.state_count())
    throw checkpoint::CheckpointError(path, "holds " + std::to_string(state.model_state.size()) +
                                                " values of model state (running statistics), "
                                                "but its model keeps " +
                                                std::to_string(model.state_count()));
  if (model.state_count() == 0) return;
  Tensor target = model.state();
  target.copy_from(
      Tensor::view(const_cast<float*>(state.model_state.data()), target.shape(), kernels::DType::f32, Device::cpu()));
}

double peak_memory_mib() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

}  // namespace troupe::models
