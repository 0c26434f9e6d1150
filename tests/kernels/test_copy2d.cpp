// copy_2d: channel concatenation and its split (the backward of a concat)
// against indexing by hand, arbitrary offsets and pitches against ref with
// every untouched element left as it was, and the bounds errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/ops.hpp"
#include "tests/kernels/harness.hpp"
#include "tests/kernels/op_checks.hpp"

namespace troupe::kernels {
namespace {

using namespace testing;
using Outputs = std::vector<std::vector<float>>;

constexpr float kSentinel = -12345.0f;

struct ConcatCase {
  std::int64_t n, c1, c2, h, w;
};

TEST(Copy2d, ConcatenatesAndSplitsChannels) {
  const ConcatCase cases[] = {{2, 3, 1, 4, 5},
                              {1, 1, 1, 1, 1},
                              {3, 1, 2, 7, 3},
                              {64, 32, 64, 13, 13},
                              {5, 7, 9, 1, 1}};  // h = w = 1: [n, c] features
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 1500;
    for (const auto& cc : cases) {
      const std::int64_t hw = cc.h * cc.w, c = cc.c1 + cc.c2;
      SCOPED_TRACE("n " + std::to_string(cc.n) + ", c " + std::to_string(cc.c1) + " + " + std::to_string(cc.c2) +
                   ", h*w " + std::to_string(hw));
      const Tensor a = random_tensor({cc.n, cc.c1, cc.h, cc.w}, ++seed),
                   b = random_tensor({cc.n, cc.c2, cc.h, cc.w}, ++seed);
      const Outputs out = backend.run([&](Device d) {
        Tensor y = Tensor::full({cc.n, c, cc.h, cc.w}, kSentinel, d);
        ops::copy_2d(a.to(d), 0, cc.c1 * hw, y, 0, c * hw, cc.n, cc.c1 * hw);
        ops::copy_2d(b.to(d), 0, cc.c2 * hw, y, cc.c1 * hw, c * hw, cc.n, cc.c2 * hw);
        Tensor da = Tensor::full(a.shape(), kSentinel, d), db = Tensor::full(b.shape(), kSentinel, d);
        ops::copy_2d(y, 0, c * hw, da, 0, cc.c1 * hw, cc.n, cc.c1 * hw);
        ops::copy_2d(y, cc.c1 * hw, c * hw, db, 0, cc.c2 * hw, cc.n, cc.c2 * hw);
        return Outputs{y.to_vector(), da.to_vector(), db.to_vector()};
      });
      const std::vector<float> av = a.to_vector(), bv = b.to_vector();
      std::vector<float> want;
      for (std::int64_t i = 0; i < cc.n; ++i) {
        want.insert(want.end(), av.begin() + i * cc.c1 * hw, av.begin() + (i + 1) * cc.c1 * hw);
        want.insert(want.end(), bv.begin() + i * cc.c2 * hw, bv.begin() + (i + 1) * cc.c2 * hw);
      }
      EXPECT_TRUE(same_values(out[0], want)) << "concat";
      EXPECT_TRUE(same_values(out[1], av)) << "split, first part";
      EXPECT_TRUE(same_values(out[2], bv)) << "split, second part";
    }
  }
}

TEST(Copy2d, OffsetsAndPitchesMatchRef) {
  auto backends = backends_under_test();
  TROUPE_REQUIRE_BACKENDS(backends);
  struct Case {
    std::int64_t src_numel, src_offset, src_pitch, dst_numel, dst_offset, dst_pitch, rows, cols;
  };
  const Case cases[] = {
      {100, 3, 10, 100, 7, 12, 7, 9},   // both strided, offsets at both ends
      {50, 0, 5, 50, 0, 5, 10, 5},      // contiguous: one copy
      {10, 4, 100, 20, 13, 6, 1, 6},    // one row: a pitch past the end is never used
      {1000, 1, 7, 300, 0, 3, 100, 3},  // a strided gather into a dense block
      {64, 0, 1, 64, 0, 1, 64, 1},      // one column
      {200000, 17, 1001, 300000, 5, 1500, 199, 1000},
  };
  for (const auto& backend : backends) {
    SCOPED_TRACE(backend.name);
    std::uint64_t seed = 1600;
    for (const Case& k : cases) {
      SCOPED_TRACE(std::to_string(k.rows) + " rows of " + std::to_string(k.cols));
      const Tensor src = random_tensor({k.src_numel}, ++seed);
      auto body = [&](Device d) {
        Tensor dst = Tensor::full({k.dst_numel}, kSentinel, d);
        ops::copy_2d(src.to(d), k.src_offset, k.src_pitch, dst, k.dst_offset, k.dst_pitch, k.rows, k.cols);
        return dst.to_vector();
      };
      EXPECT_TRUE(same_values(backend.run(body), run_ref(body)));
    }
  }
}

TEST(Copy2d, NothingToCopyIsAllowed) {
  for (const auto& backend : ref_and_backends_under_test()) {
    SCOPED_TRACE(backend.name);
    const std::vector<float> out = backend.run([&](Device d) {
      Tensor src = Tensor::full({4}, 1.0f, d), dst = Tensor::full({4}, kSentinel, d);
      ops::copy_2d(src, 0, 4, dst, 0, 4, 0, 4);
      ops::copy_2d(src, 0, 4, dst, 0, 4, 3, 0);
      return dst.to_vector();
    });
    EXPECT_TRUE(same_values(out, std::vector<float>(4, kSentinel)));
  }
}

TEST(Copy2dErrors, OutOfBoundsNamesTheOpAndTheTensor) {
  const Tensor src = Tensor::zeros({2, 3, 4, 4}), dst = Tensor::zeros({2, 5, 4, 4});
  // 2 rows of 48 with pitch 48 from offset 1: the last row ends at 97 > 96.
  expect_invalid_argument([&] { ops::copy_2d(src, 1, 48, dst, 0, 80, 2, 48); },
                          {"ops::copy_2d", "src", "[2, 3, 4, 4]", "96 elements"});
  // dst offset 48, pitch 80: the second row ends at 48 + 80 + 48 = 176 > 160.
  expect_invalid_argument([&] { ops::copy_2d(src, 0, 48, dst, 48, 80, 2, 48); },
                          {"ops::copy_2d", "dst", "[2, 5, 4, 4]", "160 elements"});
  expect_invalid_argument([&] { ops::copy_2d(src, 0, 47, dst, 0, 80, 2, 48); }, {"ops::copy_2d", "pitch", "cols"});
  expect_invalid_argument([&] { ops::copy_2d(src, -1, 48, dst, 0, 80, 1, 48); }, {"ops::copy_2d", "offset"});
  expect_invalid_argument([&] { ops::copy_2d(src, 0, 48, dst, 0, 80, -1, 48); }, {"ops::copy_2d", "rows"});
  // A pitch so large that (rows - 1) * pitch would overflow: still a bounds error.
  expect_invalid_argument([&] { ops::copy_2d(src, 0, std::int64_t{1} << 62, dst, 0, 80, 4, 1); },
                          {"ops::copy_2d", "src", "96 elements"});
  // Regions of one buffer that overlap.
  expect_invalid_argument([&] { ops::copy_2d(dst, 0, 10, dst, 5, 10, 4, 10); }, {"ops::copy_2d", "overlap"});
  expect_invalid_argument([&] { ops::copy_2d(Tensor::zeros({4}, DType::i32), 0, 4, dst, 0, 4, 1, 4); },
                          {"ops::copy_2d", "i32[4]", "f32"});
}

}  // namespace
}  // namespace troupe::kernels
