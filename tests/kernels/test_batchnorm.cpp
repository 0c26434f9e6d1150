// Batch normalisation's five steps (backend.hpp): every backend against ref
// on random data, at shapes with N = 1, C = 1, odd sizes and x [n, c] with
// no spatial dimensions; the composed training-mode function y(x, gamma,
// beta) against finite differences of the double-precision reference; the
// split across replicas (sums added, the total count) against one batch;
// the two-pass variance at a large mean; and the argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/ref/batchnorm.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;
using Outputs = std::vector<std::vector<float>>;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kEps = 1e-3f;  // Keras' default

const Shape kShapes[] = {
    {4, 3},           {1, 5},     {7, 1}, {300, 256},  // x [n, c]: after a dense layer
    {2, 3, 5, 7},     {1, 1, 9},                       // odd sizes, N = 1 and C = 1
    {3, 2, 1, 1},     {5, 4, 33},                      // spatial of 1 with rank 4; a 1-D sequence
    {64, 16, 13, 13},                                  // a CNN's feature maps
    {2, 1, 300, 300},                                  // one channel of many elements: many parts per channel
};

std::int64_t channels_of(const Shape& x) { return x[1]; }
double count_of(const Shape& x) { return double(x.numel()) / double(x[1]); }

// Per-channel inputs: means near the data's, variances in [0.5, 2], gamma
// and beta of both signs.
struct ChannelInputs {
  Tensor mean, var, gamma, beta;
};
ChannelInputs channel_inputs(std::int64_t c, std::uint64_t seed) {
  return {random_tensor({c}, seed, 0.2f, 0.8f), random_tensor({c}, seed + 1, 0.5f, 2.0f),
          random_tensor({c}, seed + 2, -1.5f, 1.5f), random_tensor({c}, seed + 3, -1.0f, 1.0f)};
}

TEST(BatchNorm, ChannelSumAndCenteredSumsqMatchRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 100;
    for (const Shape& xs : kShapes) {
      SCOPED_TRACE("x " + xs.str());
      const std::int64_t c = channels_of(xs);
      // An offset mean, so that the sums are not near zero by chance.
      const Tensor x = random_tensor(xs, ++seed, -0.5f, 1.5f);
      const Tensor mean = channel_inputs(c, ++seed).mean;
      auto body = [&](Device d) {
        Tensor xd = x.to(d);
        Tensor sum = Tensor::full({c}, kNaN, d), sq = Tensor::full({c}, kNaN, d);
        ops::channel_sum(xd, sum);
        ops::channel_centered_sumsq(xd, mean.to(d), sq);
        return Outputs{sum.to_vector(), sq.to_vector()};
      };
      const Outputs want = run_ref(body), got = backend.run(body);
      // Both accumulate in double: only the final rounding to float is left.
      EXPECT_LE(rel_error(got[0], want[0]), 1e-6) << "channel_sum";
      EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "channel_centered_sumsq";
    }
  }
}

TEST(BatchNorm, ForwardMatchesRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 200;
    for (const Shape& xs : kShapes) {
      SCOPED_TRACE("x " + xs.str());
      const ChannelInputs ci = channel_inputs(channels_of(xs), ++seed);
      const Tensor x = random_tensor(xs, ++seed, -2.0f, 2.0f);
      auto body = [&](Device d) {
        Tensor y = Tensor::full(xs, kNaN, d);
        ops::batchnorm_forward(x.to(d), ci.mean.to(d), ci.var.to(d), ci.gamma.to(d), ci.beta.to(d), kEps, y);
        return y.to_vector();
      };
      // A few float roundings per element (the float invstd among them).
      EXPECT_LE(rel_error(backend.run(body), run_ref(body)), 1e-6);
    }
  }
}

TEST(BatchNorm, BackwardReduceAndDataMatchRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 300;
    for (const Shape& xs : kShapes) {
      const std::int64_t c = channels_of(xs);
      // The local count, and three replicas' worth.
      for (double count : {count_of(xs), 3.0 * count_of(xs)}) {
        SCOPED_TRACE("x " + xs.str() + ", count " + std::to_string(count));
        const ChannelInputs ci = channel_inputs(c, ++seed);
        const Tensor x = random_tensor(xs, ++seed, -2.0f, 2.0f), dy = random_tensor(xs, ++seed);
        // The same sums go into every backend's backward_data, so that it is
        // compared on its own.
        const Tensor sum_dy = random_tensor({c}, ++seed, -5.0f, 5.0f);
        const Tensor sum_dy_xhat = random_tensor({c}, ++seed, -5.0f, 5.0f);
        auto body = [&](Device d) {
          Tensor xd = x.to(d), dyd = dy.to(d), mean = ci.mean.to(d), var = ci.var.to(d);
          Tensor s_dy = Tensor::full({c}, kNaN, d), s_dy_xhat = Tensor::full({c}, kNaN, d);
          Tensor dx = Tensor::full(xs, kNaN, d);
          ops::batchnorm_backward_reduce(xd, dyd, mean, var, kEps, s_dy, s_dy_xhat);
          ops::batchnorm_backward_data(xd, dyd, mean, var, ci.gamma.to(d), kEps, sum_dy.to(d), sum_dy_xhat.to(d), count,
                                       dx);
          return Outputs{s_dy.to_vector(), s_dy_xhat.to_vector(), dx.to_vector()};
        };
        const Outputs want = run_ref(body), got = backend.run(body);
        EXPECT_LE(rel_error(got[0], want[0]), 1e-6) << "sum_dy";
        EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "sum_dy_xhat";
        EXPECT_LE(rel_error(got[2], want[2]), 1e-6) << "dx";
      }
    }
  }
}

// One training step through the public ops on each backend: statistics from
// x, forward, backward. Compared with ref's whole step, so errors compound
// over the steps; still a few float roundings (the cpu backend is within
// 1.2e-7 of ref).
struct Step {
  Tensor y, dx, dgamma, dbeta;
};
Step training_step(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy, Device d) {
  const std::int64_t c = x.size(1);
  const float count = static_cast<float>(count_of(x.shape()));
  Tensor xd = x.to(d), dyd = dy.to(d), g = gamma.to(d);
  Tensor mean = Tensor::empty({c}, DType::f32, d), var = Tensor::empty({c}, DType::f32, d);
  ops::channel_sum(xd, mean);
  ops::scale(mean, 1.0f / count);
  ops::channel_centered_sumsq(xd, mean, var);
  ops::scale(var, 1.0f / count);  // biased, as training normalises with
  Step out{Tensor::full(x.shape(), kNaN, d), Tensor::full(x.shape(), kNaN, d), Tensor::full({c}, kNaN, d),
           Tensor::full({c}, kNaN, d)};
  ops::batchnorm_forward(xd, mean, var, g, beta.to(d), kEps, out.y);
  ops::batchnorm_backward_reduce(xd, dyd, mean, var, kEps, out.dbeta, out.dgamma);
  ops::batchnorm_backward_data(xd, dyd, mean, var, g, kEps, out.dbeta, out.dgamma, count_of(x.shape()), out.dx);
  return out;
}

TEST(BatchNorm, TrainingStepMatchesRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 400;
    for (const Shape& xs : kShapes) {
      SCOPED_TRACE("x " + xs.str());
      if (count_of(xs) < 2) continue;  // one element per channel: var 0, xhat 0, nothing to compare
      const ChannelInputs ci = channel_inputs(channels_of(xs), ++seed);
      const Tensor x = random_tensor(xs, ++seed, -1.0f, 3.0f), dy = random_tensor(xs, ++seed);
      auto body = [&](Device d) {
        Step s = training_step(x, ci.gamma, ci.beta, dy, d);
        return Outputs{s.y.to_vector(), s.dx.to_vector(), s.dgamma.to_vector(), s.dbeta.to_vector()};
      };
      const Outputs want = run_ref(body), got = backend.run(body);
      EXPECT_LE(rel_error(got[0], want[0]), 1e-6) << "y";
      EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "dx";
      EXPECT_LE(rel_error(got[2], want[2]), 1e-6) << "dgamma";
      EXPECT_LE(rel_error(got[3], want[3]), 1e-6) << "dbeta";
    }
  }
}

// What SyncBatchNorm does: two replicas each reduce their half of the batch,
// the sums are added (the all-reduce), and each replica's dx uses the total
// count. The halves' y and dx must be the whole batch's.
TEST(BatchNorm, StepsSplitAcrossReplicasGiveTheWholeBatch) {
  const Shape whole{8, 3, 5, 4}, half{4, 3, 5, 4};
  const std::int64_t c = 3, half_numel = half.numel();
  const double count = count_of(whole);
  const ChannelInputs ci = channel_inputs(c, 500);
  const Tensor x = random_tensor(whole, 501, -1.0f, 3.0f), dy = random_tensor(whole, 502);
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const Outputs out = backend.run([&](Device d) {
      const Step one = training_step(x, ci.gamma, ci.beta, dy, d);
      Tensor xd = x.to(d), dyd = dy.to(d), g = ci.gamma.to(d);
      const Tensor xs[2] = {xd.slice(0, half), xd.slice(half_numel, half)};
      const Tensor dys[2] = {dyd.slice(0, half), dyd.slice(half_numel, half)};
      auto channel_vector = [&] { return Tensor::empty({c}, DType::f32, d); };
      auto all_reduce = [&](const Tensor(&parts)[2]) {
        Tensor total = channel_vector();
        ops::add(parts[0], parts[1], total);
        return total;
      };
      Tensor sums[2] = {channel_vector(), channel_vector()};
      for (int r = 0; r < 2; ++r) ops::channel_sum(xs[r], sums[r]);
      Tensor mean = all_reduce(sums);
      ops::scale(mean, static_cast<float>(1.0 / count));
      Tensor sqs[2] = {channel_vector(), channel_vector()};
      for (int r = 0; r < 2; ++r) ops::channel_centered_sumsq(xs[r], mean, sqs[r]);
      Tensor var = all_reduce(sqs);
      ops::scale(var, static_cast<float>(1.0 / count));
      Tensor sum_dys[2] = {channel_vector(), channel_vector()}, sum_dy_xhats[2] = {channel_vector(), channel_vector()};
      for (int r = 0; r < 2; ++r)
        ops::batchnorm_backward_reduce(xs[r], dys[r], mean, var, kEps, sum_dys[r], sum_dy_xhats[r]);
      Tensor sum_dy = all_reduce(sum_dys), sum_dy_xhat = all_reduce(sum_dy_xhats);
      Tensor y = Tensor::full(whole, kNaN, d), dx = Tensor::full(whole, kNaN, d);
      for (int r = 0; r < 2; ++r) {
        ops::batchnorm_forward(xs[r], mean, var, g, ci.beta.to(d), kEps, y.slice(r * half_numel, half));
        ops::batchnorm_backward_data(xs[r], dys[r], mean, var, g, kEps, sum_dy, sum_dy_xhat, count,
                                     dx.slice(r * half_numel, half));
      }
      return Outputs{y.to_vector(),           one.y.to_vector(),      dx.to_vector(),     one.dx.to_vector(),
                     sum_dy_xhat.to_vector(), one.dgamma.to_vector(), sum_dy.to_vector(), one.dbeta.to_vector()};
    });
    // Only the order of the additions differs.
    EXPECT_LE(rel_error(out[0], out[1]), 1e-6) << "y";
    EXPECT_LE(rel_error(out[2], out[3]), 1e-6) << "dx";
    EXPECT_LE(rel_error(out[4], out[5]), 1e-6) << "dgamma";
    EXPECT_LE(rel_error(out[6], out[7]), 1e-6) << "dbeta";
  }
}

// x = 1000 + U(-1, 1): a float sum of squares minus count * mean^2 would
// keep no correct digit of the variance (about 1/3 against 10^6); the
// centered second pass keeps all of them.
TEST(BatchNorm, CenteredSumsqKeepsTheVarianceAtALargeMean) {
  const Shape xs{16, 2, 32, 32};
  const Tensor x = random_tensor(xs, 600, 999.0f, 1001.0f);
  const std::vector<float> xv = x.to_vector();
  const std::int64_t per_image = 32 * 32;
  const double count = count_of(xs);
  std::vector<float> want_var(2);
  std::vector<float> mean_values(2);
  for (int c = 0; c < 2; ++c) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < 16; ++i)
      for (std::int64_t j = 0; j < per_image; ++j) sum += xv[(i * 2 + c) * per_image + j];
    const double mean = sum / count;
    double sq = 0.0;
    for (std::int64_t i = 0; i < 16; ++i)
      for (std::int64_t j = 0; j < per_image; ++j) {
        const double dev = xv[(i * 2 + c) * per_image + j] - mean;
        sq += dev * dev;
      }
    want_var[c] = static_cast<float>(sq / count);
    mean_values[c] = static_cast<float>(mean);
  }
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const std::vector<float> var = backend.run([&](Device d) {
      Tensor xd = x.to(d), mean = Tensor::empty({2}, DType::f32, d), sq = Tensor::empty({2}, DType::f32, d);
      ops::channel_sum(xd, mean);
      ops::scale(mean, static_cast<float>(1.0 / count));
      ops::channel_centered_sumsq(xd, mean, sq);
      ops::scale(sq, static_cast<float>(1.0 / count));
      return sq.to_vector();
    });
    for (int c = 0; c < 2; ++c) EXPECT_NEAR(var[c], want_var[c], 1e-5 * want_var[c]) << "channel " << c;
  }
}

TEST(BatchNorm, EmptyBatchGivesZeroSums) {
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const Outputs out = backend.run([&](Device d) {
      Tensor x = Tensor::empty({0, 3, 4}, DType::f32, d), mean = Tensor::zeros({3}, DType::f32, d);
      Tensor sum = Tensor::full({3}, kNaN, d), sq = Tensor::full({3}, kNaN, d);
      Tensor s_dy = Tensor::full({3}, kNaN, d), s_dy_xhat = Tensor::full({3}, kNaN, d);
      ops::channel_sum(x, sum);
      ops::channel_centered_sumsq(x, mean, sq);
      ops::batchnorm_backward_reduce(x, x, mean, Tensor::full({3}, 1.0f, d), kEps, s_dy, s_dy_xhat);
      return Outputs{sum.to_vector(), sq.to_vector(), s_dy.to_vector(), s_dy_xhat.to_vector()};
    });
    for (const auto& v : out) EXPECT_TRUE(same_values(v, std::vector<float>(3, 0.0f)));
  }
}

TEST(BatchNorm, ReferenceMatchesDefinition) {
  // One channel of x = {1, 2, 3, 6} over [2, 1, 2]: mean 3, biased var 3.5.
  const BatchNormShape s{2, 1, 2};
  const std::vector<double> x{1, 2, 3, 6}, mean{3}, var{3.5}, gamma{2}, beta{0.5};
  std::vector<double> sum(1), sq(1), y(4);
  ref::channel_sum(s, x.data(), sum.data());
  ref::channel_centered_sumsq(s, x.data(), mean.data(), sq.data());
  EXPECT_EQ(sum[0], 12.0);
  EXPECT_EQ(sq[0], 14.0);
  ref::batchnorm_forward(s, x.data(), mean.data(), var.data(), gamma.data(), beta.data(), 0.0, y.data());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], 2.0 * (x[i] - 3.0) / std::sqrt(3.5) + 0.5, 1e-15);
}

// loss = sum(G * y(x, gamma, beta)), with mean and var computed from x as in
// training (channel_sum, channel_centered_sumsq, biased). Gradients from the
// reduce and data kernels: dbeta = sum_dy, dgamma = sum_dy_xhat, dx.
TEST(BatchNorm, TrainingGradientCheck) {
  const double eps = 1e-3;
  for (const BatchNormShape s : {BatchNormShape{3, 2, 5}, BatchNormShape{6, 3, 1}, BatchNormShape{2, 1, 7}}) {
    SCOPED_TRACE("n " + std::to_string(s.n) + ", c " + std::to_string(s.c) + ", spatial " + std::to_string(s.spatial));
    const std::size_t xs = static_cast<std::size_t>(s.n * s.c * s.spatial), cs = static_cast<std::size_t>(s.c);
    const double count = double(s.count());
    std::vector<double> x = random_doubles(xs, 11, -1.0, 2.0), gamma = random_doubles(cs, 12, 0.5, 1.5),
                        beta = random_doubles(cs, 13);
    const std::vector<double> g = random_doubles(xs, 14);
    auto statistics = [&](const std::vector<double>& xv, std::vector<double>& mean, std::vector<double>& var) {
      mean.assign(cs, 0.0);
      var.assign(cs, 0.0);
      ref::channel_sum(s, xv.data(), mean.data());
      for (double& m : mean) m /= count;
      ref::channel_centered_sumsq(s, xv.data(), mean.data(), var.data());
      for (double& v : var) v /= count;
    };
    auto loss = [&](const std::vector<double>& xv, const std::vector<double>& gv, const std::vector<double>& bv) {
      std::vector<double> mean, var, y(xs);
      statistics(xv, mean, var);
      ref::batchnorm_forward(s, xv.data(), mean.data(), var.data(), gv.data(), bv.data(), eps, y.data());
      double total = 0.0;
      for (std::size_t i = 0; i < xs; ++i) total += g[i] * y[i];
      return total;
    };
    std::vector<double> mean, var, sum_dy(cs), sum_dy_xhat(cs), dx(xs);
    statistics(x, mean, var);
    ref::batchnorm_backward_reduce(s, x.data(), g.data(), mean.data(), var.data(), eps, sum_dy.data(),
                                   sum_dy_xhat.data());
    ref::batchnorm_backward_data(s, x.data(), g.data(), mean.data(), var.data(), gamma.data(), eps, sum_dy.data(),
                                 sum_dy_xhat.data(), count, dx.data());
    check_gradient("batchnorm dx", x, dx, [&](const std::vector<double>& v) { return loss(v, gamma, beta); });
    check_gradient("batchnorm dgamma", gamma, sum_dy_xhat,
                   [&](const std::vector<double>& v) { return loss(x, v, beta); });
    check_gradient("batchnorm dbeta", beta, sum_dy, [&](const std::vector<double>& v) { return loss(x, gamma, v); });
  }
}

TEST(BatchNormErrors, NameTheOpAndTheShapes) {
  const Tensor x = Tensor::zeros({2, 3, 5}), c3 = Tensor::zeros({3}), c4 = Tensor::zeros({4});
  expect_invalid_argument([&] { ops::channel_sum(x, c4); }, {"ops::channel_sum", "[4]", "[3]", "[2, 3, 5]"});
  expect_invalid_argument([&] { ops::channel_sum(Tensor::zeros({5}), Tensor::zeros({5})); },
                          {"ops::channel_sum", "[5]", "at least 2-D"});
  expect_invalid_argument([&] { ops::channel_centered_sumsq(x, c4, c3); },
                          {"ops::channel_centered_sumsq", "mean", "[4]", "[2, 3, 5]"});
  expect_invalid_argument([&] { ops::batchnorm_forward(x, c3, c3, c4, c3, kEps, x); },
                          {"ops::batchnorm_forward", "gamma", "[4]", "[2, 3, 5]"});
  expect_invalid_argument(
      [&] {
        ops::batchnorm_forward(x, c3, c3, c3, c3, kEps, Tensor::zeros({2, 3, 4}));
      },
      {"ops::batchnorm_forward", "[2, 3, 5]", "[2, 3, 4]"});
  expect_invalid_argument([&] { ops::batchnorm_forward(x, c3, c3, c3, c3, -1.0f, x); },
                          {"ops::batchnorm_forward", "eps"});
  expect_invalid_argument(
      [&] {
        ops::batchnorm_backward_reduce(x, Tensor::zeros({2, 3, 6}), c3, c3, kEps, c3, c3);
      },
      {"ops::batchnorm_backward_reduce", "[2, 3, 5]", "[2, 3, 6]"});
  expect_invalid_argument([&] { ops::batchnorm_backward_reduce(x, x, c3, c3, kEps, c3, c4); },
                          {"ops::batchnorm_backward_reduce", "sum_dy_xhat", "[4]"});
  // count below the 10 elements per channel that x itself has.
  expect_invalid_argument([&] { ops::batchnorm_backward_data(x, x, c3, c3, c3, kEps, c3, c3, 2.0, x); },
                          {"ops::batchnorm_backward_data", "count", "10", "[2, 3, 5]"});
  expect_invalid_argument([&] { ops::batchnorm_backward_data(x, x, c3, c3, c3, kEps, c3, c3, 10.0, c3); },
                          {"ops::batchnorm_backward_data", "dx", "[3]"});
  expect_invalid_argument(
      [&] {
        ops::channel_sum(Tensor::zeros({2, 3}, DType::i32), c3);
      },
      {"ops::channel_sum", "i32[2, 3]", "f32"});
}

}  // namespace
}  // namespace troupe::kernels
