// Reference activations: ReLU, inverted dropout, sigmoid, tanh, exact GELU
// and softmax, written from their definitions in backend.hpp and
// independently of kernels/math/elementwise.hpp, which the tests check
// against these. Templates on the element type so the gradient checks can
// run them in double; the smooth functions evaluate in double whatever T is.
#pragma once

#include <cmath>
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

template <class T>
void sigmoid_forward(std::size_t n, const T* x, T* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = T(1.0 / (1.0 + std::exp(-double(x[i]))));
}

template <class T>
void sigmoid_backward(std::size_t n, const T* y, const T* dy, T* dx) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = T(double(dy[i]) * double(y[i]) * (1.0 - double(y[i])));
}

template <class T>
void tanh_forward(std::size_t n, const T* x, T* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = T(std::tanh(double(x[i])));
}

template <class T>
void tanh_backward(std::size_t n, const T* y, const T* dy, T* dx) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = T(double(dy[i]) * (1.0 - double(y[i]) * double(y[i])));
}

// The standard normal distribution function and density. Phi(x) =
// 0.5 (1 + erf(x / sqrt 2)) = 0.5 erfc(-x / sqrt 2); the erfc form, because
// 1 + erf cancels for negative x (even in double it is wrong below x = -7,
// where Phi < 1e-12), and the reference must be right everywhere.
inline double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
inline double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * 3.14159265358979323846); }

template <class T>
void gelu_forward(std::size_t n, const T* x, T* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = T(double(x[i]) * normal_cdf(double(x[i])));
}

template <class T>
void gelu_backward(std::size_t n, const T* x, const T* dy, T* dx) {
  for (std::size_t i = 0; i < n; ++i) {
    const double v = double(x[i]);
    dx[i] = T(double(dy[i]) * (normal_cdf(v) + v * normal_pdf(v)));
  }
}

// One row of n: the softmax of its first `keys` values (subtract their
// maximum, exponentiate, divide by the sum in double), 0 beyond them.
template <class T>
void softmax_row(std::int64_t keys, std::int64_t n, const T* row, T* out) {
  double max = double(row[0]);
  for (std::int64_t j = 1; j < keys; ++j) max = std::fmax(max, double(row[j]));
  double sum = 0.0;
  for (std::int64_t j = 0; j < keys; ++j) sum += std::exp(double(row[j]) - max);
  for (std::int64_t j = 0; j < n; ++j) out[j] = j < keys ? T(std::exp(double(row[j]) - max) / sum) : T(0);
}

// Per row of [rows, n].
template <class T>
void softmax_forward(std::int64_t rows, std::int64_t n, const T* x, T* y) {
  for (std::int64_t r = 0; r < rows; ++r) softmax_row(n, n, x + r * n, y + r * n);
}

// Row r of stacked [n, n] matrices is query i = r % n: softmax over keys
// j <= i, 0 beyond.
template <class T>
void causal_softmax_forward(std::int64_t rows, std::int64_t n, const T* x, T* y) {
  for (std::int64_t r = 0; r < rows; ++r) softmax_row(r % n + 1, n, x + r * n, y + r * n);
}

// dx = y * (dy - sum_j dy_j y_j), per row.
template <class T>
void softmax_backward(std::int64_t rows, std::int64_t n, const T* y, const T* dy, T* dx) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* yr = y + r * n;
    const T* dyr = dy + r * n;
    double dot = 0.0;
    for (std::int64_t j = 0; j < n; ++j) dot += double(dyr[j]) * double(yr[j]);
    for (std::int64_t j = 0; j < n; ++j) dx[r * n + j] = T(double(yr[j]) * (double(dyr[j]) - dot));
  }
}

}  // namespace troupe::kernels::ref
