#include "models/data/epoch_plan.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <cmath>  // before random.hpp, which uses sqrt/log/cos without including it

#include "kernels/math/random.hpp"

namespace troupe::data {

namespace {

// Keeps the shuffle's stream apart from other users of the same seed
// (initialisers, dropout): "SHUFFLE" in ASCII.
constexpr std::uint64_t shuffle_domain = 0x0053485546464c45ULL;

// A uniform integer in [0, bound) from 64 random bits (Lemire's multiply-
// shift; the bias is below bound / 2^64, far below anything measurable).
std::uint64_t bounded(std::uint64_t bits, std::uint64_t bound) {
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(bits) * bound) >> 64);
}

// The windows' stream, apart from the shuffle's: "WINDOWS" in ASCII.
std::uint64_t seed_of_windows(std::uint64_t seed) { return seed ^ 0x0057494e444f5753ULL; }

void check(const PlanOptions& options, const Shard& shard) {
  if (options.examples < 0)
    throw std::invalid_argument("epoch plan: examples must be >= 0, got " + std::to_string(options.examples));
  if (options.batch_size < 1)
    throw std::invalid_argument("epoch plan: batch_size must be >= 1, got " + std::to_string(options.batch_size));
  if (options.windows.offsets > 0 && options.windows.length < 1)
    throw std::invalid_argument("epoch plan: text windows need a length >= 1, got " +
                                std::to_string(options.windows.length));
  if (shard.world < 1 || shard.rank < 0 || shard.rank >= shard.world)
    throw std::invalid_argument("epoch plan: need 0 <= rank < world, got rank " + std::to_string(shard.rank) +
                                ", world " + std::to_string(shard.world));
}

}  // namespace

std::string Cursor::str() const {
  return "epoch " + std::to_string(epoch) + ", batch " + std::to_string(batch) +
         (offset ? " after position " + std::to_string(offset) : "");
}

std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch, bool shuffle) {
  if (n < 0) throw std::invalid_argument("epoch_permutation: n must be >= 0, got " + std::to_string(n));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (!shuffle) return order;
  const std::uint64_t stream = kernels::math::random_bits(seed ^ shuffle_domain, static_cast<std::uint64_t>(epoch));
  // Fisher-Yates: position i takes a uniform pick among positions 0..i.
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j =
        bounded(kernels::math::random_bits(stream, static_cast<std::uint64_t>(i)), static_cast<std::uint64_t>(i) + 1);
    std::swap(order[static_cast<std::size_t>(i)], order[j]);
  }
  return order;
}

std::vector<std::int64_t> epoch_order(const PlanOptions& options, std::int64_t epoch) {
  const auto& w = options.windows;
  if (w.offsets <= 0) return epoch_permutation(options.examples, options.seed, epoch, options.shuffle);
  std::vector<std::int64_t> order(static_cast<std::size_t>(options.examples));
  if (!options.shuffle) {
    for (std::int64_t p = 0; p < options.examples; ++p) order[static_cast<std::size_t>(p)] = p * w.length;
    return order;
  }
  const std::uint64_t stream =
      kernels::math::random_bits(seed_of_windows(options.seed), static_cast<std::uint64_t>(epoch));
  for (std::int64_t p = 0; p < options.examples; ++p)
    order[static_cast<std::size_t>(p)] = static_cast<std::int64_t>(bounded(
        kernels::math::random_bits(stream, static_cast<std::uint64_t>(p)), static_cast<std::uint64_t>(w.offsets)));
  return order;
}

std::int64_t batches_per_epoch(const PlanOptions& options, const Shard& shard, std::int64_t offset) {
  check(options, shard);
  if (offset < 0 || offset > options.examples)
    throw std::invalid_argument("epoch plan: offset " + std::to_string(offset) + " outside an epoch of " +
                                std::to_string(options.examples) + " examples");
  const std::int64_t left = options.examples - offset;
  const std::int64_t global = options.batch_size * shard.world;
  return options.drop_remainder ? left / global : (left + global - 1) / global;
}

std::int64_t batch_examples(const PlanOptions& options, const Shard& shard, std::int64_t offset, std::int64_t t) {
  if (t < 0 || t >= data::batches_per_epoch(options, shard, offset)) return 0;
  const std::int64_t world = shard.world;
  const std::int64_t first = offset + t * options.batch_size * world + shard.rank;
  if (first >= options.examples) return 0;
  return std::min(options.batch_size, (options.examples - first + world - 1) / world);
}

std::int64_t global_batch_examples(const PlanOptions& options, int world, std::int64_t offset, std::int64_t t) {
  const Shard first{0, world};
  if (t < 0 || t >= data::batches_per_epoch(options, first, offset)) return 0;
  const std::int64_t global = options.batch_size * world;
  return std::min(global, options.examples - offset - t * global);
}

EpochPlan::EpochPlan(const PlanOptions& options, const Shard& shard, std::int64_t epoch, std::int64_t offset)
    : options_(options),
      shard_(shard),
      epoch_(epoch),
      offset_(offset),
      batches_(data::batches_per_epoch(options, shard, offset)),
      permutation_(epoch_order(options, epoch)) {
  if (epoch < 0) throw std::invalid_argument("epoch plan: epoch must be >= 0, got " + std::to_string(epoch));
}

std::vector<std::int64_t> EpochPlan::batch(std::int64_t t) const {
  if (t < 0 || t >= batches_)
    throw std::out_of_range("epoch plan: batch " + std::to_string(t) + " of an epoch with " + std::to_string(batches_) +
                            " batches");
  const std::int64_t world = shard_.world;
  const std::int64_t first = offset_ + t * options_.batch_size * world + shard_.rank;
  std::vector<std::int64_t> indices;
  indices.reserve(static_cast<std::size_t>(options_.batch_size));
  for (std::int64_t k = 0; k < options_.batch_size; ++k) {
    const std::int64_t position = first + k * world;
    if (position >= options_.examples) break;
    indices.push_back(permutation_[static_cast<std::size_t>(position)]);
  }
  return indices;
}

std::vector<std::int64_t> EpochPlan::global_batch(std::int64_t t) const {
  if (t < 0 || t >= batches_)
    throw std::out_of_range("epoch plan: global batch " + std::to_string(t) + " of an epoch with " +
                            std::to_string(batches_) + " batches");
  const std::int64_t global = options_.batch_size * shard_.world;
  const auto begin = permutation_.begin() + offset_ + t * global;
  const auto end = permutation_.begin() + std::min(options_.examples, offset_ + (t + 1) * global);
  return {begin, end};
}

BatchIterator::BatchIterator(const PlanOptions& options, const Shard& shard, Cursor start)
    : options_(options), shard_(shard), batches_(data::batches_per_epoch(options, shard)), cursor_(start) {
  if (start.offset < 0 || start.offset > options.examples)
    throw std::invalid_argument("BatchIterator: cursor (" + start.str() + ") outside an epoch of " +
                                std::to_string(options.examples) + " examples");
  const std::int64_t now = batches_now();
  if (start.epoch < 0 || start.batch < 0 || start.batch > now)
    throw std::invalid_argument("BatchIterator: cursor (" + start.str() + ") outside an epoch of " +
                                std::to_string(now) + " batches");
  // The end of a segment is the start of the next epoch (an empty segment
  // too: its epoch has nothing left for this world).
  if (cursor_.batch == now && (now > 0 || cursor_.offset > 0)) cursor_ = {cursor_.epoch + 1, 0, 0};
}

std::int64_t BatchIterator::batches_now() const {
  return cursor_.offset == 0 ? batches_ : data::batches_per_epoch(options_, shard_, cursor_.offset);
}

BatchIterator::Batch BatchIterator::next() {
  if (batches_ == 0)
    throw std::logic_error("BatchIterator: an epoch has no batches (" + std::to_string(options_.examples) +
                           " examples, global batch " + std::to_string(options_.batch_size * shard_.world) +
                           (options_.drop_remainder ? ", drop_remainder)" : ")"));
  if (!plan_ || plan_->epoch() != cursor_.epoch || plan_->offset() != cursor_.offset)
    plan_ = std::make_shared<const EpochPlan>(options_, shard_, cursor_.epoch, cursor_.offset);
  Batch out;
  out.cursor = cursor_;
  out.indices = plan_->batch(cursor_.batch);
  out.last_in_epoch = cursor_.batch + 1 == plan_->batches();
  out.global_examples = global_batch_examples(options_, shard_.world, cursor_.offset, cursor_.batch);
  cursor_ =
      out.last_in_epoch ? Cursor{cursor_.epoch + 1, 0, 0} : Cursor{cursor_.epoch, cursor_.batch + 1, cursor_.offset};
  return out;
}

}  // namespace troupe::data
