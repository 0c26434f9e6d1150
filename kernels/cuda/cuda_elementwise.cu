// Element-wise ops of the cuda backend: fill, relu, dropout, sigmoid, tanh,
// gelu, add, scale, axpy, sum_n, and the 2-D strided copy. Each is one
// grid-stride pass over memory (bandwidth bound: 3.35 TB/s on an H100 SXM),
// with the per-element math from kernels/math/ that the cpu backend's loops
// use too.
//
// Own kernels rather than cuDNN's activations: cudnnActivationForward and
// Backward are deprecated in cuDNN 9 and have no exact (erf) GELU, and a
// fused one-pass kernel is all a memory-bound op can be; the shared math
// also keeps the arithmetic under the CPU tests.
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
using cuda::DeviceState;
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

// y = f(x) for one of the smooth activations.
struct Sigmoid {
  const float* x;
  float* y;
  __device__ void operator()(std::size_t i) const { y[i] = math::sigmoid(x[i]); }
};
struct SigmoidGrad {
  const float* y;
  const float* dy;
  float* dx;
  __device__ void operator()(std::size_t i) const { dx[i] = math::sigmoid_grad(y[i], dy[i]); }
};
struct Tanh {
  const float* x;
  float* y;
  __device__ void operator()(std::size_t i) const { y[i] = math::tanh_of(x[i]); }
};
struct TanhGrad {
  const float* y;
  const float* dy;
  float* dx;
  __device__ void operator()(std::size_t i) const { dx[i] = math::tanh_grad(y[i], dy[i]); }
};
struct Gelu {
  const float* x;
  float* y;
  __device__ void operator()(std::size_t i) const { y[i] = math::gelu(x[i]); }
};
struct GeluGrad {
  const float* x;
  const float* dy;
  float* dx;
  __device__ void operator()(std::size_t i) const { dx[i] = math::gelu_grad(x[i], dy[i]); }
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

// copy_2d for pitches that cudaMemcpy2DAsync refuses: element i of the
// rows x cols block.
struct Copy2d {
  std::int64_t cols, src_pitch, dst_pitch;
  const float* src;
  float* dst;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t r = static_cast<std::int64_t>(i) / cols, c = static_cast<std::int64_t>(i) % cols;
    dst[r * dst_pitch + c] = src[r * src_pitch + c];
  }
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

void CudaBackend::sigmoid_forward(std::size_t n, const float* x, float* y) {
  for_each_index(current_device_state(), n, Sigmoid{x, y}, "sigmoid_forward");
}

void CudaBackend::sigmoid_backward(std::size_t n, const float* y, const float* dy, float* dx) {
  for_each_index(current_device_state(), n, SigmoidGrad{y, dy, dx}, "sigmoid_backward");
}

void CudaBackend::tanh_forward(std::size_t n, const float* x, float* y) {
  for_each_index(current_device_state(), n, Tanh{x, y}, "tanh_forward");
}

void CudaBackend::tanh_backward(std::size_t n, const float* y, const float* dy, float* dx) {
  for_each_index(current_device_state(), n, TanhGrad{y, dy, dx}, "tanh_backward");
}

void CudaBackend::gelu_forward(std::size_t n, const float* x, float* y) {
  for_each_index(current_device_state(), n, Gelu{x, y}, "gelu_forward");
}

void CudaBackend::gelu_backward(std::size_t n, const float* x, const float* dy, float* dx) {
  for_each_index(current_device_state(), n, GeluGrad{x, dy, dx}, "gelu_backward");
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

// On the stream's copy engine, no SMs used: one cudaMemcpyAsync when the
// block is contiguous (one row, or both pitches equal to cols), else
// cudaMemcpy2DAsync. Its pitches are limited (cudaDevAttrMaxPitch, 2^31 - 1
// bytes on current GPUs); a wider one (rows over 512 Mi floats apart) takes
// the kernel.
void CudaBackend::copy_2d(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t src_pitch, float* dst,
                          std::int64_t dst_pitch) {
  if (rows == 0 || cols == 0) return;
  DeviceState& st = current_device_state();
  const auto bytes = [](std::int64_t elements) { return static_cast<std::size_t>(elements) * sizeof(float); };
  if (rows == 1 || (src_pitch == cols && dst_pitch == cols)) {
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes(rows * cols), cudaMemcpyDeviceToDevice, st.stream));
    return;
  }
  int max_pitch = 0;
  TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, st.index));
  const std::size_t limit = static_cast<std::size_t>(max_pitch);
  if (bytes(src_pitch) <= limit && bytes(dst_pitch) <= limit) {
    TROUPE_CUDA_CHECK(cudaMemcpy2DAsync(dst, bytes(dst_pitch), src, bytes(src_pitch), bytes(cols),
                                        static_cast<std::size_t>(rows), cudaMemcpyDeviceToDevice, st.stream));
    return;
  }
  for_each_index(st, static_cast<std::size_t>(rows * cols), Copy2d{cols, src_pitch, dst_pitch, src, dst}, "copy_2d");
}

}  // namespace troupe::kernels
