// CpuBackend's layer normalisation over the last dimension (backend.hpp):
// a row at a time, its sums in double over independent lanes (cpu/sums.hpp)
// and the transforms as loops GCC vectorises. A transformer's rows are its
// width (128 to a few thousand floats), so a row stays in L1 across its
// passes; the parameter gradients sum over rows into double accumulators
// of the row's length.
//
// Why not oneDNN's layer_normalization: its backward computes the
// parameters' gradients only together with the input's, and its forward
// keeps the variance, not 1 / sqrt(var + eps); neither step here is more
// than streaming passes over a row in L1, which the loops run at that
// speed without a primitive to build and cache per shape.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/sums.hpp"

namespace troupe::kernels {

void CpuBackend::layernorm_forward(std::int64_t rows, std::int64_t n, const float* x, const float* gamma,
                                   const float* beta, float eps, float* y, float* mean, float* rstd) {
  const std::size_t cols = static_cast<std::size_t>(n);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const double m = cpu::sum_in_double(cols, xr) / double(n);
    // The squares about the double mean: the float mean's rounding would
    // otherwise enter the variance. In lanes: one running double sum was a
    // chain of dependent adds, the gpt's LayerNorm's longest part.
    const double sq = cpu::centered_sumsq_in_double(cols, xr, m);
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(1.0 / std::sqrt(sq / double(n) + double(eps)));
    const float mr = mean[r], sr = rstd[r];
    for (std::size_t j = 0; j < cols; ++j) yr[j] = gamma[j] * ((xr[j] - mr) * sr) + beta[j];
  }
}

void CpuBackend::layernorm_backward(std::int64_t rows, std::int64_t n, const float* x, const float* dy,
                                    const float* gamma, const float* mean, const float* rstd, float* dx, float* dgamma,
                                    float* dbeta) {
  const std::size_t cols = static_cast<std::size_t>(n);
  std::vector<double> dg(cols, 0.0), db(cols, 0.0);
  std::vector<float> xhat(cols), g(cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float* dyr = dy + r * n;
    const float mr = mean[r], sr = rstd[r];
    for (std::size_t j = 0; j < cols; ++j) {
      xhat[j] = (xr[j] - mr) * sr;
      g[j] = dyr[j] * gamma[j];
      dg[j] += double(dyr[j]) * double(xhat[j]);
      db[j] += double(dyr[j]);
    }
    if (!dx) continue;
    const float mean_g = static_cast<float>(cpu::sum_in_double(cols, g.data()) / double(n));
    const float mean_g_xhat = static_cast<float>(cpu::dot_in_double(cols, g.data(), xhat.data()) / double(n));
    float* dxr = dx + r * n;
    for (std::size_t j = 0; j < cols; ++j) dxr[j] = sr * (g[j] - mean_g - xhat[j] * mean_g_xhat);
  }
  for (std::size_t j = 0; j < cols; ++j) {
    dgamma[j] = static_cast<float>(dg[j]);
    dbeta[j] = static_cast<float>(db[j]);
  }
}

}  // namespace troupe::kernels
