// Reference layer normalisation over the last dimension (backend.hpp),
// written from the formulas one row at a time; every sum in double
// whatever T is, and T = double runs the gradient checks.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace troupe::kernels::ref {

template <class T>
void layernorm_forward(std::int64_t rows, std::int64_t n, const T* x, const T* gamma, const T* beta, double eps, T* y,
                       T* mean, T* rstd) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    double sum = 0.0;
    for (std::int64_t j = 0; j < n; ++j) sum += double(xr[j]);
    const double m = sum / double(n);
    double sq = 0.0;
    for (std::int64_t j = 0; j < n; ++j) sq += (double(xr[j]) - m) * (double(xr[j]) - m);
    const double inv = 1.0 / std::sqrt(sq / double(n) + eps);
    mean[r] = T(m);
    rstd[r] = T(inv);
    for (std::int64_t j = 0; j < n; ++j)
      y[r * n + j] = T(double(gamma[j]) * (double(xr[j]) - double(mean[r])) * double(rstd[r]) + double(beta[j]));
  }
}

template <class T>
void layernorm_backward(std::int64_t rows, std::int64_t n, const T* x, const T* dy, const T* gamma, const T* mean,
                        const T* rstd, T* dx, T* dgamma, T* dbeta) {
  std::vector<double> dg(static_cast<std::size_t>(n), 0.0), db(static_cast<std::size_t>(n), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double m = double(mean[r]), inv = double(rstd[r]);
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (std::int64_t j = 0; j < n; ++j) {
      const double xhat = (double(x[r * n + j]) - m) * inv, d = double(dy[r * n + j]);
      dg[static_cast<std::size_t>(j)] += d * xhat;
      db[static_cast<std::size_t>(j)] += d;
      sum_g += d * double(gamma[j]);
      sum_g_xhat += d * double(gamma[j]) * xhat;
    }
    if (!dx) continue;
    for (std::int64_t j = 0; j < n; ++j) {
      const double xhat = (double(x[r * n + j]) - m) * inv;
      const double g = double(dy[r * n + j]) * double(gamma[j]);
      dx[r * n + j] = T(inv * (g - sum_g / double(n) - xhat * sum_g_xhat / double(n)));
    }
  }
  for (std::int64_t j = 0; j < n; ++j) {
    dgamma[j] = T(dg[static_cast<std::size_t>(j)]);
    dbeta[j] = T(db[static_cast<std::size_t>(j)]);
  }
}

}  // namespace troupe::kernels::ref
