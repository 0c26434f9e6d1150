// Reference activations: ReLU and inverted dropout, written from their
// definitions in backend.hpp and independently of kernels/math/elementwise.hpp,
// which the tests check against these. Templates on the element type so the
// gradient checks can run them in double.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/math/random.hpp"

namespace troupe::kernels::ref {

template <class T>
void relu_forward(std::size_t n, const T* x, T* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

// dx = dy where the forward input was positive, else 0 (the subgradient at 0
// is taken as 0, as every framework does).
template <class T>
void relu_backward(std::size_t n, const T* x, const T* dy, T* dx) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = x[i] > T(0) ? dy[i] : T(0);
}

// Whether dropout keeps element i. The stream itself is defined by
// math::random_uniform; the comparison is made in float, on the exact 24-bit
// uniform, so every backend and every T agrees on the mask.
inline bool dropout_keeps(std::uint64_t seed, std::size_t i, float rate) {
  return math::random_uniform(seed, static_cast<std::uint64_t>(i)) >= rate;
}

template <class T>
void dropout_forward(std::size_t n, float rate, std::uint64_t seed, const T* x, T* y) {
  const T keep_probability = T(1) - T(rate);
  for (std::size_t i = 0; i < n; ++i) y[i] = dropout_keeps(seed, i, rate) ? x[i] / keep_probability : T(0);
}

// The forward map is linear in x with the same mask, so backward is forward
// applied to dy.
template <class T>
void dropout_backward(std::size_t n, float rate, std::uint64_t seed, const T* dy, T* dx) {
  dropout_forward(n, rate, seed, dy, dx);
}

}  // namespace troupe::kernels::ref
