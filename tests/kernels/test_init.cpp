// Seeded initialisers: a seed gives bit-identical values on every backend
// (the counter-based streams of math/random.hpp), different seeds differ, and
// each initialiser has the range or spread its paper gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/ops.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;

struct Initialiser {
  std::string name;
  std::function<void(const Tensor&, std::uint64_t seed)> init;
};

std::vector<Initialiser> initialisers() {
  return {
      {"init_uniform", [](const Tensor& x, std::uint64_t s) { ops::init_uniform(x, -0.3f, 1.7f, s); }},
      {"init_normal", [](const Tensor& x, std::uint64_t s) { ops::init_normal(x, 0.5f, 2.0f, s); }},
      {"glorot_uniform", [](const Tensor& x, std::uint64_t s) { ops::glorot_uniform(x, 784, 128, s); }},
      {"he_normal", [](const Tensor& x, std::uint64_t s) { ops::he_normal(x, 300, s); }},
      {"he_uniform", [](const Tensor& x, std::uint64_t s) { ops::he_uniform(x, 300, s); }},
  };
}

std::vector<float> generate(const BackendUnderTest& backend, const Initialiser& init, const Shape& shape,
                            std::uint64_t seed) {
  return backend.run([&](Device d) {
    Tensor x = Tensor::empty(shape, DType::f32, d);
    init.init(x, seed);
    return x.to_vector();
  });
}

TEST(Init, SameSeedGivesIdenticalValuesOnEveryBackend) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  const BackendUnderTest ref{"ref", Device::cpu()};
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (const auto& init : initialisers()) {
      for (std::int64_t n : op_sizes()) {
        SCOPED_TRACE(init.name + ", n = " + std::to_string(n));
        const std::uint64_t seed = 42 + static_cast<std::uint64_t>(n);
        EXPECT_TRUE(same_values(generate(backend, init, {n}, seed), generate(ref, init, {n}, seed)));
      }
    }
  }
}

TEST(Init, ValueDependsOnSeedAndIndexOnly) {
  // Element i of a long buffer equals element i of a short one: the stream is
  // a function of (seed, i), not of the buffer's size or the work split.
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    for (const auto& init : initialisers()) {
      SCOPED_TRACE(init.name);
      const std::vector<float> a = generate(backend, init, {300000}, 9);
      std::vector<float> b = generate(backend, init, {33}, 9);
      EXPECT_TRUE(same_values(std::vector<float>(a.begin(), a.begin() + 33), b));
      // Also for a 2-D shape of the same count: only numel matters.
      EXPECT_TRUE(same_values(generate(backend, init, {1000, 300}, 9), a));
    }
  }
}

TEST(Init, DifferentSeedsDiffer) {
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    for (const auto& init : initialisers()) {
      SCOPED_TRACE(init.name);
      const std::vector<float> a = generate(backend, init, {10000}, 1);
      const std::vector<float> b = generate(backend, init, {10000}, 2);
      std::size_t equal = 0;
      for (std::size_t i = 0; i < a.size(); ++i) equal += a[i] == b[i];
      EXPECT_LT(equal, a.size() / 100);
    }
  }
}

struct Moments {
  double mean, stddev, min, max;
};
Moments moments(const std::vector<float>& x) {
  double sum = 0, sq = 0;
  for (float v : x) sum += v;
  const double mean = sum / double(x.size());
  for (float v : x) sq += (v - mean) * (v - mean);
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  return {mean, std::sqrt(sq / double(x.size() - 1)), *lo, *hi};
}

constexpr std::int64_t kSamples = 100000;

TEST(Init, UniformStaysInBoundsAndFillsThem) {
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const std::vector<float> x = backend.run([&](Device d) {
      Tensor t = Tensor::empty({kSamples}, DType::f32, d);
      ops::init_uniform(t, -0.3f, 1.7f, 3);
      return t.to_vector();
    });
    const Moments s = moments(x);
    EXPECT_GE(s.min, -0.3f);
    EXPECT_LE(s.max, 1.7f);
    EXPECT_LT(s.min, -0.29);  // 100k samples reach within 1e-4 of each end
    EXPECT_GT(s.max, 1.69);
    EXPECT_NEAR(s.mean, 0.7, 0.01);
    EXPECT_NEAR(s.stddev, 2.0 / std::sqrt(12.0), 0.01);
  }
}

TEST(Init, GlorotAndHeUniformUseTheirLimits) {
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const std::vector<float> glorot = backend.run([&](Device d) {
      Tensor t = Tensor::empty({kSamples}, DType::f32, d);
      ops::glorot_uniform(t, 784, 128, 4);
      return t.to_vector();
    });
    const std::vector<float> he = backend.run([&](Device d) {
      Tensor t = Tensor::empty({kSamples}, DType::f32, d);
      ops::he_uniform(t, 300, 5);
      return t.to_vector();
    });
    const double glorot_limit = std::sqrt(6.0 / (784 + 128)), he_limit = std::sqrt(6.0 / 300);
    const Moments g = moments(glorot), h = moments(he);
    EXPECT_GE(g.min, -glorot_limit * (1 + 1e-6));
    EXPECT_LE(g.max, glorot_limit * (1 + 1e-6));
    EXPECT_LT(g.min, -0.999 * glorot_limit);
    EXPECT_GT(g.max, 0.999 * glorot_limit);
    EXPECT_GE(h.min, -he_limit * (1 + 1e-6));
    EXPECT_LE(h.max, he_limit * (1 + 1e-6));
    EXPECT_GT(h.max, 0.999 * he_limit);
  }
}

TEST(Init, NormalAndHeNormalHaveTheirSpread) {
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const std::vector<float> normal = backend.run([&](Device d) {
      Tensor t = Tensor::empty({kSamples}, DType::f32, d);
      ops::init_normal(t, 3.0f, 0.5f, 6);
      return t.to_vector();
    });
    const std::vector<float> he = backend.run([&](Device d) {
      Tensor t = Tensor::empty({kSamples}, DType::f32, d);
      ops::he_normal(t, 500, 7);
      return t.to_vector();
    });
    // The sample std of 100k normals is within 0.3% of the true one (one
    // sigma), the sample mean within 0.3% of a std: 2% and 1.5% are safe.
    const Moments s = moments(normal);
    EXPECT_NEAR(s.mean, 3.0, 0.015 * 0.5);
    EXPECT_NEAR(s.stddev, 0.5, 0.02 * 0.5);
    const double he_std = std::sqrt(2.0 / 500);
    const Moments h = moments(he);
    EXPECT_NEAR(h.mean, 0.0, 0.015 * he_std);
    EXPECT_NEAR(h.stddev, he_std, 0.02 * he_std);
    // Tails: a normal has about 4.6% beyond 2 sigma; the Box-Muller stream
    // must not be truncated or skewed.
    std::int64_t beyond = 0;
    for (float v : he) beyond += std::fabs(v) > 2 * he_std;
    EXPECT_NEAR(double(beyond) / kSamples, 0.0455, 0.005);
  }
}

}  // namespace
}  // namespace troupe::kernels
