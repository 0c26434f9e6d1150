// CpuBackend's batch normalisation: the five steps of backend.hpp as loops,
// sums in double (cpu/sums.hpp), the per-element arithmetic from
// math/batchnorm.hpp (the cuda kernels' own).
//
// Why not oneDNN: its batch_normalization primitive takes the statistics of
// the batch it is given, in the same call that normalises, and its backward
// divides by that batch's own element count. The point of this split is to
// all-reduce the sums across replicas between the steps and to divide by
// the replicas' total count, which the primitive cannot take. Forward with
// given statistics (use_global_stats) it could run, but that is one
// streaming pass, which the loop below runs at memory speed too, without a
// primitive to build and cache per shape.
//
// Layout: x is [n, c, spatial]. With spatial > 1 each (image, channel) plane
// is a contiguous run with per-channel constants, summed with the lane
// helpers or transformed by a loop GCC vectorises. With spatial == 1 (x
// [n, c], after a dense layer) a plane is one element, so the loops run
// over rows instead, each a vector operation across the channels.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/sums.hpp"
#include "kernels/math/batchnorm.hpp"

namespace troupe::kernels {

namespace {

std::size_t channels(const BatchNormShape& s) { return static_cast<std::size_t>(s.c); }

const float* plane_of(const BatchNormShape& s, const float* x, std::int64_t i, std::int64_t ch) {
  return x + (i * s.c + ch) * s.spatial;
}

std::vector<float> invstds(const BatchNormShape& s, const float* var, float eps) {
  std::vector<float> out(channels(s));
  for (std::int64_t ch = 0; ch < s.c; ++ch) out[ch] = math::batchnorm_invstd(var[ch], eps);
  return out;
}

}  // namespace

void CpuBackend::channel_sum(const BatchNormShape& s, const float* x, float* sum) {
  std::vector<double> acc(channels(s), 0.0);
  double* __restrict__ a = acc.data();
  if (s.spatial == 1) {
    for (std::int64_t i = 0; i < s.n; ++i) {
      const float* __restrict__ row = x + i * s.c;
      for (std::int64_t ch = 0; ch < s.c; ++ch) a[ch] += static_cast<double>(row[ch]);
    }
  } else {
    const std::size_t len = static_cast<std::size_t>(s.spatial);
    for (std::int64_t i = 0; i < s.n; ++i)
      for (std::int64_t ch = 0; ch < s.c; ++ch) a[ch] += cpu::sum_in_double(len, plane_of(s, x, i, ch));
  }
  for (std::int64_t ch = 0; ch < s.c; ++ch) sum[ch] = static_cast<float>(a[ch]);
}

void CpuBackend::channel_centered_sumsq(const BatchNormShape& s, const float* x, const float* mean, float* out) {
  std::vector<double> acc(channels(s), 0.0);
  double* __restrict__ a = acc.data();
  if (s.spatial == 1) {
    const std::vector<double> m(mean, mean + s.c);
    for (std::int64_t i = 0; i < s.n; ++i) {
      const float* __restrict__ row = x + i * s.c;
      for (std::int64_t ch = 0; ch < s.c; ++ch) {
        const double d = static_cast<double>(row[ch]) - m[ch];
        a[ch] += d * d;
      }
    }
  } else {
    const std::size_t len = static_cast<std::size_t>(s.spatial);
    for (std::int64_t i = 0; i < s.n; ++i)
      for (std::int64_t ch = 0; ch < s.c; ++ch)
        a[ch] += cpu::centered_sumsq_in_double(len, plane_of(s, x, i, ch), mean[ch]);
  }
  for (std::int64_t ch = 0; ch < s.c; ++ch) out[ch] = static_cast<float>(a[ch]);
}

void CpuBackend::batchnorm_forward(const BatchNormShape& s, const float* x, const float* mean, const float* var,
                                   const float* gamma, const float* beta, float eps, float* y) {
  // Local copies: y cannot alias them, so the vectoriser needs no checks.
  const std::vector<float> invstd = invstds(s, var, eps), m(mean, mean + s.c), g(gamma, gamma + s.c),
                           b(beta, beta + s.c);
  for (std::int64_t i = 0; i < s.n; ++i) {
    if (s.spatial == 1) {
      const float* row = x + i * s.c;
      float* out = y + i * s.c;
      for (std::int64_t ch = 0; ch < s.c; ++ch)
        out[ch] = math::batchnorm_normalize(row[ch], m[ch], invstd[ch], g[ch], b[ch]);
      continue;
    }
    for (std::int64_t ch = 0; ch < s.c; ++ch) {
      const float* in = plane_of(s, x, i, ch);
      float* out = y + (in - x);
      const float mc = m[ch], ic = invstd[ch], gc = g[ch], bc = b[ch];
      for (std::int64_t j = 0; j < s.spatial; ++j) out[j] = math::batchnorm_normalize(in[j], mc, ic, gc, bc);
    }
  }
}

void CpuBackend::batchnorm_backward_reduce(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                                           const float* var, float eps, float* sum_dy, float* sum_dy_xhat) {
  // Sums of dy and of dy * (x - mean); invstd is applied once, to the sum.
  std::vector<double> acc_dy(channels(s), 0.0), acc_dot(channels(s), 0.0);
  if (s.spatial == 1) {
    const std::vector<double> m(mean, mean + s.c);
    double* __restrict__ a_dy = acc_dy.data();
    double* __restrict__ a_dot = acc_dot.data();
    for (std::int64_t i = 0; i < s.n; ++i) {
      const float* __restrict__ xr = x + i * s.c;
      const float* __restrict__ gr = dy + i * s.c;
      for (std::int64_t ch = 0; ch < s.c; ++ch) {
        const double g = static_cast<double>(gr[ch]);
        a_dy[ch] += g;
        a_dot[ch] += g * (static_cast<double>(xr[ch]) - m[ch]);
      }
    }
  } else {
    const std::size_t len = static_cast<std::size_t>(s.spatial);
    for (std::int64_t i = 0; i < s.n; ++i)
      for (std::int64_t ch = 0; ch < s.c; ++ch) {
        const std::int64_t at = (i * s.c + ch) * s.spatial;
        cpu::centered_dot_in_double(len, x + at, dy + at, mean[ch], acc_dy[ch], acc_dot[ch]);
      }
  }
  for (std::int64_t ch = 0; ch < s.c; ++ch) {
    sum_dy[ch] = static_cast<float>(acc_dy[ch]);
    sum_dy_xhat[ch] = math::batchnorm_sum_dy_xhat(acc_dot[ch], var[ch], eps);
  }
}

void CpuBackend::batchnorm_backward_data(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                                         const float* var, const float* gamma, float eps, const float* sum_dy,
                                         const float* sum_dy_xhat, double count, float* dx) {
  const std::vector<float> invstd = invstds(s, var, eps), m(mean, mean + s.c), g(gamma, gamma + s.c);
  std::vector<float> mean_dy(channels(s)), mean_dy_xhat(channels(s));
  for (std::int64_t ch = 0; ch < s.c; ++ch) {
    mean_dy[ch] = math::batchnorm_mean_of(sum_dy[ch], count);
    mean_dy_xhat[ch] = math::batchnorm_mean_of(sum_dy_xhat[ch], count);
  }
  for (std::int64_t i = 0; i < s.n; ++i) {
    if (s.spatial == 1) {
      const std::int64_t row = i * s.c;
      for (std::int64_t ch = 0; ch < s.c; ++ch)
        dx[row + ch] = math::batchnorm_input_grad(x[row + ch], dy[row + ch], m[ch], invstd[ch], g[ch], mean_dy[ch],
                                                  mean_dy_xhat[ch]);
      continue;
    }
    for (std::int64_t ch = 0; ch < s.c; ++ch) {
      const std::int64_t at = (i * s.c + ch) * s.spatial;
      const float mc = m[ch], ic = invstd[ch], gc = g[ch], md = mean_dy[ch], mdx = mean_dy_xhat[ch];
      for (std::int64_t j = 0; j < s.spatial; ++j)
        dx[at + j] = math::batchnorm_input_grad(x[at + j], dy[at + j], mc, ic, gc, md, mdx);
    }
  }
}

}  // namespace troupe::kernels
