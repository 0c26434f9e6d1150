// Batch normalisation on the GPU, in the five steps of backend.hpp: own
// kernels, split where PyTorch's SyncBatchNorm splits its own (ATen's
// batch_norm_stats, batch_norm_elemt, batch_norm_backward_reduce and
// batch_norm_backward_elemt), so that the per-channel sums can be
// all-reduced across replicas between them.
//
// Why not cuDNN: cudnnBatchNormalizationForwardTraining and
// cudnnBatchNormalizationBackward take the batch statistics inside the call
// and divide by the batch's own count, which is exactly what the split must
// avoid; and the whole legacy batch-norm API, inference included, is
// deprecated in cuDNN 9.
//
// Reductions (channel_sum, channel_centered_sumsq, backward_reduce): a 2-D
// grid, blockIdx.y over channels and blockIdx.x cutting each channel's
// count = n * spatial elements into `parts`, so that a few channels of many
// elements (C = 3 on a large image) still fill the GPU. Every thread adds
// its elements in double, the block adds its threads (block_sum), and each
// part's partial goes to scratch (the device workspace); a second kernel
// adds each channel's parts in a fixed order and stores the float. No
// atomics: the same input gives the same bits on every run.
//
// Element-wise steps (forward, backward_data): the same grid; a thread works
// out its channel's coefficients once per channel with math/batchnorm.hpp
// (the cpu backend's arithmetic, so the CPU tests check it) and then walks
// its elements.
//
// Walking a channel: its element k is image k / spatial, position
// k % spatial, at x[(image * c + channel) * spatial + position]. A thread
// divides once, for its first element; stepping by the grid's stride then
// advances (image, position) by (stride / spatial, stride % spatial) with one
// carry, not a 64-bit division per element. Consecutive threads read
// consecutive positions, coalesced whenever spatial is at least a warp;
// for x [n, c] (spatial 1) they read one float per row, c apart, which the
// small batch of a dense layer makes cheap.
#include <algorithm>
#include <cstdint>
#include <mutex>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/batchnorm.hpp"

namespace troupe::kernels {

using cuda::block_sum;
using cuda::check_launch;
using cuda::current_device_state;
using cuda::DeviceState;
using cuda::for_each_index;
using cuda::kThreads;

namespace {

struct ChannelWalk {
  std::int64_t image, position, step_images, step_positions;
  __device__ ChannelWalk(std::int64_t first, std::int64_t stride, std::int64_t spatial)
      : image(first / spatial),
        position(first % spatial),
        step_images(stride / spatial),
        step_positions(stride % spatial) {}
  __device__ void advance(std::int64_t spatial) {
    image += step_images;
    position += step_positions;
    if (position >= spatial) {
      position -= spatial;
      ++image;
    }
  }
  __device__ std::int64_t at(const BatchNormShape& s, std::int64_t channel) const {
    return (image * s.c + channel) * s.spatial + position;
  }
};

// This thread's first element of a channel and the grid's stride.
struct ChannelShare {
  std::int64_t first, stride;
};
__device__ __forceinline__ ChannelShare channel_share() {
  return {static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
          static_cast<std::int64_t>(gridDim.x) * blockDim.x};
}

// The grid: channel blocks in y (at most 65535; more channels loop), parts
// in x, enough that each thread has about 8 elements, but no more than fill
// the device (st.max_blocks blocks in all) or 1024 (the scratch stays small).
dim3 channel_grid(const DeviceState& st, const BatchNormShape& s) {
  const std::int64_t channel_blocks = std::min<std::int64_t>(s.c, 65535);
  const std::int64_t wanted = (s.count() + kThreads * 8 - 1) / (kThreads * 8);
  const std::int64_t fill = std::max<std::int64_t>(1, static_cast<std::int64_t>(st.max_blocks) / channel_blocks);
  const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>({wanted, fill, 1024}));
  return dim3(static_cast<unsigned>(parts), static_cast<unsigned>(channel_blocks));
}

// ---- reductions: kSums double partials per (channel, part) ----

// partials[(j * c + channel) * parts + part] for sum j. A Term gives the
// per-channel constants (channel(ch)) and adds one element's terms (add).
template <class Term>
__global__ void channel_partials_kernel(BatchNormShape s, Term term, double* partials) {
  const std::int64_t count = s.count();
  const ChannelShare share = channel_share();
  for (std::int64_t channel = blockIdx.y; channel < s.c; channel += gridDim.y) {
    const typename Term::Channel k = term.channel(channel);
    double acc[Term::kSums] = {};
    if (share.first < count) {
      ChannelWalk walk(share.first, share.stride, s.spatial);
      for (std::int64_t e = share.first; e < count; e += share.stride, walk.advance(s.spatial))
        term.add(k, walk.at(s, channel), acc);
    }
    for (int j = 0; j < Term::kSums; ++j) {
      const double total = block_sum(acc[j]);
      if (threadIdx.x == 0) partials[(j * s.c + channel) * gridDim.x + blockIdx.x] = total;
      __syncthreads();  // block_sum's shared array is reused by the next sum
    }
  }
}

struct SumTerm {
  static constexpr int kSums = 1;
  struct Channel {};
  const float* x;
  __device__ Channel channel(std::int64_t) const { return {}; }
  __device__ void add(const Channel&, std::int64_t at, double* acc) const { acc[0] += x[at]; }
};

// (x - mean)^2, the difference in double (exact for floats).
struct CenteredSquareTerm {
  static constexpr int kSums = 1;
  struct Channel {
    double mean;
  };
  const float* x;
  const float* mean;
  __device__ Channel channel(std::int64_t ch) const { return {mean[ch]}; }
  __device__ void add(const Channel& k, std::int64_t at, double* acc) const {
    const double d = static_cast<double>(x[at]) - k.mean;
    acc[0] += d * d;
  }
};

// dy, and dy * (x - mean): invstd is applied once, to the sum (FinishBackward).
struct BackwardTerm {
  static constexpr int kSums = 2;
  struct Channel {
    double mean;
  };
  const float* x;
  const float* dy;
  const float* mean;
  __device__ Channel channel(std::int64_t ch) const { return {mean[ch]}; }
  __device__ void add(const Channel& k, std::int64_t at, double* acc) const {
    const double g = dy[at];
    acc[0] += g;
    acc[1] += g * (static_cast<double>(x[at]) - k.mean);
  }
};

// Adds channel i's parts of sum j, in part order.
__device__ double channel_total(const double* partials, std::int64_t c, std::int64_t parts, int j, std::int64_t i) {
  const double* p = partials + (j * c + i) * parts;
  double total = 0.0;
  for (std::int64_t b = 0; b < parts; ++b) total += p[b];
  return total;
}

struct FinishSum {
  std::int64_t c, parts;
  const double* partials;
  float* out;
  __device__ void operator()(std::size_t i) const {
    out[i] = static_cast<float>(channel_total(partials, c, parts, 0, static_cast<std::int64_t>(i)));
  }
};

struct FinishBackward {
  std::int64_t c, parts;
  const double* partials;
  const float* var;
  float eps;
  float* sum_dy;
  float* sum_dy_xhat;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t ch = static_cast<std::int64_t>(i);
    sum_dy[ch] = static_cast<float>(channel_total(partials, c, parts, 0, ch));
    sum_dy_xhat[ch] = math::batchnorm_sum_dy_xhat(channel_total(partials, c, parts, 1, ch), var[ch], eps);
  }
};

// Both stages, under the device mutex (the scratch is the shared workspace).
template <class Term, class Finish>
void reduce_channels(const char* name, const BatchNormShape& s, const Term& term, Finish finish) {
  if (s.c == 0) return;
  DeviceState& st = current_device_state();
  const dim3 grid = channel_grid(st, s);
  std::lock_guard<std::mutex> lock(st.mutex);
  auto* partials =
      static_cast<double*>(cuda::workspace(st, sizeof(double) * Term::kSums * static_cast<std::size_t>(s.c) * grid.x));
  channel_partials_kernel<<<grid, kThreads, 0, st.stream>>>(s, term, partials);
  check_launch(name, __FILE__, __LINE__);
  finish.parts = grid.x;
  finish.partials = partials;
  for_each_index(st, static_cast<std::size_t>(s.c), finish, name);
}

// ---- element-wise steps ----

// An Op gives the per-channel coefficients (channel(ch)) and transforms one
// element (apply).
template <class Op>
__global__ void channel_elementwise_kernel(BatchNormShape s, Op op) {
  const std::int64_t count = s.count();
  const ChannelShare share = channel_share();
  if (share.first >= count) return;  // no element of any channel (no block-wide sync below)
  for (std::int64_t channel = blockIdx.y; channel < s.c; channel += gridDim.y) {
    const typename Op::Channel k = op.channel(channel);
    ChannelWalk walk(share.first, share.stride, s.spatial);
    for (std::int64_t e = share.first; e < count; e += share.stride, walk.advance(s.spatial))
      op.apply(k, walk.at(s, channel));
  }
}

struct NormalizeOp {
  const float *x, *mean, *var, *gamma, *beta;
  float eps;
  float* y;
  struct Channel {
    float mean, invstd, gamma, beta;
  };
  __device__ Channel channel(std::int64_t ch) const {
    return {mean[ch], math::batchnorm_invstd(var[ch], eps), gamma[ch], beta[ch]};
  }
  __device__ void apply(const Channel& k, std::int64_t at) const {
    y[at] = math::batchnorm_normalize(x[at], k.mean, k.invstd, k.gamma, k.beta);
  }
};

struct InputGradOp {
  const float *x, *dy, *mean, *var, *gamma, *sum_dy, *sum_dy_xhat;
  float eps;
  double count;
  float* dx;
  struct Channel {
    float mean, invstd, gamma, mean_dy, mean_dy_xhat;
  };
  __device__ Channel channel(std::int64_t ch) const {
    return {mean[ch], math::batchnorm_invstd(var[ch], eps), gamma[ch], math::batchnorm_mean_of(sum_dy[ch], count),
            math::batchnorm_mean_of(sum_dy_xhat[ch], count)};
  }
  __device__ void apply(const Channel& k, std::int64_t at) const {
    dx[at] = math::batchnorm_input_grad(x[at], dy[at], k.mean, k.invstd, k.gamma, k.mean_dy, k.mean_dy_xhat);
  }
};

template <class Op>
void transform_channels(const char* name, const BatchNormShape& s, const Op& op) {
  if (s.c == 0 || s.count() == 0) return;
  DeviceState& st = current_device_state();
  channel_elementwise_kernel<<<channel_grid(st, s), kThreads, 0, st.stream>>>(s, op);
  check_launch(name, __FILE__, __LINE__);
}

}  // namespace

void CudaBackend::channel_sum(const BatchNormShape& s, const float* x, float* sum) {
  reduce_channels("channel_sum", s, SumTerm{x}, FinishSum{s.c, 1, nullptr, sum});
}

void CudaBackend::channel_centered_sumsq(const BatchNormShape& s, const float* x, const float* mean, float* out) {
  reduce_channels("channel_centered_sumsq", s, CenteredSquareTerm{x, mean}, FinishSum{s.c, 1, nullptr, out});
}

void CudaBackend::batchnorm_forward(const BatchNormShape& s, const float* x, const float* mean, const float* var,
                                    const float* gamma, const float* beta, float eps, float* y) {
  transform_channels("batchnorm_forward", s, NormalizeOp{x, mean, var, gamma, beta, eps, y});
}

void CudaBackend::batchnorm_backward_reduce(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                                            const float* var, float eps, float* sum_dy, float* sum_dy_xhat) {
  reduce_channels("batchnorm_backward_reduce", s, BackwardTerm{x, dy, mean},
                  FinishBackward{s.c, 1, nullptr, var, eps, sum_dy, sum_dy_xhat});
}

void CudaBackend::batchnorm_backward_data(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                                          const float* var, const float* gamma, float eps, const float* sum_dy,
                                          const float* sum_dy_xhat, double count, float* dx) {
  transform_channels("batchnorm_backward_data", s,
                     InputGradOp{x, dy, mean, var, gamma, sum_dy, sum_dy_xhat, eps, count, dx});
}

}  // namespace troupe::kernels
