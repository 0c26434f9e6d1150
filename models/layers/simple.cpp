// Layers without parameters that transform element by element or only
// reinterpret a shape: Flatten, ReLU, the other activations, Dropout.
#include <stdexcept>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

// ---- Flatten ----

Shape Flatten::build(const Shape& input, const Device&) {
  input_ = input;
  numel_ = input.numel();
  return Shape{numel_};
}

const Tensor& Flatten::forward(const Tensor& x, bool) {
  y_ = x.reshape(Shape{x.size(0), numel_});
  return y_;
}

const Tensor& Flatten::backward(const Tensor& dy, bool need_dx) {
  if (need_dx) dx_ = dy.reshape(batched(dy.size(0), input_));
  return dx_;
}

// ---- ReLU ----

Shape ReLU::build(const Shape& input, const Device& device) {
  shape_ = input;
  device_ = device;
  return input;
}

const Tensor& ReLU::forward(const Tensor& x, bool) {
  x_ = x;
  Tensor& y = ensure(y_, x.size(0), shape_, device_);
  ops::relu_forward(x, y);
  return y;
}

const Tensor& ReLU::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), shape_, device_);
  ops::relu_backward(x_, dy, dx);
  return dx;
}

// ---- Activation: sigmoid, tanh, gelu, softmax ----

std::string Activation::spec() const {
  switch (kind_) {
    case Kind::sigmoid:
      return "sigmoid";
    case Kind::tanh:
      return "tanh";
    case Kind::gelu:
      return "gelu";
    case Kind::softmax:
      return "softmax";
  }
  return "";
}

Shape Activation::build(const Shape& input, const Device& device) {
  shape_ = input;
  device_ = device;
  return input;
}

const Tensor& Activation::forward(const Tensor& x, bool) {
  x_ = x;
  Tensor& y = ensure(y_, x.size(0), shape_, device_);
  switch (kind_) {
    case Kind::sigmoid:
      ops::sigmoid_forward(x, y);
      break;
    case Kind::tanh:
      ops::tanh_forward(x, y);
      break;
    case Kind::gelu:
      ops::gelu_forward(x, y);
      break;
    case Kind::softmax:
      ops::softmax_forward(x, y);
      break;
  }
  return y;
}

const Tensor& Activation::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), shape_, device_);
  switch (kind_) {  // sigmoid, tanh and softmax from their output, gelu from its input
    case Kind::sigmoid:
      ops::sigmoid_backward(y_, dy, dx);
      break;
    case Kind::tanh:
      ops::tanh_backward(y_, dy, dx);
      break;
    case Kind::gelu:
      ops::gelu_backward(x_, dy, dx);
      break;
    case Kind::softmax:
      ops::softmax_backward(y_, dy, dx);
      break;
  }
  return dx;
}

// ---- Dropout ----

Dropout::Dropout(float rate) : rate_(rate) {
  if (!(rate >= 0.0f && rate < 1.0f))
    throw std::invalid_argument("dropout: rate must be in [0, 1), got " + std::to_string(rate));
}

std::string Dropout::spec() const {
  std::string r = std::to_string(rate_);
  r.erase(r.find_last_not_of('0') + 1);
  if (!r.empty() && r.back() == '.') r.pop_back();
  return "dropout rate=" + r;
}

Shape Dropout::build(const Shape& input, const Device& device) {
  shape_ = input;
  device_ = device;
  return input;
}

const Tensor& Dropout::forward(const Tensor& x, bool training) {
  active_ = training && rate_ > 0.0f;
  // Identity at inference, as Keras. Return the input itself (owned by the
  // caller) rather than aliasing it in y_, which training would write into.
  if (!active_) return x;
  Tensor& y = ensure(y_, x.size(0), shape_, device_);
  ops::dropout_forward(x, y, rate_, seed_);
  return y;
}

const Tensor& Dropout::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return dx_;
  if (!active_) return dy;
  Tensor& dx = ensure(dx_, dy.size(0), shape_, device_);
  ops::dropout_backward(dy, dx, rate_, seed_);
  return dx;
}

}  // namespace troupe::models
