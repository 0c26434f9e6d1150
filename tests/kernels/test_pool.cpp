// Max pooling (2-D and the 1-D wrappers): every backend against ref through
// the public ops, with argmax compared exactly (first maximum wins, index
// h * W + w in the plane), including inputs full of ties; gradient check of
// the ref templates in double; overwrite semantics; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/ops.hpp"
#include "kernels/ref/pool.hpp"
#include "tests/kernels/harness.hpp"

namespace troupe::kernels {
namespace {

using testing::backends_under_test;
using testing::random_tensor;
using testing::rel_error;
using testing::run_ref;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct PoolCase {
  Shape x;
  ops::Pool2dOptions o;
};

const PoolCase kCases[] = {
    {{2, 3, 8, 8}, {2, 2, 2, 2}},     {{1, 2, 7, 9}, {2, 2, 2, 2}},  // odd sizes: the last row and column are not read
    {{2, 2, 7, 7}, {3, 3, 1, 1}},                                    // overlapping windows
    {{1, 1, 1, 5}, {1, 2, 1, 2}},     {{3, 1, 9, 6}, {3, 2, 2, 3}},  // non-square window and stride
    {{64, 32, 26, 26}, {2, 2, 2, 2}},                                // the seed CNN
    {{1, 1, 1, 1}, {1, 1, 1, 1}},
};

std::string describe(const PoolCase& pc) {
  return "x " + pc.x.str() + " window " + std::to_string(pc.o.window_h) + "x" + std::to_string(pc.o.window_w) +
         " stride " + std::to_string(pc.o.stride_h) + "x" + std::to_string(pc.o.stride_w);
}

// Values from {-1, -0.5, 0, 0.5, 1}: most windows hold ties, so any backend
// that does not keep the first maximum shows up in argmax.
Tensor tied_tensor(const Shape& shape, std::uint64_t seed) {
  Tensor t = random_tensor(shape, seed);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::round(t.f32()[i] * 2.0f) / 2.0f;
  return t;
}

TEST(MaxPool2d, ForwardMatchesRefIncludingTies) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 7000;
    for (const auto& pc : kCases)
      for (bool ties : {false, true}) {
        SCOPED_TRACE(describe(pc) + (ties ? " with ties" : ""));
        Tensor x = ties ? tied_tensor(pc.x, ++seed) : random_tensor(pc.x, ++seed);
        const Shape ys = ops::maxpool2d_output_shape(pc.x, pc.o);
        auto body = [&](Device d) {
          Tensor y = Tensor::full(ys, kNaN, d);
          Tensor argmax = Tensor::empty(ys, DType::i32, d);
          ops::maxpool2d_forward(x.to(d), y, argmax, pc.o);
          return std::pair{y, argmax};
        };
        auto want = run_ref(body);
        auto got = backend.run(body);
        EXPECT_EQ(got.first.to_vector(), want.first.to_vector());
        EXPECT_EQ(got.second.to_int_vector(), want.second.to_int_vector());
      }
  }
}

TEST(MaxPool2d, FirstMaximumWinsAndArgmaxIsInPlane) {
  // Two planes of 3x4, all equal except one 5 in the second plane.
  std::vector<float> values(2 * 12, 1.0f);
  values[12 + 1 * 4 + 3] = 5.0f;  // plane 1, h 1, w 3
  Tensor x = Tensor::from_vector({1, 2, 3, 4}, values);
  for (const auto& backend : backends_under_test()) {
    SCOPED_TRACE(backend.name);
    auto argmax = backend.run([&](Device d) {
      Tensor y = Tensor::empty({1, 2, 1, 2}, DType::f32, d);
      Tensor a = Tensor::empty({1, 2, 1, 2}, DType::i32, d);
      ops::maxpool2d_forward(x.to(d), y, a);
      return a.to_int_vector();
    });
    // Windows start at w 0 and 2; ties keep the top-left; the 5 is at 1 * 4 + 3.
    EXPECT_EQ(argmax, (std::vector<std::int32_t>{0, 2, 0, 7}));
  }
}

TEST(MaxPool2d, BackwardMatchesRefAndOverwrites) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 8000;
    for (const auto& pc : kCases) {
      SCOPED_TRACE(describe(pc));
      const Shape ys = ops::maxpool2d_output_shape(pc.x, pc.o);
      Tensor x = tied_tensor(pc.x, ++seed), dy = random_tensor(ys, ++seed);
      // argmax from ref's forward, so both backwards route the same way.
      Tensor argmax = run_ref([&](Device d) {
        Tensor y = Tensor::empty(ys, DType::f32, d), a = Tensor::empty(ys, DType::i32, d);
        ops::maxpool2d_forward(x, y, a, pc.o);
        return a;
      });
      auto body = [&](Device d) {
        Tensor dx = Tensor::full(pc.x, kNaN, d);
        ops::maxpool2d_backward(dy.to(d), argmax.to(d), dx, pc.o);
        return dx;
      };
      Tensor want = run_ref(body);
      // Overlapping windows add in the same order on both: exact up to rounding.
      EXPECT_LE(rel_error(backend.run(body), want), 1e-6);
    }
  }
}

TEST(MaxPool1d, MatchesRef) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  struct Case1d {
    Shape x;
    ops::Pool1dOptions o;
  };
  const Case1d cases[] = {{{2, 3, 33}, {2, 2}}, {{1, 64, 296}, {3, 1}}, {{4, 1, 7}, {7, 7}}};
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 9000;
    for (const auto& pc : cases) {
      SCOPED_TRACE(pc.x.str());
      const Shape ys = ops::maxpool1d_output_shape(pc.x, pc.o);
      Tensor x = tied_tensor(pc.x, ++seed), dy = random_tensor(ys, ++seed);
      auto body = [&](Device d) {
        Tensor y = Tensor::empty(ys, DType::f32, d), a = Tensor::empty(ys, DType::i32, d);
        Tensor dx = Tensor::full(pc.x, kNaN, d);
        ops::maxpool1d_forward(x.to(d), y, a, pc.o);
        ops::maxpool1d_backward(dy.to(d), a, dx, pc.o);
        return std::vector<Tensor>{y, a, dx};
      };
      auto want = run_ref(body);
      auto got = backend.run(body);
      EXPECT_EQ(got[0].to_vector(), want[0].to_vector());
      EXPECT_EQ(got[1].to_int_vector(), want[1].to_int_vector());
      EXPECT_LE(rel_error(got[2], want[2]), 1e-6);
    }
  }
  EXPECT_EQ(ops::maxpool1d_output_shape({64, 64, 296}, {2, 2}), (Shape{64, 64, 148}));
}

// loss = sum(G * maxpool(x)). The inputs are distinct and at least 0.01
// apart, so the finite-difference step never changes which element wins.
TEST(MaxPool2d, GradientOfInput) {
  for (const auto& pc : {PoolCase{{2, 2, 7, 7}, {3, 3, 1, 1}}, PoolCase{{1, 3, 6, 9}, {2, 3, 2, 2}}}) {
    SCOPED_TRACE(describe(pc));
    Pool2dShape sh;
    sh.n = pc.x[0];
    sh.c = pc.x[1];
    sh.h = pc.x[2];
    sh.w = pc.x[3];
    sh.window_h = pc.o.window_h;
    sh.window_w = pc.o.window_w;
    sh.stride_h = pc.o.stride_h;
    sh.stride_w = pc.o.stride_w;
    const std::size_t xs = pc.x.numel(), ys = sh.n * sh.c * sh.p() * sh.q();
    std::vector<double> x(xs);
    // i -> (i * 37) mod xs is a permutation when 37 does not divide xs.
    ASSERT_NE(xs % 37, 0u);
    for (std::size_t i = 0; i < xs; ++i) x[i] = 0.01 * double((i * 37) % xs);
    const std::vector<double> g = testing::random_doubles(ys, 5);
    std::vector<double> y(ys), dx(xs);
    std::vector<std::int32_t> argmax(ys);
    ref::maxpool2d_forward(sh, x.data(), y.data(), argmax.data());
    ref::maxpool2d_backward(sh, g.data(), argmax.data(), dx.data());
    testing::check_gradient("maxpool dx", x, dx, [&](const std::vector<double>& v) {
      std::vector<double> out(ys);
      std::vector<std::int32_t> a(ys);
      ref::maxpool2d_forward(sh, v.data(), out.data(), a.data());
      double sum = 0.0;
      for (std::size_t i = 0; i < ys; ++i) sum += g[i] * out[i];
      return sum;
    });
  }
}

template <class Call>
void expect_invalid(Call&& call, std::initializer_list<std::string> parts) {
  try {
    call();
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what() << " lacks " << part;
  }
}

TEST(PoolErrors, NameTheOpAndBothShapes) {
  Tensor x = Tensor::zeros({2, 3, 8, 8});
  Tensor a = Tensor::zeros({2, 3, 4, 4}, DType::i32);
  expect_invalid(
      [&] {
        ops::maxpool2d_forward(x, Tensor::zeros({2, 3, 4, 5}), a);
      },
      {"maxpool2d_forward", "[2, 3, 4, 5]", "[2, 3, 4, 4]"});
  expect_invalid(
      [&] {
        ops::maxpool2d_forward(x, Tensor::zeros({2, 3, 4, 4}), Tensor::zeros({2, 3, 4, 4}));
      },
      {"maxpool2d_forward", "argmax", "i32"});
  expect_invalid(
      [&] {
        ops::maxpool2d_backward(Tensor::zeros({2, 3, 3, 4}), a, x);
      },
      {"maxpool2d_backward", "[2, 3, 3, 4]", "[2, 3, 4, 4]"});
  expect_invalid(
      [&] {
        ops::maxpool2d_forward(Tensor::zeros({1, 1, 2, 5}), Tensor::zeros({1, 1, 1, 1}),
                               Tensor::zeros({1, 1, 1, 1}, DType::i32), {3, 3, 1, 1});
      },
      {"maxpool2d_forward", "3x3", "[1, 1, 2, 5]"});
  expect_invalid(
      [&] {
        ops::maxpool2d_forward(x, Tensor::zeros({2, 3, 4, 4}, DType::f32, Device::cpu(1)), a);
      },
      {"maxpool2d_forward", "[2, 3, 8, 8] on cpu:0", "[2, 3, 4, 4] on cpu:1"});
}

}  // namespace
}  // namespace troupe::kernels
