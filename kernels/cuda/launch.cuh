// Launch helpers shared by the .cu files: grid sizing, grid-stride loops
// with 64-bit indices, a generic element-wise kernel over a functor, warp
// and block sums, and warp-per-row loops.
//
// Functors (structs with a __device__ operator()) instead of device lambdas
// keep the build free of --extended-lambda and read well in a profiler.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/device_state.hpp"

namespace troupe::kernels::cuda {

// 256 threads: 8 warps per block, a multiple of the warp size that lets 8
// blocks be resident per SM at sm_90's 2048-thread limit.
constexpr unsigned kThreads = 256;

// Blocks for a grid-stride loop over n items: enough to cover n, at most
// st.max_blocks, at least 1.
inline unsigned blocks_for(const DeviceState& st, std::size_t n, unsigned threads = kThreads) {
  const std::size_t wanted = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(wanted, st.max_blocks)));
}

inline void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw_cuda_error((std::string("launch of ") + kernel).c_str(),
                     std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status), file, line);
}

// Index of this thread in the whole grid, and the grid's size, in 64 bits:
// tensors over 2^31 elements are real (a flat gradient buffer).
__device__ __forceinline__ std::size_t global_thread() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t grid_threads() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

template <class F>
__global__ void for_each_index_kernel(std::size_t n, F f) {
  for (std::size_t i = global_thread(); i < n; i += grid_threads()) f(i);
}

// Runs f(i) for every i in [0, n) on st's stream; nothing when n == 0.
template <class F>
void for_each_index(DeviceState& st, std::size_t n, const F& f, const char* kernel) {
  if (n == 0) return;
  for_each_index_kernel<<<blocks_for(st, n), kThreads, 0, st.stream>>>(n, f);
  check_launch(kernel, __FILE__, __LINE__);
}

// Sum and max over a warp with butterfly shuffles (no shared memory); every
// lane gets the result.
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <class T>
__device__ __forceinline__ T warp_max(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Block-wide sum in double: warp shuffles, then one value per warp through
// shared memory, then the first warp. Every thread must call it, and a
// kernel calls it once (the shared array is not re-synchronised for reuse).
__device__ inline double block_sum(double v) {
  __shared__ double per_warp[32];
  v = warp_sum(v);
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) per_warp[warp] = v;
  __syncthreads();
  const unsigned warps = (blockDim.x + 31) / 32;
  v = threadIdx.x < warps ? per_warp[threadIdx.x] : 0.0;
  if (warp == 0) v = warp_sum(v);
  return v;  // valid in thread 0
}

// One warp per row: for ops over many short rows (a classifier's logits, the
// planes of a global pooling), where a warp covers a row in a few coalesced
// loads and reduces it with shuffles, without shared memory or
// __syncthreads. Long rows still work, each lane striding through the row.
constexpr unsigned kWarpsPerBlock = kThreads / 32;

// The rows of this warp: a grid-stride loop over rows.
struct WarpRows {
  std::int64_t first, step;
  int lane;
};
__device__ __forceinline__ WarpRows warp_rows() {
  return {static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32,
          static_cast<std::int64_t>(gridDim.x) * kWarpsPerBlock, static_cast<int>(threadIdx.x % 32)};
}

// Blocks of kThreads for `rows` warp-rows.
inline unsigned blocks_for_rows(const DeviceState& st, std::int64_t rows) {
  return blocks_for(st, static_cast<std::size_t>(rows), kWarpsPerBlock);
}

}  // namespace troupe::kernels::cuda
