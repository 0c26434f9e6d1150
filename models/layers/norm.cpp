// Normalisation layers: BatchNorm, LayerNorm, and the fixed Standardize.
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

namespace {
std::string number(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(v));
  return text;
}
}  // namespace

BatchNorm::BatchNorm(float momentum, float epsilon, bool sync) : momentum_(momentum), epsilon_(epsilon), sync_(sync) {
  if (!(momentum >= 0.0f && momentum < 1.0f))
    throw std::invalid_argument(
        "batchnorm: momentum must be in [0, 1) (Keras' convention: 0.9 keeps 90% of the "
        "running estimate each step), got " +
        number(momentum));
  if (!(epsilon > 0.0f && epsilon < 1.0f))
    throw std::invalid_argument("batchnorm: epsilon must be in (0, 1), got " + number(epsilon));
}

std::string BatchNorm::spec() const {
  // sync only when set: the text of every unsynchronized model (and so its
  // checkpoints) stays as it was.
  return "batchnorm momentum=" + number(momentum_) + " epsilon=" + number(epsilon_) + (sync_ ? " sync=true" : "");
}

Shape BatchNorm::build(const Shape& input, const Device& device) {
  if (input.rank() < 1) throw std::invalid_argument("batchnorm: expects [channels, ...], got " + input.str());
  shape_ = input;
  device_ = device;
  channels_ = input[0];
  per_example_ = input.numel() / channels_;
  return input;
}

std::vector<ParameterInfo> BatchNorm::parameters() const {
  return {{"gamma", Shape{channels_}}, {"beta", Shape{channels_}}};
}

std::vector<ParameterInfo> BatchNorm::state() const {
  return {{"running_mean", Shape{channels_}}, {"running_var", Shape{channels_}}};
}

void BatchNorm::bind(const Tensor& params, const Tensor& grads) {
  gamma_ = params.slice(0, {channels_});
  beta_ = params.slice(channels_, {channels_});
  dgamma_ = grads.slice(0, {channels_});
  dbeta_ = grads.slice(channels_, {channels_});
}

void BatchNorm::bind_state(const Tensor& state) {
  running_mean_ = state.slice(0, {channels_});
  running_var_ = state.slice(channels_, {channels_});
}

void BatchNorm::initialize(std::uint64_t) {
  ops::fill(gamma_, 1.0f);
  ops::fill(beta_, 0.0f);
  if (running_mean_.defined()) {
    ops::fill(running_mean_, 0.0f);
    ops::fill(running_var_, 1.0f);
  }
}

// The batch's mean and variance (two passes: the mean, then the squares
// about it, not the mean of the squares, which loses the variance to
// cancellation), then the running statistics' update. Synchronized, each
// pass's sums are those of every replica: the channel sums go with the
// positions counted (as two floats, high and low 2^20, so that counts up
// to 2^44 stay exact), then the squares about the common mean. `x` null: a
// replica with no examples, which adds zeros and updates its running
// statistics as the others do, so that the replicas keep agreeing.
void BatchNorm::batch_statistics(const Tensor* x) {
  if (!mean_.defined() || mean_.device() != device_) {
    mean_ = Tensor::zeros({channels_}, DType::f32, device_);
    var_ = Tensor::zeros({channels_}, DType::f32, device_);
  }
  const double local = x ? static_cast<double>(x->size(0)) * static_cast<double>(per_example_) : 0.0;
  double count = local;
  if (!reducer_) {
    ops::channel_sum(*x, mean_);
    ops::scale(mean_, static_cast<float>(1.0 / count));
    ops::channel_centered_sumsq(*x, mean_, var_);
  } else {
    if (!stats_.defined() || stats_.device() != device_) {
      stats_ = Tensor::zeros({channels_ + 2}, DType::f32, device_);
      dsums_ = Tensor::zeros({2 * channels_}, DType::f32, device_);
    }
    const Tensor sums = stats_.slice(0, {channels_});
    if (x)
      ops::channel_sum(*x, sums);
    else
      ops::fill(sums, 0.0f);
    constexpr double split = 1048576.0;  // 2^20
    const double high = std::floor(local / split);
    ops::fill(stats_.slice(channels_, {1}), static_cast<float>(high));
    ops::fill(stats_.slice(channels_ + 1, {1}), static_cast<float>(local - high * split));
    reducer_->sum(stats_);
    const std::vector<float> counted = stats_.slice(channels_, {2}).to_vector();
    count = double(counted[0]) * split + double(counted[1]);
    if (!(count > 0))
      throw std::logic_error("batchnorm sync=true: no replica had examples in this step (a step is never empty)");
    mean_.copy_from(sums);
    ops::scale(mean_, static_cast<float>(1.0 / count));
    if (x)
      ops::channel_centered_sumsq(*x, mean_, var_);
    else
      ops::fill(var_, 0.0f);
    reducer_->sum(var_);
  }
  ops::scale(var_, static_cast<float>(1.0 / count));
  count_ = count;
  // The running variance is unbiased, as PyTorch keeps it; one value per
  // channel has no unbiased variance, and then the batch's (0) is used.
  const double unbias = count > 1 ? count / (count - 1) : 1.0;
  ops::scale(running_mean_, momentum_);
  ops::axpy(1.0f - momentum_, mean_, running_mean_);
  ops::scale(running_var_, momentum_);
  ops::axpy(static_cast<float>((1.0 - momentum_) * unbias), var_, running_var_);
}

const Tensor& BatchNorm::forward(const Tensor& x, bool training) {
  x_ = x;
  trained_ = training;
  Tensor& y = ensure(y_, x.size(0), shape_, device_);
  if (!training) {
    ops::batchnorm_forward(x, running_mean_, running_var_, gamma_, beta_, epsilon_, y);
    return y;
  }
  batch_statistics(&x);
  ops::batchnorm_forward(x, mean_, var_, gamma_, beta_, epsilon_, y);
  return y;
}

void BatchNorm::join_forward() {
  if (reducer_) batch_statistics(nullptr);
}

const Tensor& BatchNorm::backward(const Tensor& dy, bool need_dx) {
  // The per-channel sums of dy and dy * xhat are dbeta and dgamma; the
  // input's gradient needs both (a training pass: the batch's statistics
  // depend on x) or neither (an evaluation pass: fixed statistics).
  const Tensor& mean = trained_ ? mean_ : running_mean_;
  const Tensor& var = trained_ ? var_ : running_var_;
  ops::batchnorm_backward_reduce(x_, dy, mean, var, epsilon_, dbeta_, dgamma_);
  const bool synchronized = trained_ && reducer_ != nullptr;
  if (synchronized) {
    // The parameters' gradients stay this replica's (the step's gradient
    // all-reduce sums them); the input's gradient needs the sums over
    // every replica's batch, as the statistics were. Reduced even when no
    // input gradient is wanted, so that every replica reduces alike.
    dsums_.slice(0, {channels_}).copy_from(dbeta_);
    dsums_.slice(channels_, {channels_}).copy_from(dgamma_);
    reducer_->sum(dsums_);
  }
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), shape_, device_);
  if (synchronized) {
    ops::batchnorm_backward_data(x_, dy, mean, var, gamma_, epsilon_, dsums_.slice(0, {channels_}),
                                 dsums_.slice(channels_, {channels_}), count_, dx);
  } else if (trained_) {
    const double count = static_cast<double>(dy.size(0)) * static_cast<double>(per_example_);
    ops::batchnorm_backward_data(x_, dy, mean, var, gamma_, epsilon_, dbeta_, dgamma_, count, dx);
  } else {
    const double count = static_cast<double>(dy.size(0)) * static_cast<double>(per_example_);
    if (!zeros_.defined() || zeros_.device() != device_) zeros_ = Tensor::zeros({channels_}, DType::f32, device_);
    ops::batchnorm_backward_data(x_, dy, mean, var, gamma_, epsilon_, zeros_, zeros_, count, dx);
  }
  return dx;
}

void BatchNorm::join_backward() {
  if (!reducer_) return;
  ops::fill(dsums_, 0.0f);
  reducer_->sum(dsums_);
}

// ---- LayerNorm ----

LayerNorm::LayerNorm(float epsilon) : epsilon_(epsilon) {
  if (!(epsilon > 0.0f && epsilon < 1.0f))
    throw std::invalid_argument("layernorm: epsilon must be in (0, 1), got " + number(epsilon));
}

std::string LayerNorm::spec() const { return "layernorm epsilon=" + number(epsilon_); }

Shape LayerNorm::build(const Shape& input, const Device& device) {
  if (input.rank() < 1 || input.numel() < 1)
    throw std::invalid_argument("layernorm: expects [..., width], got " + input.str());
  shape_ = input;
  device_ = device;
  width_ = input[input.rank() - 1];
  rows_per_example_ = input.numel() / width_;
  return input;
}

std::vector<ParameterInfo> LayerNorm::parameters() const { return {{"gamma", Shape{width_}}, {"beta", Shape{width_}}}; }

void LayerNorm::bind(const Tensor& params, const Tensor& grads) {
  gamma_ = params.slice(0, {width_});
  beta_ = params.slice(width_, {width_});
  dgamma_ = grads.slice(0, {width_});
  dbeta_ = grads.slice(width_, {width_});
}

void LayerNorm::initialize(std::uint64_t) {
  ops::fill(gamma_, 1.0f);
  ops::fill(beta_, 0.0f);
}

const Tensor& LayerNorm::forward(const Tensor& x, bool) {
  x_ = x;
  Tensor& y = ensure(y_, x.size(0), shape_, device_);
  const Shape rows{x.size(0) * rows_per_example_};
  if (!mean_.defined() || mean_.shape() != rows || mean_.device() != device_) {
    mean_ = Tensor::zeros(rows, DType::f32, device_);
    rstd_ = Tensor::zeros(rows, DType::f32, device_);
  }
  ops::layernorm_forward(x, gamma_, beta_, epsilon_, y, mean_, rstd_);
  return y;
}

const Tensor& LayerNorm::backward(const Tensor& dy, bool need_dx) {
  if (need_dx) ensure(dx_, dy.size(0), shape_, device_);
  ops::layernorm_backward(x_, dy, gamma_, mean_, rstd_, need_dx ? dx_ : Tensor(), dgamma_, dbeta_);
  return dx_;
}

// ---- Standardize ----

namespace {
// Nine significant digits: a float32 reads back as itself, so the spec
// text (and a checkpoint's) rebuilds the same constants.
std::string list(const std::vector<float>& values) {
  std::string out;
  for (float v : values) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", static_cast<double>(v));
    out += (out.empty() ? "" : ",") + std::string(text);
  }
  return out;
}
}  // namespace

Standardize::Standardize(std::vector<float> mean, std::vector<float> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  if (mean_.empty() || mean_.size() != std_.size())
    throw std::invalid_argument("standardize: mean= and std= need one value per channel each, got " +
                                std::to_string(mean_.size()) + " and " + std::to_string(std_.size()));
  for (std::size_t c = 0; c < mean_.size(); ++c) {
    if (!std::isfinite(mean_[c]))
      throw std::invalid_argument("standardize: mean " + std::to_string(c + 1) + " is not finite");
    if (!(std::isfinite(std_[c]) && std_[c] > 0.0f))
      throw std::invalid_argument("standardize: std " + std::to_string(c + 1) + " is " + number(std_[c]) +
                                  "; every deviation must be finite and > 0");
  }
}

std::string Standardize::spec() const { return "standardize mean=" + list(mean_) + " std=" + list(std_); }

Shape Standardize::build(const Shape& input, const Device& device) {
  const auto channels = static_cast<std::int64_t>(mean_.size());
  if (input.rank() < 1 || input[0] != channels)
    throw std::invalid_argument("standardize: " + std::to_string(channels) +
                                " means and deviations, one per channel (the first dimension), but the input is " +
                                input.str());
  shape_ = input;
  device_ = device;
  // The batch-norm kernel with the deviations' squares as the variance and
  // no epsilon: y = (x - mean) / sqrt(std^2), and sqrt of a float's
  // rounded square is that float again (IEEE round to nearest).
  std::vector<float> var(std_.size());
  for (std::size_t c = 0; c < std_.size(); ++c) var[c] = std_[c] * std_[c];
  mean_t_ = Tensor::from_vector(Shape{channels}, mean_).to(device);
  var_t_ = Tensor::from_vector(Shape{channels}, var).to(device);
  zeros_ = Tensor::zeros(Shape{channels}, DType::f32, device);
  ones_ = Tensor::full(Shape{channels}, 1.0f, device);
  for (float v : var)
    if (!(v > 0.0f && std::isfinite(v)))
      throw std::invalid_argument(
          "standardize: a deviation's square is not a positive float (below about 1e-19 "
          "or above 1.8e19): such a feature cannot be standardized in float32");
  return input;
}

const Tensor& Standardize::forward(const Tensor& x, bool) {
  Tensor& y = ensure(y_, x.size(0), shape_, device_);
  ops::batchnorm_forward(x, mean_t_, var_t_, ones_, zeros_, 0.0f, y);
  return y;
}

const Tensor& Standardize::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), shape_, device_);
  ops::batchnorm_forward(dy, zeros_, var_t_, ones_, zeros_, 0.0f, dx);  // dy / std
  return dx;
}

}  // namespace troupe::models
