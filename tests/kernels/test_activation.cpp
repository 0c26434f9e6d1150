// ReLU and dropout: every backend against ref on random data, the backward
// passes against finite differences of the double-precision reference, and
// dropout's statistics and mask contract.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/ref/activation.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;
using Outputs = std::vector<std::vector<float>>;

TEST(Relu, ForwardAndBackwardMatchRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (std::int64_t n : op_sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const Tensor x = random_tensor({n}, 10 + n), dy = random_tensor({n}, 20 + n);
      auto body = [&](Device d) {
        Tensor xd = x.to(d), dyd = dy.to(d);
        Tensor y = Tensor::empty({n}, DType::f32, d), dx = Tensor::empty({n}, DType::f32, d);
        ops::relu_forward(xd, y);
        ops::relu_backward(xd, dyd, dx);
        return Outputs{y.to_vector(), dx.to_vector()};
      };
      const Outputs want = run_ref(body), got = backend.run(body);
      // A select per element: no rounding, so every backend is exact.
      EXPECT_TRUE(same_values(got[0], want[0])) << "relu_forward";
      EXPECT_TRUE(same_values(got[1], want[1])) << "relu_backward";
    }
  }
}

TEST(Relu, ReferenceMatchesDefinition) {
  const std::vector<float> x{-2.0f, -0.0f, 0.0f, 1e-30f, 3.5f};
  const std::vector<float> dy{1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  std::vector<float> y(5), dx(5);
  ref::relu_forward(x.size(), x.data(), y.data());
  ref::relu_backward(x.size(), x.data(), dy.data(), dx.data());
  EXPECT_EQ(y, (std::vector<float>{0.0f, 0.0f, 0.0f, 1e-30f, 3.5f}));
  EXPECT_EQ(dx, (std::vector<float>{0.0f, 0.0f, 0.0f, 4.0f, 5.0f}));
}

TEST(Relu, GradientCheck) {
  // Inputs at least 0.1 away from the kink, where finite differences of a
  // step of 1e-6 are exact.
  std::vector<double> x = random_doubles(500, 3);
  for (double& v : x) v = v < 0 ? v - 0.1 : v + 0.1;
  const std::vector<double> weights = random_doubles(x.size(), 4);  // loss = sum w * relu(x)
  std::vector<double> analytic(x.size());
  ref::relu_backward(x.size(), x.data(), weights.data(), analytic.data());
  check_gradient("relu", x, analytic, [&](const std::vector<double>& in) {
    std::vector<double> y(in.size());
    ref::relu_forward(in.size(), in.data(), y.data());
    double loss = 0;
    for (std::size_t i = 0; i < y.size(); ++i) loss += weights[i] * y[i];
    return loss;
  });
}

TEST(Dropout, ForwardAndBackwardMatchRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (float rate : {0.0f, 0.1f, 0.5f, 0.9f}) {
      for (std::int64_t n : op_sizes()) {
        SCOPED_TRACE("rate = " + std::to_string(rate) + ", n = " + std::to_string(n));
        const std::uint64_t seed = 1234 + static_cast<std::uint64_t>(n);
        const Tensor x = random_tensor({n}, 30 + n), dy = random_tensor({n}, 40 + n);
        auto body = [&](Device d) {
          Tensor y = Tensor::empty({n}, DType::f32, d), dx = Tensor::empty({n}, DType::f32, d);
          ops::dropout_forward(x.to(d), y, rate, seed);
          ops::dropout_backward(dy.to(d), dx, rate, seed);
          return Outputs{y.to_vector(), dx.to_vector()};
        };
        const Outputs want = run_ref(body), got = backend.run(body);
        // ref divides by 1 - rate, the shared math multiplies by its
        // reciprocal: they may differ in the last bit of kept elements.
        EXPECT_LE(rel_error(got[0], want[0]), 1e-6) << "dropout_forward";
        EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "dropout_backward";
        for (std::size_t i = 0; i < want[0].size(); ++i) {
          ASSERT_EQ(got[0][i] == 0.0f, want[0][i] == 0.0f) << "masks differ at " << i;
        }
      }
    }
  }
}

TEST(Dropout, DropsTheRateAndScalesTheRest) {
  const std::int64_t n = 100000;
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    for (float rate : {0.1f, 0.3f, 0.5f, 0.8f}) {
      SCOPED_TRACE("rate = " + std::to_string(rate));
      const Tensor x = random_tensor({n}, 50, 0.5f, 2.0f);  // never 0, so 0 means dropped
      const Tensor dy = random_tensor({n}, 51, 0.5f, 2.0f);
      const Outputs out = backend.run([&](Device d) {
        Tensor y = Tensor::empty({n}, DType::f32, d), dx = Tensor::empty({n}, DType::f32, d);
        ops::dropout_forward(x.to(d), y, rate, 77);
        ops::dropout_backward(dy.to(d), dx, rate, 77);
        return Outputs{y.to_vector(), dx.to_vector()};
      });
      const std::vector<float> xs = x.to_vector(), dys = dy.to_vector();
      const double keep_scale = 1.0 / (1.0 - double(rate));
      std::int64_t dropped = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const float y = out[0][i], dx = out[1][i];
        if (y == 0.0f) {
          ++dropped;
          ASSERT_EQ(dx, 0.0f) << "backward kept element " << i << ", which forward dropped";
        } else {
          ASSERT_NEAR(y, xs[i] * keep_scale, 1e-6 * std::fabs(y)) << "element " << i;
          ASSERT_NEAR(dx, dys[i] * keep_scale, 1e-6 * std::fabs(dx)) << "element " << i;
        }
      }
      // The dropped fraction is binomial: its standard deviation at 100k
      // elements is at most 0.0016, so 0.01 is over six sigma.
      EXPECT_NEAR(double(dropped) / double(n), rate, 0.01);
    }
  }
}

TEST(Dropout, RateZeroIsIdentityAndSeedsDiffer) {
  const std::int64_t n = 10007;
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const Tensor x = random_tensor({n}, 60);
    const Outputs out = backend.run([&](Device d) {
      Tensor xd = x.to(d);
      Tensor y0 = Tensor::empty({n}, DType::f32, d), dx0 = Tensor::empty({n}, DType::f32, d);
      Tensor a = Tensor::empty({n}, DType::f32, d), b = Tensor::empty({n}, DType::f32, d);
      ops::dropout_forward(xd, y0, 0.0f, 5);
      ops::dropout_backward(xd, dx0, 0.0f, 5);
      ops::dropout_forward(xd, a, 0.5f, 5);
      ops::dropout_forward(xd, b, 0.5f, 6);
      return Outputs{y0.to_vector(), dx0.to_vector(), a.to_vector(), b.to_vector()};
    });
    EXPECT_TRUE(same_values(out[0], x.to_vector())) << "forward at rate 0";
    EXPECT_TRUE(same_values(out[1], x.to_vector())) << "backward at rate 0";
    std::int64_t same_mask = 0;
    for (std::int64_t i = 0; i < n; ++i) same_mask += (out[2][i] == 0.0f) == (out[3][i] == 0.0f);
    // Independent masks at rate 0.5 agree on about half the elements.
    EXPECT_NEAR(double(same_mask) / double(n), 0.5, 0.05);
  }
}

TEST(Dropout, GradientCheck) {
  std::vector<double> x = random_doubles(2000, 7);
  const std::vector<double> weights = random_doubles(x.size(), 8);
  const float rate = 0.4f;
  const std::uint64_t seed = 99;
  std::vector<double> analytic(x.size());
  ref::dropout_backward(x.size(), rate, seed, weights.data(), analytic.data());
  check_gradient("dropout", x, analytic, [&](const std::vector<double>& in) {
    std::vector<double> y(in.size());
    ref::dropout_forward(in.size(), rate, seed, in.data(), y.data());
    double loss = 0;
    for (std::size_t i = 0; i < y.size(); ++i) loss += weights[i] * y[i];
    return loss;
  });
}

}  // namespace
}  // namespace troupe::kernels
