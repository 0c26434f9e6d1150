#include <stdexcept>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

Dense::Dense(std::int64_t units) : units_(units) {
  if (units <= 0) throw std::invalid_argument("dense: units must be positive, got " + std::to_string(units));
}

std::string Dense::spec() const { return "dense units=" + std::to_string(units_); }

Shape Dense::build(const Shape& input, const Device& device) {
  if (input.rank() != 1)
    throw std::invalid_argument("dense: expects a flat input [features], got " + input.str() +
                                "; put a flatten layer before it");
  in_ = input[0];
  device_ = device;
  return Shape{units_};
}

std::vector<ParameterInfo> Dense::parameters() const {
  return {{"kernel", Shape{in_, units_}}, {"bias", Shape{units_}}};
}

void Dense::bind(const Tensor& params, const Tensor& grads) {
  kernel_ = params.slice(0, {in_, units_});
  bias_ = params.slice(in_ * units_, {units_});
  dkernel_ = grads.slice(0, {in_, units_});
  dbias_ = grads.slice(in_ * units_, {units_});
}

void Dense::initialize(std::uint64_t seed) {
  ops::glorot_uniform(kernel_, in_, units_, seed);
  ops::fill(bias_, 0.0f);
}

const Tensor& Dense::forward(const Tensor& x, bool) {
  x_ = x;
  Tensor& y = ensure(y_, x.size(0), Shape{units_}, device_);
  ops::gemm(x, kernel_, y);
  ops::bias_add(y, bias_);
  return y;
}

const Tensor& Dense::backward(const Tensor& dy, bool need_dx) {
  ops::gemm(x_, dy, dkernel_, /*trans_a=*/true);
  ops::bias_grad(dy, dbias_);
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), Shape{in_}, device_);
  ops::gemm(dy, kernel_, dx, false, /*trans_b=*/true);
  return dx;
}

}  // namespace troupe::models
