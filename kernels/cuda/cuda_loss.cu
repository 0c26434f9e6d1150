// Losses, metrics and the sum reductions of the cuda backend.
//
// softmax_xent, mse and topk_correct give one warp to each row: the rows of
// a classifier are short (10 to a few thousand classes), so a warp covers a
// row in a few coalesced loads, and the row's max and sums are warp shuffles
// with no shared memory and no __syncthreads. Long rows (a 50k vocabulary)
// still work, each lane striding through the row.
//
// Labels are data, not shapes, so ops.cpp cannot check them: a kernel that
// finds a label outside [0, c) records the first bad row in the device's
// error slot (atomicMin), writes NaN loss and zero gradient for that row so
// nothing is left unwritten, and the host synchronizes and throws
// std::out_of_range naming the row, like the CPU backends.
//
// Sums of squares and exponentials are accumulated in double, so the result
// matches the reference to float rounding whatever the row length.
#include <cmath>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/launch.cuh"

namespace troupe::kernels {

using cuda::block_sum;
using cuda::blocks_for;
using cuda::blocks_for_rows;
using cuda::check_launch;
using cuda::current_device_state;
using cuda::DeviceState;
using cuda::kThreads;
using cuda::warp_max;
using cuda::warp_rows;
using cuda::warp_sum;
using cuda::WarpRows;

namespace {

__global__ void softmax_xent_kernel(std::int64_t n, std::int64_t c, const float* logits, const std::int32_t* labels,
                                    float* loss, float* dlogits, float grad_scale, float smoothing,
                                    unsigned long long* error_slot) {
  const WarpRows w = warp_rows();
  for (std::int64_t row = w.first; row < n; row += w.step) {
    const float* x = logits + row * c;
    float* dx = dlogits ? dlogits + row * c : nullptr;
    const std::int32_t label = labels[row];
    if (label < 0 || label >= c) {  // the same for the whole warp: no divergence
      if (w.lane == 0) {
        atomicMin(error_slot, static_cast<unsigned long long>(row));
        loss[row] = NAN;
      }
      if (dx)
        for (std::int64_t j = w.lane; j < c; j += 32) dx[j] = 0.0f;
      continue;
    }
    float row_max = -INFINITY;
    for (std::int64_t j = w.lane; j < c; j += 32) row_max = fmaxf(row_max, x[j]);
    row_max = warp_max(row_max);
    double sum = 0.0, row_sum = 0.0;
    for (std::int64_t j = w.lane; j < c; j += 32) {
      sum += expf(x[j] - row_max);
      row_sum += x[j];
    }
    sum = warp_sum(sum);
    // The row's logits are read before any lane writes dx, which may be the
    // logits buffer: warp_sum synchronises the warp.
    const float label_logit = x[label];
    if (smoothing != 0.0f) row_sum = warp_sum(row_sum);
    const double e = smoothing;
    if (w.lane == 0)
      loss[row] = static_cast<float>(log(sum) + static_cast<double>(row_max) - (1.0 - e) * label_logit -
                                     (e / static_cast<double>(c)) * row_sum);
    if (dx) {
      const double inv_sum = 1.0 / sum;
      const float uniform_target = static_cast<float>(e / static_cast<double>(c));
      const float label_target = 1.0f - smoothing;
      for (std::int64_t j = w.lane; j < c; j += 32) {
        const float p = static_cast<float>(expf(x[j] - row_max) * inv_sum);
        dx[j] = grad_scale * (p - (j == label ? label_target : 0.0f) - uniform_target);
      }
    }
  }
}

__global__ void mse_kernel(std::int64_t n, std::int64_t d, const float* pred, const float* target, float* loss,
                           float* dpred, float grad_scale) {
  const WarpRows w = warp_rows();
  for (std::int64_t row = w.first; row < n; row += w.step) {
    const float* p = pred + row * d;
    const float* t = target + row * d;
    double sum = 0.0;
    for (std::int64_t j = w.lane; j < d; j += 32) {
      const float diff = p[j] - t[j];
      sum += static_cast<double>(diff) * diff;
      if (dpred) dpred[row * d + j] = grad_scale * 2.0f * diff / static_cast<float>(d);
    }
    sum = warp_sum(sum);
    if (w.lane == 0) loss[row] = static_cast<float>(sum / static_cast<double>(d));
  }
}

__global__ void topk_correct_kernel(std::int64_t n, std::int64_t c, std::int64_t k, const float* logits,
                                    const std::int32_t* labels, float* correct, unsigned long long* error_slot) {
  const WarpRows w = warp_rows();
  for (std::int64_t row = w.first; row < n; row += w.step) {
    const float* x = logits + row * c;
    const std::int32_t label = labels[row];
    if (label < 0 || label >= c) {
      if (w.lane == 0) {
        atomicMin(error_slot, static_cast<unsigned long long>(row));
        correct[row] = 0.0f;
      }
      continue;
    }
    // Ties count against: the label is in the top k when fewer than k
    // logits are strictly greater than its own.
    const float own = x[label];
    long long greater = 0;
    // !(a <= b): a NaN logit counts as greater, so a diverged row is never right.
    for (std::int64_t j = w.lane; j < c; j += 32) greater += !(x[j] <= own) ? 1 : 0;
    greater = warp_sum(greater);
    if (w.lane == 0) correct[row] = greater < k && own == own ? 1.0f : 0.0f;
  }
}

// Stage 1: each block's grid-stride share of x (or of its squares) into
// partials[blockIdx.x].
template <bool Squares>
__global__ void reduce_sum_blocks(std::size_t n, const float* x, double* partials) {
  double acc = 0.0;
  for (std::size_t i = cuda::global_thread(); i < n; i += cuda::grid_threads()) {
    const double xi = x[i];
    acc += Squares ? xi * xi : xi;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Stage 2: one block adds the partials, in a fixed order: the same input
// gives the same bits every time (no atomics).
__global__ void reduce_sum_final(unsigned count, double* partials) {
  double acc = 0.0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[DeviceState::kReduceBlocks] = acc;
}

[[noreturn]] void throw_bad_label(const char* op, DeviceState& st, std::int64_t row, const std::int32_t* labels,
                                  std::int64_t c) {
  const std::int32_t label = cuda::read_i32(st, labels + row);
  // Worded as the ref and cpu backends word it ("label L of row R"), so a
  // bad label reads the same on every device.
  throw std::out_of_range(std::string("cuda backend: ") + op + ": label " + std::to_string(label) + " of row " +
                          std::to_string(row) + " is outside [0, " + std::to_string(c) + ")");
}

}  // namespace

void CudaBackend::softmax_xent(std::int64_t n, std::int64_t c, const float* logits, const std::int32_t* labels,
                               float* loss, float* dlogits, float grad_scale, float smoothing) {
  if (n == 0) return;
  DeviceState& st = current_device_state();
  std::lock_guard<std::mutex> lock(st.mutex);  // the error slot is shared
  cuda::reset_error_slot(st);
  softmax_xent_kernel<<<blocks_for_rows(st, n), kThreads, 0, st.stream>>>(n, c, logits, labels, loss, dlogits,
                                                                          grad_scale, smoothing, st.error_slot);
  check_launch("softmax_xent_kernel", __FILE__, __LINE__);
  const std::int64_t bad = cuda::read_error_slot(st);
  if (bad >= 0) throw_bad_label("softmax_xent", st, bad, labels, c);
}

void CudaBackend::mse(std::int64_t n, std::int64_t d, const float* pred, const float* target, float* loss, float* dpred,
                      float grad_scale) {
  if (n == 0) return;
  DeviceState& st = current_device_state();
  mse_kernel<<<blocks_for_rows(st, n), kThreads, 0, st.stream>>>(n, d, pred, target, loss, dpred, grad_scale);
  check_launch("mse_kernel", __FILE__, __LINE__);
}

void CudaBackend::topk_correct(std::int64_t n, std::int64_t c, std::int64_t k, const float* logits,
                               const std::int32_t* labels, float* correct) {
  if (n == 0) return;
  DeviceState& st = current_device_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  cuda::reset_error_slot(st);
  topk_correct_kernel<<<blocks_for_rows(st, n), kThreads, 0, st.stream>>>(n, c, k, logits, labels, correct,
                                                                          st.error_slot);
  check_launch("topk_correct_kernel", __FILE__, __LINE__);
  const std::int64_t bad = cuda::read_error_slot(st);
  if (bad >= 0) throw_bad_label("topk_correct", st, bad, labels, c);
}

namespace {

template <bool Squares>
double reduce(std::size_t n, const float* x) {
  if (n == 0) return 0.0;
  DeviceState& st = current_device_state();
  std::lock_guard<std::mutex> lock(st.mutex);  // partials are shared scratch
  const unsigned blocks = std::min(blocks_for(st, n), DeviceState::kReduceBlocks);
  reduce_sum_blocks<Squares><<<blocks, kThreads, 0, st.stream>>>(n, x, st.partials);
  check_launch("reduce_sum_blocks", __FILE__, __LINE__);
  reduce_sum_final<<<1, 1024, 0, st.stream>>>(blocks, st.partials);
  check_launch("reduce_sum_final", __FILE__, __LINE__);
  double total = 0.0;
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(&total, st.partials + DeviceState::kReduceBlocks, sizeof total,
                                    cudaMemcpyDeviceToHost, st.stream));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
  return total;
}

}  // namespace

double CudaBackend::reduce_sum(std::size_t n, const float* x) { return reduce<false>(n, x); }

double CudaBackend::reduce_sum_squares(std::size_t n, const float* x) { return reduce<true>(n, x); }

}  // namespace troupe::kernels
