// conv2d (and the conv1d wrappers): every backend against ref through the
// public ops at odd shapes, strides, paddings and non-square filters;
// gradient checks of the ref templates in double; overwrite semantics of the
// backward ops; thread safety of the cpu backend's cached primitives; and the
// errors users see.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "kernels/ops.hpp"
#include "kernels/ref/conv.hpp"
#include "tests/kernels/harness.hpp"

namespace troupe::kernels {
namespace {

using testing::backends_under_test;
using testing::random_tensor;
using testing::rel_error;
using testing::run_ref;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Sums of up to a few hundred products in float, in different orders.
constexpr double kConvTolerance = 1e-5;

struct ConvCase {
  Shape x, w;
  ops::Conv2dOptions o;
};

const ConvCase kCases[] = {
    {{2, 3, 7, 7}, {4, 3, 3, 3}, {1, 1, 0, 0}},
    {{2, 3, 8, 9}, {5, 3, 3, 3}, {2, 2, 1, 1}},     // stride 2, padding 1
    {{1, 1, 5, 5}, {1, 1, 1, 1}, {1, 1, 0, 0}},     // 1x1: cpu skips im2col
    {{2, 4, 6, 6}, {3, 4, 1, 1}, {2, 2, 0, 0}},     // 1x1 but strided
    {{3, 2, 9, 7}, {4, 2, 3, 2}, {2, 1, 1, 0}},     // non-square filter and stride
    {{1, 7, 33, 1}, {2, 7, 3, 1}, {1, 1, 1, 0}},    // a column
    {{2, 2, 5, 5}, {3, 2, 5, 5}, {1, 1, 0, 0}},     // filter as large as the input
    {{2, 3, 7, 8}, {2, 3, 3, 3}, {3, 2, 2, 1}},     // stride leaves columns unread
    {{4, 1, 28, 28}, {32, 1, 3, 3}, {1, 1, 0, 0}},  // the seed CNN, small batch
    // 16 channels and more: the cpu backend's blocked oneDNN layouts
    // (nChw16c), troupe's NCHW reordered in and out.
    {{3, 16, 9, 9}, {16, 16, 3, 3}, {1, 1, 1, 1}},    // a resnet block's 3x3, same padding
    {{2, 16, 10, 10}, {32, 16, 3, 3}, {2, 2, 1, 1}},  // its downsampling 3x3, stride 2
    {{2, 16, 10, 10}, {32, 16, 1, 1}, {2, 2, 0, 0}},  // its 1x1 projection shortcut
    {{2, 20, 7, 6}, {24, 20, 3, 3}, {1, 1, 1, 1}},    // channels not a multiple of 16
    {{2, 3, 8, 8}, {17, 3, 3, 3}, {1, 1, 0, 0}},      // few input channels, 17 filters
};

std::string describe(const ConvCase& cc) {
  return "x " + cc.x.str() + " w " + cc.w.str() + " stride " + std::to_string(cc.o.stride_h) + "x" +
         std::to_string(cc.o.stride_w) + " pad " + std::to_string(cc.o.pad_h) + "x" + std::to_string(cc.o.pad_w);
}

TEST(Conv2d, ForwardMatchesRef) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 1000;
    for (const auto& cc : kCases)
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(describe(cc) + (with_bias ? " with bias" : " without bias"));
        Tensor x = random_tensor(cc.x, ++seed), w = random_tensor(cc.w, ++seed);
        Tensor bias = random_tensor({cc.w[0]}, ++seed);
        const Shape ys = ops::conv2d_output_shape(cc.x, cc.w, cc.o);
        auto body = [&](Device d) {
          Tensor y = Tensor::full(ys, kNaN, d);
          ops::conv2d_forward(x.to(d), w.to(d), with_bias ? bias.to(d) : Tensor(), y, cc.o);
          return y;
        };
        Tensor want = run_ref(body);
        EXPECT_LE(rel_error(backend.run(body), want), kConvTolerance);
      }
  }
}

TEST(Conv2d, BackwardDataMatchesRefAndOverwrites) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 2000;
    for (const auto& cc : kCases) {
      SCOPED_TRACE(describe(cc));
      const Shape ys = ops::conv2d_output_shape(cc.x, cc.w, cc.o);
      Tensor dy = random_tensor(ys, ++seed), w = random_tensor(cc.w, ++seed);
      auto body = [&](Device d) {
        Tensor dx = Tensor::full(cc.x, kNaN, d);  // garbage: must be overwritten
        ops::conv2d_backward_data(dy.to(d), w.to(d), dx, cc.o);
        return dx;
      };
      Tensor want = run_ref(body);
      EXPECT_LE(rel_error(backend.run(body), want), kConvTolerance);
    }
  }
}

TEST(Conv2d, BackwardFilterMatchesRefAndOverwrites) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 3000;
    for (const auto& cc : kCases)
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(describe(cc) + (with_bias ? " with db" : " without db"));
        const Shape ys = ops::conv2d_output_shape(cc.x, cc.w, cc.o);
        Tensor x = random_tensor(cc.x, ++seed), dy = random_tensor(ys, ++seed);
        auto body = [&](Device d) {
          Tensor dw = Tensor::full(cc.w, kNaN, d);
          Tensor db = with_bias ? Tensor::full({cc.w[0]}, kNaN, d) : Tensor();
          ops::conv2d_backward_filter(x.to(d), dy.to(d), dw, db, cc.o);
          return std::pair{dw, db};
        };
        auto want = run_ref(body);
        auto got = backend.run(body);
        EXPECT_LE(rel_error(got.first, want.first), kConvTolerance);
        if (with_bias) {
          EXPECT_LE(rel_error(got.second, want.second), kConvTolerance);
        }
      }
  }
}

// --precision bf16's and fp16's convolutions (Conv2dShape::precision): each
// direction's two inputs round to bfloat16 or IEEE half and the sums stay
// fp32, on every backend as in the reference (the cpu backend's oneDNN
// primitives to fp32's tolerance; cuda's TF32 tensor cores to a bf16-sized
// one); the result is theirs, not fp32's. The scope's end is fp32 again.
TEST(Conv2d, MixedPrecisionRoundsEachDirectionsInputsOnEveryBackend) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends)
    for (const ops::MatmulPrecision precision : {ops::MatmulPrecision::bf16, ops::MatmulPrecision::fp16}) {
      SCOPED_TRACE(backend.name + " " + to_string(precision));
      const double tolerance = backend.name.find("cuda") != std::string::npos ? 1e-2 : kConvTolerance;
      std::uint64_t seed = 5000;
      for (const auto& cc : kCases) {
        SCOPED_TRACE(describe(cc));
        const Shape ys = ops::conv2d_output_shape(cc.x, cc.w, cc.o);
        Tensor x = random_tensor(cc.x, ++seed), w = random_tensor(cc.w, ++seed);
        Tensor bias = random_tensor({cc.w[0]}, ++seed), dy = random_tensor(ys, ++seed);
        auto all = [&](ops::MatmulPrecision p) {
          return [&, p](Device d) {
            const ops::MatmulPrecisionScope scope(p);
            Tensor y = Tensor::full(ys, kNaN, d), dx = Tensor::full(cc.x, kNaN, d);
            Tensor dw = Tensor::full(cc.w, kNaN, d), db = Tensor::full({cc.w[0]}, kNaN, d);
            ops::conv2d_forward(x.to(d), w.to(d), bias.to(d), y, cc.o);
            ops::conv2d_backward_data(dy.to(d), w.to(d), dx, cc.o);
            ops::conv2d_backward_filter(x.to(d), dy.to(d), dw, db, cc.o);
            return std::vector<Tensor>{y, dx, dw, db};
          };
        };
        const auto want = run_ref(all(precision));
        const auto fp32 = run_ref(all(ops::MatmulPrecision::fp32));
        const auto got = backend.run(all(precision));
        const char* names[] = {"y", "dx", "dw", "db"};
        for (std::size_t i = 0; i < want.size(); ++i) {
          SCOPED_TRACE(names[i]);
          EXPECT_LE(rel_error(got[i], want[i]), tolerance);
          EXPECT_LT(rel_error(want[i], fp32[i]), 2e-2);
          if (i != 3) {
            EXPECT_GT(rel_error(want[i], fp32[i]), precision == ops::MatmulPrecision::bf16 ? 1e-4 : 2e-6)
                << "gave fp32's result: nothing was rounded";
          }
        }
        EXPECT_EQ(ops::matmul_precision(), ops::MatmulPrecision::fp32);
      }
    }
}

// The text CNN's layers: 1-D convolution over [n, channels, length].
TEST(Conv1d, AllDirectionsMatchRef) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  struct Case1d {
    Shape x, w;
    ops::Conv1dOptions o;
  };
  const Case1d cases[] = {
      {{2, 7, 30}, {4, 7, 5}, {1, 0}}, {{3, 2, 33}, {5, 2, 3}, {2, 2}}, {{1, 1, 1}, {1, 1, 1}, {1, 0}}};
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 4000;
    for (const auto& cc : cases) {
      SCOPED_TRACE("x " + cc.x.str() + " w " + cc.w.str());
      const Shape ys = ops::conv1d_output_shape(cc.x, cc.w, cc.o);
      Tensor x = random_tensor(cc.x, ++seed), w = random_tensor(cc.w, ++seed);
      Tensor bias = random_tensor({cc.w[0]}, ++seed), dy = random_tensor(ys, ++seed);
      auto body = [&](Device d) {
        Tensor y = Tensor::full(ys, kNaN, d), dx = Tensor::full(cc.x, kNaN, d);
        Tensor dw = Tensor::full(cc.w, kNaN, d), db = Tensor::full({cc.w[0]}, kNaN, d);
        ops::conv1d_forward(x.to(d), w.to(d), bias.to(d), y, cc.o);
        ops::conv1d_backward_data(dy.to(d), w.to(d), dx, cc.o);
        ops::conv1d_backward_filter(x.to(d), dy.to(d), dw, db, cc.o);
        return std::vector<Tensor>{y, dx, dw, db};
      };
      auto want = run_ref(body);
      auto got = backend.run(body);
      for (std::size_t i = 0; i < want.size(); ++i)
        EXPECT_LE(rel_error(got[i], want[i]), kConvTolerance) << "output " << i;
    }
  }
}

TEST(Conv1d, OutputShape) {
  EXPECT_EQ(ops::conv1d_output_shape({64, 7, 300}, {64, 7, 5}), (Shape{64, 64, 296}));
  EXPECT_EQ(ops::conv1d_output_shape({1, 2, 10}, {3, 2, 3}, {2, 1}), (Shape{1, 3, 5}));
}

// loss = sum(G * conv(x, w) + bias): its gradients with respect to x, w and
// bias are backward_data(G, w), backward_filter(x, G) and sum(G).
TEST(Conv2d, GradientsOfInputWeightsAndBias) {
  Conv2dShape sh;
  sh.n = 2;
  sh.c = 2;
  sh.h = 5;
  sh.w = 6;
  sh.k = 3;
  sh.r = 3;
  sh.s = 2;
  sh.stride_h = 2;
  sh.stride_w = 1;
  sh.pad_h = 1;
  sh.pad_w = 1;
  const std::size_t xs = sh.n * sh.c * sh.h * sh.w, ws = sh.k * sh.c * sh.r * sh.s;
  const std::size_t ys = sh.n * sh.k * sh.p() * sh.q();
  std::vector<double> x = testing::random_doubles(xs, 1), w = testing::random_doubles(ws, 2);
  std::vector<double> b = testing::random_doubles(sh.k, 3);
  const std::vector<double> g = testing::random_doubles(ys, 4);
  auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv, const std::vector<double>& bv) {
    std::vector<double> y(ys);
    ref::conv2d_forward(sh, xv.data(), wv.data(), bv.data(), y.data());
    double sum = 0.0;
    for (std::size_t i = 0; i < ys; ++i) sum += g[i] * y[i];
    return sum;
  };
  std::vector<double> dx(xs), dw(ws), db(sh.k);
  ref::conv2d_backward_data(sh, g.data(), w.data(), dx.data());
  ref::conv2d_backward_filter(sh, x.data(), g.data(), dw.data(), db.data());
  testing::check_gradient("conv2d dx", x, dx, [&](const std::vector<double>& v) { return loss(v, w, b); });
  testing::check_gradient("conv2d dw", w, dw, [&](const std::vector<double>& v) { return loss(x, v, b); });
  testing::check_gradient("conv2d db", b, db, [&](const std::vector<double>& v) { return loss(x, w, v); });
}

// Replicas run convolutions on their own threads at once; the cpu backend's
// per-shape primitive caches must not mix them up.
TEST(Conv2d, ConcurrentCallsAgreeWithRef) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::vector<Tensor> want, got(8);
    std::vector<ConvCase> cases;
    std::vector<Tensor> xs, ws;
    for (int i = 0; i < 8; ++i) {
      cases.push_back(kCases[i % 4]);
      xs.push_back(random_tensor(cases.back().x, 5000 + i));
      ws.push_back(random_tensor(cases.back().w, 6000 + i));
    }
    auto body = [&](int i, Device d) {
      Tensor y = Tensor::empty(ops::conv2d_output_shape(cases[i].x, cases[i].w, cases[i].o), DType::f32, d);
      Tensor xd = xs[i].to(d), wd = ws[i].to(d);
      for (int rep = 0; rep < 20; ++rep) ops::conv2d_forward(xd, wd, Tensor(), y, cases[i].o);
      return y;
    };
    for (int i = 0; i < 8; ++i) want.push_back(run_ref([&](Device d) { return body(i, d); }));
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i)
      threads.emplace_back([&, i] { got[i] = backend.run([&](Device d) { return body(i, d); }); });
    for (auto& t : threads) t.join();
    for (int i = 0; i < 8; ++i) EXPECT_LE(rel_error(got[i], want[i]), kConvTolerance) << i;
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

TEST(ConvErrors, NameTheOpAndBothShapes) {
  Tensor x = Tensor::zeros({2, 3, 8, 8}), w = Tensor::zeros({4, 2, 3, 3});
  expect_invalid(
      [&] {
        ops::conv2d_forward(x, w, Tensor(), Tensor::zeros({2, 4, 6, 6}));
      },
      {"conv2d_forward", "[2, 3, 8, 8]", "[4, 2, 3, 3]"});
  Tensor w3 = Tensor::zeros({4, 3, 3, 3});
  expect_invalid(
      [&] {
        ops::conv2d_forward(x, w3, Tensor(), Tensor::zeros({2, 4, 7, 7}));
      },
      {"conv2d_forward", "[2, 4, 7, 7]", "[2, 4, 6, 6]"});
  expect_invalid(
      [&] {
        ops::conv2d_forward(x, w3, Tensor::zeros({3}), Tensor::zeros({2, 4, 6, 6}));
      },
      {"conv2d_forward", "bias f32[3]", "[4]"});
  expect_invalid(
      [&] {
        ops::conv2d_backward_data(Tensor::zeros({2, 4, 5, 6}), w3, x);
      },
      {"conv2d_backward_data", "[2, 4, 5, 6]", "[2, 4, 6, 6]"});
  expect_invalid(
      [&] {
        ops::conv2d_backward_filter(x, Tensor::zeros({2, 4, 6, 6}), w, Tensor());
      },
      {"conv2d_backward_filter", "[2, 3, 8, 8]", "[4, 2, 3, 3]"});
  expect_invalid(
      [&] {
        ops::conv2d_forward(Tensor::zeros({1, 1, 2, 2}), Tensor::zeros({1, 1, 3, 3}), Tensor(),
                            Tensor::zeros({1, 1, 1, 1}));
      },
      {"conv2d_forward", "[1, 1, 3, 3]", "[1, 1, 2, 2]"});
  expect_invalid(
      [&] {
        ops::conv1d_forward(Tensor::zeros({2, 3, 8}), Tensor::zeros({4, 2, 3}), Tensor(), Tensor::zeros({2, 4, 6}));
      },
      {"conv2d_forward", "[2, 3, 1, 8]", "[4, 2, 1, 3]"});
  expect_invalid(
      [&] {
        ops::conv2d_forward(x, Tensor::zeros({4, 3, 3, 3}, DType::f32, Device::cpu(1)), Tensor(),
                            Tensor::zeros({2, 4, 6, 6}));
      },
      {"conv2d_forward", "[2, 3, 8, 8] on cpu:0", "[4, 3, 3, 3] on cpu:1"});
}

}  // namespace
}  // namespace troupe::kernels
