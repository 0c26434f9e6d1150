// Embedding lookup and its scatter-add gradient: every backend against ref
// through the public ops (repeated ids, vocab 1, dim 1), gradient check of
// the ref templates in double, overwrite semantics, out-of-range ids and
// shape errors.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "kernels/ops.hpp"
#include "kernels/ref/embedding.hpp"
#include "tests/kernels/harness.hpp"

namespace troupe::kernels {
namespace {

using testing::backends_under_test;
using testing::random_ints;
using testing::random_tensor;
using testing::rel_error;
using testing::run_ref;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct EmbeddingCase {
  Shape ids;
  std::int64_t vocab, dim;
};

// Counts larger than vocab guarantee repeated ids.
const EmbeddingCase kCases[] = {{{7}, 10, 33}, {{4, 33}, 50, 8}, {{5}, 1, 1}, {{64, 300}, 1000, 7}, {{1}, 3, 128}};

TEST(Embedding, ForwardAndBackwardMatchRef) {
  const auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 11000;
    for (const auto& ec : kCases) {
      SCOPED_TRACE("ids " + ec.ids.str() + " vocab " + std::to_string(ec.vocab) + " dim " + std::to_string(ec.dim));
      Tensor ids = random_ints(ec.ids, ++seed, static_cast<std::int32_t>(ec.vocab));
      Tensor table = random_tensor({ec.vocab, ec.dim}, ++seed);
      std::vector<std::int64_t> out_dims = ec.ids.dims();
      out_dims.push_back(ec.dim);
      Tensor dout = random_tensor(Shape(out_dims), ++seed);
      auto body = [&](Device d) {
        Tensor out = Tensor::full(Shape(out_dims), kNaN, d);
        Tensor dtable = Tensor::full({ec.vocab, ec.dim}, kNaN, d);  // garbage: must be overwritten
        Tensor ids_d = ids.to(d);
        ops::embedding_forward(ids_d, table.to(d), out);
        ops::embedding_backward(ids_d, dout.to(d), dtable);
        return std::pair{out, dtable};
      };
      auto want = run_ref(body);
      auto got = backend.run(body);
      EXPECT_EQ(got.first.to_vector(), want.first.to_vector());  // a copy: exact
      EXPECT_LE(rel_error(got.second, want.second), 1e-6);
    }
  }
}

TEST(Embedding, RepeatedIdsAddUpAndUnusedRowsAreZero) {
  Tensor ids = Tensor::from_vector({4}, std::vector<std::int32_t>{2, 0, 2, 2});
  Tensor dout = Tensor::from_vector({4, 2}, std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  auto body = [&](Device d) {
    Tensor dtable = Tensor::full({4, 2}, kNaN, d);
    ops::embedding_backward(ids.to(d), dout.to(d), dtable);
    return dtable.to_vector();
  };
  const std::vector<float> want{3, 4, 0, 0, 13, 16, 0, 0};
  EXPECT_EQ(run_ref(body), want);
  for (const auto& backend : backends_under_test()) EXPECT_EQ(backend.run(body), want) << backend.name;
}

TEST(Embedding, GradientOfTableWithRepeatedIds) {
  const std::int64_t vocab = 5, dim = 3;
  const std::vector<std::int32_t> ids{1, 4, 1, 0, 1, 4};
  const std::int64_t count = static_cast<std::int64_t>(ids.size());
  std::vector<double> table = testing::random_doubles(vocab * dim, 1);
  const std::vector<double> g = testing::random_doubles(count * dim, 2);
  std::vector<double> dtable(vocab * dim);
  ref::embedding_backward(count, vocab, dim, ids.data(), g.data(), dtable.data());
  testing::check_gradient("embedding dtable", table, dtable, [&](const std::vector<double>& t) {
    std::vector<double> out(count * dim);
    ref::embedding_forward(count, vocab, dim, ids.data(), t.data(), out.data());
    double sum = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) sum += g[i] * out[i];
    return sum;
  });
}

// Ids come from data files, so every backend checks them and names the
// position of the first bad one.
TEST(Embedding, OutOfRangeIdsThrowNamingThePosition) {
  const std::vector<std::string> names = [] {
    std::vector<std::string> n{"ref"};
    for (const auto& b : backends_under_test()) n.push_back(b.name);
    return n;
  }();
  for (std::int32_t bad : {10, -1, std::numeric_limits<std::int32_t>::max()}) {
    Tensor ids = Tensor::from_vector({5}, std::vector<std::int32_t>{0, 9, 3, bad, 1});
    Tensor table = random_tensor({10, 4}, 1), dout = random_tensor({5, 4}, 2);
    auto forward = [&](Device d) {
      ops::embedding_forward(ids.to(d), table.to(d), Tensor::empty({5, 4}, DType::f32, d));
      return 0;
    };
    auto backward = [&](Device d) {
      ops::embedding_backward(ids.to(d), dout.to(d), Tensor::empty({10, 4}, DType::f32, d));
      return 0;
    };
    auto check = [&](const std::string& backend, auto&& run) {
      SCOPED_TRACE(backend + " id " + std::to_string(bad));
      try {
        run();
        ADD_FAILURE() << "no exception";
      } catch (const std::out_of_range& e) {
        EXPECT_NE(std::string(e.what()).find("ids[3]"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
      }
    };
    check("ref", [&] { run_ref(forward); });
    check("ref", [&] { run_ref(backward); });
    for (const auto& backend : backends_under_test()) {
      check(backend.name, [&] { backend.run(forward); });
      check(backend.name, [&] { backend.run(backward); });
    }
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

TEST(EmbeddingErrors, NameTheOpAndBothShapes) {
  Tensor ids = Tensor::zeros({4, 3}, DType::i32), table = Tensor::zeros({10, 8});
  expect_invalid(
      [&] {
        ops::embedding_forward(ids, table, Tensor::zeros({4, 3, 7}));
      },
      {"embedding_forward", "[4, 3, 7]", "[4, 3, 8]"});
  expect_invalid(
      [&] {
        ops::embedding_backward(ids, Tensor::zeros({4, 8}), table);
      },
      {"embedding_backward", "[4, 8]", "[4, 3, 8]"});
  expect_invalid(
      [&] {
        ops::embedding_forward(Tensor::zeros({4, 3}), table, Tensor::zeros({4, 3, 8}));
      },
      {"embedding_forward", "ids", "i32"});
  expect_invalid(
      [&] {
        ops::embedding_forward(ids, Tensor::zeros({10, 8}, DType::f32, Device::cpu(1)), Tensor::zeros({4, 3, 8}));
      },
      {"embedding_forward", "[4, 3] on cpu:0", "[10, 8] on cpu:1"});
}

}  // namespace
}  // namespace troupe::kernels
