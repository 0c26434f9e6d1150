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
