// Batch normalisation's per-element math, shared by the cpu loops and the
// cuda kernels (the reference backend has its own, ref/batchnorm.hpp). The
// per-channel coefficients are functions too, so that the cpu backend, which
// computes them once per channel, and the cuda kernels, which recompute them
// per thread from the same float inputs, round them the same way.
#pragma once

#include <cmath>

#include "kernels/math/host_device.hpp"

namespace troupe::kernels::math {

// 1 / sqrt(var + eps). Both operations are correctly rounded on the host and,
// without --use_fast_math, in CUDA.
TROUPE_HD float batchnorm_invstd(float var, float eps) { return 1.0f / sqrtf(var + eps); }

// sum / count for a per-channel mean of the backward sums, in double: count
// may be far above 2^24 (every replica's batch times the spatial size).
TROUPE_HD float batchnorm_mean_of(float sum, double count) {
  return static_cast<float>(static_cast<double>(sum) / count);
}

// sum of dy * xhat from the sum of dy * (x - mean), both in double: invstd
// is applied once, to the sum, as PyTorch's batch_norm_backward_reduce does.
TROUPE_HD float batchnorm_sum_dy_xhat(double sum_dy_centered, float var, float eps) {
  return static_cast<float>(sum_dy_centered / sqrt(static_cast<double>(var) + static_cast<double>(eps)));
}

// gamma * (x - mean) * invstd + beta. x - mean first: with a mean large
// against the spread, x * scale + shift would cancel.
TROUPE_HD float batchnorm_normalize(float x, float mean, float invstd, float gamma, float beta) {
  return gamma * ((x - mean) * invstd) + beta;
}

// gamma * invstd * (dy - mean_dy - xhat * mean_dy_xhat), xhat = (x - mean) * invstd.
TROUPE_HD float batchnorm_input_grad(float x, float dy, float mean, float invstd, float gamma, float mean_dy,
                                     float mean_dy_xhat) {
  const float xhat = (x - mean) * invstd;
  return gamma * invstd * (dy - mean_dy - xhat * mean_dy_xhat);
}

}  // namespace troupe::kernels::math
