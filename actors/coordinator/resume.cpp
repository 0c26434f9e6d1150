#include "actors/coordinator/resume.hpp"

#include <algorithm>
#include <stdexcept>

namespace troupe::actors {

namespace {

std::int64_t per_epoch(data::PlanOptions plan, std::int64_t batch, int world) {
  plan.batch_size = batch;
  return data::batches_per_epoch(plan, {0, world});
}

// Checkpoints without a segment: clocks count from epoch boundaries.
ResumePlan plan_without_segment(const checkpoint::State& c, const std::string& path, int world, std::int64_t batch,
                                const data::PlanOptions& plan) {
  ResumePlan out;
  const std::int64_t bpe = std::max<std::int64_t>(1, per_epoch(plan, batch, world));
  const auto& saved = c.position.replica_clocks;
  if (static_cast<int>(saved.size()) == world) {
    for (std::uint64_t v : saved) out.clocks.push_back(static_cast<std::int64_t>(v));
  } else {
    const int w_old = std::max<int>(1, static_cast<int>(saved.size()));
    const std::int64_t from = per_epoch(plan, batch, w_old);
    const auto at = static_cast<std::int64_t>(c.position.cursor.batch_in_epoch);
    const std::int64_t clock =
        static_cast<std::int64_t>(c.position.cursor.epoch) * bpe + (from > 0 ? at * bpe / from : 0);
    out.clocks.assign(static_cast<std::size_t>(world), clock);
    out.note = path + " was written by " + std::to_string(w_old) +
               " replica(s) and records no data segment; resuming on " + std::to_string(world) +
               ": every replica continues at batch " + std::to_string(clock % bpe) + " of epoch " +
               std::to_string(clock / bpe + 1) +
               " in the new data order (some examples of this epoch may be seen twice or not at all)";
  }
  for (std::int64_t clock : out.clocks) out.cursors.push_back(data::Cursor{clock / bpe, clock % bpe, 0});
  return out;
}

}  // namespace

ResumePlan plan_resume(const checkpoint::State& c, const std::string& path, int world, std::int64_t batch,
                       const data::PlanOptions& plan) {
  const checkpoint::Segment& g = c.position.segment;
  if (!g.recorded()) return plan_without_segment(c, path, world, batch, plan);
  const auto& saved = c.position.replica_clocks;
  if (saved.size() != g.world)
    throw std::runtime_error(path + ": the data segment names " + std::to_string(g.world) + " replicas but " +
                             std::to_string(saved.size()) + " replica clocks are recorded");
  const auto epoch = static_cast<std::int64_t>(c.position.epoch);
  const auto seg_clock = static_cast<std::int64_t>(g.start_clock);
  const auto offset = static_cast<std::int64_t>(g.offset);
  for (std::uint64_t v : saved)
    if (static_cast<std::int64_t>(v) < seg_clock)
      throw std::runtime_error(path + ": a replica clock (" + std::to_string(v) +
                               ") lies before its data segment (from " + std::to_string(seg_clock) + ")");
  if (g.epoch_unscored > g.epoch_examples)
    throw std::runtime_error(path + ": the data segment counts " + std::to_string(g.epoch_unscored) +
                             " examples without a loss among only " + std::to_string(g.epoch_examples));
  ResumePlan out;
  out.start.epoch_examples = static_cast<std::int64_t>(g.epoch_examples);
  out.start.epoch_correct = static_cast<std::int64_t>(g.epoch_correct);
  out.start.epoch_unscored = static_cast<std::int64_t>(g.epoch_unscored);
  out.start.epoch_loss_sum = g.epoch_loss_sum;
  if (static_cast<int>(g.world) == world && static_cast<std::int64_t>(g.batch) == batch) {
    // The same replicas: each one exactly where it was.
    for (std::uint64_t v : saved) {
      const auto clock = static_cast<std::int64_t>(v);
      out.clocks.push_back(clock);
      out.cursors.push_back(data::Cursor{epoch, clock - seg_clock, offset});
    }
    out.start.segment_clock = seg_clock;
    out.start.offset = offset;
    out.start.steps_before = static_cast<std::int64_t>(g.steps_before);
    return out;
  }
  // Another world: a new segment from the first position not every replica
  // has used (in sync they all stand at one place).
  const auto [slow, fast] = std::minmax_element(saved.begin(), saved.end());
  const auto clock = static_cast<std::int64_t>(*slow);
  const std::int64_t old_global = static_cast<std::int64_t>(g.batch) * static_cast<std::int64_t>(g.world);
  const std::int64_t used = std::min<std::int64_t>(plan.examples, offset + (clock - seg_clock) * old_global);
  out.clocks.assign(static_cast<std::size_t>(world), clock);
  out.cursors.assign(static_cast<std::size_t>(world), data::Cursor{epoch, 0, used});
  out.start.segment_clock = clock;
  out.start.offset = used;
  out.start.steps_before = static_cast<std::int64_t>(g.steps_before) + (clock - seg_clock);
  out.note = path + " was written by " + std::to_string(g.world) + " replica(s) of batch " + std::to_string(g.batch) +
             ", resuming on " + std::to_string(world) + " of batch " + std::to_string(batch) + ": the rest of epoch " +
             std::to_string(epoch + 1) + " (" + std::to_string(plan.examples - used) + " examples after position " +
             std::to_string(used) + ") is split among them";
  if (*fast != *slow)
    out.note += "; the replicas stood at different steps (async), so up to " + std::to_string(*fast - *slow) +
                " step(s) of the faster replicas' data are used again";
  return out;
}

}  // namespace troupe::actors
