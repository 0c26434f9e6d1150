// Where each replica's data continues when a job resumes from a checkpoint.
//
// A checkpoint of the actor runtime records every replica's clock and the
// data segment they train (checkpoint::Segment; models/data/epoch_plan.hpp,
// 5.). From them:
//   - the same number of replicas with the same batch: every replica
//     continues exactly where it was, at batch (clock - segment start) of the
//     segment, in every mode, whatever views came before;
//   - another number of replicas (or batch): the rest of the epoch, from the
//     first permutation position no replica has used, becomes a new segment
//     split among the new replicas. In sync every example of the epoch is
//     still used once; in async and ssp the replicas stood at different
//     places, so the examples the faster ones had used beyond the slowest
//     one are used again (the plan's note says how many steps that is).
// Checkpoints without a segment (older files, the single-replica trainer)
// are read as before: clocks counted from epoch boundaries, and on another
// world every replica continues at the same fraction of the epoch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/checkpoint/checkpoint.hpp"
#include "models/data/epoch_plan.hpp"

namespace troupe::actors {

// The data segment training starts in, and what its epoch trained before
// (a resume; the coordinator's defaults: the start epoch's beginning).
struct DataStart {
  std::int64_t segment_clock = -1;  // -1: the start epoch's first step (epoch x batches per epoch)
  std::int64_t offset = 0;          // permutation positions of the epoch used before the segment
  std::int64_t steps_before = 0;    // the epoch's steps before the segment
  std::int64_t epoch_examples = 0, epoch_correct = 0;
  std::int64_t epoch_unscored = 0;  // of epoch_examples: without a loss or correct count (view_start.hpp)
  double epoch_loss_sum = 0;
  bool mid_epoch() const { return offset > 0 || steps_before > 0 || epoch_examples > 0; }
};

struct ResumePlan {
  std::vector<std::int64_t> clocks;   // by rank
  std::vector<data::Cursor> cursors;  // by rank: each replica's next batch
  DataStart start;
  std::string note;  // for the user when the data order changes; empty otherwise
};

// `world` replicas of `batch` examples each resume from `c` (read from
// `path`, named in errors and notes). `plan` describes the data
// (examples, shuffle, seed, drop_remainder; its batch_size is ignored).
// Throws std::runtime_error for a checkpoint whose positions contradict
// each other.
ResumePlan plan_resume(const checkpoint::State& c, const std::string& path, int world, std::int64_t batch,
                       const data::PlanOptions& plan);

}  // namespace troupe::actors
