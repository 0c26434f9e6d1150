// Layers without parameters that transform element by element or only
// reinterpret a shape: Flatten, ReLU, Dropout.
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
