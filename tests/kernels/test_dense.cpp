// gemm, bias_add, bias_grad and transpose: every backend against ref through
// the public ops, gradient checks of the ref templates in double (the
// dense layer's backward is gemm with transposes, so those are what is
// checked), and the errors users see.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/math/bf16.hpp"
#include "kernels/math/precision.hpp"
#include "kernels/ops.hpp"
#include "kernels/ref/dense.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using testing::backends_under_test;
using testing::random_tensor;
using testing::rel_error;
using testing::run_ref;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct GemmCase {
  std::int64_t m, n, k;
};

TEST(Gemm, MatchesRefForAllTransposesAndShapes) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  const GemmCase cases[] = {{1, 1, 1},  {7, 33, 5}, {33, 7, 64},    {64, 10, 128},
                            {3, 1, 17}, {1, 65, 1}, {64, 256, 784}, {100, 97, 130}};
  std::uint64_t seed = 100;
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (const auto& gc : cases)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 2.0f}}) {
            SCOPED_TRACE(::testing::Message() << "m=" << gc.m << " n=" << gc.n << " k=" << gc.k << " ta=" << ta
                                              << " tb=" << tb << " alpha=" << alpha << " beta=" << beta);
            Tensor a = random_tensor(ta ? Shape{gc.k, gc.m} : Shape{gc.m, gc.k}, ++seed);
            Tensor b = random_tensor(tb ? Shape{gc.n, gc.k} : Shape{gc.k, gc.n}, ++seed);
            Tensor c0 = random_tensor({gc.m, gc.n}, ++seed);
            auto body = [&](Device d) {
              // beta == 0 must not read C: start from NaN to prove it.
              Tensor c = beta == 0.0f ? Tensor::full({gc.m, gc.n}, kNaN, d) : c0.to(d);
              ops::gemm(a.to(d), b.to(d), c, ta, tb, alpha, beta);
              return c;
            };
            Tensor want = run_ref(body);
            Tensor got = backend.run(body);
            EXPECT_LE(rel_error(got, want), 1e-5);
          }
  }
}

TEST(Bf16, RoundsToNearestEvenAndKeepsNaNInfinityAndSign) {
  EXPECT_EQ(math::round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(math::round_to_bf16(1.0f + 0x1.0p-8f), 1.0f);              // a tie: to the even 1.0
  EXPECT_EQ(math::round_to_bf16(1.0f + 0x1.8p-7f), 1.0f + 0x1.0p-6f);  // a tie: to the even 1 + 2^-6
  EXPECT_EQ(math::round_to_bf16(1.0f + 0x1.2p-8f), 1.0f + 0x1.0p-7f);  // above the tie: up
  EXPECT_EQ(math::round_to_bf16(-3.0f), -3.0f);
  EXPECT_EQ(math::round_to_bf16(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(math::round_to_bf16(kNaN)));
  EXPECT_EQ(math::round_to_bf16(0x1.fffffep127f), std::numeric_limits<float>::infinity());  // rounds past the max
  EXPECT_TRUE(std::signbit(math::round_to_bf16(-0.0f)));
}

// IEEE half as --precision fp16 rounds (math/precision.hpp): to nearest,
// ties to even, at the top of the range, in the subnormals and at zero.
TEST(Fp16, RoundsToNearestEvenOverTheWholeRange) {
  EXPECT_EQ(math::round_to_fp16(1.0f), 1.0f);
  EXPECT_EQ(math::round_to_fp16(1.0f + 0x1.0p-11f), 1.0f);                           // a tie: to the even 1.0
  EXPECT_EQ(math::round_to_fp16(1.0f + 0x1.8p-10f), 1.0f + 0x1.0p-9f);               // a tie: to the even 1 + 2^-9
  EXPECT_EQ(math::round_to_fp16(1.0f + 0x1.2p-11f), 1.0f + 0x1.0p-10f);              // above the tie: up
  EXPECT_EQ(math::round_to_fp16(65504.0f), 65504.0f);                                // the largest half
  EXPECT_EQ(math::round_to_fp16(65519.0f), 65504.0f);                                // below the tie with 65536
  EXPECT_EQ(math::round_to_fp16(65520.0f), std::numeric_limits<float>::infinity());  // the tie: to even, infinity
  EXPECT_EQ(math::round_to_fp16(-1e6f), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(math::round_to_fp16(0x1.0p-14f), 0x1.0p-14f);  // the smallest normal
  EXPECT_EQ(math::round_to_fp16(0x1.0p-24f), 0x1.0p-24f);  // the smallest subnormal
  EXPECT_EQ(math::round_to_fp16(0x1.8p-24f), 0x1.0p-23f);  // a subnormal tie: to even
  EXPECT_EQ(math::round_to_fp16(0x1.0p-25f), 0.0f);        // half the smallest: to even, zero
  EXPECT_EQ(math::round_to_fp16(0x1.2p-25f), 0x1.0p-24f);
  EXPECT_EQ(math::round_to_fp16(3.0e-5f), 0x1.f7p-16f);  // a subnormal, rounded
  EXPECT_TRUE(std::signbit(math::round_to_fp16(-0.0f)));
  EXPECT_TRUE(std::isnan(math::round_to_fp16(kNaN)));
  EXPECT_EQ(math::round_to_fp16(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(math::round_to_fp16(0.1f), 0x1.998p-4f);
}

// --precision bf16's and fp16's matmuls: every backend rounds A and B to
// bfloat16 or IEEE half and sums in fp32, as the reference does; the result
// is theirs, not fp32's (off by more than fp32 rounding, within the bound of
// 2^-8 relative per input), under ops::MatmulPrecisionScope, for gemm and
// gemm_batched.
TEST(Gemm, MixedPrecisionRoundsTheInputsOnEveryBackend) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  const GemmCase cases[] = {{7, 33, 5}, {64, 64, 32}, {100, 97, 130}, {768, 128, 64}};
  std::uint64_t seed = 500;
  for (const auto& backend : backends)
    for (const ops::MatmulPrecision precision : {ops::MatmulPrecision::bf16, ops::MatmulPrecision::fp16}) {
      SCOPED_TRACE(backend.name + " " + to_string(precision));
      for (const auto& gc : cases)
        for (bool ta : {false, true})
          for (bool tb : {false, true})
            for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 2.0f}}) {
              SCOPED_TRACE(::testing::Message() << "m=" << gc.m << " n=" << gc.n << " k=" << gc.k << " ta=" << ta
                                                << " tb=" << tb << " alpha=" << alpha << " beta=" << beta);
              Tensor a = random_tensor(ta ? Shape{gc.k, gc.m} : Shape{gc.m, gc.k}, ++seed);
              Tensor b = random_tensor(tb ? Shape{gc.n, gc.k} : Shape{gc.k, gc.n}, ++seed);
              Tensor c0 = random_tensor({gc.m, gc.n}, ++seed);
              auto body = [&](ops::MatmulPrecision p) {
                return [&, p](Device d) {
                  const ops::MatmulPrecisionScope scope(p);
                  Tensor c = beta == 0.0f ? Tensor::full({gc.m, gc.n}, kNaN, d) : c0.to(d);
                  ops::gemm(a.to(d), b.to(d), c, ta, tb, alpha, beta);
                  return c;
                };
              };
              const Tensor want = run_ref(body(precision));
              const Tensor fp32 = run_ref(body(ops::MatmulPrecision::fp32));
              const Tensor got = backend.run(body(precision));
              // cuBLAS's fast-bf16 and -fp16 modes may round their conversions
              // otherwise than to nearest even: a bf16-sized tolerance there.
              EXPECT_LE(rel_error(got, want), backend.name.find("cuda") != std::string::npos ? 1e-2 : 1e-5);
              EXPECT_GT(rel_error(want, fp32), precision == ops::MatmulPrecision::bf16 ? 1e-4 : 2e-6)
                  << "gave fp32's result: nothing was rounded";
              EXPECT_LT(rel_error(want, fp32), 2e-2);
            }
      // The batched form, and the scope's end: fp32 again after it.
      Tensor a = random_tensor({6, 64, 32}, 7), b = random_tensor({6, 64, 32}, 8);
      auto batched = [&](Device d) {
        Tensor c = Tensor::empty({6, 64, 64}, DType::f32, d);
        {
          const ops::MatmulPrecisionScope scope(precision);
          ops::gemm_batched(a.to(d), b.to(d), c, false, true);
        }
        EXPECT_EQ(ops::matmul_precision(), ops::MatmulPrecision::fp32);
        return c;
      };
      EXPECT_LE(rel_error(backend.run(batched), run_ref(batched)),
                backend.name.find("cuda") != std::string::npos ? 1e-2 : 1e-5);
    }
}

// The batched gemm: each matrix of the batch as gemm computes it alone, on
// every backend, for all transposes (attention's q k^T, p v, p^T dO, ...).
TEST(GemmBatched, EachMatrixIsTheGemmOfItsOwnPair) {
  const GemmCase cases[] = {{1, 1, 1}, {64, 64, 32}, {7, 5, 3}, {33, 17, 65}};
  std::uint64_t seed = 900;
  auto backends = backends_under_test();
  backends.insert(backends.begin(), testing::BackendUnderTest{"ref", Device::cpu()});
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (const auto& gc : cases)
      for (std::int64_t batch : {1, 6})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "m=" << gc.m << " n=" << gc.n << " k=" << gc.k << " batch=" << batch
                                              << " ta=" << ta << " tb=" << tb);
            const Shape as = ta ? Shape{gc.k, gc.m} : Shape{gc.m, gc.k},
                        bs = tb ? Shape{gc.n, gc.k} : Shape{gc.k, gc.n};
            Tensor a = random_tensor({batch, as[0], as[1]}, ++seed), b = random_tensor({batch, bs[0], bs[1]}, ++seed);
            Tensor c0 = random_tensor({batch, gc.m, gc.n}, ++seed);
            const Tensor got = backend.run([&](Device d) {
              Tensor c = c0.to(d);
              ops::gemm_batched(a.to(d), b.to(d), c, ta, tb, 0.5f, 2.0f);
              return c.to(Device::cpu());
            });
            for (std::int64_t i = 0; i < batch; ++i) {
              const Tensor want = run_ref([&](Device d) {
                Tensor c = c0.slice(i * gc.m * gc.n, {gc.m, gc.n}).to(d);
                ops::gemm(a.slice(i * as.numel(), as).to(d), b.slice(i * bs.numel(), bs).to(d), c, ta, tb, 0.5f, 2.0f);
                return c;
              });
              EXPECT_LE(rel_error(got.slice(i * gc.m * gc.n, {gc.m, gc.n}), want), 1e-5) << "matrix " << i;
            }
          }
  }
  testing::expect_invalid_argument(
      [] {
        ops::gemm_batched(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5}), Tensor::zeros({2, 3, 5}));
      },
      {"ops::gemm_batched", "batch"});
}

// The gradients of loss = sum(G * op(A) op(B)), written as the gemms a dense
// layer's backward runs:
//   d op(A) = G op(B)^T,   d op(B) = op(A)^T G,
// each stored transposed when its input is.
TEST(Gemm, GradientOfBothInputsForAllTransposes) {
  const std::int64_t m = 3, n = 4, k = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb);
      std::vector<double> a = testing::random_doubles(m * k, 1);
      std::vector<double> b = testing::random_doubles(k * n, 2);
      const std::vector<double> g = testing::random_doubles(m * n, 3);
      const GemmShape fwd{ta, tb, m, n, k};
      auto loss = [&](const std::vector<double>& av, const std::vector<double>& bv) {
        std::vector<double> c(m * n);
        ref::gemm(fwd, 1.0, av.data(), bv.data(), 0.0, c.data());
        double sum = 0.0;
        for (std::int64_t i = 0; i < m * n; ++i) sum += g[i] * c[i];
        return sum;
      };
      std::vector<double> da(m * k), db(k * n);
      if (!ta)
        ref::gemm(GemmShape{false, !tb, m, k, n}, 1.0, g.data(), b.data(), 0.0, da.data());
      else
        ref::gemm(GemmShape{tb, true, k, m, n}, 1.0, b.data(), g.data(), 0.0, da.data());
      if (!tb)
        ref::gemm(GemmShape{!ta, false, k, n, m}, 1.0, a.data(), g.data(), 0.0, db.data());
      else
        ref::gemm(GemmShape{true, ta, n, k, m}, 1.0, g.data(), a.data(), 0.0, db.data());
      testing::check_gradient("gemm dA", a, da, [&](const std::vector<double>& av) { return loss(av, b); });
      testing::check_gradient("gemm dB", b, db, [&](const std::vector<double>& bv) { return loss(a, bv); });
    }
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    Tensor got = backend.run([&](Device d) {
      Tensor c = Tensor::full({2, 3}, 4.0f, d);
      ops::gemm(Tensor::empty({2, 0}, DType::f32, d), Tensor::empty({0, 3}, DType::f32, d), c, false, false, 1.0f,
                0.5f);
      return c;
    });
    EXPECT_EQ(got.to_vector(), std::vector<float>(6, 2.0f));
  }
}

TEST(BiasAdd, MatchesRef) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  const Shape shapes[] = {{1, 1}, {7, 33}, {64, 10}, {2, 5, 7}, {1}, {33}};
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 200;
    for (const auto& shape : shapes) {
      SCOPED_TRACE(shape.str());
      Tensor y0 = random_tensor(shape, ++seed);
      Tensor bias = random_tensor({shape[shape.rank() - 1]}, ++seed);
      auto body = [&](Device d) {
        Tensor y = y0.to(d);
        ops::bias_add(y, bias.to(d));
        return y;
      };
      Tensor want = run_ref(body);
      EXPECT_LE(rel_error(backend.run(body), want), 1e-6);
    }
  }
}

TEST(BiasGrad, MatchesRefAndOverwrites) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  const Shape shapes[] = {{1, 1}, {7, 33}, {64, 10}, {2, 5, 7}, {1000, 3}, {33}};
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 300;
    for (const auto& shape : shapes) {
      SCOPED_TRACE(shape.str());
      Tensor dy = random_tensor(shape, ++seed);
      auto body = [&](Device d) {
        Tensor db = Tensor::full({shape[shape.rank() - 1]}, kNaN, d);
        ops::bias_grad(dy.to(d), db);
        return db;
      };
      Tensor want = run_ref(body);
      EXPECT_LE(rel_error(backend.run(body), want), 1e-5);
    }
  }
}

TEST(BiasGrad, IsTheGradientOfBiasAdd) {
  const std::int64_t rows = 4, cols = 6;
  const std::vector<double> y = testing::random_doubles(rows * cols, 10);
  const std::vector<double> g = testing::random_doubles(rows * cols, 11);
  std::vector<double> bias = testing::random_doubles(cols, 12);
  std::vector<double> analytic(cols);
  ref::bias_grad(rows, cols, g.data(), analytic.data());
  testing::check_gradient("bias", bias, analytic, [&](const std::vector<double>& b) {
    std::vector<double> out = y;
    ref::bias_add(rows, cols, b.data(), out.data());
    double sum = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) sum += g[i] * out[i];
    return sum;
  });
}

TEST(Transpose, MatchesRef) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  const Shape shapes[] = {{1, 1}, {7, 33}, {33, 7}, {3, 5, 70}, {2, 2, 64, 65}, {1, 100}};
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 400;
    for (const auto& shape : shapes) {
      SCOPED_TRACE(shape.str());
      Tensor x = random_tensor(shape, ++seed);
      std::vector<std::int64_t> dims = shape.dims();
      std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
      auto body = [&](Device d) {
        Tensor y = Tensor::full(Shape(dims), kNaN, d);
        ops::transpose_last2(x.to(d), y);
        return y;
      };
      Tensor want = run_ref(body);
      // A transpose moves values without arithmetic: exact.
      EXPECT_EQ(backend.run(body).to_vector(), want.to_vector());
    }
  }
}

TEST(Transpose, RefIsItsOwnInverse) {
  Tensor x = random_tensor({3, 7, 33}, 5);
  run_ref([&](Device d) {
    Tensor y = Tensor::empty({3, 33, 7}, DType::f32, d), z = Tensor::empty({3, 7, 33}, DType::f32, d);
    ops::transpose_last2(x, y);
    ops::transpose_last2(y, z);
    EXPECT_EQ(z.to_vector(), x.to_vector());
    EXPECT_EQ(y.to_vector()[1 * 7 + 2], x.to_vector()[2 * 33 + 1]);  // y[0, 1, 2] = x[0, 2, 1]
    return 0;
  });
}

// Runs `call`, expecting std::invalid_argument whose text holds every part.
template <class Call>
void expect_invalid(Call&& call, std::initializer_list<std::string> parts) {
  try {
    call();
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    for (const auto& part : parts) EXPECT_TRUE(contains(e.what(), part)) << e.what() << " lacks " << part;
  }
}

TEST(DenseErrors, NameTheOpAndBothShapes) {
  Tensor a = Tensor::zeros({7, 5}), b = Tensor::zeros({4, 3}), c = Tensor::zeros({7, 3});
  expect_invalid([&] { ops::gemm(a, b, c); }, {"gemm", "[7, 5]", "[4, 3]"});
  expect_invalid(
      [&] {
        ops::gemm(a, Tensor::zeros({5, 3}), Tensor::zeros({3, 7}));
      },
      {"gemm", "c f32[3, 7]", "[7, 3]"});
  expect_invalid([&] { ops::bias_add(Tensor::zeros({2, 7}), Tensor::zeros({5})); }, {"bias_add", "[5]", "[2, 7]"});
  expect_invalid([&] { ops::bias_grad(Tensor::zeros({2, 7}), Tensor::zeros({6})); }, {"bias_grad", "[6]", "[2, 7]"});
  expect_invalid(
      [&] {
        ops::transpose_last2(Tensor::zeros({2, 7}), Tensor::zeros({2, 7}));
      },
      {"transpose_last2", "[2, 7]", "[7, 2]"});
}

TEST(DenseErrors, MixedDevicesNameBothTensors) {
  // cpu:0 and cpu:1 are different devices (two replicas), even on one host.
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({3, 4}, DType::f32, Device::cpu(1));
  expect_invalid(
      [&] {
        ops::gemm(a, b, Tensor::zeros({2, 4}));
      },
      {"gemm", "f32[2, 3] on cpu:0", "f32[3, 4] on cpu:1", "different devices"});
  expect_invalid([&] { ops::bias_add(a, Tensor::zeros({3}, DType::f32, Device::cpu(1))); },
                 {"bias_add", "f32[2, 3] on cpu:0", "f32[3] on cpu:1"});
}

}  // namespace
}  // namespace troupe::kernels
