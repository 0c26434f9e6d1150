// Softmax over the last dimension: every backend against ref on random data
// at several ranks and row lengths, rows that sum to 1 and logits too large
// for an unshifted exp, the backward pass against finite differences of the
// double-precision reference, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/ref/activation.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;
using Outputs = std::vector<std::vector<float>>;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const Shape kShapes[] = {{1, 1},     {7, 10},    {3, 5, 33},   {2, 1000},
                         {300, 128}, {1, 50000}, {4, 2, 3, 1}, {17}};  // a last dimension of 1; a single row

TEST(Softmax, ForwardAndBackwardMatchRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 1300;
    for (const Shape& xs : kShapes) {
      SCOPED_TRACE("x " + xs.str());
      const Tensor x = random_tensor(xs, ++seed, -5.0f, 5.0f), dy = random_tensor(xs, ++seed);
      // Backward gets ref's y, so that it is compared on its own.
      const Tensor y_ref = run_ref([&](Device d) {
        Tensor y = Tensor::empty(xs, DType::f32, d);
        ops::softmax_forward(x, y);
        return y;
      });
      auto body = [&](Device d) {
        Tensor y = Tensor::full(xs, kNaN, d), dx = Tensor::full(xs, kNaN, d);
        ops::softmax_forward(x.to(d), y);
        ops::softmax_backward(y_ref.to(d), dy.to(d), dx);
        return Outputs{y.to_vector(), dx.to_vector()};
      };
      const Outputs want = run_ref(body), got = backend.run(body);
      // ref works in double; cpu sums in double but exponentiates in float,
      // cuDNN also sums in float: a few ulps, more over long rows.
      EXPECT_LE(rel_error(got[0], want[0]), 5e-6) << "forward";
      EXPECT_LE(rel_error(got[1], want[1]), 5e-6) << "backward";
    }
  }
}

// Causal softmax over stacked [n, n] score matrices: every backend against
// ref, and ref against a plain softmax of each row's first i + 1 keys with
// zeros beyond (the definition, written another way).
TEST(CausalSoftmax, MatchesRefAndIsASoftmaxOfTheKeysUpToTheQuery) {
  const Shape shapes[] = {{1, 1}, {5, 5}, {3, 4, 64, 64}, {2, 33, 33}, {1, 300, 300}};
  std::uint64_t seed = 1400;
  for (const Shape& xs : shapes) {
    SCOPED_TRACE("x " + xs.str());
    const std::int64_t n = xs[xs.rank() - 1], rows = xs.numel() / n;
    const Tensor x = random_tensor(xs, ++seed, -5.0f, 5.0f);
    auto body = [&](Device d) {
      Tensor y = Tensor::full(xs, kNaN, d);
      ops::causal_softmax_forward(x.to(d), y);
      return y.to_vector();
    };
    const std::vector<float> want = run_ref(body);
    const std::vector<float> xv = x.to_vector();
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t seen = r % n + 1;
      std::vector<float> part(xv.begin() + r * n, xv.begin() + r * n + seen), soft(static_cast<std::size_t>(seen));
      ref::softmax_forward<float>(1, seen, part.data(), soft.data());
      for (std::int64_t j = 0; j < n; ++j)
        ASSERT_FLOAT_EQ(want[static_cast<std::size_t>(r * n + j)], j < seen ? soft[static_cast<std::size_t>(j)] : 0.0f)
            << "row " << r << ", key " << j;
    }
    for (const auto& backend : backends_under_test()) {
      SCOPED_TRACE(backend.name);
      EXPECT_LE(rel_error(backend.run(body), want), 5e-6);
    }
  }
  expect_invalid_argument(
      [&] {
        ops::causal_softmax_forward(Tensor::zeros({2, 3}), Tensor::zeros({2, 3}));
      },
      {"ops::causal_softmax_forward", "square"});
}

TEST(Softmax, RowsSumToOneEvenForHugeLogits) {
  // Row 0: 1000 + small (exp(1000) overflows float); row 1: -1000 + small;
  // row 2: [0, ln 3], softmax [1/4, 3/4].
  std::vector<float> values;
  for (int j = 0; j < 4; ++j) values.push_back(1000.0f + float(j));
  for (int j = 0; j < 4; ++j) values.push_back(-1000.0f - float(j));
  values.insert(values.end(), {0.0f, std::log(3.0f), -INFINITY, -INFINITY});
  const Tensor x = Tensor::from_vector({3, 4}, values);
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const std::vector<float> y = backend.run([&](Device d) {
      Tensor out = Tensor::full({3, 4}, kNaN, d);
      ops::softmax_forward(x.to(d), out);
      return out.to_vector();
    });
    for (int r = 0; r < 3; ++r) {
      double sum = 0.0;
      for (int j = 0; j < 4; ++j) {
        ASSERT_TRUE(std::isfinite(y[r * 4 + j])) << "row " << r << ", element " << j;
        sum += y[r * 4 + j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
    }
    // Row 0 is softmax([0, 1, 2, 3]) shifted: the largest gets e^3 / sum.
    EXPECT_NEAR(y[3], std::exp(3.0) / (1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-6);
    EXPECT_NEAR(y[8], 0.25, 1e-6);
    EXPECT_NEAR(y[9], 0.75, 1e-6);
    EXPECT_EQ(y[10], 0.0f);
  }
}

// loss = sum(w * softmax(x)) over several rows.
TEST(Softmax, GradientCheck) {
  const std::int64_t rows = 5, n = 13;
  std::vector<double> x = random_doubles(rows * n, 51, -3.0, 3.0);
  const std::vector<double> w = random_doubles(x.size(), 52);
  auto forward = [&](const std::vector<double>& in) {
    std::vector<double> y(in.size());
    ref::softmax_forward(rows, n, in.data(), y.data());
    return y;
  };
  const std::vector<double> y = forward(x);
  std::vector<double> dx(x.size());
  ref::softmax_backward(rows, n, y.data(), w.data(), dx.data());
  check_gradient("softmax dx", x, dx, [&](const std::vector<double>& in) {
    const std::vector<double> out = forward(in);
    double loss = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) loss += w[i] * out[i];
    return loss;
  });
}

TEST(SoftmaxErrors, NameTheOpAndTheShapes) {
  const Tensor a = Tensor::zeros({3, 4}), b = Tensor::zeros({3, 5});
  expect_invalid_argument([&] { ops::softmax_forward(a, b); }, {"ops::softmax_forward", "[3, 4]", "[3, 5]"});
  expect_invalid_argument([&] { ops::softmax_backward(a, b, a); }, {"ops::softmax_backward", "[3, 4]", "[3, 5]"});
  expect_invalid_argument([&] { ops::softmax_backward(a, a, b); }, {"ops::softmax_backward", "[3, 4]", "[3, 5]"});
}

}  // namespace
}  // namespace troupe::kernels
