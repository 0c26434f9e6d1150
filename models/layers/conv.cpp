#include <stdexcept>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

// ---- Padding ----

Padding Padding::parse(const std::string& text) {
  if (text == "valid") return {Kind::valid, 0};
  if (text == "same") return {Kind::same, 0};
  try {
    std::size_t used = 0;
    long long n = std::stoll(text, &used);
    if (used == text.size() && n >= 0 && n <= kMaxWindow) return {Kind::explicit_, n};
  } catch (const std::exception&) {}
  throw std::invalid_argument("padding '" + text + "': expected valid, same or a number from 0 to " +
                              std::to_string(kMaxWindow));
}

std::int64_t Padding::for_kernel(std::int64_t kernel) const {
  switch (kind) {
    case Kind::valid:
      return 0;
    case Kind::explicit_:
      return amount;
    case Kind::same:
      if (kernel % 2 == 0)
        throw std::invalid_argument("padding 'same' needs an odd kernel size, got " + std::to_string(kernel) +
                                    " (use an explicit padding)");
      return (kernel - 1) / 2;
  }
  return 0;
}

std::string Padding::str() const {
  return kind == Kind::valid ? "valid" : kind == Kind::same ? "same" : std::to_string(amount);
}

namespace {
void require_positive(const char* layer, const char* what, std::int64_t v) {
  if (v <= 0)
    throw std::invalid_argument(std::string(layer) + ": " + what + " must be positive, got " + std::to_string(v));
}
// A kernel size or stride: positive and at most kMaxWindow.
void require_window(const char* layer, const char* what, std::int64_t v) {
  require_positive(layer, what, v);
  if (v > kMaxWindow)
    throw std::invalid_argument(std::string(layer) + ": " + what + " must be at most " + std::to_string(kMaxWindow) +
                                ", got " + std::to_string(v));
}
void require_padding(const char* layer, const Padding& p) {
  if (p.amount < 0 || p.amount > kMaxWindow)
    throw std::invalid_argument(std::string(layer) + ": padding must be from 0 to " + std::to_string(kMaxWindow) +
                                ", got " + std::to_string(p.amount));
}
}  // namespace

// ---- Conv2D ----

Conv2D::Conv2D(std::int64_t filters, std::int64_t kernel_h, std::int64_t kernel_w, std::int64_t stride, Padding padding,
               bool bias, Init init)
    : filters_(filters),
      kernel_h_(kernel_h),
      kernel_w_(kernel_w),
      stride_(stride),
      padding_(padding),
      use_bias_(bias),
      init_(init) {
  require_positive("conv2d", "filters", filters);
  require_window("conv2d", "kernel", kernel_h);
  require_window("conv2d", "kernel", kernel_w);
  require_window("conv2d", "stride", stride);
  require_padding("conv2d", padding);
}

std::string Conv2D::spec() const {
  std::string kernel =
      kernel_h_ == kernel_w_ ? std::to_string(kernel_h_) : std::to_string(kernel_h_) + "x" + std::to_string(kernel_w_);
  return "conv2d filters=" + std::to_string(filters_) + " kernel=" + kernel + " stride=" + std::to_string(stride_) +
         " padding=" + padding_.str() + (use_bias_ ? "" : " bias=false") +
         (init_ == Init::glorot_uniform ? "" : " init=he_normal_fan_out");
}

Conv2D::Init Conv2D::parse_init(const std::string& text) {
  if (text == "glorot_uniform") return Init::glorot_uniform;
  if (text == "he_normal_fan_out") return Init::he_normal_fan_out;
  throw std::invalid_argument("conv2d init '" + text + "': expected glorot_uniform or he_normal_fan_out");
}

Shape Conv2D::build(const Shape& input, const Device& device) {
  if (input.rank() != 3)
    throw std::invalid_argument("conv2d: expects an image input [channels, height, width], got " + input.str());
  input_ = input;
  device_ = device;
  kernels::ops::Conv2dOptions o{stride_, stride_, padding_.for_kernel(kernel_h_), padding_.for_kernel(kernel_w_)};
  Shape y = ops::conv2d_output_shape(Shape{1, input[0], input[1], input[2]},
                                     Shape{filters_, input[0], kernel_h_, kernel_w_}, o);
  output_ = Shape{y[1], y[2], y[3]};
  return output_;
}

std::vector<ParameterInfo> Conv2D::parameters() const {
  if (!use_bias_) return {{"kernel", Shape{filters_, input_[0], kernel_h_, kernel_w_}}};
  return {{"kernel", Shape{filters_, input_[0], kernel_h_, kernel_w_}}, {"bias", Shape{filters_}}};
}

void Conv2D::bind(const Tensor& params, const Tensor& grads) {
  const Shape ks{filters_, input_[0], kernel_h_, kernel_w_};
  kernel_ = params.slice(0, ks);
  dkernel_ = grads.slice(0, ks);
  if (use_bias_) {  // else undefined: the ops then add no bias and compute none
    bias_ = params.slice(ks.numel(), {filters_});
    dbias_ = grads.slice(ks.numel(), {filters_});
  }
}

void Conv2D::initialize(std::uint64_t seed) {
  // Keras' Glorot fans for convolutions: receptive field times channels.
  const std::int64_t field = kernel_h_ * kernel_w_;
  if (init_ == Init::he_normal_fan_out)
    ops::he_normal(kernel_, filters_ * field, seed);
  else
    ops::glorot_uniform(kernel_, input_[0] * field, filters_ * field, seed);
  if (use_bias_) ops::fill(bias_, 0.0f);
}

const Tensor& Conv2D::forward(const Tensor& x, bool) {
  x_ = x;
  Tensor& y = ensure(y_, x.size(0), output_, device_);
  ops::conv2d_forward(x, kernel_, bias_, y,
                      {stride_, stride_, padding_.for_kernel(kernel_h_), padding_.for_kernel(kernel_w_)});
  return y;
}

const Tensor& Conv2D::backward(const Tensor& dy, bool need_dx) {
  const ops::Conv2dOptions o{stride_, stride_, padding_.for_kernel(kernel_h_), padding_.for_kernel(kernel_w_)};
  ops::conv2d_backward_filter(x_, dy, dkernel_, dbias_, o);
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), input_, device_);
  ops::conv2d_backward_data(dy, kernel_, dx, o);
  return dx;
}

// ---- Conv1D ----

Conv1D::Conv1D(std::int64_t filters, std::int64_t kernel, std::int64_t stride, Padding padding)
    : filters_(filters), kernel_(kernel), stride_(stride), padding_(padding) {
  require_positive("conv1d", "filters", filters);
  require_window("conv1d", "kernel", kernel);
  require_window("conv1d", "stride", stride);
  require_padding("conv1d", padding);
}

std::string Conv1D::spec() const {
  return "conv1d filters=" + std::to_string(filters_) + " kernel=" + std::to_string(kernel_) +
         " stride=" + std::to_string(stride_) + " padding=" + padding_.str();
}

Shape Conv1D::build(const Shape& input, const Device& device) {
  if (input.rank() != 2)
    throw std::invalid_argument("conv1d: expects a sequence input [channels, length], got " + input.str());
  input_ = input;
  device_ = device;
  Shape y = ops::conv1d_output_shape(Shape{1, input[0], input[1]}, Shape{filters_, input[0], kernel_},
                                     {stride_, padding_.for_kernel(kernel_)});
  output_ = Shape{y[1], y[2]};
  return output_;
}

std::vector<ParameterInfo> Conv1D::parameters() const {
  return {{"kernel", Shape{filters_, input_[0], kernel_}}, {"bias", Shape{filters_}}};
}

void Conv1D::bind(const Tensor& params, const Tensor& grads) {
  const Shape ks{filters_, input_[0], kernel_};
  kernel_w_ = params.slice(0, ks);
  bias_ = params.slice(ks.numel(), {filters_});
  dkernel_ = grads.slice(0, ks);
  dbias_ = grads.slice(ks.numel(), {filters_});
}

void Conv1D::initialize(std::uint64_t seed) {
  ops::glorot_uniform(kernel_w_, input_[0] * kernel_, filters_ * kernel_, seed);
  ops::fill(bias_, 0.0f);
}

const Tensor& Conv1D::forward(const Tensor& x, bool) {
  x_ = x;
  Tensor& y = ensure(y_, x.size(0), output_, device_);
  ops::conv1d_forward(x, kernel_w_, bias_, y, {stride_, padding_.for_kernel(kernel_)});
  return y;
}

const Tensor& Conv1D::backward(const Tensor& dy, bool need_dx) {
  const ops::Conv1dOptions o{stride_, padding_.for_kernel(kernel_)};
  ops::conv1d_backward_filter(x_, dy, dkernel_, dbias_, o);
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), input_, device_);
  ops::conv1d_backward_data(dy, kernel_w_, dx, o);
  return dx;
}

}  // namespace troupe::models
