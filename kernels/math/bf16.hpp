// bfloat16: float's sign, exponent and top 7 mantissa bits. A float rounds
// to it to nearest, ties to even (as oneDNN, cuBLAS and PyTorch round);
// NaN stays NaN (quiet), infinities and zeros keep their sign.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/math/host_device.hpp"

namespace troupe::kernels::math {

TROUPE_HD std::uint16_t bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN, quiet
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

TROUPE_HD float bf16_value(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// f rounded to the nearest bfloat16, as a float.
TROUPE_HD float round_to_bf16(float f) { return bf16_value(bf16_bits(f)); }

}  // namespace troupe::kernels::math
