// Fused optimizer updates (SGD, the Adam family) on flat parameter buffers,
// and the seeded initialisers. One pass each, the per-element formulas from
// kernels/math/ (the cpu backend runs the same ones), and the element index
// as the random counter so every backend draws the same numbers.
#include <cstdint>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/elementwise.hpp"
#include "kernels/math/init.hpp"
#include "kernels/math/random.hpp"

namespace troupe::kernels {

using cuda::current_device_state;
using cuda::for_each_index;

namespace {

struct SgdStep {
  SgdParams p;  // 16 bytes, passed by value in the kernel parameters
  float* param;
  const float* grad;
  float* velocity;  // null when p.momentum == 0 (sgd_step never reads it then)
  __device__ void operator()(std::size_t i) const {
    float value = param[i];
    math::sgd_step(p, value, grad[i], velocity ? velocity + i : nullptr);
    param[i] = value;
  }
};

struct AdamStep {
  AdamParams p;
  float* param;
  const float* grad;
  float* m;
  float* v;
  __device__ void operator()(std::size_t i) const {
    // Work on registers, then one store each: the three read-modify-write
    // streams stay coalesced and adam_step's references never alias memory.
    float value = param[i], mi = m[i], vi = v[i];
    math::adam_step(p, value, grad[i], mi, vi);
    param[i] = value;
    m[i] = mi;
    v[i] = vi;
  }
};

// Initialisers map the shared random streams through math/init.hpp, as the
// cpu loops do: it evaluates in double, where a fused and an unfused
// multiply-add round alike, so a seed gives bit-identical parameters here
// and on the host.
struct Uniform {
  float low, high;
  std::uint64_t seed;
  float* x;
  __device__ void operator()(std::size_t i) const { x[i] = math::uniform_in(low, high, math::random_uniform(seed, i)); }
};

struct Normal {
  float mean, stddev;
  std::uint64_t seed;
  float* x;
  __device__ void operator()(std::size_t i) const {
    x[i] = math::normal_with(mean, stddev, math::random_normal(seed, i));
  }
};

}  // namespace

void CudaBackend::sgd_update(std::size_t n, const SgdParams& p, float* param, const float* grad, float* velocity) {
  for_each_index(current_device_state(), n, SgdStep{p, param, grad, p.momentum != 0.0f ? velocity : nullptr},
                 "sgd_update");
}

void CudaBackend::adam_update(std::size_t n, const AdamParams& p, float* param, const float* grad, float* m, float* v) {
  for_each_index(current_device_state(), n, AdamStep{p, param, grad, m, v}, "adam_update");
}

void CudaBackend::init_uniform(std::size_t n, float low, float high, std::uint64_t seed, float* x) {
  for_each_index(current_device_state(), n, Uniform{low, high, seed, x}, "init_uniform");
}

void CudaBackend::init_normal(std::size_t n, float mean, float stddev, std::uint64_t seed, float* x) {
  for_each_index(current_device_state(), n, Normal{mean, stddev, seed, x}, "init_normal");
}

}  // namespace troupe::kernels
