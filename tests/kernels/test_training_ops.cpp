// The ops behind the training options: softmax cross-entropy with label
// smoothing (every backend against ref, ref against a hand computation and
// finite differences) and the sum of squares a gradient-norm clip takes.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/ref/loss.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;
using Outputs = std::vector<std::vector<float>>;

TEST(SoftmaxXentLabelSmoothing, MatchesRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  struct Rows {
    std::int64_t n, c;
  };
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (const Rows rows : std::vector<Rows>{{1, 1}, {7, 10}, {33, 33}, {128, 1000}, {3000, 100}}) {
      for (float e : {0.1f, 0.5f, 1.0f}) {
        const std::int64_t n = rows.n, c = rows.c;
        SCOPED_TRACE("[" + std::to_string(n) + ", " + std::to_string(c) + "] e = " + std::to_string(e));
        const Tensor logits = random_tensor({n, c}, 500 + n * c, -8.0f, 8.0f);
        const Tensor labels = random_ints({n}, 600 + n, static_cast<std::int32_t>(c));
        auto body = [&](Device d) {
          Tensor x = logits.to(d), l = labels.to(d);
          Tensor loss = Tensor::empty({n}, DType::f32, d), dx = Tensor::empty({n, c}, DType::f32, d);
          Tensor loss_only = Tensor::empty({n}, DType::f32, d);
          ops::softmax_xent(x, l, loss, dx, 1.0f / float(n), e);
          ops::softmax_xent(x, l, loss_only, Tensor(), 1.0f / float(n), e);
          // In place: dlogits may be the logits buffer.
          Tensor inplace = x.clone(), loss_inplace = Tensor::empty({n}, DType::f32, d);
          ops::softmax_xent(inplace, l, loss_inplace, inplace, 1.0f / float(n), e);
          return Outputs{loss.to_vector(), dx.to_vector(), loss_only.to_vector(), inplace.to_vector(),
                         loss_inplace.to_vector()};
        };
        const Outputs want = run_ref(body), got = backend.run(body);
        EXPECT_LE(rel_error(got[0], want[0]), 1e-5) << "loss";
        EXPECT_LE(rel_error(got[1], want[1]), 1e-5) << "dlogits";
        EXPECT_LE(rel_error(got[2], want[0]), 1e-5) << "loss without dlogits";
        EXPECT_LE(rel_error(got[3], want[1]), 1e-5) << "dlogits in place";
        EXPECT_LE(rel_error(got[4], want[0]), 1e-5) << "loss in place";
      }
    }
  }
}

TEST(SoftmaxXentLabelSmoothing, MatchesAHandComputation) {
  // One row of 3 classes, label 1, e = 0.3: t = (0.1, 0.8, 0.1).
  const std::vector<float> x{1.0f, 2.0f, -0.5f};
  const double e = 0.3;
  double z = 0;
  for (float v : x) z += std::exp(double(v));
  const double t[3] = {e / 3, 1 - e + e / 3, e / 3};
  double want_loss = 0;
  double want_grad[3];
  for (int j = 0; j < 3; ++j) {
    const double p = std::exp(double(x[j])) / z;
    want_loss -= t[j] * std::log(p);
    want_grad[j] = 2.0 * (p - t[j]);  // grad_scale 2
  }
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const Outputs got = backend.run([&](Device d) {
      Tensor logits = Tensor::from_vector({1, 3}, x).to(d);
      Tensor labels = Tensor::from_vector({1}, std::vector<std::int32_t>{1}).to(d);
      Tensor loss = Tensor::empty({1}, DType::f32, d), dx = Tensor::empty({1, 3}, DType::f32, d);
      ops::softmax_xent(logits, labels, loss, dx, 2.0f, 0.3f);
      return Outputs{loss.to_vector(), dx.to_vector()};
    });
    EXPECT_NEAR(got[0][0], want_loss, 1e-6);
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(got[1][static_cast<std::size_t>(j)], want_grad[j], 1e-6) << j;
  }
}

TEST(SoftmaxXentLabelSmoothing, ZeroIsThePlainLossAndBadValuesAreRefused) {
  const Tensor logits = random_tensor({16, 10}, 700, -3.0f, 3.0f);
  const Tensor labels = random_ints({16}, 701, 10);
  Tensor a = Tensor::empty({16}), b = Tensor::empty({16});
  ops::softmax_xent(logits, labels, a, Tensor(), 1.0f);
  ops::softmax_xent(logits, labels, b, Tensor(), 1.0f, 0.0f);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_THROW(ops::softmax_xent(logits, labels, a, Tensor(), 1.0f, -0.1f), std::invalid_argument);
  EXPECT_THROW(ops::softmax_xent(logits, labels, a, Tensor(), 1.0f, 1.5f), std::invalid_argument);
}

TEST(SoftmaxXentLabelSmoothing, GradientCheck) {
  const std::int64_t n = 4, c = 7;
  std::vector<double> logits = random_doubles(static_cast<std::size_t>(n * c), 21, -4.0, 4.0);
  const std::vector<std::int32_t> labels = random_ints({n}, 22, static_cast<std::int32_t>(c)).to_int_vector();
  const double scale = 0.25, e = 0.2;
  std::vector<double> loss(static_cast<std::size_t>(n)), analytic(logits.size());
  ref::softmax_xent(n, c, logits.data(), labels.data(), loss.data(), analytic.data(), scale, e);
  check_gradient("softmax_xent smoothed", logits, analytic, [&](const std::vector<double>& in) {
    std::vector<double> l(static_cast<std::size_t>(n));
    ref::softmax_xent<double>(n, c, in.data(), labels.data(), l.data(), nullptr, 0.0, e);
    double sum = 0;
    for (double v : l) sum += v;
    return scale * sum;
  });
}

TEST(SumSquares, MatchesRefAndL2Norm) {
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    for (std::int64_t n : op_sizes()) {
      const Tensor x = random_tensor({n}, 800 + n);
      double exact = 0;
      for (float v : x.to_vector()) exact += double(v) * double(v);
      const double got = backend.run([&](Device d) { return ops::sum_squares(x.to(d)); });
      EXPECT_NEAR(got, exact, 1e-12 * std::max(exact, 1.0)) << "n = " << n;
      const double norm = backend.run([&](Device d) { return ops::l2_norm(x.to(d)); });
      EXPECT_NEAR(norm, std::sqrt(exact), 1e-12 * std::max(std::sqrt(exact), 1.0)) << "n = " << n;
    }
  }
}

}  // namespace
}  // namespace troupe::kernels
