// Layer normalisation over the last dimension on the GPU (backend.hpp): own
// kernels, one warp per row (launch.cuh's warp rows), as a transformer's
// rows are its width, a few hundred to a few thousand floats that a warp
// covers in coalesced loads and reduces with shuffles. Sums in double, as
// the cpu backend's, so that the tests hold both to the reference alike.
//
// The parameters' gradients are sums over the rows: one thread per column
// walks every row (consecutive threads read consecutive floats of a row),
// adding in double in row order. No atomics: the same input gives the same
// bits on every run.
//
// Why not cuDNN: its normalisation API (cudnnNormalizationForwardTraining)
// is deprecated in cuDNN 9 and its graph API's layer norm needs a plan built
// per shape; these passes are memory-bound streams either way.
#include <cstdint>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/launch.cuh"

namespace troupe::kernels {

using cuda::check_launch;
using cuda::current_device_state;
using cuda::DeviceState;
using cuda::kThreads;
using cuda::warp_rows;
using cuda::warp_sum;
using cuda::WarpRows;

namespace {

__global__ void layernorm_forward_kernel(std::int64_t rows, std::int64_t n, const float* x, const float* gamma,
                                         const float* beta, float eps, float* y, float* mean, float* rstd) {
  const WarpRows w = warp_rows();
  for (std::int64_t r = w.first; r < rows; r += w.step) {
    const float* xr = x + r * n;
    double sum = 0.0;
    for (std::int64_t j = w.lane; j < n; j += 32) sum += xr[j];
    const double m = warp_sum(sum) / static_cast<double>(n);
    double sq = 0.0;
    for (std::int64_t j = w.lane; j < n; j += 32) {
      const double d = static_cast<double>(xr[j]) - m;
      sq += d * d;
    }
    sq = warp_sum(sq);
    const float mr = static_cast<float>(m);
    const float sr = static_cast<float>(1.0 / sqrt(sq / static_cast<double>(n) + static_cast<double>(eps)));
    if (w.lane == 0) {
      mean[r] = mr;
      rstd[r] = sr;
    }
    float* yr = y + r * n;
    for (std::int64_t j = w.lane; j < n; j += 32) yr[j] = gamma[j] * ((xr[j] - mr) * sr) + beta[j];
  }
}

__global__ void layernorm_backward_data_kernel(std::int64_t rows, std::int64_t n, const float* x, const float* dy,
                                               const float* gamma, const float* mean, const float* rstd, float* dx) {
  const WarpRows w = warp_rows();
  for (std::int64_t r = w.first; r < rows; r += w.step) {
    const float* xr = x + r * n;
    const float* dyr = dy + r * n;
    const float mr = mean[r], sr = rstd[r];
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (std::int64_t j = w.lane; j < n; j += 32) {
      const float xhat = (xr[j] - mr) * sr, g = dyr[j] * gamma[j];
      sum_g += g;
      sum_g_xhat += static_cast<double>(g) * static_cast<double>(xhat);
    }
    const float mean_g = static_cast<float>(warp_sum(sum_g) / static_cast<double>(n));
    const float mean_g_xhat = static_cast<float>(warp_sum(sum_g_xhat) / static_cast<double>(n));
    float* dxr = dx + r * n;
    for (std::int64_t j = w.lane; j < n; j += 32) {
      const float xhat = (xr[j] - mr) * sr;
      dxr[j] = sr * (dyr[j] * gamma[j] - mean_g - xhat * mean_g_xhat);
    }
  }
}

__global__ void layernorm_backward_params_kernel(std::int64_t rows, std::int64_t n, const float* x, const float* dy,
                                                 const float* mean, const float* rstd, float* dgamma, float* dbeta) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride) {
    double dg = 0.0, db = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float d = dy[r * n + j];
      dg += static_cast<double>(d) * static_cast<double>((x[r * n + j] - mean[r]) * rstd[r]);
      db += d;
    }
    dgamma[j] = static_cast<float>(dg);
    dbeta[j] = static_cast<float>(db);
  }
}

}  // namespace

void CudaBackend::layernorm_forward(std::int64_t rows, std::int64_t n, const float* x, const float* gamma,
                                    const float* beta, float eps, float* y, float* mean, float* rstd) {
  if (rows == 0) return;
  DeviceState& st = current_device_state();
  layernorm_forward_kernel<<<cuda::blocks_for_rows(st, rows), kThreads, 0, st.stream>>>(rows, n, x, gamma, beta, eps, y,
                                                                                        mean, rstd);
  check_launch("layernorm_forward_kernel", __FILE__, __LINE__);
}

void CudaBackend::layernorm_backward(std::int64_t rows, std::int64_t n, const float* x, const float* dy,
                                     const float* gamma, const float* mean, const float* rstd, float* dx, float* dgamma,
                                     float* dbeta) {
  DeviceState& st = current_device_state();
  layernorm_backward_params_kernel<<<cuda::blocks_for(st, static_cast<std::size_t>(n)), kThreads, 0, st.stream>>>(
      rows, n, x, dy, mean, rstd, dgamma, dbeta);
  check_launch("layernorm_backward_params_kernel", __FILE__, __LINE__);
  if (!dx || rows == 0) return;
  layernorm_backward_data_kernel<<<cuda::blocks_for_rows(st, rows), kThreads, 0, st.stream>>>(rows, n, x, dy, gamma,
                                                                                              mean, rstd, dx);
  check_launch("layernorm_backward_data_kernel", __FILE__, __LINE__);
}

}  // namespace troupe::kernels
