// Average pooling (windowed and global): every backend against ref on
// random data, a hand-computed case on every backend including ref,
// overwrite semantics (outputs poisoned with NaN first), gradient checks of
// the ref templates in double, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/ref/pool.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct PoolCase {
  Shape x;
  ops::Pool2dOptions o;
};

const PoolCase kCases[] = {
    {{2, 3, 8, 8}, {2, 2, 2, 2}},     {{1, 2, 7, 9}, {2, 2, 2, 2}},  // odd sizes: the last row and column are not read
    {{2, 2, 7, 7}, {3, 3, 1, 1}},                                    // overlapping windows
    {{1, 1, 8, 9}, {2, 2, 3, 3}},                                    // stride > window: rows no window reaches
    {{1, 1, 1, 5}, {1, 2, 1, 2}},     {{3, 1, 9, 6}, {3, 2, 2, 3}},  // non-square window and stride
    {{64, 32, 26, 26}, {2, 2, 2, 2}},                                // a seed CNN's size
    {{1, 1, 1, 1}, {1, 1, 1, 1}},     {{2, 4, 5, 5}, {5, 5, 5, 5}},  // the whole plane as one window
};

std::string describe(const PoolCase& pc) {
  return "x " + pc.x.str() + " window " + std::to_string(pc.o.window_h) + "x" + std::to_string(pc.o.window_w) +
         " stride " + std::to_string(pc.o.stride_h) + "x" + std::to_string(pc.o.stride_w);
}

Pool2dShape pool_shape(const PoolCase& pc) {
  Pool2dShape sh;
  sh.n = pc.x[0];
  sh.c = pc.x[1];
  sh.h = pc.x[2];
  sh.w = pc.x[3];
  sh.window_h = pc.o.window_h;
  sh.window_w = pc.o.window_w;
  sh.stride_h = pc.o.stride_h;
  sh.stride_w = pc.o.stride_w;
  return sh;
}

TEST(AvgPool2d, ForwardAndBackwardMatchRef) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 700;
    for (const auto& pc : kCases) {
      SCOPED_TRACE(describe(pc));
      const Shape ys = ops::avgpool2d_output_shape(pc.x, pc.o);
      const Tensor x = random_tensor(pc.x, ++seed), dy = random_tensor(ys, ++seed);
      auto body = [&](Device d) {
        Tensor y = Tensor::full(ys, kNaN, d), dx = Tensor::full(pc.x, kNaN, d);
        ops::avgpool2d_forward(x.to(d), y, pc.o);
        ops::avgpool2d_backward(dy.to(d), dx, pc.o);
        return std::vector<std::vector<float>>{y.to_vector(), dx.to_vector()};
      };
      const auto want = run_ref(body), got = backend.run(body);
      // Float window sums against ref's double ones; backward gathers where
      // ref scatters, so the additions come in another order.
      EXPECT_LE(rel_error(got[0], want[0]), 1e-6) << "forward";
      EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "backward";
    }
  }
}

TEST(AvgPool2d, MatchesHandComputedValues) {
  // x = 0..8 in one 3x3 plane, 2x2 windows, stride 1.
  std::vector<float> values(9);
  for (int i = 0; i < 9; ++i) values[i] = float(i);
  const Tensor x = Tensor::from_vector({1, 1, 3, 3}, values);
  const ops::Pool2dOptions o{2, 2, 1, 1};
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const auto out = backend.run([&](Device d) {
      Tensor y = Tensor::full({1, 1, 2, 2}, kNaN, d), dx = Tensor::full({1, 1, 3, 3}, kNaN, d);
      ops::avgpool2d_forward(x.to(d), y, o);
      ops::avgpool2d_backward(Tensor::full({1, 1, 2, 2}, 1.0f, d), dx, o);
      return std::vector<std::vector<float>>{y.to_vector(), dx.to_vector()};
    });
    EXPECT_TRUE(same_values(out[0], {2.0f, 3.0f, 5.0f, 6.0f}));
    // Each window hands 1/4 to each of its elements; the centre is in all four.
    EXPECT_TRUE(same_values(out[1], {0.25f, 0.5f, 0.25f, 0.5f, 1.0f, 0.5f, 0.25f, 0.5f, 0.25f}));
  }
  // Stride 3 over a 1x4 row with windows of 2: element 2 is in no window.
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name + " with a gap");
    const auto dx = backend.run([&](Device d) {
      Tensor g = Tensor::full({1, 1, 1, 4}, kNaN, d);
      ops::avgpool2d_backward(Tensor::from_vector({1, 1, 1, 1}, std::vector<float>{4.0f}).to(d), g, {1, 2, 1, 3});
      return g.to_vector();
    });
    EXPECT_TRUE(same_values(dx, {2.0f, 2.0f, 0.0f, 0.0f}));
  }
}

// loss = sum(G * avgpool(x)): linear, so central differences are exact.
TEST(AvgPool2d, GradientCheck) {
  for (const auto& pc : {PoolCase{{2, 2, 7, 7}, {3, 3, 1, 1}}, PoolCase{{1, 3, 6, 9}, {2, 3, 2, 2}},
                         PoolCase{{1, 1, 8, 9}, {2, 2, 3, 3}}}) {
    SCOPED_TRACE(describe(pc));
    const Pool2dShape sh = pool_shape(pc);
    const std::size_t xs = static_cast<std::size_t>(pc.x.numel()),
                      ys = static_cast<std::size_t>(sh.n * sh.c * sh.p() * sh.q());
    std::vector<double> x = random_doubles(xs, 21);
    const std::vector<double> g = random_doubles(ys, 22);
    std::vector<double> dx(xs);
    ref::avgpool2d_backward(sh, g.data(), dx.data());
    check_gradient("avgpool dx", x, dx, [&](const std::vector<double>& v) {
      std::vector<double> y(ys);
      ref::avgpool2d_forward(sh, v.data(), y.data());
      double sum = 0.0;
      for (std::size_t i = 0; i < ys; ++i) sum += g[i] * y[i];
      return sum;
    });
  }
}

const Shape kGlobalShapes[] = {{2, 3, 5, 7}, {1, 1, 1, 1}, {3, 2, 1, 9}, {64, 128, 7, 7}, {1, 4, 300, 300}};

TEST(GlobalAvgPool2d, ForwardAndBackwardMatchRef) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 800;
    for (const Shape& xs : kGlobalShapes) {
      SCOPED_TRACE("x " + xs.str());
      const Shape ys{xs[0], xs[1]};
      const Tensor x = random_tensor(xs, ++seed, -0.5f, 1.5f), dy = random_tensor(ys, ++seed);
      auto body = [&](Device d) {
        Tensor y = Tensor::full(ys, kNaN, d), dx = Tensor::full(xs, kNaN, d);
        ops::global_avgpool2d_forward(x.to(d), y);
        ops::global_avgpool2d_backward(dy.to(d), dx);
        return std::vector<std::vector<float>>{y.to_vector(), dx.to_vector()};
      };
      const auto want = run_ref(body), got = backend.run(body);
      EXPECT_LE(rel_error(got[0], want[0]), 1e-6) << "forward";   // sums in double on both
      EXPECT_LE(rel_error(got[1], want[1]), 1e-6) << "backward";  // one division
    }
  }
}

TEST(GlobalAvgPool2d, GradientCheck) {
  const std::int64_t planes = 6, plane_size = 35;
  std::vector<double> x = random_doubles(planes * plane_size, 31);
  const std::vector<double> g = random_doubles(planes, 32);
  std::vector<double> dx(x.size());
  ref::global_avgpool2d_backward(planes, plane_size, g.data(), dx.data());
  check_gradient("global avgpool dx", x, dx, [&](const std::vector<double>& v) {
    std::vector<double> y(planes);
    ref::global_avgpool2d_forward(planes, plane_size, v.data(), y.data());
    double sum = 0.0;
    for (std::int64_t i = 0; i < planes; ++i) sum += g[i] * y[i];
    return sum;
  });
}

TEST(AvgPoolErrors, NameTheOpAndTheShapes) {
  const Tensor x = Tensor::zeros({2, 3, 8, 8});
  expect_invalid_argument(
      [&] {
        ops::avgpool2d_forward(x, Tensor::zeros({2, 3, 4, 5}));
      },
      {"ops::avgpool2d_forward", "[2, 3, 4, 5]", "[2, 3, 4, 4]"});
  expect_invalid_argument(
      [&] {
        ops::avgpool2d_backward(Tensor::zeros({2, 3, 3, 4}), x);
      },
      {"ops::avgpool2d_backward", "[2, 3, 3, 4]", "[2, 3, 4, 4]"});
  expect_invalid_argument(
      [&] {
        ops::avgpool2d_forward(Tensor::zeros({1, 1, 2, 5}), Tensor::zeros({1, 1, 1, 1}), {3, 3, 1, 1});
      },
      {"ops::avgpool2d_forward", "3x3", "[1, 1, 2, 5]"});
  expect_invalid_argument(
      [&] {
        ops::avgpool2d_output_shape({1, 1, 2, 5}, {3, 3, 1, 1});
      },
      {"ops::avgpool2d_output_shape", "3x3", "[1, 1, 2, 5]"});
  expect_invalid_argument(
      [&] {
        ops::avgpool2d_forward(Tensor::zeros({3, 8, 8}), Tensor::zeros({3, 4, 4}));
      },
      {"ops::avgpool2d_forward", "[3, 8, 8]", "4-D"});
  expect_invalid_argument(
      [&] {
        ops::global_avgpool2d_forward(x, Tensor::zeros({2, 4}));
      },
      {"ops::global_avgpool2d_forward", "[2, 4]", "[2, 3]"});
  expect_invalid_argument(
      [&] {
        ops::global_avgpool2d_backward(Tensor::zeros({2, 3}), Tensor::zeros({2, 3, 8}));
      },
      {"ops::global_avgpool2d_backward", "[2, 3, 8]", "4-D"});
  expect_invalid_argument(
      [&] {
        ops::global_avgpool2d_forward(Tensor::zeros({2, 3, 0, 4}), Tensor::zeros({2, 3}));
      },
      {"ops::global_avgpool2d_forward", "[2, 3, 0, 4]", "empty"});
  EXPECT_EQ(ops::avgpool2d_output_shape({64, 32, 26, 26}), (Shape{64, 32, 13, 13}));
}

}  // namespace
}  // namespace troupe::kernels
