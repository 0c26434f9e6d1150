// Which examples each replica sees, batch by batch: a deterministic epoch
// plan, the part of tf.data's shuffle / shard / batch that decides order.
//
// 1. Permutation. Epoch e visits the examples in the order
//    epoch_permutation(n, seed, e, shuffle): the identity without shuffling,
//    else a Fisher-Yates shuffle driven by kernels::math::random_bits with a
//    stream seed derived from (seed, e). It is a pure function of its
//    arguments: every rank of every process computes the same one.
//
// 2. Sharding (tf.data's auto-shard by data). With `world` replicas and a
//    per-replica batch size b, rank r takes permutation positions
//    r, r + world, r + 2*world, ... and batches them b at a time. Step t of
//    rank r is therefore positions  t*B + r + k*world  (k = 0..b-1), with
//    B = b * world the global batch, and
//
//      INVARIANT: for every step t, the union over ranks of their step-t
//      batches is exactly global batch t, positions [t*B, (t+1)*B), of one
//      replica with batch B over the same permutation.
//
//    So synchronous training on W replicas with batch b sees the same
//    examples per step as 1 replica with batch b*W.
//
// 3. Batches per epoch, the same on every rank (a synchronous step needs all
//    of them):
//      drop_remainder:  floor(n / B); the last n mod B positions are skipped.
//      otherwise:       ceil(n / B); the last, partial global batch of
//                       m = n - (steps-1)*B examples is split by the same
//                       stride rule: rank r gets max(0, ceil((m - r) / world))
//                       of them, as even as possible (counts differ by at
//                       most one). A rank therefore gets a SHORT batch, or an
//                       EMPTY one when m <= r. Consumers must accept a batch
//                       of 0 examples (skip the forward pass, still join the
//                       step's all-reduce with a zero gradient, and weight
//                       gradients by example count).
//
// 4. Cursor: (epoch, batch index within the epoch) of the NEXT batch. A
//    BatchIterator started at a saved cursor yields exactly the batches the
//    original one would have yielded from there (checkpoints store it).
//
// 5. Segments (elastic membership). When the world changes inside an epoch,
//    the examples not yet used are split among the new members: a segment
//    starts at permutation position `offset` (every position before it was
//    used exactly once), and the rules above apply to the positions
//    offset..n-1 with the new world (and per-replica batch). A cursor's
//    `batch` counts batches from its segment's offset; the next epoch starts
//    a segment at offset 0 with the same world. So in sync mode every
//    example is used exactly once per epoch whatever joins or leaves.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace troupe::data {

// The visiting order of epoch `epoch`: a permutation of 0..n-1.
std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch,
                                            bool shuffle = true);

// A language model's text (Dataset::window): with offsets > 0, position
// p of an epoch is a window offset, not an example: drawn uniformly from
// [0, offsets) with replacement when shuffling (nanoGPT's random offsets;
// a pure function of (seed, epoch, p), so sharding, segments and cursors
// work as for examples), p * length in order when not. PlanOptions::examples
// is then the windows of an epoch (Dataset::size()).
struct TextWindows {
  std::int64_t offsets = 0;
  std::int64_t length = 0;
};

struct PlanOptions {
  using Windows = TextWindows;
  std::int64_t examples = 0;    // n, the dataset size
  std::int64_t batch_size = 1;  // per replica (b)
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_remainder = false;
  Windows windows = {};  // text only
};

// What epoch `epoch` visits, position by position: epoch_permutation()
// for examples, the window offsets above for text.
std::vector<std::int64_t> epoch_order(const PlanOptions& options, std::int64_t epoch);

struct Shard {
  int rank = 0;
  int world = 1;
};

struct Cursor {
  std::int64_t epoch = 0;
  std::int64_t batch = 0;   // index of the next batch within `epoch` (from `offset`)
  std::int64_t offset = 0;  // permutation positions of `epoch` used before this segment (5.)
  friend bool operator==(const Cursor& a, const Cursor& b) {
    return a.epoch == b.epoch && a.batch == b.batch && a.offset == b.offset;
  }
  friend bool operator!=(const Cursor& a, const Cursor& b) { return !(a == b); }
  std::string str() const;  // "epoch 3, batch 17"
};

// Batches per epoch for every rank (see 3. above). Throws
// std::invalid_argument for a batch size < 1, world < 1 or rank outside
// [0, world).
// With `offset`: the batches of the segment that starts there (5.).
std::int64_t batches_per_epoch(const PlanOptions& options, const Shard& shard, std::int64_t offset = 0);

// How many examples rank `shard.rank`'s batch at step t of the segment that
// starts at `offset` holds (3. and 5.): the batch size, fewer in a last
// partial global batch, 0 past the segment's end. EpochPlan::batch(t).size()
// without building the permutation.
std::int64_t batch_examples(const PlanOptions& options, const Shard& shard, std::int64_t offset, std::int64_t t);
// The examples of global batch t of that segment, every rank's together:
// b * world, fewer in the last, partial one, 0 past the end. A synchronous
// step's mean loss is over these (the gradient's 1 / count), so that the
// replicas of a partial last batch train as one replica would on it.
std::int64_t global_batch_examples(const PlanOptions& options, int world, std::int64_t offset, std::int64_t t);

// One epoch's order, with the batches of any rank and the global batches.
class EpochPlan {
 public:
  // The segment of `epoch` that starts at permutation position `offset`.
  EpochPlan(const PlanOptions& options, const Shard& shard, std::int64_t epoch, std::int64_t offset = 0);

  std::int64_t epoch() const { return epoch_; }
  std::int64_t offset() const { return offset_; }
  std::int64_t batches() const { return batches_; }
  const std::vector<std::int64_t>& permutation() const { return permutation_; }

  // Example indices of this plan's rank at step t in [0, batches()).
  std::vector<std::int64_t> batch(std::int64_t t) const;
  // The example indices global batch t would hold: one replica, batch b*world.
  std::vector<std::int64_t> global_batch(std::int64_t t) const;

 private:
  PlanOptions options_;
  Shard shard_;
  std::int64_t epoch_;
  std::int64_t offset_;
  std::int64_t batches_;
  std::vector<std::int64_t> permutation_;
};

// The endless sequence of one rank's batches, epoch after epoch.
class BatchIterator {
 public:
  BatchIterator(const PlanOptions& options, const Shard& shard, Cursor start = {});

  struct Batch {
    Cursor cursor;                      // where this batch sits
    std::vector<std::int64_t> indices;  // example indices (may be empty, see 3.)
    bool last_in_epoch = false;
    std::int64_t global_examples = 0;  // of the global batch it is part of (global_batch_examples)
  };

  // The next batch; advances the cursor (into the next epoch after the last
  // batch of one). Throws std::logic_error when an epoch has no batches
  // (drop_remainder with n < b*world), rather than looping forever.
  Batch next();
  // Where the next call to next() will read: save it in a checkpoint.
  Cursor cursor() const { return cursor_; }
  std::int64_t batches_per_epoch() const { return batches_; }

 private:
  // Batches of the cursor's epoch (its segment, when it has an offset).
  std::int64_t batches_now() const;
  PlanOptions options_;
  Shard shard_;
  std::int64_t batches_;  // of a whole epoch
  Cursor cursor_;
  std::shared_ptr<const EpochPlan> plan_;  // of cursor_.epoch, built lazily; shared by copies
};

}  // namespace troupe::data
