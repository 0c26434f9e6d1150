// Data augmentation (models/data/augment.hpp) against a plain reference:
// zero-pad, crop, flip, each example's draw a function of (seed, epoch,
// example index) only.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/math/random.hpp"
#include "kernels/tensor.hpp"
#include "models/data/augment.hpp"

namespace troupe::data {
namespace {

using kernels::Shape;
using kernels::Tensor;

// The anchor's augment() for one image: pad by P with zeros, take the HxW
// window at (y, x) of the padded image, flip it left-right.
std::vector<float> reference(const std::vector<float>& img, int c, int h, int w, int p, Augmentation::Draw d) {
  const int ph = h + 2 * p, pw = w + 2 * p;
  std::vector<float> padded(static_cast<std::size_t>(c * ph * pw), 0.0f);
  for (int ch = 0; ch < c; ++ch)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) padded[(ch * ph + y + p) * pw + x + p] = img[(ch * h + y) * w + x];
  std::vector<float> out(img.size());
  for (int ch = 0; ch < c; ++ch)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) out[(ch * h + y) * w + x] = padded[(ch * ph + y + d.y) * pw + x + d.x];
  if (d.flip)
    for (int ch = 0; ch < c; ++ch)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w / 2; ++x) std::swap(out[(ch * h + y) * w + x], out[(ch * h + y) * w + w - 1 - x]);
  return out;
}

TEST(Augment, ParsesItsFormsAndRefusesOthersNamingThem) {
  EXPECT_TRUE(Augmentation::parse("").empty());
  EXPECT_TRUE(Augmentation::parse("none").empty());
  const Augmentation both = Augmentation::parse("crop:2,flip");
  EXPECT_EQ(both.crop_padding, 2);
  EXPECT_TRUE(both.flip);
  EXPECT_EQ(both.str(), "crop:2,flip");
  EXPECT_EQ(Augmentation::parse("flip,crop:3").str(), "crop:3,flip");
  EXPECT_EQ(Augmentation::parse("flip").str(), "flip");
  for (const char* bad : {"crop", "crop:", "crop:0", "crop:-1", "crop:x", "crop:100", "rotate", "flip,flip", ","}) {
    try {
      Augmentation::parse(bad);
      ADD_FAILURE() << bad << " was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("valid forms: none, flip, crop:P"), std::string::npos) << e.what();
    }
  }
}

TEST(Augment, EachRowIsTheReferencesCropAndFlipOfItsExample) {
  const int c = 2, h = 7, w = 5, rows = 40;
  const Augmentation a = Augmentation::parse("crop:2,flip");
  Tensor batch = Tensor::empty(Shape({rows + 3, c, h, w}));  // rows past `rows` stay as they are
  float* data = batch.f32();
  for (std::int64_t i = 0; i < batch.numel(); ++i) data[i] = kernels::math::random_uniform(5, i) + 0.5f;
  const std::vector<float> before(data, data + batch.numel());
  std::vector<std::int64_t> indices;
  for (int r = 0; r < rows; ++r) indices.push_back(1000 + 7 * r);
  a.apply(batch, rows, indices, /*seed=*/3, /*epoch=*/2);
  const int plane = c * h * w;
  std::set<std::pair<int, int>> offsets;
  int flips = 0;
  for (int r = 0; r < rows; ++r) {
    const Augmentation::Draw d = a.draw(3, 2, indices[r]);
    offsets.insert({d.x, d.y});
    flips += d.flip;
    const std::vector<float> img(before.begin() + r * plane, before.begin() + (r + 1) * plane);
    const std::vector<float> want = reference(img, c, h, w, 2, d);
    for (int i = 0; i < plane; ++i) ASSERT_EQ(data[r * plane + i], want[i]) << "row " << r << " element " << i;
  }
  for (int i = rows * plane; i < static_cast<int>(batch.numel()); ++i) ASSERT_EQ(data[i], before[i]);
  EXPECT_GT(offsets.size(), 10u) << "the crops hardly vary";
  EXPECT_GT(flips, 5);
  EXPECT_LT(flips, 35);
}

TEST(Augment, ADrawDependsOnSeedEpochAndExampleOnly) {
  const Augmentation a = Augmentation::parse("crop:2,flip");
  // Over many examples every offset in [0, 4] x [0, 4] and both flips occur,
  // about uniformly.
  int counts[5][5] = {};
  int flips = 0;
  const int n = 25000;
  for (int i = 0; i < n; ++i) {
    const auto d = a.draw(0, 0, i);
    ASSERT_GE(d.x, 0);
    ASSERT_LE(d.x, 4);
    ASSERT_GE(d.y, 0);
    ASSERT_LE(d.y, 4);
    ++counts[d.y][d.x];
    flips += d.flip;
  }
  for (auto& row : counts)
    for (int k : row) EXPECT_NEAR(k, n / 25, 150);
  EXPECT_NEAR(flips, n / 2, 300);
  // Another epoch or seed draws anew; the same triple, the same draw, in
  // whichever batch row the example lands.
  int same_epoch = 0, same_seed = 0;
  for (int i = 0; i < 1000; ++i) {
    const auto d = a.draw(0, 0, i), e = a.draw(0, 1, i), s = a.draw(1, 0, i), again = a.draw(0, 0, i);
    EXPECT_TRUE(d.x == again.x && d.y == again.y && d.flip == again.flip);
    same_epoch += d.x == e.x && d.y == e.y && d.flip == e.flip;
    same_seed += d.x == s.x && d.y == s.y && d.flip == s.flip;
  }
  EXPECT_LT(same_epoch, 100);  // 1 in 50 by chance
  EXPECT_LT(same_seed, 100);
  Tensor one = Tensor::full(Shape({1, 1, 6, 6}), 1.0f), other = Tensor::full(Shape({3, 1, 6, 6}), 1.0f);
  a.apply(one, 1, {42}, 9, 4);
  a.apply(other, 3, {7, 8, 42}, 9, 4);
  EXPECT_EQ(one.to_vector(), other.slice(2 * 36, Shape({1, 1, 6, 6})).to_vector());
}

TEST(Augment, OnlyImagesAreAugmented) {
  const Augmentation a = Augmentation::parse("crop:2");
  EXPECT_NO_THROW(a.check_images(Shape({1, 28, 28}), kernels::DType::f32));
  EXPECT_THROW(a.check_images(Shape({784}), kernels::DType::f32), std::invalid_argument);
  EXPECT_THROW(a.check_images(Shape({1, 28, 28}), kernels::DType::i32), std::invalid_argument);
  EXPECT_THROW(Augmentation::parse("crop:9").check_images(Shape({1, 4, 4}), kernels::DType::f32),
               std::invalid_argument);
  EXPECT_NO_THROW(Augmentation().check_images(Shape({784}), kernels::DType::f32));
  Tensor flat = Tensor::zeros(Shape({2, 784}));
  EXPECT_THROW(a.apply(flat, 2, {0, 1}, 0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace troupe::data
