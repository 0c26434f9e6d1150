// Element-wise ops of the cuda backend: fill, relu, dropout, add, scale,
// axpy and sum_n. Each is one grid-stride pass over memory (bandwidth
// bound: 3.35 TB/s on an H100 SXM), with the per-element math from
// kernels/math/ that the cpu backend's loops use too.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/elementwise.hpp"
#include "kernels/math/random.hpp"

namespace troupe::kernels {

using cuda::current_device_state;
using cuda::for_each_index;

namespace {

template <class T>
struct Fill {
  T value;
  T* x;
  __device__ void operator()(std::size_t i) const { x[i] = value; }
};

struct Relu {
  const float* x;
  float* y;
  __device__ void operator()(std::size_t i) const { y[i] = math::relu(x[i]); }
};

struct ReluGrad {
  const float* x;
  const float* dy;
  float* dx;
  __device__ void operator()(std::size_t i) const { dx[i] = math::relu_grad(x[i], dy[i]); }
};

// Forward and backward alike: out = in * mask factor, the mask recomputed
// from (seed, global element index), the same counter the cpu loop uses.
struct Dropout {
  float rate;
  std::uint64_t seed;
  const float* in;
  float* out;
  __device__ void operator()(std::size_t i) const { out[i] = in[i] * math::dropout_factor(seed, i, rate); }
};

struct Add {
  const float* a;
  const float* b;
  float* y;
  __device__ void operator()(std::size_t i) const { y[i] = a[i] + b[i]; }
};

struct Scale {
  float alpha;
  float* x;
  __device__ void operator()(std::size_t i) const { x[i] *= alpha; }
};

struct Axpy {
  float alpha;
  const float* x;
  float* y;
  __device__ void operator()(std::size_t i) const { y[i] += alpha * x[i]; }
};

// Up to kSumChunk source pointers travel in the kernel's parameters (128
// bytes, far below the 4 KiB parameter limit), so no device copy of the
// pointer array is needed. More sources are summed in chunks.
constexpr int kSumChunk = 16;

struct SumChunk {
  const float* srcs[kSumChunk];
  int count;
  bool accumulate;  // add to dst (a later chunk) instead of overwriting it
  float* dst;
  __device__ void operator()(std::size_t i) const {
    // Sources in order, as the reference adds them, so rounding agrees.
    float acc = accumulate ? dst[i] : srcs[0][i];
    for (int j = accumulate ? 0 : 1; j < count; ++j) acc += srcs[j][i];
    dst[i] = acc;
  }
};

}  // namespace

void CudaBackend::fill(std::size_t n, float value, float* x) {
  for_each_index(current_device_state(), n, Fill<float>{value, x}, "fill");
}

void CudaBackend::fill_i32(std::size_t n, std::int32_t value, std::int32_t* x) {
  for_each_index(current_device_state(), n, Fill<std::int32_t>{value, x}, "fill_i32");
}

void CudaBackend::relu_forward(std::size_t n, const float* x, float* y) {
  for_each_index(current_device_state(), n, Relu{x, y}, "relu_forward");
}

void CudaBackend::relu_backward(std::size_t n, const float* x, const float* dy, float* dx) {
  for_each_index(current_device_state(), n, ReluGrad{x, dy, dx}, "relu_backward");
}

void CudaBackend::dropout_forward(std::size_t n, float rate, std::uint64_t seed, const float* x, float* y) {
  for_each_index(current_device_state(), n, Dropout{rate, seed, x, y}, "dropout_forward");
}

void CudaBackend::dropout_backward(std::size_t n, float rate, std::uint64_t seed, const float* dy, float* dx) {
  for_each_index(current_device_state(), n, Dropout{rate, seed, dy, dx}, "dropout_backward");
}

void CudaBackend::add(std::size_t n, const float* a, const float* b, float* y) {
  for_each_index(current_device_state(), n, Add{a, b, y}, "add");
}

void CudaBackend::scale(std::size_t n, float alpha, float* x) {
  for_each_index(current_device_state(), n, Scale{alpha, x}, "scale");
}

void CudaBackend::axpy(std::size_t n, float alpha, const float* x, float* y) {
  for_each_index(current_device_state(), n, Axpy{alpha, x, y}, "axpy");
}

void CudaBackend::sum_n(std::size_t n, const float* const* srcs, int count, float* dst) {
  if (n == 0 || count <= 0) return;
  cuda::DeviceState& st = current_device_state();
  std::vector<const float*> order(srcs, srcs + count);
  // dst may alias a source. Within a chunk that is safe (each element reads
  // every source before it writes); across chunks it is not, so an aliased
  // source is moved into the first chunk, read before dst is overwritten.
  int free_slot = 0;  // next first-chunk position that is not dst itself
  for (int j = kSumChunk; j < count; ++j) {
    if (order[j] != dst) continue;
    while (free_slot < kSumChunk && order[free_slot] == dst) ++free_slot;
    if (free_slot == kSumChunk)
      throw std::invalid_argument("cuda backend: sum_n with dst passed as a source more than " +
                                  std::to_string(kSumChunk) + " times");
    std::swap(order[j], order[free_slot++]);
  }
  for (int first = 0; first < count; first += kSumChunk) {
    SumChunk chunk{};
    chunk.count = std::min(kSumChunk, count - first);
    for (int j = 0; j < chunk.count; ++j) chunk.srcs[j] = order[first + j];
    chunk.accumulate = first > 0;
    chunk.dst = dst;
    for_each_index(st, n, chunk, "sum_n");
  }
}

}  // namespace troupe::kernels
