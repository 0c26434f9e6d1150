// The parameter-server partitioner (actors/ps/partition.hpp): every element
// of the flat buffer in exactly one shard, whole layers round-robin, big
// layers split across every shard on 16-float bounds, odd sizes, more
// shards than layers, bad input refused; and packing a buffer into the
// shard-major layout and back gives it back.
#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>

#include "actors/ps/partition.hpp"
#include "models/model.hpp"
#include "models/spec.hpp"

namespace troupe::actors::ps {
namespace {

// Which shard owns each element; fails the test on an element owned twice
// or not at all.
std::vector<int> owners(const Partition& p) {
  std::vector<int> owner(static_cast<std::size_t>(p.total()), -1);
  for (int s = 0; s < p.shards(); ++s) {
    std::int64_t n = 0;
    for (const auto& r : p.pieces(s)) {
      EXPECT_GT(r.count, 0) << "shard " << s << " has an empty range";
      for (std::int64_t i = r.offset; i < r.offset + r.count; ++i) {
        EXPECT_EQ(owner[static_cast<std::size_t>(i)], -1) << "element " << i << " in two shards";
        owner[static_cast<std::size_t>(i)] = s;
      }
      n += r.count;
    }
    EXPECT_EQ(n, p.size(s)) << "shard " << s;
  }
  for (std::size_t i = 0; i < owner.size(); ++i) EXPECT_NE(owner[i], -1) << "element " << i << " in no shard";
  std::int64_t sum = 0;
  for (int s = 0; s < p.shards(); ++s) {
    EXPECT_EQ(p.packed_offset(s), sum);
    sum += p.size(s);
  }
  EXPECT_EQ(sum, p.total());
  return owner;
}

TEST(PsPartition, OneShardIsTheWholeBufferInOneRange) {
  const Partition p = Partition::make(96, {{0, 10}, {16, 30}, {48, 40}}, 1, 8);
  ASSERT_EQ(p.shards(), 1);
  ASSERT_EQ(p.pieces(0).size(), 1u);
  EXPECT_EQ(p.pieces(0)[0], (Range{0, 96}));
  EXPECT_EQ(Partition::whole(96).pieces(0), p.pieces(0));
}

TEST(PsPartition, WholeLayersGoRoundRobinWithTheirPadding) {
  // Four small layers (sizes 10, 30, 5, 17; padded to 16-float bounds).
  const std::vector<Range> layers{{0, 10}, {16, 30}, {48, 5}, {64, 17}};
  const Partition p = Partition::make(96, layers, 2, 1000);
  owners(p);
  ASSERT_EQ(p.shards(), 2);
  EXPECT_EQ(p.pieces(0), (std::vector<Range>{{0, 16}, {48, 16}}));
  EXPECT_EQ(p.pieces(1), (std::vector<Range>{{16, 32}, {64, 32}}));
}

TEST(PsPartition, ABigLayerIsSplitAcrossEveryShardOnAlignedBounds) {
  // Layer 1 (1000 floats) is above the bound of 100; layers 0 and 2 are not.
  const std::vector<Range> layers{{0, 10}, {16, 1000}, {1024, 20}};
  const Partition p = Partition::make(1056, layers, 3, 100);
  const auto owner = owners(p);
  // Every shard holds part of the big layer.
  for (int s = 0; s < 3; ++s) {
    std::int64_t in_big = 0;
    for (std::int64_t i = 16; i < 1024; ++i) in_big += owner[static_cast<std::size_t>(i)] == s;
    EXPECT_GT(in_big, 300) << "shard " << s << " has too little of the split layer";
    EXPECT_LT(in_big, 370) << "shard " << s << " has too much of the split layer";
  }
  // Cuts inside it fall on 16-float bounds.
  for (std::int64_t i = 17; i < 1024; ++i)
    if (owner[static_cast<std::size_t>(i)] != owner[static_cast<std::size_t>(i - 1)]) {
      EXPECT_EQ(i % 16, 0) << i;
    }
  // The small layers stay whole.
  for (std::int64_t i = 1; i < 16; ++i) EXPECT_EQ(owner[static_cast<std::size_t>(i)], owner[0]);
  for (std::int64_t i = 1025; i < 1056; ++i) EXPECT_EQ(owner[static_cast<std::size_t>(i)], owner[1024]);
}

TEST(PsPartition, TheBoundIsConfigurable) {
  const std::vector<Range> layers{{0, 64}, {64, 64}};
  // 64 floats: at the bound, whole; just below it, split.
  const Partition whole = Partition::make(128, layers, 2, 64);
  EXPECT_EQ(whole.pieces(0), (std::vector<Range>{{0, 64}}));
  EXPECT_EQ(whole.pieces(1), (std::vector<Range>{{64, 64}}));
  const Partition split = Partition::make(128, layers, 2, 63);
  owners(split);
  EXPECT_EQ(split.pieces(0), (std::vector<Range>{{0, 32}, {64, 32}}));
  EXPECT_EQ(split.pieces(1), (std::vector<Range>{{32, 32}, {96, 32}}));
}

TEST(PsPartition, OddSizesAreCoveredExactly) {
  // Unaligned, unpadded layers of odd sizes, a gap before the first, a
  // split layer shorter than 16 floats per shard.
  for (int shards = 1; shards <= 7; ++shards) {
    const std::vector<Range> layers{{3, 1}, {4, 7}, {11, 33}, {44, 101}, {145, 2}};
    for (std::int64_t bound : {1, 5, 40, 1000}) {
      SCOPED_TRACE("shards " + std::to_string(shards) + ", bound " + std::to_string(bound));
      owners(Partition::make(151, layers, shards, bound));
    }
  }
}

TEST(PsPartition, MoreShardsThanLayersLeavesSomeEmptyAndTheyCanBeDropped) {
  const Partition p = Partition::make(48, {{0, 10}, {16, 20}}, 5, 1000);
  owners(p);
  ASSERT_EQ(p.shards(), 5);
  EXPECT_EQ(p.size(2), 0);
  EXPECT_EQ(p.size(4), 0);
  const Partition used = p.without_empty_shards();
  owners(used);
  ASSERT_EQ(used.shards(), 2);
  EXPECT_EQ(used.pieces(0), p.pieces(0));
  EXPECT_EQ(used.pieces(1), p.pieces(1));
}

TEST(PsPartition, BadInputIsRefusedWithTheReason) {
  EXPECT_THROW(Partition::make(10, {}, 0), std::invalid_argument);
  EXPECT_THROW(Partition::make(10, {}, 2, 0), std::invalid_argument);
  EXPECT_THROW(Partition::make(10, {{0, 11}}, 2), std::invalid_argument);         // leaves the buffer
  EXPECT_THROW(Partition::make(20, {{0, 8}, {4, 8}}, 2), std::invalid_argument);  // overlaps
  EXPECT_THROW(Partition::make(20, {{0, 0}}, 2), std::invalid_argument);          // empty
  try {
    Partition::make(10, {}, -3);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("-3"), std::string::npos) << e.what();
  }
}

TEST(PsPartition, PackingIntoTheShardLayoutAndBackIsTheIdentity) {
  const std::vector<Range> layers{{0, 10}, {16, 1000}, {1024, 20}};
  const Partition p = Partition::make(1056, layers, 3, 100);
  std::vector<float> values(1056);
  std::iota(values.begin(), values.end(), 1.0f);
  const Tensor flat = Tensor::from_vector({1056}, values);
  const Tensor staging = Tensor::zeros({1056});
  p.pack_all(flat, staging);
  EXPECT_NE(staging.to_vector(), values) << "three shards and a split layer must reorder something";
  const Tensor back = Tensor::zeros({1056});
  for (int s = 0; s < p.shards(); ++s) {
    const Tensor part = p.part(s, staging);
    EXPECT_EQ(part.numel(), p.size(s));
    EXPECT_EQ(part.to_vector().front(), values[static_cast<std::size_t>(p.pieces(s).front().offset)]);
    p.unpack(s, part, back);
  }
  EXPECT_EQ(back.to_vector(), values);
}

// The real models' layouts: every partition of them covers the buffer.
TEST(PsPartition, RealModelsAreCoveredForOneToFourShards) {
  for (const char* name : {"mlp", "cnn"}) {
    models::DataShape images;
    images.input = kernels::Shape({1, 28, 28});
    images.classes = 10;
    const models::ModelSpec spec = models::zoo_spec(name, images);
    models::Model model(spec, kernels::Device::cpu());
    std::vector<Range> layers;
    for (const auto& [offset, count] : model.layer_ranges()) layers.push_back({offset, count});
    ASSERT_FALSE(layers.empty());
    for (int shards = 1; shards <= 4; ++shards) {
      SCOPED_TRACE(std::string(name) + ", " + std::to_string(shards) + " shards");
      const Partition p = Partition::make(model.parameter_count(), layers, shards, 50000);
      owners(p);
    }
  }
}

}  // namespace
}  // namespace troupe::actors::ps
