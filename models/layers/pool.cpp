#include <stdexcept>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

namespace {
std::int64_t checked_pool(const char* layer, std::int64_t pool) {
  if (pool <= 0)
    throw std::invalid_argument(std::string(layer) + ": pool must be positive, got " + std::to_string(pool));
  if (pool > kMaxWindow)
    throw std::invalid_argument(std::string(layer) + ": pool must be at most " + std::to_string(kMaxWindow) + ", got " +
                                std::to_string(pool));
  return pool;
}
std::int64_t default_stride(const char* layer, std::int64_t stride, std::int64_t pool) {
  if (stride < 0)
    throw std::invalid_argument(std::string(layer) + ": stride must be positive, got " + std::to_string(stride));
  if (stride > kMaxWindow)
    throw std::invalid_argument(std::string(layer) + ": stride must be at most " + std::to_string(kMaxWindow) +
                                ", got " + std::to_string(stride));
  return stride == 0 ? pool : stride;  // Keras: strides default to pool_size
}
}  // namespace

MaxPool2D::MaxPool2D(std::int64_t pool, std::int64_t stride)
    : pool_(checked_pool("maxpool2d", pool)), stride_(default_stride("maxpool2d", stride, pool)) {}

std::string MaxPool2D::spec() const {
  return "maxpool2d pool=" + std::to_string(pool_) + " stride=" + std::to_string(stride_);
}

Shape MaxPool2D::build(const Shape& input, const Device& device) {
  if (input.rank() != 3)
    throw std::invalid_argument("maxpool2d: expects an image input [channels, height, width], got " + input.str());
  input_ = input;
  device_ = device;
  Shape y = ops::maxpool2d_output_shape(Shape{1, input[0], input[1], input[2]}, {pool_, pool_, stride_, stride_});
  output_ = Shape{y[1], y[2], y[3]};
  return output_;
}

const Tensor& MaxPool2D::forward(const Tensor& x, bool) {
  Tensor& y = ensure(y_, x.size(0), output_, device_);
  Tensor& argmax = ensure(argmax_, x.size(0), output_, device_, DType::i32);
  ops::maxpool2d_forward(x, y, argmax, {pool_, pool_, stride_, stride_});
  return y;
}

const Tensor& MaxPool2D::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return dx_;  // no parameters: nothing else to compute
  Tensor& dx = ensure(dx_, dy.size(0), input_, device_);
  ops::maxpool2d_backward(dy, argmax_, dx, {pool_, pool_, stride_, stride_});
  return dx;
}

MaxPool1D::MaxPool1D(std::int64_t pool, std::int64_t stride)
    : pool_(checked_pool("maxpool1d", pool)), stride_(default_stride("maxpool1d", stride, pool)) {}

std::string MaxPool1D::spec() const {
  return "maxpool1d pool=" + std::to_string(pool_) + " stride=" + std::to_string(stride_);
}

Shape MaxPool1D::build(const Shape& input, const Device& device) {
  if (input.rank() != 2)
    throw std::invalid_argument("maxpool1d: expects a sequence input [channels, length], got " + input.str());
  input_ = input;
  device_ = device;
  Shape y = ops::maxpool1d_output_shape(Shape{1, input[0], input[1]}, {pool_, stride_});
  output_ = Shape{y[1], y[2]};
  return output_;
}

const Tensor& MaxPool1D::forward(const Tensor& x, bool) {
  Tensor& y = ensure(y_, x.size(0), output_, device_);
  Tensor& argmax = ensure(argmax_, x.size(0), output_, device_, DType::i32);
  ops::maxpool1d_forward(x, y, argmax, {pool_, stride_});
  return y;
}

const Tensor& MaxPool1D::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), input_, device_);
  ops::maxpool1d_backward(dy, argmax_, dx, {pool_, stride_});
  return dx;
}

// ---- AvgPool2D ----

AvgPool2D::AvgPool2D(std::int64_t pool, std::int64_t stride)
    : pool_(checked_pool("avgpool2d", pool)), stride_(default_stride("avgpool2d", stride, pool)) {}

std::string AvgPool2D::spec() const {
  return "avgpool2d pool=" + std::to_string(pool_) + " stride=" + std::to_string(stride_);
}

Shape AvgPool2D::build(const Shape& input, const Device& device) {
  if (input.rank() != 3)
    throw std::invalid_argument("avgpool2d: expects an image input [channels, height, width], got " + input.str());
  input_ = input;
  device_ = device;
  Shape y = ops::avgpool2d_output_shape(Shape{1, input[0], input[1], input[2]}, {pool_, pool_, stride_, stride_});
  output_ = Shape{y[1], y[2], y[3]};
  return output_;
}

const Tensor& AvgPool2D::forward(const Tensor& x, bool) {
  Tensor& y = ensure(y_, x.size(0), output_, device_);
  ops::avgpool2d_forward(x, y, {pool_, pool_, stride_, stride_});
  return y;
}

const Tensor& AvgPool2D::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), input_, device_);
  ops::avgpool2d_backward(dy, dx, {pool_, pool_, stride_, stride_});
  return dx;
}

// ---- GlobalAvgPool2D ----

Shape GlobalAvgPool2D::build(const Shape& input, const Device& device) {
  if (input.rank() != 3)
    throw std::invalid_argument("globalavgpool2d: expects an image input [channels, height, width], got " +
                                input.str());
  input_ = input;
  device_ = device;
  return Shape{input[0]};
}

const Tensor& GlobalAvgPool2D::forward(const Tensor& x, bool) {
  Tensor& y = ensure(y_, x.size(0), Shape{input_[0]}, device_);
  ops::global_avgpool2d_forward(x, y);
  return y;
}

const Tensor& GlobalAvgPool2D::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), input_, device_);
  ops::global_avgpool2d_backward(dy, dx);
  return dx;
}

}  // namespace troupe::models
