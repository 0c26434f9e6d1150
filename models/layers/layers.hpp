// The layers of troupe's Sequential models. Shapes are per example (no batch
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

// y = x W + b over a flat input [in]; W is Glorot-uniform, b zero (Keras).
class Dense final : public Layer {
 public:
  explicit Dense(std::int64_t units);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  std::vector<ParameterInfo> parameters() const override;
  void bind(const Tensor& params, const Tensor& grads) override;
  void initialize(std::uint64_t seed) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  std::int64_t in_ = 0, units_;
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
  Conv2D(std::int64_t filters, std::int64_t kernel_h, std::int64_t kernel_w, std::int64_t stride = 1,
         Padding padding = {});
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

// Token ids i32 [length] -> vectors [dim, length]; table U(-0.05, 0.05) as Keras.
class Embedding final : public Layer {
 public:
  Embedding(std::int64_t vocab, std::int64_t dim);
  std::string spec() const override;
  Shape build(const Shape& input, const Device& device) override;
  std::vector<ParameterInfo> parameters() const override;
  void bind(const Tensor& params, const Tensor& grads) override;
  void initialize(std::uint64_t seed) override;
  const Tensor& forward(const Tensor& x, bool training) override;
  const Tensor& backward(const Tensor& dy, bool need_dx) override;

 private:
  std::int64_t vocab_, dim_, length_ = 0;
  Device device_;
  Tensor table_, dtable_, ids_, rows_, y_, drows_, dx_;
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

}  // namespace troupe::models
