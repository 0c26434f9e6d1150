#include "actors/ps/partition.hpp"

#include <algorithm>
#include <stdexcept>

namespace troupe::actors::ps {

namespace {

// Piece boundaries inside a split layer fall on 16-float (64-byte) bounds,
// like the layers' own starts, so every shard's kernels see aligned rows.
constexpr std::int64_t piece_alignment = 16;

void add_piece(std::vector<Range>& pieces, Range r) {
  if (r.count <= 0) return;
  if (!pieces.empty() && pieces.back().offset + pieces.back().count == r.offset) {
    pieces.back().count += r.count;  // adjacent: one range
    return;
  }
  pieces.push_back(r);
}

}  // namespace

Partition Partition::make(std::int64_t total, const std::vector<Range>& layers, int shards, std::int64_t split_above) {
  if (shards < 1)
    throw std::invalid_argument("a parameter server needs at least 1 shard, not " + std::to_string(shards));
  if (split_above < 1)
    throw std::invalid_argument("the size above which a layer is split across shards must be at least 1 float, not " +
                                std::to_string(split_above));
  if (total < 0) throw std::invalid_argument("a parameter buffer of " + std::to_string(total) + " floats");
  std::int64_t end = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Range& l = layers[i];
    if (l.count < 1 || l.offset < end || l.offset + l.count > total)
      throw std::invalid_argument("layer range " + std::to_string(i) + " [" + std::to_string(l.offset) + ", " +
                                  std::to_string(l.offset + l.count) + ") is empty, overlaps the one before or " +
                                  "leaves the buffer of " + std::to_string(total) + " floats");
    end = l.offset + l.count;
  }
  Partition p;
  p.total_ = total;
  p.pieces_.assign(static_cast<std::size_t>(shards), {});
  int next = 0;  // round-robin cursor for whole layers
  for (std::size_t i = 0; i < layers.size(); ++i) {
    // The layer with the padding after it (and, for the first, anything
    // before it), up to where the next layer starts.
    const std::int64_t begin = i == 0 ? 0 : layers[i].offset;
    const std::int64_t stop = i + 1 < layers.size() ? layers[i + 1].offset : total;
    if (layers[i].count > split_above && shards > 1) {
      std::int64_t from = begin;
      for (int s = 0; s < shards; ++s) {
        std::int64_t to = stop;
        if (s + 1 < shards) {
          const std::int64_t cut = begin + (stop - begin) * (s + 1) / shards;
          to = std::max(from, begin + (cut - begin) / piece_alignment * piece_alignment);
        }
        add_piece(p.pieces_[static_cast<std::size_t>(s)], {from, to - from});
        from = to;
      }
    } else {
      add_piece(p.pieces_[static_cast<std::size_t>(next)], {begin, stop - begin});
      next = (next + 1) % shards;
    }
  }
  if (layers.empty()) add_piece(p.pieces_[0], {0, total});  // no layer has parameters: the padding-free rest
  p.index();
  return p;
}

Partition Partition::whole(std::int64_t total) { return make(total, {}, 1); }

Partition Partition::without_empty_shards() const {
  Partition p;
  p.total_ = total_;
  for (const auto& pieces : pieces_)
    if (!pieces.empty()) p.pieces_.push_back(pieces);
  if (p.pieces_.empty()) p.pieces_.emplace_back();  // an empty buffer still has its one (empty) shard
  p.index();
  return p;
}

void Partition::index() {
  sizes_.clear();
  offsets_.clear();
  std::int64_t at = 0;
  for (const auto& pieces : pieces_) {
    std::int64_t n = 0;
    for (const auto& r : pieces) n += r.count;
    offsets_.push_back(at);
    sizes_.push_back(n);
    at += n;
  }
}

std::string Partition::describe() const {
  std::string out = std::to_string(shards()) + (shards() == 1 ? " shard:" : " shards:");
  for (int s = 0; s < shards(); ++s)
    out += std::string(s ? ";" : "") + " " + std::to_string(pieces(s).size()) +
           (pieces(s).size() == 1 ? " range, " : " ranges, ") + std::to_string(size(s)) + " floats";
  return out;
}

void Partition::pack(int shard, const Tensor& flat, const Tensor& packed) const {
  std::int64_t at = 0;
  for (const auto& r : pieces(shard)) {
    packed.slice(at, {r.count}).copy_from(flat.slice(r.offset, {r.count}));
    at += r.count;
  }
}

void Partition::unpack(int shard, const Tensor& packed, const Tensor& flat) const {
  std::int64_t at = 0;
  for (const auto& r : pieces(shard)) {
    flat.slice(r.offset, {r.count}).copy_from(packed.slice(at, {r.count}));
    at += r.count;
  }
}

void Partition::pack_all(const Tensor& flat, const Tensor& staging) const {
  for (int s = 0; s < shards(); ++s) pack(s, flat, part(s, staging));
}

Tensor Partition::part(int shard, const Tensor& staging) const {
  return staging.slice(packed_offset(shard), {size(shard)});
}

std::vector<std::pair<std::int64_t, std::int64_t>> Partition::ranges_in(
    int shard, const std::vector<std::pair<std::int64_t, std::int64_t>>& flat) const {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  std::int64_t packed = 0;  // where the current piece starts in the shard's buffer
  for (const Range& piece : pieces(shard)) {
    const std::int64_t end = piece.offset + piece.count;
    for (const auto& [offset, count] : flat) {
      const std::int64_t b = std::max(offset, piece.offset), e = std::min(offset + count, end);
      if (b >= e) continue;
      const std::int64_t at = packed + (b - piece.offset);
      if (!out.empty() && out.back().first + out.back().second == at)
        out.back().second += e - b;
      else
        out.emplace_back(at, e - b);
    }
    packed += piece.count;
  }
  return out;
}

}  // namespace troupe::actors::ps
