// Reference batch normalisation in the five steps of backend.hpp (PyTorch's
// SyncBatchNorm split): two per-channel reductions for the statistics, the
// normalisation, and the backward reduction and data gradient. Written from
// the formulas, one channel at a time; every sum is accumulated in double
// whatever T is, and T = double runs the gradient checks.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/backend.hpp"

namespace troupe::kernels::ref {

// Element j of channel ch in image i.
inline std::int64_t batchnorm_at(const BatchNormShape& s, std::int64_t i, std::int64_t ch, std::int64_t j) {
  return (i * s.c + ch) * s.spatial + j;
}

template <class T>
double batchnorm_invstd(T var, double eps) {
  return 1.0 / std::sqrt(double(var) + eps);
}

template <class T>
void channel_sum(const BatchNormShape& s, const T* x, T* sum) {
  for (std::int64_t ch = 0; ch < s.c; ++ch) {
    double acc = 0.0;
    for (std::int64_t i = 0; i < s.n; ++i)
      for (std::int64_t j = 0; j < s.spatial; ++j) acc += double(x[batchnorm_at(s, i, ch, j)]);
    sum[ch] = T(acc);
  }
}

template <class T>
void channel_centered_sumsq(const BatchNormShape& s, const T* x, const T* mean, T* out) {
  for (std::int64_t ch = 0; ch < s.c; ++ch) {
    double acc = 0.0;
    for (std::int64_t i = 0; i < s.n; ++i)
      for (std::int64_t j = 0; j < s.spatial; ++j) {
        const double d = double(x[batchnorm_at(s, i, ch, j)]) - double(mean[ch]);
        acc += d * d;
      }
    out[ch] = T(acc);
  }
}

template <class T>
void batchnorm_forward(const BatchNormShape& s, const T* x, const T* mean, const T* var, const T* gamma, const T* beta,
                       double eps, T* y) {
  for (std::int64_t ch = 0; ch < s.c; ++ch) {
    const double invstd = batchnorm_invstd(var[ch], eps);
    for (std::int64_t i = 0; i < s.n; ++i)
      for (std::int64_t j = 0; j < s.spatial; ++j) {
        const std::int64_t at = batchnorm_at(s, i, ch, j);
        const double xhat = (double(x[at]) - double(mean[ch])) * invstd;
        y[at] = T(double(gamma[ch]) * xhat + double(beta[ch]));
      }
  }
}

template <class T>
void batchnorm_backward_reduce(const BatchNormShape& s, const T* x, const T* dy, const T* mean, const T* var,
                               double eps, T* sum_dy, T* sum_dy_xhat) {
  for (std::int64_t ch = 0; ch < s.c; ++ch) {
    const double invstd = batchnorm_invstd(var[ch], eps);
    double acc_dy = 0.0, acc_dy_xhat = 0.0;
    for (std::int64_t i = 0; i < s.n; ++i)
      for (std::int64_t j = 0; j < s.spatial; ++j) {
        const std::int64_t at = batchnorm_at(s, i, ch, j);
        const double xhat = (double(x[at]) - double(mean[ch])) * invstd;
        acc_dy += double(dy[at]);
        acc_dy_xhat += double(dy[at]) * xhat;
      }
    sum_dy[ch] = T(acc_dy);
    sum_dy_xhat[ch] = T(acc_dy_xhat);
  }
}

template <class T>
void batchnorm_backward_data(const BatchNormShape& s, const T* x, const T* dy, const T* mean, const T* var,
                             const T* gamma, double eps, const T* sum_dy, const T* sum_dy_xhat, double count, T* dx) {
  for (std::int64_t ch = 0; ch < s.c; ++ch) {
    const double invstd = batchnorm_invstd(var[ch], eps);
    const double mean_dy = double(sum_dy[ch]) / count, mean_dy_xhat = double(sum_dy_xhat[ch]) / count;
    for (std::int64_t i = 0; i < s.n; ++i)
      for (std::int64_t j = 0; j < s.spatial; ++j) {
        const std::int64_t at = batchnorm_at(s, i, ch, j);
        const double xhat = (double(x[at]) - double(mean[ch])) * invstd;
        dx[at] = T(double(gamma[ch]) * invstd * (double(dy[at]) - mean_dy - xhat * mean_dy_xhat));
      }
  }
}

}  // namespace troupe::kernels::ref
