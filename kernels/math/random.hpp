// Counter-based random numbers: the i-th number of a stream is a pure
// function of (seed, i). Any backend, thread or GPU block computes element i
// on its own and all of them agree, so a seeded dropout mask or initialiser
// is identical on ref, cpu and cuda, and a backward pass can recompute a
// forward mask instead of storing it.
//
// The mixer is SplitMix64's finaliser (Steele, Lea, Flood 2014): the stream
// for a seed is mix64(mix64(seed) + (i + 1) * golden_gamma).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/host_device.hpp"

namespace troupe::kernels::math {

TROUPE_HD std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

TROUPE_HD std::uint64_t random_bits(std::uint64_t seed, std::uint64_t i) {
  constexpr std::uint64_t golden_gamma = 0x9e3779b97f4a7c15ULL;
  return mix64(mix64(seed) + (i + 1) * golden_gamma);
}

// Uniform in [0, 1) with 24 random bits: exactly representable as a float,
// so comparisons against it (dropout) give the same answer everywhere.
TROUPE_HD float random_uniform(std::uint64_t seed, std::uint64_t i) {
  return static_cast<float>(random_bits(seed, i) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller from counters 2i and 2i + 1, in double so
// that host and GPU libm differences stay below float rounding.
TROUPE_HD float random_normal(std::uint64_t seed, std::uint64_t i) {
  const double two_pi = 6.283185307179586476925286766559;
  // u1 in (0, 1]: never 0, so the log is finite.
  double u1 = (static_cast<double>(random_bits(seed, 2 * i) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  double u2 = static_cast<double>(random_bits(seed, 2 * i + 1) >> 11) * (1.0 / 9007199254740992.0);
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(two_pi * u2));
}

// Inverted dropout's per-element factor: 0 for a dropped element, else
// 1 / (1 - rate).
TROUPE_HD float dropout_factor(std::uint64_t seed, std::uint64_t i, float rate) {
  return random_uniform(seed, i) >= rate ? 1.0f / (1.0f - rate) : 0.0f;
}

}  // namespace troupe::kernels::math
