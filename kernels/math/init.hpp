// Maps the random streams of random.hpp to an initialiser's range, shared by
// the cpu loops and the cuda kernels so a seed gives bit-identical parameters
// on every backend.
//
// Why double: the obvious float `low + (high - low) * u` may be compiled to a
// fused multiply-add on one backend (nvcc and -march=native both contract by
// default) and to a multiply and an add on another, which differ in the last
// bit. Here both factors are floats (24 significant bits each), so their
// product is exact in double (53 bits); a fused and an unfused evaluation
// then round the same exact sum once, and give the same float.
#pragma once

#include "kernels/math/host_device.hpp"

namespace troupe::kernels::math {

// low + (high - low) * u for u in [0, 1).
TROUPE_HD float uniform_in(float low, float high, float u) {
  const float span = high - low;
  return static_cast<float>(static_cast<double>(low) + static_cast<double>(span) * static_cast<double>(u));
}

// mean + stddev * z for a standard normal z.
TROUPE_HD float normal_with(float mean, float stddev, float z) {
  return static_cast<float>(static_cast<double>(mean) + static_cast<double>(stddev) * static_cast<double>(z));
}

}  // namespace troupe::kernels::math
