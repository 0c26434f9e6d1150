// Per-element math shared by the cpu loops and the cuda kernels. Each
// function is the body of one loop iteration; the reference backend has its
// own independent versions (ref/), which is what the tests compare against.
#pragma once

#include <cmath>

#include "kernels/backend.hpp"
#include "kernels/math/host_device.hpp"

namespace troupe::kernels::math {

TROUPE_HD float relu(float x) { return x > 0.0f ? x : 0.0f; }
TROUPE_HD float relu_grad(float x, float dy) { return x > 0.0f ? dy : 0.0f; }

// Sigmoid without overflow: exp is only taken of -|x|, so e is in (0, 1] and
// neither branch divides infinities; x < 0 uses e / (1 + e) = sigmoid(x).
TROUPE_HD float sigmoid(float x) {
  const float e = expf(-fabsf(x));
  const float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}
// From the forward output y. 1 - y is exact for y >= 0.5 (Sterbenz).
TROUPE_HD float sigmoid_grad(float y, float dy) { return dy * (y * (1.0f - y)); }

TROUPE_HD float tanh_of(float x) { return tanhf(x); }
// From the forward output y: 1 - y^2 as (1 - y)(1 + y), which keeps its
// relative accuracy as |y| nears 1, where 1 - y * y would cancel.
TROUPE_HD float tanh_grad(float y, float dy) { return dy * ((1.0f - y) * (1.0f + y)); }

// Exact GELU, x * Phi(x). Phi(x) = 0.5 * erfc(-x / sqrt 2) rather than the
// textbook 0.5 * (1 + erf(x / sqrt 2)): the same function, but for negative
// x erfc returns the small tail itself, where 1 + erf would cancel to a few
// correct bits (x = -4: Phi = 3.2e-5, and 1 + erf loses about 5 of float's
// 24 bits).
TROUPE_HD float normal_cdf(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
TROUPE_HD float gelu(float x) { return x * normal_cdf(x); }
// d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
TROUPE_HD float gelu_grad(float x, float dy) {
  const float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
  return dy * (normal_cdf(x) + x * pdf);
}

// One SGD step for one element (see SgdParams for the formula).
TROUPE_HD void sgd_step(const SgdParams& p, float& param, float grad, float* velocity) {
  float g = grad + p.weight_decay * param;
  if (p.momentum != 0.0f) {
    float v = p.momentum * *velocity + g;
    *velocity = v;
    g = p.nesterov ? g + p.momentum * v : v;
  }
  param -= p.lr * g;
}

// One Adam-family step for one element (see AdamParams for the formula).
TROUPE_HD void adam_step(const AdamParams& p, float& param, float grad, float& m, float& v) {
  float g = grad + p.weight_decay * param;
  m = p.beta1 * m + (1.0f - p.beta1) * g;
  v = p.beta2 * v + (1.0f - p.beta2) * g * g;
  float old = param;
  param -= p.lr * (p.coef_m * m + p.coef_g * g) / (sqrtf(v * p.coef_v) + p.eps);
  param -= p.lr * p.decoupled_weight_decay * old;
}

}  // namespace troupe::kernels::math
