// Rounding a float to the precision a matmul or convolution reads its
// inputs in (--precision; kernels::Precision): bf16 (math/bf16.hpp) or IEEE
// half, fp16: 5 exponent and 10 mantissa bits, to nearest, ties to even;
// from 65520 up it is infinite (an overflow, which dynamic loss scaling
// detects), below 2^-25 zero, subnormal between 2^-25 and 2^-14. Written out
// rather than through _Float16, which Clang 14 (the sanitizer builds) has
// no x86-64 support for; checked bit for bit against GCC's _Float16 on every
// third float bit pattern and on every half (tests/kernels/test_dense.cpp
// has the boundary cases). Host code: the reference and the cpu backend's
// fallbacks.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/backend.hpp"
#include "kernels/math/bf16.hpp"

namespace troupe::kernels::math {

inline std::uint16_t fp16_bits(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN, quiet
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // 65520 and up: infinity
  if (a < 0x38800000u) {
    // Below 2^-14: a subnormal half, a whole number of 2^-24. The scaling
    // by 2^24 is exact; nearbyint rounds ties to even (the default mode).
    float v;
    std::memcpy(&v, &a, sizeof v);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(v * 16777216.0f)));
  }
  std::uint32_t h = a - 0x38000000u;  // the exponent rebiased from 127 to 15
  h += 0x0fffu + ((h >> 13) & 1u);    // to nearest on the 13 bits dropped, ties to even
  return static_cast<std::uint16_t>(sign | (h >> 13));
}

inline float fp16_value(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  std::uint32_t bits;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m x 2^-24, exact
    std::memcpy(&bits, &v, sizeof bits);
    bits |= sign;
  } else if (e == 31) {
    bits = sign | 0x7f800000u | (m << 13);  // infinity, NaN
  } else {
    bits = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline float round_to_fp16(float f) { return fp16_value(fp16_bits(f)); }

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
