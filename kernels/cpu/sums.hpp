// The cpu backend's reductions, accumulated in double over independent
// lanes. IEEE addition is not associative, so without -ffast-math GCC will
// not reorder one running sum into vector lanes; writing the lanes out lets
// it (SLP) and also breaks the add latency chain. 16 doubles = four AVX2
// registers in flight. Double accumulation makes the order of the terms
// irrelevant at float precision: a sum of 2^24 floats loses under 2^-28 of
// its magnitude, where a float running sum may lose every digit.
#pragma once

#include <cstddef>

namespace troupe::kernels::cpu {

constexpr std::size_t kLanes = 16;

// Sum of x[0..n).
inline double sum_in_double(std::size_t n, const float* x) {
  double lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(x[i + l]);
  double tail = 0.0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]);
  for (std::size_t l = 0; l < kLanes; ++l) tail += lane[l];
  return tail;
}

// Sum of a[i] * b[i].
inline double dot_in_double(std::size_t n, const float* a, const float* b) {
  double lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(a[i + l]) * static_cast<double>(b[i + l]);
  double tail = 0.0;
  for (; i < n; ++i) tail += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  for (std::size_t l = 0; l < kLanes; ++l) tail += lane[l];
  return tail;
}

// Sum of (x[i] - mean)^2, the difference taken in double (exact for a
// float mean; LayerNorm passes its double one).
inline double centered_sumsq_in_double(std::size_t n, const float* x, double mean) {
  const double m = mean;
  double lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) {
      const double d = static_cast<double>(x[i + l]) - m;
      lane[l] += d * d;
    }
  double tail = 0.0;
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - m;
    tail += d * d;
  }
  for (std::size_t l = 0; l < kLanes; ++l) tail += lane[l];
  return tail;
}

// Adds the sum of dy[i] to sum_dy and of dy[i] * (x[i] - mean) to sum_dy_centered.
inline void centered_dot_in_double(std::size_t n, const float* x, const float* dy, float mean, double& sum_dy,
                                   double& sum_dy_centered) {
  const double m = mean;
  double lane_dy[kLanes] = {}, lane_dot[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) {
      const double g = static_cast<double>(dy[i + l]);
      lane_dy[l] += g;
      lane_dot[l] += g * (static_cast<double>(x[i + l]) - m);
    }
  double tail_dy = 0.0, tail_dot = 0.0;
  for (; i < n; ++i) {
    const double g = static_cast<double>(dy[i]);
    tail_dy += g;
    tail_dot += g * (static_cast<double>(x[i]) - m);
  }
  for (std::size_t l = 0; l < kLanes; ++l) {
    tail_dy += lane_dy[l];
    tail_dot += lane_dot[l];
  }
  sum_dy += tail_dy;
  sum_dy_centered += tail_dot;
}

}  // namespace troupe::kernels::cpu
