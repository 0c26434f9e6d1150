// Reference optimizer updates, written from the formulas in backend.hpp
// (SgdParams: PyTorch's SGD; AdamParams: the Adam family with host-computed
// coefficients), independently of kernels/math/elementwise.hpp.
#pragma once

#include <cmath>
#include <cstddef>

#include "kernels/backend.hpp"

namespace troupe::kernels::ref {

template <class T>
void sgd_update(std::size_t n, const SgdParams& p, T* param, const T* grad, T* velocity) {
  const T lr = p.lr, momentum = p.momentum, weight_decay = p.weight_decay;
  for (std::size_t i = 0; i < n; ++i) {
    const T g = grad[i] + weight_decay * param[i];
    T step = g;
    if (p.momentum != 0.0f) {
      velocity[i] = momentum * velocity[i] + g;
      step = p.nesterov ? g + momentum * velocity[i] : velocity[i];
    }
    param[i] = param[i] - lr * step;
  }
}

template <class T>
void adam_update(std::size_t n, const AdamParams& p, T* param, const T* grad, T* m, T* v) {
  const T lr = p.lr, beta1 = p.beta1, beta2 = p.beta2, eps = p.eps;
  for (std::size_t i = 0; i < n; ++i) {
    const T old = param[i];
    const T g = grad[i] + T(p.weight_decay) * old;
    m[i] = beta1 * m[i] + (T(1) - beta1) * g;
    v[i] = beta2 * v[i] + (T(1) - beta2) * g * g;
    const T numerator = T(p.coef_m) * m[i] + T(p.coef_g) * g;
    const T denominator = std::sqrt(v[i] * T(p.coef_v)) + eps;
    param[i] = old - lr * numerator / denominator - lr * T(p.decoupled_weight_decay) * old;
  }
}

}  // namespace troupe::kernels::ref
