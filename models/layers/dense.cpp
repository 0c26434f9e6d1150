#include <cstdio>
#include <stdexcept>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

std::string normal_init_text(float stddev) {
  char text[32];
  std::snprintf(text, sizeof text, "normal:%g", static_cast<double>(stddev));
  return text;
}

Dense::Dense(std::int64_t units, float init_std) : units_(units), init_std_(init_std) {
  if (units <= 0) throw std::invalid_argument("dense: units must be positive, got " + std::to_string(units));
  if (!(init_std >= 0.0f)) throw std::invalid_argument("dense: the init's deviation must be positive");
}

// init= only when it is not the default: older specs (and checkpoints) read
// as they always did.
std::string Dense::spec() const {
  return "dense units=" + std::to_string(units_) + (init_std_ > 0 ? " init=" + normal_init_text(init_std_) : "");
}

Shape Dense::build(const Shape& input, const Device& device) {
  if (input.rank() != 1 && input.rank() != 2)
    throw std::invalid_argument("dense: expects a flat input [features] or a sequence [length, features], got " +
                                input.str() + "; put a flatten layer before it");
  in_ = input[input.rank() - 1];
  positions_ = input.rank() == 2 ? input[0] : 1;
  input_ = input;
  output_ = input.rank() == 2 ? Shape{positions_, units_} : Shape{units_};
  device_ = device;
  return output_;
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
  if (init_std_ > 0)
    ops::init_normal(kernel_, 0.0f, init_std_, seed);
  else
    ops::glorot_uniform(kernel_, in_, units_, seed);
  ops::fill(bias_, 0.0f);
}

// A sequence's positions are rows of one GEMM: [batch * length, in] x W.
const Tensor& Dense::forward(const Tensor& x, bool) {
  const std::int64_t rows = x.size(0) * positions_;
  x_ = x.reshape({rows, in_});
  Tensor& y = ensure(y_, x.size(0), output_, device_);
  const Tensor y2 = y.reshape({rows, units_});
  ops::gemm(x_, kernel_, y2);
  ops::bias_add(y2, bias_);
  return y;
}

const Tensor& Dense::backward(const Tensor& dy, bool need_dx) {
  const std::int64_t rows = dy.size(0) * positions_;
  const Tensor dy2 = dy.reshape({rows, units_});
  ops::gemm(x_, dy2, dkernel_, /*trans_a=*/true);
  ops::bias_grad(dy2, dbias_);
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), input_, device_);
  ops::gemm(dy2, kernel_, dx.reshape({rows, in_}), false, /*trans_b=*/true);
  return dx;
}

}  // namespace troupe::models
