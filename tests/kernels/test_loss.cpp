// Softmax cross-entropy, MSE, top-k accuracy and the double-accumulated sum:
// every backend against ref, the gradients against finite differences of the
// double-precision reference, and the edge cases each op documents.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/ref/loss.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;
using Outputs = std::vector<std::vector<float>>;

struct Rows {
  std::int64_t n, c;
};
// Row counts and widths from one element up to a few hundred thousand, with
// widths that are and are not multiples of a vector width.
const std::vector<Rows> kRowShapes{{1, 1}, {1, 7}, {7, 10}, {33, 33}, {1000, 10}, {128, 1000}, {3000, 100}};

TEST(SoftmaxXent, MatchesRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (const Rows& rows : kRowShapes) {
      const std::int64_t n = rows.n, c = rows.c;
      SCOPED_TRACE("[" + std::to_string(n) + ", " + std::to_string(c) + "]");
      const Tensor logits = random_tensor({n, c}, 100 + n * c, -8.0f, 8.0f);
      const Tensor labels = random_ints({n}, 200 + n, static_cast<std::int32_t>(c));
      const float grad_scale = 1.0f / float(n);
      auto body = [&](Device d) {
        Tensor x = logits.to(d), l = labels.to(d);
        Tensor loss = Tensor::empty({n}, DType::f32, d), dx = Tensor::empty({n, c}, DType::f32, d);
        Tensor loss_only = Tensor::empty({n}, DType::f32, d);
        ops::softmax_xent(x, l, loss, dx, grad_scale);
        ops::softmax_xent(x, l, loss_only, Tensor(), grad_scale);  // no gradient wanted
        return Outputs{loss.to_vector(), dx.to_vector(), loss_only.to_vector()};
      };
      const Outputs want = run_ref(body), got = backend.run(body);
      EXPECT_LE(rel_error(got[0], want[0]), 1e-5) << "loss";
      EXPECT_LE(rel_error(got[1], want[1]), 1e-5) << "dlogits";
      EXPECT_LE(rel_error(got[2], want[0]), 1e-5) << "loss without dlogits";
    }
  }
}

TEST(SoftmaxXent, StableForLargeLogits) {
  // exp(1000) overflows float and double; a shift by the row max makes the
  // loss independent of a constant added to the row.
  const std::int64_t n = 64, c = 37;
  const Tensor logits = random_tensor({n, c}, 300, -3.0f, 3.0f);
  std::vector<float> shifted = logits.to_vector();
  for (float& v : shifted) v += 1000.0f;
  const Tensor big = Tensor::from_vector({n, c}, shifted);
  const Tensor labels = random_ints({n}, 301, static_cast<std::int32_t>(c));
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const Outputs out = backend.run([&](Device d) {
      Tensor l = labels.to(d);
      Tensor loss = Tensor::empty({n}, DType::f32, d), dx = Tensor::empty({n, c}, DType::f32, d);
      Tensor loss_big = Tensor::empty({n}, DType::f32, d), dx_big = Tensor::empty({n, c}, DType::f32, d);
      ops::softmax_xent(logits.to(d), l, loss, dx, 1.0f);
      ops::softmax_xent(big.to(d), l, loss_big, dx_big, 1.0f);
      return Outputs{loss.to_vector(), dx.to_vector(), loss_big.to_vector(), dx_big.to_vector()};
    });
    for (float v : out[2]) ASSERT_TRUE(std::isfinite(v));
    for (float v : out[3]) ASSERT_TRUE(std::isfinite(v));
    // Adding 1000 in float rounds the logits to multiples of 2^-14, so the
    // two agree to about 1e-4, not to float precision.
    for (std::int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[2][i], out[0][i], 1e-3) << "row " << i;
    EXPECT_LE(rel_error(out[3], out[1]), 1e-3);
  }
}

TEST(SoftmaxXent, GradientCheck) {
  for (const Rows& rows : std::vector<Rows>{{1, 1}, {3, 5}, {16, 10}, {4, 130}}) {
    const std::int64_t n = rows.n, c = rows.c;
    SCOPED_TRACE("[" + std::to_string(n) + ", " + std::to_string(c) + "]");
    std::vector<double> logits = random_doubles(static_cast<std::size_t>(n * c), 11, -4.0, 4.0);
    const std::vector<std::int32_t> labels = random_ints({n}, 12, static_cast<std::int32_t>(c)).to_int_vector();
    const double scale = 1.0 / double(n);
    std::vector<double> loss(static_cast<std::size_t>(n)), analytic(logits.size());
    ref::softmax_xent(n, c, logits.data(), labels.data(), loss.data(), analytic.data(), scale);
    // d(scale * sum of row losses) / d logits is what dlogits promises.
    check_gradient("softmax_xent", logits, analytic, [&](const std::vector<double>& in) {
      std::vector<double> l(static_cast<std::size_t>(n));
      ref::softmax_xent<double>(n, c, in.data(), labels.data(), l.data(), nullptr, 0.0);
      double sum = 0;
      for (double v : l) sum += v;
      return scale * sum;
    });
  }
}

TEST(SoftmaxXent, KnownValues) {
  // Uniform logits: loss = log(c); gradient = 1/c - onehot.
  const Tensor logits = Tensor::full({2, 4}, 0.5f);
  const Tensor labels = Tensor::from_vector({2}, std::vector<std::int32_t>{0, 3});
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const Outputs out = backend.run([&](Device d) {
      Tensor loss = Tensor::empty({2}, DType::f32, d), dx = Tensor::empty({2, 4}, DType::f32, d);
      ops::softmax_xent(logits.to(d), labels.to(d), loss, dx, 2.0f);
      return Outputs{loss.to_vector(), dx.to_vector()};
    });
    EXPECT_NEAR(out[0][0], std::log(4.0), 1e-6);
    EXPECT_NEAR(out[0][1], std::log(4.0), 1e-6);
    const std::vector<float> want{-1.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, -1.5f};
    EXPECT_LE(rel_error(out[1], want), 1e-6);
  }
}

TEST(SoftmaxXent, BadLabelThrowsOutOfRangeNamingTheRow) {
  const std::int64_t n = 6, c = 5;
  const Tensor logits = random_tensor({n, c}, 400);
  for (std::int32_t bad : {-1, 5, 1000}) {
    std::vector<std::int32_t> ids{0, 1, 2, 3, 4, 0};
    ids[3] = bad;
    const Tensor labels = Tensor::from_vector({n}, ids);
    for (const auto& backend : ref_and_backends_under_test()) {
      SCOPED_TRACE(backend.name + ", label " + std::to_string(bad));
      backend.run([&](Device d) {
        Tensor loss = Tensor::empty({n}, DType::f32, d), dx = Tensor::empty({n, c}, DType::f32, d);
        try {
          ops::softmax_xent(logits.to(d), labels.to(d), loss, dx, 1.0f);
          ADD_FAILURE() << "no exception for label " << bad;
        } catch (const std::out_of_range& e) {
          EXPECT_NE(std::string(e.what()).find("row 3"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
        }
        return 0;
      });
    }
  }
}

TEST(Mse, MatchesRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (const Rows& rows : kRowShapes) {
      const std::int64_t n = rows.n, d = rows.c;
      for (bool one_d : {false, true}) {
        if (one_d && d != 1) continue;
        const Shape shape = one_d ? Shape{n} : Shape{n, d};
        SCOPED_TRACE(shape.str());
        const Tensor pred = random_tensor(shape, 500 + n * d), target = random_tensor(shape, 600 + n);
        auto body = [&](Device dev) {
          Tensor p = pred.to(dev), t = target.to(dev);
          Tensor loss = Tensor::empty({n}, DType::f32, dev), dp = Tensor::empty(shape, DType::f32, dev);
          ops::mse(p, t, loss, dp, 0.5f);
          Tensor loss_only = Tensor::empty({n}, DType::f32, dev);
          ops::mse(p, t, loss_only, Tensor(), 0.5f);
          return Outputs{loss.to_vector(), dp.to_vector(), loss_only.to_vector()};
        };
        const Outputs want = run_ref(body), got = backend.run(body);
        EXPECT_LE(rel_error(got[0], want[0]), 1e-6) << "loss";
        EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "dpred";
        EXPECT_LE(rel_error(got[2], want[0]), 1e-6) << "loss without dpred";
      }
    }
  }
}

TEST(Mse, GradientCheck) {
  const std::int64_t n = 9, d = 13;
  std::vector<double> pred = random_doubles(static_cast<std::size_t>(n * d), 21);
  const std::vector<double> target = random_doubles(pred.size(), 22);
  const double scale = 0.25;
  std::vector<double> loss(static_cast<std::size_t>(n)), analytic(pred.size());
  ref::mse(n, d, pred.data(), target.data(), loss.data(), analytic.data(), scale);
  check_gradient("mse", pred, analytic, [&](const std::vector<double>& in) {
    std::vector<double> l(static_cast<std::size_t>(n));
    ref::mse<double>(n, d, in.data(), target.data(), l.data(), nullptr, 0.0);
    double sum = 0;
    for (double v : l) sum += v;
    return scale * sum;
  });
}

TEST(TopkCorrect, MatchesRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (const Rows& rows : kRowShapes) {
      const std::int64_t n = rows.n, c = rows.c;
      // Coarse logits (multiples of 1/4) so that ties are common.
      std::vector<float> values = random_tensor({n, c}, 700 + n).to_vector();
      for (float& v : values) v = std::round(v * 4.0f) / 4.0f;
      const Tensor logits = Tensor::from_vector({n, c}, values);
      const Tensor labels = random_ints({n}, 701, static_cast<std::int32_t>(c));
      for (std::int64_t k : {std::int64_t{1}, std::min<std::int64_t>(3, c), c}) {
        SCOPED_TRACE("[" + std::to_string(n) + ", " + std::to_string(c) + "], k = " + std::to_string(k));
        auto body = [&](Device d) {
          Tensor correct = Tensor::empty({n}, DType::f32, d);
          ops::topk_correct(logits.to(d), labels.to(d), correct, k);
          return correct.to_vector();
        };
        EXPECT_TRUE(same_values(backend.run(body), run_ref(body)));
      }
    }
  }
}

TEST(TopkCorrect, TiesCountForTheLabelUpToK) {
  // Row: 1, 2, 2, 0. Label 1 or 2 (a tied maximum) is top-1; label 0 has two
  // logits strictly above it, so it is top-3 but not top-2; label 3 is top-4.
  const Tensor logits = Tensor::from_vector({4, 4}, std::vector<float>{1, 2, 2, 0, 1, 2, 2, 0, 1, 2, 2, 0, 1, 2, 2, 0});
  const Tensor labels = Tensor::from_vector({4}, std::vector<std::int32_t>{1, 2, 0, 3});
  const std::vector<std::vector<float>> want{{1, 1, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}};  // k = 1..4
  const Tensor flat = Tensor::full({1, 5}, 3.0f);  // all tied: every label is top-1
  const Tensor flat_label = Tensor::from_vector({1}, std::vector<std::int32_t>{4});
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    backend.run([&](Device d) {
      for (std::int64_t k = 1; k <= 4; ++k) {
        Tensor correct = Tensor::empty({4}, DType::f32, d);
        ops::topk_correct(logits.to(d), labels.to(d), correct, k);
        EXPECT_EQ(correct.to_vector(), want[static_cast<std::size_t>(k - 1)]) << "k = " << k;
      }
      Tensor correct = Tensor::empty({1}, DType::f32, d);
      ops::topk_correct(flat.to(d), flat_label.to(d), correct, 1);
      EXPECT_EQ(correct.to_vector(), std::vector<float>{1.0f});
      return 0;
    });
  }
}

TEST(TopkCorrect, Top1IsArgmaxAndTopCIsAlwaysRight) {
  const std::int64_t n = 5000, c = 10;
  const Tensor logits = random_tensor({n, c}, 800);  // continuous: ties have probability ~0
  const Tensor labels = random_ints({n}, 801, static_cast<std::int32_t>(c));
  const std::vector<float> values = logits.to_vector();
  const std::vector<std::int32_t> ids = labels.to_int_vector();
  std::vector<float> argmax_right(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t best = 0;
    for (std::int64_t j = 1; j < c; ++j)
      if (values[i * c + j] > values[i * c + best]) best = j;
    argmax_right[i] = best == ids[i] ? 1.0f : 0.0f;
  }
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const Outputs out = backend.run([&](Device d) {
      Tensor top1 = Tensor::empty({n}, DType::f32, d), topc = Tensor::empty({n}, DType::f32, d);
      ops::topk_correct(logits.to(d), labels.to(d), top1, 1);
      ops::topk_correct(logits.to(d), labels.to(d), topc, c);
      return Outputs{top1.to_vector(), topc.to_vector()};
    });
    EXPECT_TRUE(same_values(out[0], argmax_right));
    EXPECT_TRUE(same_values(out[1], std::vector<float>(static_cast<std::size_t>(n), 1.0f)));
  }
}

// A diverged model's NaN logits must never count as correct predictions
// (they did: NaN compares false, so no logit was "greater" than the label's).
TEST(TopkCorrect, NaNLogitsAreNeverRight) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Rows: all NaN; the label's logit NaN; another logit NaN above a finite
  // label logit that would otherwise be top-1; a clean row (still right).
  const Tensor logits = Tensor::from_vector({4, 3}, std::vector<float>{nan, nan, nan, 1, nan, 0, 2, 0, nan, 0, 5, 1});
  const Tensor labels = Tensor::from_vector({4}, std::vector<std::int32_t>{0, 1, 0, 1});
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    backend.run([&](Device d) {
      for (std::int64_t k : {1, 2, 3}) {
        Tensor correct = Tensor::empty({4}, DType::f32, d);
        ops::topk_correct(logits.to(d), labels.to(d), correct, k);
        const std::vector<float> got = correct.to_vector();
        EXPECT_EQ(got[0], 0.0f) << "all-NaN row, k = " << k;
        EXPECT_EQ(got[1], 0.0f) << "NaN label logit, k = " << k;
        EXPECT_EQ(got[2], k >= 2 ? 1.0f : 0.0f) << "a NaN logit outranks the label, k = " << k;
        EXPECT_EQ(got[3], 1.0f) << "clean row, k = " << k;
      }
      return 0;
    });
  }
}

TEST(Sum, MatchesRefAndAccumulatesInDouble) {
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    for (std::int64_t n : op_sizes()) {
      const Tensor x = random_tensor({n}, 900 + n);
      double exact = 0, magnitude = 0;  // in order, in double: what ref does
      for (float v : x.to_vector()) {
        exact += v;
        magnitude += std::fabs(v);
      }
      const double got = backend.run([&](Device d) { return ops::sum(x.to(d)); });
      // Only the order of the double additions may differ.
      EXPECT_NEAR(got, exact, 1e-13 * magnitude) << "n = " << n;
    }
    // 2^24 + 3 ones: a float accumulator stops growing at 2^24.
    const std::int64_t big = (std::int64_t{1} << 24) + 3;
    const Tensor ones = Tensor::full({big}, 1.0f);
    EXPECT_EQ(backend.run([&](Device d) { return ops::sum(ones.to(d)); }), double(big));
  }
}

}  // namespace
}  // namespace troupe::kernels
