// Partition: which parts of a model's flat parameter buffer each
// parameter-server shard owns.
//
// The flat buffer (models/model.hpp) holds every layer's parameters as one
// range, each starting on a 16-float boundary. A partition cuts it into
// pieces and gives each piece to one shard:
//   - a layer of at most `split_above` floats stays whole, and whole layers
//     go to the shards round-robin (TensorFlow 1's replica_device_setter);
//   - a layer bigger than `split_above` is cut into one piece per shard, of
//     near-equal sizes on 16-float boundaries (TF's MinSizePartitioner,
//     MXNet kvstore's big-array bound), so one big embedding or dense layer
//     does not leave every shard but one idle.
// The padding after a layer goes with the layer (or with its last piece),
// so every element of the buffer, padding included, belongs to exactly one
// shard and a shard's optimizer runs over plain vectors, as the single
// server's does. Adjacent pieces of one shard are merged: with one shard
// the partition is the whole buffer, one range.
//
// The packed layout: each shard's pieces, in buffer order, one after the
// other, shard 0 first. A shard holds its parameters and optimizer state
// packed; a replica packs its gradient into one staging buffer of this
// layout, so every shard's part is a contiguous view of it (no copy per
// shard), and unpacks each shard's answer into its parameters.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe::actors::ps {

using kernels::Tensor;

// Elements [offset, offset + count) of the flat buffer.
struct Range {
  std::int64_t offset = 0, count = 0;
  bool operator==(const Range& o) const { return offset == o.offset && count == o.count; }
};

// The default bound above which a layer is split: 1 Mi floats (4 MiB).
constexpr std::int64_t default_split_above = std::int64_t{1} << 20;

class Partition {
 public:
  // `total`: the flat buffer's size; `layers`: each layer with parameters
  // (models::Model::layer_ranges), in buffer order, inside [0, total).
  // Throws std::invalid_argument naming what is wrong (shards < 1,
  // split_above < 1, overlapping or unordered layers, a layer outside the
  // buffer). With more shards than pieces some shards own nothing
  // (size(s) == 0); without_empty_shards() drops them.
  static Partition make(std::int64_t total, const std::vector<Range>& layers, int shards,
                        std::int64_t split_above = default_split_above);
  // One shard owning the whole buffer: today's single server.
  static Partition whole(std::int64_t total);

  // The same pieces, numbered anew without the shards that own nothing.
  Partition without_empty_shards() const;

  int shards() const { return static_cast<int>(pieces_.size()); }
  std::int64_t total() const { return total_; }
  // Shard s's pieces, in buffer order; their sizes add up to size(s).
  const std::vector<Range>& pieces(int shard) const { return pieces_.at(static_cast<std::size_t>(shard)); }
  std::int64_t size(int shard) const { return sizes_.at(static_cast<std::size_t>(shard)); }
  // Where shard s's pieces begin in the packed layout.
  std::int64_t packed_offset(int shard) const { return offsets_.at(static_cast<std::size_t>(shard)); }
  // One shard owning the whole buffer as one range: the packed layout is
  // the flat buffer itself, so a replica pushes its gradient as it is and
  // takes the answer straight into its parameters (no packing copy).
  bool is_whole() const {
    return shards() == 1 && (total_ == 0 || (pieces_[0].size() == 1 && pieces_[0][0] == Range{0, total_}));
  }
  // "3 shards: 2 ranges, 1 120 floats; ..." for logs and errors.
  std::string describe() const;

  // Copies shard s's pieces of `flat` (total() elements, any device) into
  // `packed` (size(s) elements), and back. Copies across devices when the
  // two are on different ones.
  void pack(int shard, const Tensor& flat, const Tensor& packed) const;
  void unpack(int shard, const Tensor& packed, const Tensor& flat) const;
  // Every shard: `staging` has total() elements in the packed layout.
  void pack_all(const Tensor& flat, const Tensor& staging) const;
  // Shard s's part of a packed-layout buffer (a view, no copy).
  Tensor part(int shard, const Tensor& staging) const;
  // Ranges {offset, count} of the flat buffer (in order, not overlapping:
  // Model::decayed_ranges) as they lie in shard s's packed buffer, in order.
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges_in(
      int shard, const std::vector<std::pair<std::int64_t, std::int64_t>>& flat) const;

 private:
  std::int64_t total_ = 0;
  std::vector<std::vector<Range>> pieces_;
  std::vector<std::int64_t> sizes_, offsets_;
  void index();  // sizes_ and offsets_ from pieces_
};

}  // namespace troupe::actors::ps
