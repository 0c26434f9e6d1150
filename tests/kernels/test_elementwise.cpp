// add, scale, axpy and sum_n against ref, sum_n's aliasing contract, and the
// argument errors of every element-wise, activation, loss and optimizer op.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/ops.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;
using Outputs = std::vector<std::vector<float>>;

TEST(Elementwise, AddScaleAxpyMatchRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (std::int64_t n : op_sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const Tensor a = random_tensor({n}, 1000 + n), b = random_tensor({n}, 1100 + n);
      auto body = [&](Device d) {
        Tensor ad = a.to(d), bd = b.to(d);
        Tensor sum = Tensor::empty({n}, DType::f32, d);
        ops::add(ad, bd, sum);
        Tensor scaled = a.to(d);
        ops::scale(scaled, -0.37f);
        Tensor y = b.to(d);
        ops::axpy(1.7f, ad, y);
        ops::add(ad, bd, ad);  // in place: y may be one of the inputs
        return Outputs{sum.to_vector(), scaled.to_vector(), y.to_vector(), ad.to_vector()};
      };
      const Outputs want = run_ref(body), got = backend.run(body);
      // One rounding per element in add and scale: exact everywhere.
      EXPECT_TRUE(same_values(got[0], want[0])) << "add";
      EXPECT_TRUE(same_values(got[1], want[1])) << "scale";
      // axpy may be fused into one rounding instead of two.
      EXPECT_LE(rel_error(got[2], want[2]), 1e-6) << "axpy";
      EXPECT_TRUE(same_values(got[3], want[0])) << "add in place";
    }
  }
}

TEST(Elementwise, SumNMatchesRefWithAndWithoutAliasing) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    for (std::int64_t n : op_sizes()) {
      for (int count : {1, 2, 3, 5}) {
        // dst_alias: -1 a separate buffer, else the index of the source it is.
        for (int dst_alias : {-1, 0, count - 1}) {
          SCOPED_TRACE("n = " + std::to_string(n) + ", count = " + std::to_string(count) +
                       ", dst = " + (dst_alias < 0 ? "separate" : "srcs[" + std::to_string(dst_alias) + "]"));
          std::vector<Tensor> host;
          for (int k = 0; k < count; ++k) host.push_back(random_tensor({n}, 1200 + 10 * n + k));
          auto body = [&](Device d) {
            std::vector<Tensor> srcs;
            for (const Tensor& h : host) srcs.push_back(h.to(d));
            Tensor dst = dst_alias < 0 ? Tensor::empty({n}, DType::f32, d) : srcs[static_cast<std::size_t>(dst_alias)];
            ops::sum_n(srcs, dst);
            return dst.to_vector();
          };
          const std::vector<float> want = run_ref(body), got = backend.run(body);
          // Float sums of a few terms: only the order of additions may differ.
          EXPECT_LE(rel_error(got, want), 1e-6);
        }
      }
    }
  }
}

TEST(Elementwise, SumNAddsEverySource) {
  // Small integers are exact in float, so the expected sum is exact too.
  const std::int64_t n = 5000;
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const std::vector<float> got = backend.run([&](Device d) {
      std::vector<Tensor> srcs;
      for (int k = 0; k < 4; ++k) srcs.push_back(Tensor::full({n}, float(1 << k), d));
      ops::sum_n(srcs, srcs[2]);
      return srcs[2].to_vector();
    });
    EXPECT_TRUE(same_values(got, std::vector<float>(static_cast<std::size_t>(n), 15.0f)));
  }
}

// Every op must refuse mismatched shapes, dtypes and devices before it reaches
// a backend, naming itself and the tensors involved.
TEST(Elementwise, BadShapesThrowNamingTheOpAndBothShapes) {
  const Tensor a7 = Tensor::zeros({7}), b8 = Tensor::zeros({8}), m = Tensor::zeros({7, 3});
  expect_invalid_argument([&] { ops::add(a7, b8, a7); }, {"ops::add", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::axpy(1.0f, a7, b8); }, {"ops::axpy", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::sum_n({a7, b8}, a7); }, {"ops::sum_n", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::relu_forward(a7, b8); }, {"ops::relu_forward", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::relu_backward(a7, a7, b8); }, {"ops::relu_backward", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::dropout_forward(a7, b8, 0.5f, 1); }, {"ops::dropout_forward", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::dropout_backward(a7, b8, 0.5f, 1); }, {"ops::dropout_backward", "[7]", "[8]"});
  expect_invalid_argument(
      [&] {
        ops::mse(m, Tensor::zeros({7, 4}), a7, Tensor(), 1.0f);
      },
      {"ops::mse", "[7, 3]", "[7, 4]"});
  const Tensor labels7 = Tensor::zeros({7}, DType::i32);
  expect_invalid_argument([&] { ops::softmax_xent(m, labels7, b8, Tensor(), 1.0f); },
                          {"ops::softmax_xent", "[8]", "[7]"});
  expect_invalid_argument(
      [&] {
        ops::softmax_xent(m, labels7, a7, Tensor::zeros({7, 2}), 1.0f);
      },
      {"ops::softmax_xent", "[7, 3]", "[7, 2]"});
  expect_invalid_argument([&] { ops::topk_correct(m, Tensor::zeros({8}, DType::i32), a7, 1); },
                          {"ops::topk_correct", "[8]", "[7]"});
  expect_invalid_argument([&] { ops::sgd_update(a7, b8, Tensor(), SgdParams{}); }, {"ops::sgd_update", "[7]", "[8]"});
  SgdParams momentum;
  momentum.momentum = 0.9f;
  expect_invalid_argument([&] { ops::sgd_update(a7, a7, b8, momentum); }, {"ops::sgd_update", "[7]", "[8]"});
  expect_invalid_argument([&] { ops::adam_update(a7, a7, a7, b8, AdamParams{}); }, {"ops::adam_update", "[7]", "[8]"});
}

TEST(Elementwise, BadDtypesThrowNamingTheOp) {
  const Tensor f = Tensor::zeros({7}), i = Tensor::zeros({7}, DType::i32);
  expect_invalid_argument([&] { ops::add(f, i, f); }, {"ops::add", "i32[7]", "f32"});
  expect_invalid_argument([&] { ops::scale(i, 2.0f); }, {"ops::scale", "i32[7]"});
  expect_invalid_argument([&] { ops::sum(i); }, {"ops::sum", "i32[7]"});
  expect_invalid_argument([&] { ops::relu_forward(i, f); }, {"ops::relu_forward", "i32[7]"});
  expect_invalid_argument([&] { ops::init_uniform(i, 0.0f, 1.0f, 1); }, {"ops::init_uniform", "i32[7]"});
  // Labels must be i32, not f32 class indices.
  expect_invalid_argument(
      [&] {
        ops::softmax_xent(Tensor::zeros({7, 3}), f, f, Tensor(), 1.0f);
      },
      {"ops::softmax_xent", "labels", "f32[7]", "i32"});
}

TEST(Elementwise, MixedDevicesThrowNamingBothTensors) {
  bool have_cuda = false;
  for (const auto& b : backends_under_test()) have_cuda |= b.device.kind == DeviceKind::cuda;
  if (!have_cuda) GTEST_SKIP() << "needs a GPU to place a tensor on another device";
  const Tensor host = Tensor::zeros({7});
  const Tensor gpu = Tensor::zeros({7}, DType::f32, Device::cuda(0));
  expect_invalid_argument([&] { ops::add(host, gpu, host); }, {"ops::add", "cpu:0", "cuda:0", "different devices"});
  expect_invalid_argument([&] { ops::axpy(1.0f, gpu, host); }, {"ops::axpy", "cpu:0", "cuda:0", "different devices"});
  expect_invalid_argument(
      [&] {
        ops::sum_n({host, gpu}, host);
      },
      {"ops::sum_n", "cpu:0", "cuda:0", "different devices"});
  expect_invalid_argument([&] { ops::adam_update(gpu, gpu, host, gpu, AdamParams{}); },
                          {"ops::adam_update", "cpu:0", "cuda:0", "different devices"});
}

}  // namespace
}  // namespace troupe::kernels
