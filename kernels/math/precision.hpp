// Rounding a float to the precision a matmul or convolution reads its
// inputs in (--precision; kernels::Precision): bf16 (math/bf16.hpp) or IEEE
// half, fp16: 5 exponent and 10 mantissa bits, to nearest, ties to even;
// beyond 65504 it is infinite (an overflow, which dynamic loss scaling
// detects), below 2^-24 zero. Host code only: the reference and the cpu
// backend's fallbacks (GCC's _Float16 converts exactly so, in hardware
// where the CPU has F16C or AVX512-FP16).
#pragma once

#include "kernels/backend.hpp"
#include "kernels/math/bf16.hpp"

namespace troupe::kernels::math {

inline float round_to_fp16(float f) { return static_cast<float>(static_cast<_Float16>(f)); }

inline float round_to(Precision p, float f) {
  switch (p) {
    case Precision::bf16:
      return round_to_bf16(f);
    case Precision::fp16:
      return round_to_fp16(f);
    case Precision::fp32:
      break;
  }
  return f;
}

}  // namespace troupe::kernels::math
