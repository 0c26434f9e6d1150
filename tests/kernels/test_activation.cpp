// ReLU, dropout, sigmoid, tanh and exact GELU: every backend against ref on
// random data, the backward passes against finite differences of the
// double-precision reference, dropout's statistics and mask contract, known
// values, and GELU's accuracy in its negative tail.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/math/elementwise.hpp"
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

// ---- sigmoid, tanh, GELU ----

enum class Smooth { sigmoid, tanh, gelu };
const char* name_of(Smooth f) { return f == Smooth::sigmoid ? "sigmoid" : f == Smooth::tanh ? "tanh" : "gelu"; }

void smooth_forward(Smooth f, const Tensor& x, const Tensor& y) {
  if (f == Smooth::sigmoid) ops::sigmoid_forward(x, y);
  if (f == Smooth::tanh) ops::tanh_forward(x, y);
  if (f == Smooth::gelu) ops::gelu_forward(x, y);
}
// sigmoid and tanh take the forward output y, gelu the input x.
void smooth_backward(Smooth f, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  if (f == Smooth::sigmoid) ops::sigmoid_backward(y, dy, dx);
  if (f == Smooth::tanh) ops::tanh_backward(y, dy, dx);
  if (f == Smooth::gelu) ops::gelu_backward(x, dy, dx);
}

constexpr Smooth kSmooth[] = {Smooth::sigmoid, Smooth::tanh, Smooth::gelu};

TEST(SmoothActivations, ForwardAndBackwardMatchRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (Smooth f : kSmooth) {
      for (std::int64_t n : op_sizes()) {
        SCOPED_TRACE(std::string(name_of(f)) + ", n = " + std::to_string(n));
        // Wide enough for the saturated ends of all three.
        const Tensor x = random_tensor({n}, 70 + n, -6.0f, 6.0f), dy = random_tensor({n}, 80 + n);
        // Every backward gets ref's forward output, so that it is compared on its own.
        const Tensor y_ref = run_ref([&](Device d) {
          Tensor y = Tensor::empty({n}, DType::f32, d);
          smooth_forward(f, x, y);
          return y;
        });
        auto body = [&](Device d) {
          Tensor y = Tensor::full({n}, NAN, d), dx = Tensor::full({n}, NAN, d);
          smooth_forward(f, x.to(d), y);
          smooth_backward(f, x.to(d), y_ref.to(d), dy.to(d), dx);
          return Outputs{y.to_vector(), dx.to_vector()};
        };
        const Outputs want = run_ref(body), got = backend.run(body);
        // ref evaluates in double; the float math is within a few ulps
        // (CUDA's expf and tanhf 2, erfcf 4) plus a few roundings.
        EXPECT_LE(rel_error(got[0], want[0]), 1e-6) << "forward";
        EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "backward";
      }
    }
  }
}

// The shared per-element math that the cuda kernels run, on the host: the
// cpu backend runs it only for GELU (sigmoid and tanh go to oneDNN), so this
// is where the CPU tests check the GPU's arithmetic for all three.
TEST(SmoothActivations, SharedMathMatchesRef) {
  const std::size_t n = 100000;
  const std::vector<float> x = random_tensor({std::int64_t(n)}, 60, -8.0f, 8.0f).to_vector();
  const std::vector<float> dy = random_tensor({std::int64_t(n)}, 61).to_vector();
  std::vector<float> want(n), want_dx(n), got(n), got_dx(n);
  // sigmoid
  ref::sigmoid_forward(n, x.data(), want.data());
  ref::sigmoid_backward(n, want.data(), dy.data(), want_dx.data());
  for (std::size_t i = 0; i < n; ++i) {
    got[i] = math::sigmoid(x[i]);
    got_dx[i] = math::sigmoid_grad(want[i], dy[i]);
  }
  EXPECT_LE(rel_error(got, want), 1e-6) << "sigmoid";
  EXPECT_LE(rel_error(got_dx, want_dx), 1e-6) << "sigmoid_grad";
  // tanh
  ref::tanh_forward(n, x.data(), want.data());
  ref::tanh_backward(n, want.data(), dy.data(), want_dx.data());
  for (std::size_t i = 0; i < n; ++i) {
    got[i] = math::tanh_of(x[i]);
    got_dx[i] = math::tanh_grad(want[i], dy[i]);
  }
  EXPECT_LE(rel_error(got, want), 1e-6) << "tanh";
  EXPECT_LE(rel_error(got_dx, want_dx), 1e-6) << "tanh_grad";
  // gelu
  ref::gelu_forward(n, x.data(), want.data());
  ref::gelu_backward(n, x.data(), dy.data(), want_dx.data());
  for (std::size_t i = 0; i < n; ++i) {
    got[i] = math::gelu(x[i]);
    got_dx[i] = math::gelu_grad(x[i], dy[i]);
  }
  EXPECT_LE(rel_error(got, want), 1e-6) << "gelu";
  EXPECT_LE(rel_error(got_dx, want_dx), 1e-6) << "gelu_grad";
}

TEST(SmoothActivations, KnownValuesAndSaturation) {
  const Tensor x = Tensor::from_vector({7}, std::vector<float>{0.0f, 1.0f, -1.0f, 0.5f, 100.0f, -100.0f, -20.0f});
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const Outputs out = backend.run([&](Device d) {
      Outputs o;
      for (Smooth f : kSmooth) {
        Tensor y = Tensor::empty({7}, DType::f32, d);
        smooth_forward(f, x.to(d), y);
        o.push_back(y.to_vector());
      }
      return o;
    });
    const std::vector<float>& sig = out[0];
    const std::vector<float>& th = out[1];
    const std::vector<float>& gelu = out[2];
    EXPECT_EQ(sig[0], 0.5f);
    EXPECT_NEAR(sig[1], 0.7310585786300049, 1e-7);
    EXPECT_NEAR(sig[2], 0.2689414213699951, 1e-7);
    EXPECT_EQ(sig[4], 1.0f);
    EXPECT_GE(sig[5], 0.0f);  // e^-100 underflows to 0 or a subnormal, never NaN
    EXPECT_LT(sig[5], 1e-30f);
    EXPECT_EQ(th[0], 0.0f);
    EXPECT_NEAR(th[3], 0.46211715726000974, 1e-7);
    EXPECT_EQ(th[4], 1.0f);
    EXPECT_EQ(th[5], -1.0f);
    // gelu(1) = Phi(1), gelu(-1) = -Phi(-1).
    EXPECT_EQ(gelu[0], 0.0f);
    EXPECT_NEAR(gelu[1], 0.8413447460685429, 1e-7);
    EXPECT_NEAR(gelu[2], -0.15865525393145707, 1e-7);
    EXPECT_EQ(gelu[4], 100.0f);
    EXPECT_EQ(gelu[5], 0.0f);  // -100 * Phi(-100): below the smallest float
    EXPECT_LE(std::fabs(gelu[6]), 1e-30f);
  }
}

// For x in [-5, -3], Phi(x) is 3e-7 to 1e-3: 0.5 * (1 + erf(x / sqrt 2)) in
// float would keep 0 to 14 of its 24 bits there (a relative error of up to
// 0.2), where the erfc form keeps all but those lost to rounding x / sqrt 2
// (amplified about 2 x^2 / 2 times: under 3e-6). Per element, not by norm.
TEST(SmoothActivations, GeluKeepsItsNegativeTail) {
  const std::int64_t n = 2000;
  const Tensor x = random_tensor({n}, 90, -5.0f, -3.0f), dy = Tensor::full({n}, 1.0f);
  const Outputs want = run_ref([&](Device d) {
    Tensor y = Tensor::empty({n}, DType::f32, d), dx = Tensor::empty({n}, DType::f32, d);
    ops::gelu_forward(x, y);
    ops::gelu_backward(x, dy, dx);
    return Outputs{y.to_vector(), dx.to_vector()};
  });
  for (const auto& backend : backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const Outputs got = backend.run([&](Device d) {
      Tensor y = Tensor::empty({n}, DType::f32, d), dx = Tensor::empty({n}, DType::f32, d);
      ops::gelu_forward(x.to(d), y);
      ops::gelu_backward(x.to(d), dy.to(d), dx);
      return Outputs{y.to_vector(), dx.to_vector()};
    });
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
      ASSERT_NEAR(got[0][i], want[0][i], 1e-5 * std::fabs(want[0][i])) << "gelu at x = " << x.to_vector()[i];
      // The derivative Phi + x phi also cancels in this range; both terms
      // are of the same size, so the relative error grows a little more.
      ASSERT_NEAR(got[1][i], want[1][i], 1e-4 * std::fabs(want[1][i])) << "gelu' at x = " << x.to_vector()[i];
    }
  }
}

TEST(SmoothActivations, GradientCheck) {
  for (Smooth f : kSmooth) {
    SCOPED_TRACE(name_of(f));
    std::vector<double> x = random_doubles(500, 41, -4.0, 4.0);
    const std::vector<double> weights = random_doubles(x.size(), 42);  // loss = sum w * f(x)
    auto forward = [&](const std::vector<double>& in) {
      std::vector<double> y(in.size());
      if (f == Smooth::sigmoid) ref::sigmoid_forward(in.size(), in.data(), y.data());
      if (f == Smooth::tanh) ref::tanh_forward(in.size(), in.data(), y.data());
      if (f == Smooth::gelu) ref::gelu_forward(in.size(), in.data(), y.data());
      return y;
    };
    const std::vector<double> y = forward(x);
    std::vector<double> analytic(x.size());
    if (f == Smooth::sigmoid) ref::sigmoid_backward(x.size(), y.data(), weights.data(), analytic.data());
    if (f == Smooth::tanh) ref::tanh_backward(x.size(), y.data(), weights.data(), analytic.data());
    if (f == Smooth::gelu) ref::gelu_backward(x.size(), x.data(), weights.data(), analytic.data());
    check_gradient(name_of(f), x, analytic, [&](const std::vector<double>& in) {
      const std::vector<double> out = forward(in);
      double loss = 0;
      for (std::size_t i = 0; i < out.size(); ++i) loss += weights[i] * out[i];
      return loss;
    });
  }
}

TEST(SmoothActivations, BadShapesThrowNamingTheOp) {
  const Tensor a7 = Tensor::zeros({7}), b8 = Tensor::zeros({8});
  expect_invalid_argument([&] { ops::sigmoid_forward(a7, b8); }, {"ops::sigmoid_forward", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::sigmoid_backward(a7, a7, b8); }, {"ops::sigmoid_backward", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::tanh_forward(a7, b8); }, {"ops::tanh_forward", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::tanh_backward(a7, b8, a7); }, {"ops::tanh_backward", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::gelu_forward(a7, b8); }, {"ops::gelu_forward", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::gelu_backward(b8, a7, a7); }, {"ops::gelu_backward", "[8]", "[7]"});
  expect_invalid_argument([&] { ops::gelu_forward(Tensor::zeros({7}, DType::i32), a7); },
                          {"ops::gelu_forward", "i32[7]"});
}

}  // namespace
}  // namespace troupe::kernels
