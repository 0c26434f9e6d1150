// The layers of troupe's models. Shapes are per example (no batch
// dimension) and channels come first: images are [channels, height, width],
// sequences [channels, length].
//
// Differences from Keras worth knowing: Dense kernels are [in, out] as in
// Keras; Conv kernels are [filters, channels, kernel...] (channels-first);
// Embedding outputs [dim, length] (channels-first, ready for Conv1D) where
// Keras gives [length, dim].
#pragma once

#include <cstdint>
#include <string>

#include "models/layer.hpp"

namespace troupe::models {

// The text of init=normal:STD in a layer's spec line.
std::string normal_init_text(float stddev);

// y = x W + b over a flat input [in], or over every position of a sequence
// [length, in] -> [length, units] (Keras' Dense on the last axis; a
// transformer's projections); W is Glorot-uniform, b zero (Keras). An image
// [c, h, w] must be flattened first.
class Dense final : public Layer {
 public:
  // init_std > 0: the kernel starts N(0, init_std) (GPT's 0.02; spec
  // init=normal:0.02) instead of Glorot-uniform.
  explicit Dense(std::int64_t units, float init_std = 0.0f);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  std::vector<ParameterInfo> parameters() const override;
  void bind(const Tensor& params, const Tensor& grads) override;
  void initialize(std::uint64_t seed) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

  // Positions the same W applies to in each example: 1 for [in], length for [length, in].
  std::int64_t positions() const { return positions_; }

 private:
  std::int64_t in_ = 0, units_, positions_ = 1;
  float init_std_ = 0.0f;
  Shape input_, output_;
  Device device_;
  Tensor kernel_, bias_, dkernel_, dbias_, x_, y_, dx_;
};

// The largest kernel, stride, pool window or padding a layer takes: what
// oneDNN's convolutions accept (it refuses a stride of 2^31 with "could not
// create a descriptor"), and small enough that no output-size arithmetic on
// a shape (at most 2^56 elements) can overflow.
constexpr std::int64_t kMaxWindow = 2147483647;

// Padding: "valid" (none), "same" (output as large as the input at stride 1)
// or a number of zeros on each side (at most kMaxWindow).
struct Padding {
  enum class Kind { valid, same, explicit_ } kind = Kind::valid;
  std::int64_t amount = 0;
  static Padding parse(const std::string& text);  // throws std::invalid_argument
  std::int64_t for_kernel(std::int64_t kernel) const;
  std::string str() const;
};

// 2-D convolution over [c, h, w] with `filters` kernels of kernel_h x kernel_w.
class Conv2D final : public Layer {
 public:
  // How the kernel starts: Glorot uniform (Keras' default), or He normal
  // over the fan-out (PyTorch's kaiming_normal_(mode="fan_out",
  // nonlinearity="relu"), a ResNet's: std sqrt(2 / (filters * kh * kw))).
  enum class Init { glorot_uniform, he_normal_fan_out };
  static Init parse_init(const std::string& text);  // "glorot_uniform", "he_normal_fan_out"
  // bias=false: no bias (a BatchNorm after it has its own beta), as
  // PyTorch's bias=False and Keras' use_bias=False.
  Conv2D(std::int64_t filters, std::int64_t kernel_h, std::int64_t kernel_w, std::int64_t stride = 1,
         Padding padding = {}, bool bias = true, Init init = Init::glorot_uniform);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  std::vector<ParameterInfo> parameters() const override;
  void bind(const Tensor& params, const Tensor& grads) override;
  void initialize(std::uint64_t seed) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  std::int64_t filters_, kernel_h_, kernel_w_, stride_;
  Padding padding_;
  bool use_bias_;
  Init init_;
  Shape input_, output_;
  Device device_;
  Tensor kernel_, bias_, dkernel_, dbias_, x_, y_, dx_;
};

// 1-D convolution over [c, length].
class Conv1D final : public Layer {
 public:
  Conv1D(std::int64_t filters, std::int64_t kernel, std::int64_t stride = 1, Padding padding = {});
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  std::vector<ParameterInfo> parameters() const override;
  void bind(const Tensor& params, const Tensor& grads) override;
  void initialize(std::uint64_t seed) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  std::int64_t filters_, kernel_, stride_;
  Padding padding_;
  Shape input_, output_;
  Device device_;
  Tensor kernel_w_, bias_, dkernel_, dbias_, x_, y_, dx_;
};

// Max pooling over [c, h, w] with a window and stride (stride defaults to the window).
class MaxPool2D final : public Layer {
 public:
  explicit MaxPool2D(std::int64_t pool = 2, std::int64_t stride = 0);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  std::int64_t pool_, stride_;
  Shape input_, output_;
  Device device_;
  Tensor y_, argmax_, dx_;
};

// Max pooling over [c, length].
class MaxPool1D final : public Layer {
 public:
  explicit MaxPool1D(std::int64_t pool = 2, std::int64_t stride = 0);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  std::int64_t pool_, stride_;
  Shape input_, output_;
  Device device_;
  Tensor y_, argmax_, dx_;
};

// Token ids i32 [length] -> vectors [dim, length] (channels first, for a
// Conv1D: the default), or [length, dim] with layout=channels_last (Keras'
// own, a transformer's); table U(-0.05, 0.05) as Keras.
class Embedding final : public Layer {
 public:
  // init_std > 0: the table starts N(0, init_std) (GPT's; init=normal:0.02).
  Embedding(std::int64_t vocab, std::int64_t dim, bool channels_last = false, float init_std = 0.0f);
  std::int64_t vocab() const { return vocab_; }
  std::int64_t dim() const { return dim_; }
  bool channels_last() const { return channels_last_; }
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  std::vector<ParameterInfo> parameters() const override;
  void bind(const Tensor& params, const Tensor& grads) override;
  void initialize(std::uint64_t seed) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  std::int64_t vocab_, dim_, length_ = 0;
  bool channels_last_ = false;
  float init_std_ = 0.0f;
  Device device_;
  Tensor table_, dtable_, ids_, rows_, y_, drows_, dx_;
};

// The output layer tied to the token embedding (GPT-2's, nanoGPT's
// lm_head.weight = wte.weight): logits over the vocabulary from the
// embedding's table E [vocab, dim], y = x E^T over every position of
// [length, dim] (or [dim]) -> [length, vocab], no bias and no parameters of
// its own. The model ties it to its embedding (of the same dim) before
// build(), and binds it to the table and to a gradient buffer of the
// layer's own, which Model::backward adds into the embedding's gradient
// after the embedding's backward: a parameter used twice has its whole
// gradient only once its last use is done. Spec:
//   tied_output
class TiedOutput final : public Layer {
 public:
  std::string spec() const override { return "tied_output"; }
  void tie_to(std::int64_t vocab) { vocab_ = vocab; }
  Shape build(const Shape& input, const Device& device) override;
  void bind_tied(const Tensor& table, const Tensor& dtable);
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;
  std::int64_t width() const { return width_; }

 private:
  std::int64_t width_ = 0, positions_ = 1, vocab_ = 0;
  Shape input_;
  Device device_;
  Tensor table_, dtable_, x_, y_, dx_;
};

// A learned position embedding added to a sequence [length, dim]: y = x +
// table, table [length, dim] (nanoGPT's wpe added to the token embedding),
// initialised N(0, 0.02) as nanoGPT's. Spec:
//   positional_embedding
class PositionalEmbedding final : public Layer {
 public:
  std::string spec() const override { return "positional_embedding"; }
  Shape build(const Shape& input, const Device& device) override;
  std::vector<ParameterInfo> parameters() const override;
  void bind(const Tensor& params, const Tensor& grads) override;
  void initialize(std::uint64_t seed) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  Shape shape_;
  Device device_;
  Tensor table_, dtable_, y_, dx_;
};

// Any shape -> [numel]: a view, no copy.
class Flatten final : public Layer {
 public:
  std::string spec() const override { return "flatten"; }
  Shape build(const Shape& input, const Device& device) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  Shape input_;
  std::int64_t numel_ = 0;
  Tensor y_, dx_;
};

class ReLU final : public Layer {
 public:
  std::string spec() const override { return "relu"; }
  Shape build(const Shape& input, const Device& device) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  Shape shape_;
  Device device_;
  Tensor x_, y_, dx_;
};

// Inverted dropout: active in training only; the mask comes from the step
// seed, so backward recomputes it and replicas can reproduce it.
class Dropout final : public Layer {
 public:
  explicit Dropout(float rate);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  void set_step_seed(std::uint64_t seed) override { seed_ = seed; }
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  float rate_;
  std::uint64_t seed_ = 0;
  bool active_ = false;
  Shape shape_;
  Device device_;
  Tensor x_, y_, dx_;
};

// Average pooling over [c, h, w] (Keras AveragePooling2D, 'valid'): the
// mean of each full window; stride defaults to the window.
class AvgPool2D final : public Layer {
 public:
  explicit AvgPool2D(std::int64_t pool = 2, std::int64_t stride = 0);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  std::int64_t pool_, stride_;
  Shape input_, output_;
  Device device_;
  Tensor y_, dx_;
};

// [c, h, w] -> [c]: the mean of each channel's plane (Keras
// GlobalAveragePooling2D; a ResNet's head).
class GlobalAvgPool2D final : public Layer {
 public:
  std::string spec() const override { return "globalavgpool2d"; }
  Shape build(const Shape& input, const Device& device) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  Shape input_;
  Device device_;
  Tensor y_, dx_;
};

// Element-wise activations: sigmoid, tanh, gelu (exact, with erf: PyTorch's
// default, Keras approximate=False), and softmax over the last dimension
// (over the classes of [classes], or the positions of [c, length]).
class Activation final : public Layer {
 public:
  enum class Kind { sigmoid, tanh, gelu, softmax };
  explicit Activation(Kind kind) : kind_(kind) {}
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  Kind kind_;
  Shape shape_;
  Device device_;
  Tensor x_, y_, dx_;
};

// Batch normalisation per channel of [c, ...] (BatchNorm2d on [c, h, w],
// BatchNorm1d on [c]): training normalises by the batch's mean and (biased)
// variance and updates the running estimates,
//   running = momentum * running + (1 - momentum) * batch
// with the variance unbiased (n / (n - 1)) as PyTorch does; evaluation
// normalises by the running estimates. momentum is Keras' convention: 0.9
// here is PyTorch's momentum=0.1 (the default, as the anchors use; Keras'
// own default is 0.99). epsilon defaults to PyTorch's 1e-5 (Keras: 1e-3).
// gamma (1) and beta (0) are trained; the running mean (0) and variance
// (1) are the model's state (Model::state()), not parameters: no gradient
// and no optimizer touch them.
class BatchNorm final : public Layer {
 public:
  // sync: in a synchronous step with a reducer (layer.hpp), the batch's
  // statistics are those of every replica's batch together (PyTorch's
  // SyncBatchNorm, TF's synchronized=True), forward and backward.
  explicit BatchNorm(float momentum = 0.9f, float epsilon = 1e-5f, bool sync = false);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  std::vector<ParameterInfo> parameters() const override;
  std::vector<ParameterInfo> state() const override;
  void bind(const Tensor& params, const Tensor& grads) override;
  void bind_state(const Tensor& state) override;
  void initialize(std::uint64_t seed) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;
  bool reduces_across_replicas() const override { return sync_; }
  void set_reducer(ReplicaReducer* reducer) override { reducer_ = sync_ ? reducer : nullptr; }
  void join_forward() override;
  void join_backward() override;

 private:
  // The batch's mean and variance from the channel sums (and, synchronized,
  // those of every replica), and the running statistics' update.
  void batch_statistics(const Tensor* x);
  float momentum_, epsilon_;
  bool sync_ = false;
  ReplicaReducer* reducer_ = nullptr;
  double count_ = 0;  // positions per channel the last training pass normalised over (all replicas')
  Tensor stats_;      // [C + 2] reduced forward: the channel sums and the count (high, low)
  Tensor dsums_;      // [2C] reduced backward: the sums of dy and dy * xhat
  std::int64_t channels_ = 0, per_example_ = 0;  // per_example_: positions per channel in one example
  Shape shape_;
  Device device_;
  bool trained_ = false;  // the last forward pass was a training one
  Tensor gamma_, beta_, dgamma_, dbeta_, running_mean_, running_var_;
  Tensor mean_, var_, zeros_, x_, y_, dx_;
};

// Multi-head causal self-attention over a sequence [length, width] (GPT's
// CausalSelfAttention, nanoGPT's): one fused dense for q, k and v ([width,
// 3 width] and its bias), `heads` heads of width / heads each, scores q k^T /
// sqrt(head width) with the causal mask (position i attends to positions
// 0..i), softmax, the heads' outputs side by side, and the output
// projection ([width, width] and its bias). Kernels Glorot-uniform, biases
// zero (Keras), or N(0, init_std) and N(0, out_std) (GPT-2's, with
// out_std = 0.02 / sqrt(2 layers) for the projection into the residual
// stream). No dropout. Spec:
//   attention heads=4 [init=normal:0.02 out_init=normal:0.00707107]
class CausalSelfAttention final : public Layer {
 public:
  explicit CausalSelfAttention(std::int64_t heads, float init_std = 0.0f, float out_std = 0.0f);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  std::vector<ParameterInfo> parameters() const override;
  void bind(const Tensor& params, const Tensor& grads) override;
  void initialize(std::uint64_t seed) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;
  std::int64_t heads() const { return heads_; }

 private:
  // Every head's q, k or v (part 0, 1, 2) out of the fused projection:
  // [examples * heads, length, head width], contiguous in heads_qkv_.
  Tensor qkv_part(int part) const;
  std::int64_t heads_, length_ = 0, width_ = 0, head_width_ = 0;
  float init_std_ = 0.0f, out_std_ = 0.0f;
  Shape shape_;
  Device device_;
  Tensor w_qkv_, b_qkv_, w_out_, b_out_, dw_qkv_, db_qkv_, dw_out_, db_out_;
  Tensor x_, qkv_, heads_qkv_, probs_, merged_, y_;  // forward, kept for backward
  // [examples * heads, length, head width]: the weighted values forward (copied
  // into merged_ at once), each head's dO backward.
  Tensor per_head_;
  Tensor dmerged_, dscores_, dprobs_, dpart_, dqkv_, dx_;  // backward
};

// Layer normalisation over the last dimension of each example (a
// transformer's [length, width]: every position's width; a vector [d]: the
// vector), PyTorch's nn.LayerNorm(width) and Keras' LayerNormalization(
// axis=-1): y = gamma * (x - mean) / sqrt(var + epsilon) + beta, the mean and
// the biased variance those of the position's values; the same in training
// and evaluation (no running statistics). gamma (1) and beta (0) [width] are
// trained. epsilon defaults to PyTorch's 1e-5. Spec:
//   layernorm epsilon=1e-5
class LayerNorm final : public Layer {
 public:
  explicit LayerNorm(float epsilon = 1e-5f);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  std::vector<ParameterInfo> parameters() const override;
  void bind(const Tensor& params, const Tensor& grads) override;
  void initialize(std::uint64_t seed) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;
  float epsilon() const { return epsilon_; }

 private:
  float epsilon_;
  std::int64_t width_ = 0, rows_per_example_ = 0;
  Shape shape_;
  Device device_;
  Tensor gamma_, beta_, dgamma_, dbeta_, x_, y_, dx_, mean_, rstd_;
};

// Fixed standardization per channel of [c, ...] (per feature of [d]):
//   y = (x - mean[c]) / std[c]
// with constants written in the spec (Keras' Normalization(mean=,
// variance=) with its values given): `troupe train --standardize` puts one
// first, with the training split's means and deviations
// (models::standardize_first), so that the checkpoint, eval, predict and
// the ONNX export (Sub, Div) all apply what training did. Nothing is
// trained; the backward pass is dy / std. Spec:
//   standardize mean=5.84,3.05 std=0.83,0.43
class Standardize final : public Layer {
 public:
  // Throws std::invalid_argument unless both have the same length >= 1,
  // every mean is finite and every deviation finite and > 0.
  Standardize(std::vector<float> mean, std::vector<float> std);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;
  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& deviation() const { return std_; }

 private:
  std::vector<float> mean_, std_;
  Shape shape_;
  Device device_;
  Tensor mean_t_, var_t_, zeros_, ones_, y_, dx_;  // on the device: the kernels' per-channel constants
};

// ---- merges: they join the branches of a model graph (models/spec.hpp) ----

// The element-wise sum of its inputs, which must have one shape (a
// residual connection: Keras layers.Add). Its backward hands dy itself to
// every input: nothing is copied.
class Add final : public Merge {
 public:
  std::string spec() const override { return "add"; }
  Shape build_merge(const std::vector<Shape>& inputs, const Device& device) override;
  const Tensor& forward_merge(const std::vector<const Tensor*>& xs, bool training) override;
  const std::vector<const Tensor*>& backward_merge(const Tensor& dy, const std::vector<bool>& need) override;

 private:
  Shape shape_;
  Device device_;
  Tensor y_;
  std::vector<const Tensor*> dxs_;
};

// Concatenation along the channels (the first per-example dimension;
// Keras Concatenate(axis=1) on channels-first data): every other dimension
// of the inputs must agree.
class Concat final : public Merge {
 public:
  std::string spec() const override { return "concat"; }
  Shape build_merge(const std::vector<Shape>& inputs, const Device& device) override;
  const Tensor& forward_merge(const std::vector<const Tensor*>& xs, bool training) override;
  const std::vector<const Tensor*>& backward_merge(const Tensor& dy, const std::vector<bool>& need) override;

 private:
  std::vector<Shape> inputs_;
  Shape shape_;
  Device device_;
  Tensor y_;
  std::vector<Tensor> dx_buffers_;
  std::vector<const Tensor*> dxs_;
};

}  // namespace troupe::models
