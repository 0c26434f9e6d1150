// Layer normalisation over the last dimension (backend.hpp): every backend
// against ref on random data, at rows of 1, widths of 1, odd widths, a
// transformer's [batch, length, width] and wide rows; the double reference's
// gradients against finite differences; a large common offset (the
// two-pass variance); and the argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/ref/layernorm.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;
using Outputs = std::vector<std::vector<float>>;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kEps = 1e-5f;  // PyTorch's default

const Shape kShapes[] = {
    {4, 8},     {1, 5},        {7, 1},  // rows of one, a width of one (y = beta)
    {2, 3, 33}, {12, 64, 128},          // odd widths; the zoo gpt's [batch, context, width]
    {3, 1000},  {2, 5, 2049},           // wide rows: many warp strides
};

std::int64_t width_of(const Shape& x) { return x[x.rank() - 1]; }
std::int64_t rows_of(const Shape& x) { return x.numel() / width_of(x); }

TEST(LayerNorm, ForwardMatchesRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 500;
    for (const Shape& xs : kShapes) {
      SCOPED_TRACE("x " + xs.str());
      const std::int64_t n = width_of(xs), rows = rows_of(xs);
      const Tensor x = random_tensor(xs, ++seed, -2.0f, 3.0f);
      const Tensor gamma = random_tensor({n}, ++seed, -1.5f, 1.5f), beta = random_tensor({n}, ++seed);
      auto body = [&](Device d) {
        Tensor y = Tensor::full(xs, kNaN, d), mean = Tensor::full({rows}, kNaN, d),
               rstd = Tensor::full({rows}, kNaN, d);
        ops::layernorm_forward(x.to(d), gamma.to(d), beta.to(d), kEps, y, mean, rstd);
        return Outputs{y.to_vector(), mean.to_vector(), rstd.to_vector()};
      };
      const Outputs want = run_ref(body), got = backend.run(body);
      EXPECT_LE(rel_error(got[0], want[0]), 2e-6) << "y";
      EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "mean";
      EXPECT_LE(rel_error(got[2], want[2]), 1e-6) << "rstd";
    }
  }
}

TEST(LayerNorm, BackwardMatchesRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 600;
    for (const Shape& xs : kShapes) {
      SCOPED_TRACE("x " + xs.str());
      const std::int64_t n = width_of(xs), rows = rows_of(xs);
      const Tensor x = random_tensor(xs, ++seed, -2.0f, 3.0f), dy = random_tensor(xs, ++seed);
      const Tensor gamma = random_tensor({n}, ++seed, -1.5f, 1.5f);
      // The statistics ref's forward kept, so that every backend's backward
      // is compared on the same inputs.
      Tensor mean = Tensor::zeros({rows}), rstd = Tensor::zeros({rows}), y = Tensor::zeros(xs);
      run_ref([&](Device) {
        ops::layernorm_forward(x, gamma, Tensor::zeros({n}), kEps, y, mean, rstd);
        return 0;
      });
      for (bool with_dx : {true, false}) {
        auto body = [&](Device d) {
          Tensor dx = with_dx ? Tensor::full(xs, kNaN, d) : Tensor();
          Tensor dgamma = Tensor::full({n}, kNaN, d), dbeta = Tensor::full({n}, kNaN, d);
          ops::layernorm_backward(x.to(d), dy.to(d), gamma.to(d), mean.to(d), rstd.to(d), dx, dgamma, dbeta);
          return Outputs{with_dx ? dx.to_vector() : std::vector<float>{}, dgamma.to_vector(), dbeta.to_vector()};
        };
        const Outputs want = run_ref(body), got = backend.run(body);
        EXPECT_LE(rel_error(got[0], want[0]), 1e-5) << "dx";
        EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "dgamma";
        EXPECT_LE(rel_error(got[2], want[2]), 1e-6) << "dbeta";
      }
    }
  }
}

// The rows' statistics survive a large common offset: the squares are taken
// about the mean (a second pass), not as the mean of the squares minus the
// squared mean, which would lose the variance of values near 1e4 to
// cancellation in float.
TEST(LayerNorm, ALargeOffsetKeepsTheVariance) {
  auto backends = backends_under_test();
  backends.insert(backends.begin(), BackendUnderTest{"ref", Device::cpu()});
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::vector<float> values;
    for (int i = 0; i < 64; ++i) values.push_back(10000.0f + static_cast<float>(i % 4) * 0.5f);  // var 0.3125
    auto body = [&](Device d) {
      Tensor x = Tensor::from_vector({1, 64}, values).to(d);
      Tensor y = Tensor::zeros({1, 64}, DType::f32, d), mean = Tensor::zeros({1}, DType::f32, d);
      Tensor rstd = Tensor::zeros({1}, DType::f32, d);
      ops::layernorm_forward(x, Tensor::full({64}, 1.0f, d), Tensor::zeros({64}, DType::f32, d), kEps, y, mean, rstd);
      return Outputs{mean.to_vector(), rstd.to_vector()};
    };
    const Outputs got = backend.run(body);
    EXPECT_FLOAT_EQ(got[0][0], 10000.75f);
    EXPECT_NEAR(got[1][0], 1.0 / std::sqrt(0.3125 + 1e-5), 1e-5);
  }
}

// The double reference's gradients (dx, dgamma, dbeta) against central
// differences of the loss sum(g * y(x, gamma, beta)).
TEST(LayerNorm, GradientCheck) {
  const double eps = 1e-5;
  for (auto [rows, n] : {std::pair<std::int64_t, std::int64_t>{3, 7}, {5, 1}, {2, 16}}) {
    SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(n));
    const std::size_t xs = static_cast<std::size_t>(rows * n), ns = static_cast<std::size_t>(n);
    std::vector<double> x = random_doubles(xs, 21, -1.0, 2.0), gamma = random_doubles(ns, 22, 0.5, 1.5),
                        beta = random_doubles(ns, 23);
    const std::vector<double> g = random_doubles(xs, 24);
    auto loss = [&](const std::vector<double>& xv, const std::vector<double>& gv, const std::vector<double>& bv) {
      std::vector<double> y(xs), mean(static_cast<std::size_t>(rows)), rstd(static_cast<std::size_t>(rows));
      ref::layernorm_forward(rows, n, xv.data(), gv.data(), bv.data(), eps, y.data(), mean.data(), rstd.data());
      double total = 0.0;
      for (std::size_t i = 0; i < xs; ++i) total += g[i] * y[i];
      return total;
    };
    std::vector<double> y(xs), mean(static_cast<std::size_t>(rows)), rstd(static_cast<std::size_t>(rows));
    ref::layernorm_forward(rows, n, x.data(), gamma.data(), beta.data(), eps, y.data(), mean.data(), rstd.data());
    std::vector<double> dx(xs), dgamma(ns), dbeta(ns);
    ref::layernorm_backward(rows, n, x.data(), g.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                            dgamma.data(), dbeta.data());
    check_gradient("layernorm dx", x, dx, [&](const std::vector<double>& v) { return loss(v, gamma, beta); });
    check_gradient("layernorm dgamma", gamma, dgamma, [&](const std::vector<double>& v) { return loss(x, v, beta); });
    check_gradient("layernorm dbeta", beta, dbeta, [&](const std::vector<double>& v) { return loss(x, gamma, v); });
  }
}

TEST(LayerNormErrors, NameTheOpAndTheShapes) {
  const Tensor x = Tensor::zeros({2, 3, 5}), n5 = Tensor::zeros({5}), n4 = Tensor::zeros({4}), r6 = Tensor::zeros({6});
  expect_invalid_argument([&] { ops::layernorm_forward(x, n4, n5, kEps, x, r6, r6); },
                          {"ops::layernorm_forward", "gamma", "[4]", "[5]"});
  expect_invalid_argument([&] { ops::layernorm_forward(x, n5, n5, kEps, x, Tensor::zeros({5}), r6); },
                          {"ops::layernorm_forward", "mean", "[6]"});
  expect_invalid_argument([&] { ops::layernorm_forward(x, n5, n5, 0.0f, x, r6, r6); },
                          {"ops::layernorm_forward", "eps"});
  expect_invalid_argument(
      [&] {
        ops::layernorm_backward(x, Tensor::zeros({2, 3, 4}), n5, r6, r6, x, n5, n5);
      },
      {"ops::layernorm_backward", "[2, 3, 5]", "[2, 3, 4]"});
  expect_invalid_argument([&] { ops::layernorm_backward(x, x, n5, r6, r6, x, n4, n5); },
                          {"ops::layernorm_backward", "dgamma", "[4]"});
}

}  // namespace
}  // namespace troupe::kernels
