// Reference seeded initialisers. The streams are defined by
// math::random_uniform / math::random_normal; these only map them to the
// requested range.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/math/random.hpp"

namespace troupe::kernels::ref {

// x[i] = low + (high - low) * u_i. The affine map is done in double from a
// float span: u has 24 bits and the span 24, so span * u is exact in double
// and a fused multiply-add (which the cpu and cuda compilers may use) gives
// the same double, and so the same float, as a separate multiply and add.
// That is what makes a seed give bit-identical values on every backend.
template <class T>
void init_uniform(std::size_t n, float low, float high, std::uint64_t seed, T* x) {
  const float span = high - low;
  for (std::size_t i = 0; i < n; ++i) {
    const float u = math::random_uniform(seed, static_cast<std::uint64_t>(i));
    x[i] = T(static_cast<float>(double(low) + double(span) * double(u)));
  }
}

// x[i] = mean + stddev * z_i, by the same exact-product argument as above.
template <class T>
void init_normal(std::size_t n, float mean, float stddev, std::uint64_t seed, T* x) {
  for (std::size_t i = 0; i < n; ++i) {
    const float z = math::random_normal(seed, static_cast<std::uint64_t>(i));
    x[i] = T(static_cast<float>(double(mean) + double(stddev) * double(z)));
  }
}

}  // namespace troupe::kernels::ref
