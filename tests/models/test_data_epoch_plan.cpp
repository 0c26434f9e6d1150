// The epoch plan: seeded permutations, sharding by rank, batch counts,
// cursors. The union property is what synchronous training relies on.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "models/data/epoch_plan.hpp"

namespace troupe::data {
namespace {

bool is_permutation_of_range(std::vector<std::int64_t> order) {
  std::sort(order.begin(), order.end());
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<std::int64_t>(i)) return false;
  }
  return true;
}

TEST(DataPermutation, DeterministicAndAPermutation) {
  const auto a = epoch_permutation(1000, 42, 3);
  EXPECT_EQ(a, epoch_permutation(1000, 42, 3));
  EXPECT_TRUE(is_permutation_of_range(a));
  std::vector<std::int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a, identity);
  EXPECT_EQ(epoch_permutation(1000, 42, 3, /*shuffle=*/false), identity);
  EXPECT_TRUE(epoch_permutation(0, 1, 0).empty());
  EXPECT_EQ(epoch_permutation(1, 1, 0), std::vector<std::int64_t>{0});
}

TEST(DataPermutation, DependsOnSeedAndEpoch) {
  const auto base = epoch_permutation(500, 7, 0);
  EXPECT_NE(base, epoch_permutation(500, 8, 0));
  EXPECT_NE(base, epoch_permutation(500, 7, 1));
  EXPECT_NE(epoch_permutation(500, 7, 1), epoch_permutation(500, 7, 2));
}

// A pinned value: the order must not change between builds or hosts, or
// resumed checkpoints would see other examples.
TEST(DataPermutation, PinnedOrder) {
  EXPECT_EQ(epoch_permutation(10, 1234, 5), (std::vector<std::int64_t>{4, 2, 3, 5, 9, 0, 6, 8, 7, 1}));
}

TEST(DataPermutation, RoughlyUniformFirstElement) {
  // Where does example 0 land, over 4000 epochs of n = 4? Each slot ~1000.
  std::vector<int> counts(4, 0);
  for (int epoch = 0; epoch < 4000; ++epoch) {
    const auto order = epoch_permutation(4, 99, epoch);
    ++counts[static_cast<std::size_t>(std::find(order.begin(), order.end(), 0) - order.begin())];
  }
  for (const int c : counts) EXPECT_NEAR(c, 1000, 150);
}

TEST(DataSharding, UnionOfRankBatchesIsTheGlobalBatch) {
  for (const int world : {1, 2, 3}) {
    for (const bool drop : {false, true}) {
      for (const std::int64_t n : {0, 1, 5, 17, 24, 100}) {
        for (const std::int64_t b : {1, 4, 7}) {
          SCOPED_TRACE("world " + std::to_string(world) + " drop " + std::to_string(drop) + " n " + std::to_string(n) +
                       " b " + std::to_string(b));
          PlanOptions options{n, b, /*shuffle=*/true, /*seed=*/11, drop};
          const std::int64_t steps = batches_per_epoch(options, {0, world});
          const std::int64_t global = b * world;
          EXPECT_EQ(steps, drop ? n / global : (n + global - 1) / global);
          // One replica with batch b * world over the same permutation.
          PlanOptions single = options;
          single.batch_size = global;
          const EpochPlan reference(single, {0, 1}, 2);
          EXPECT_EQ(reference.batches(), steps);
          std::vector<EpochPlan> ranks;
          for (int r = 0; r < world; ++r) ranks.emplace_back(options, Shard{r, world}, 2);
          std::multiset<std::int64_t> seen_all;
          for (std::int64_t t = 0; t < steps; ++t) {
            std::multiset<std::int64_t> united;
            std::size_t smallest = SIZE_MAX, largest = 0;
            for (const auto& plan : ranks) {
              EXPECT_EQ(plan.batches(), steps);
              const auto batch = plan.batch(t);
              EXPECT_LE(batch.size(), static_cast<std::size_t>(b));
              smallest = std::min(smallest, batch.size());
              largest = std::max(largest, batch.size());
              united.insert(batch.begin(), batch.end());
            }
            const auto want = reference.batch(t);
            EXPECT_EQ(united, std::multiset<std::int64_t>(want.begin(), want.end())) << "step " << t;
            EXPECT_EQ(ranks[0].global_batch(t), want);
            EXPECT_LE(largest - smallest, 1u) << "uneven split at step " << t;
            if (drop || t + 1 < steps) {
              EXPECT_EQ(smallest, static_cast<std::size_t>(b));
            }
            seen_all.insert(united.begin(), united.end());
          }
          // Every example at most once per epoch; all of them without drop.
          EXPECT_EQ(std::set<std::int64_t>(seen_all.begin(), seen_all.end()).size(), seen_all.size());
          EXPECT_EQ(static_cast<std::int64_t>(seen_all.size()), drop ? steps * global : n);
        }
      }
    }
  }
}

TEST(DataSharding, LastPartialBatchCanBeEmptyForHighRanks) {
  // n = 13, b = 4, world = 3: one full global batch of 12, then 1 example.
  PlanOptions options{13, 4, false, 0, false};
  EXPECT_EQ(batches_per_epoch(options, {0, 3}), 2);
  EXPECT_EQ(EpochPlan(options, {0, 3}, 0).batch(1), std::vector<std::int64_t>{12});
  EXPECT_TRUE(EpochPlan(options, {1, 3}, 0).batch(1).empty());
  EXPECT_TRUE(EpochPlan(options, {2, 3}, 0).batch(1).empty());
  // Unshuffled, rank 1's first batch is positions 1, 4, 7, 10.
  EXPECT_EQ(EpochPlan(options, {1, 3}, 0).batch(0), (std::vector<std::int64_t>{1, 4, 7, 10}));
  options.drop_remainder = true;
  EXPECT_EQ(batches_per_epoch(options, {2, 3}), 1);
}

TEST(DataSharding, RejectsBadArguments) {
  EXPECT_THROW(batches_per_epoch({10, 0}, {0, 1}), std::invalid_argument);
  EXPECT_THROW(batches_per_epoch({10, 2}, {2, 2}), std::invalid_argument);
  EXPECT_THROW(batches_per_epoch({10, 2}, {0, 0}), std::invalid_argument);
  EXPECT_THROW(EpochPlan({10, 2}, {0, 1}, 0).batch(5), std::out_of_range);
  PlanOptions tiny{3, 2, true, 0, true};
  BatchIterator empty(tiny, {0, 2});
  EXPECT_EQ(empty.batches_per_epoch(), 0);
  EXPECT_THROW(empty.next(), std::logic_error);
}

TEST(DataIterator, WalksEpochsInOrder) {
  PlanOptions options{10, 3, true, 5, false};
  BatchIterator it(options, {1, 2});
  EXPECT_EQ(it.batches_per_epoch(), 2);
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    const EpochPlan plan(options, {1, 2}, epoch);
    for (std::int64_t t = 0; t < 2; ++t) {
      EXPECT_EQ(it.cursor(), (Cursor{epoch, t}));
      const auto batch = it.next();
      EXPECT_EQ(batch.cursor, (Cursor{epoch, t}));
      EXPECT_EQ(batch.indices, plan.batch(t));
      EXPECT_EQ(batch.last_in_epoch, t == 1);
    }
  }
  EXPECT_EQ(it.cursor(), (Cursor{3, 0}));
}

TEST(DataIterator, ResumesExactlyFromASavedCursor) {
  PlanOptions options{50, 4, true, 77, true};
  for (const int rank : {0, 2}) {
    BatchIterator original(options, {rank, 3});
    for (int i = 0; i < 5; ++i) original.next();  // into epoch 1 (4 batches an epoch)
    const Cursor saved = original.cursor();
    EXPECT_EQ(saved, (Cursor{1, 1}));
    BatchIterator resumed(options, {rank, 3}, saved);
    for (int i = 0; i < 10; ++i) {
      const auto a = original.next();
      const auto b = resumed.next();
      EXPECT_EQ(a.cursor, b.cursor);
      EXPECT_EQ(a.indices, b.indices);
    }
    // Copies carry on independently from the same place.
    BatchIterator copy = resumed;
    EXPECT_EQ(copy.next().indices, resumed.next().indices);
  }
  // A cursor at the end of an epoch is the start of the next one.
  BatchIterator at_end(options, {0, 3}, Cursor{0, 4});
  EXPECT_EQ(at_end.cursor(), (Cursor{1, 0}));
  EXPECT_THROW(BatchIterator(options, {0, 3}, Cursor{0, 5}), std::invalid_argument);
  EXPECT_THROW(BatchIterator(options, {0, 3}, Cursor{-1, 0}), std::invalid_argument);
}

}  // namespace
}  // namespace troupe::data

namespace troupe::data {
namespace {

// Elastic membership (epoch_plan.hpp, 5.): the world changes twice inside an
// epoch (3 replicas, then 2, then 5, and the per-replica batch changes too);
// each segment starts where the last ended, and every example of the epoch
// is used exactly once. Counted over random sizes, with and without the
// partial last batch.
TEST(EpochPlanSegments, EveryExampleExactlyOnceWhateverJoinsOrLeaves) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 500);
    PlanOptions o{n, 1 + static_cast<std::int64_t>(rng() % 9), true, rng(), false};
    const std::int64_t epoch = static_cast<std::int64_t>(rng() % 4);
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    std::int64_t offset = 0;
    const int worlds[] = {3, 2, 5};
    for (int s = 0; s < 3; ++s) {
      const int world = worlds[s];
      if (s > 0) o.batch_size = 1 + static_cast<std::int64_t>(rng() % 9);
      const std::int64_t batches = batches_per_epoch(o, {0, world}, offset);
      // The last segment runs to the epoch's end; the others stop early.
      const std::int64_t steps = s == 2 ? batches : std::min<std::int64_t>(batches, rng() % (batches + 1));
      for (int r = 0; r < world; ++r) {
        BatchIterator it(o, {r, world}, Cursor{epoch, 0, offset});
        for (std::int64_t t = 0; t < steps; ++t) {
          const auto b = it.next();
          EXPECT_EQ(b.cursor.epoch, epoch);
          EXPECT_EQ(b.cursor.offset, offset);
          for (auto i : b.indices) ++seen[static_cast<std::size_t>(i)];
        }
        // After the last batch of a segment the iterator is in the next epoch.
        if (steps == batches) {
          EXPECT_EQ(it.cursor(), (Cursor{epoch + 1, 0, 0}));
        }
      }
      offset = std::min(n, offset + steps * o.batch_size * world);
    }
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_EQ(seen[static_cast<std::size_t>(i)], 1) << "example " << i << ", trial " << trial;
  }
}

// batch_examples, which the coordinator uses to count the examples of a
// step whose report never came (a lost node's last step), is the size of
// the batch EpochPlan hands that rank, on random segments.
TEST(EpochPlanSegments, BatchExamplesIsTheSizeOfTheRanksBatch) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 300);
    const PlanOptions o{n, 1 + static_cast<std::int64_t>(rng() % 9), true, rng(), (rng() & 1) != 0};
    const int world = 1 + static_cast<int>(rng() % 5);
    const std::int64_t offset = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n + 1));
    for (int r = 0; r < world; ++r) {
      const EpochPlan plan(o, {r, world}, 0, offset);
      for (std::int64_t t = -1; t <= plan.batches(); ++t) {
        const std::int64_t expected =
            t >= 0 && t < plan.batches() ? static_cast<std::int64_t>(plan.batch(t).size()) : 0;
        ASSERT_EQ(batch_examples(o, {r, world}, offset, t), expected)
            << "n " << n << ", batch " << o.batch_size << ", world " << world << ", rank " << r << ", offset " << offset
            << ", step " << t;
      }
    }
  }
}

// A global batch's examples are every rank's batch together: the sum of
// batch_examples over the ranks, fewer than batch x world only in the last,
// partial batch; and the iterator's batches carry it.
TEST(EpochPlanSegments, GlobalBatchExamplesIsTheSumOverTheRanks) {
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 300);
    const PlanOptions o{n, 1 + static_cast<std::int64_t>(rng() % 9), true, rng(), (rng() & 1) != 0};
    const int world = 1 + static_cast<int>(rng() % 5);
    const std::int64_t offset = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n + 1));
    const std::int64_t steps = batches_per_epoch(o, {0, world}, offset);
    for (std::int64_t t = -1; t <= steps; ++t) {
      std::int64_t sum = 0;
      for (int r = 0; r < world; ++r) sum += batch_examples(o, {r, world}, offset, t);
      ASSERT_EQ(global_batch_examples(o, world, offset, t), sum) << "n " << n << ", world " << world << ", step " << t;
      if (t >= 0 && t + 1 < steps) {
        ASSERT_EQ(sum, o.batch_size * world);
      }
    }
  }
  BatchIterator it(PlanOptions{10, 2, false, 0, false}, {1, 2});
  EXPECT_EQ(it.next().global_examples, 4);
  EXPECT_EQ(it.next().global_examples, 4);
  const BatchIterator::Batch last = it.next();
  EXPECT_TRUE(last.last_in_epoch);
  EXPECT_EQ(last.global_examples, 2);  // 10 = 4 + 4 + 2
  EXPECT_EQ(last.indices.size(), 1u);  // rank 1's share of the 2
}

TEST(EpochPlanSegments, RejectsAnOffsetOutsideTheEpoch) {
  PlanOptions o{100, 4, true, 1, false};
  EXPECT_THROW(batches_per_epoch(o, {0, 2}, 101), std::invalid_argument);
  EXPECT_THROW(BatchIterator(o, {0, 2}, Cursor{0, 0, -1}), std::invalid_argument);
  EXPECT_EQ(batches_per_epoch(o, {0, 2}, 100), 0);
  // A cursor at an empty segment is at the start of the next epoch.
  EXPECT_EQ(BatchIterator(o, {0, 2}, Cursor{3, 0, 100}).cursor(), (Cursor{4, 0, 0}));
}

}  // namespace
}  // namespace troupe::data
