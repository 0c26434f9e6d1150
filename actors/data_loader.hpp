// Data-loader actor: one per replica. Owns that replica's shard of the
// training data (data::BatchIterator for its rank) and keeps up to
// `prefetch` batches ready.
//
// Protocol:
//   next_batch            -> Batch     the next batch of this replica's shard
//   seek, Cursor          -> ok        continue from a saved cursor (resume)
//   reconfig, batch, rank, world, Cursor -> ok
//                                      a new membership view: shard anew
//   (self) fill                        gather one more batch while fewer than
//                                      `prefetch` are ready
//
// Demand-driven: a batch is gathered only to replace one that was taken, so
// the queue never holds more than `prefetch` batches however slow the device
// is, and a fast device finds its next batch ready. Each batch has its own
// tensors (no reuse), because the device may still be reading the previous
// one when the next is gathered.
#pragma once

#include <caf/all.hpp>

#include <deque>
#include <memory>

#include "actors/messages.hpp"
#include "models/data/augment.hpp"
#include "models/data/dataset.hpp"

namespace troupe::actors {

struct LoaderConfig {
  std::shared_ptr<const data::Dataset> dataset;
  data::PlanOptions plan;  // per-replica batch, seed, shuffle, drop_remainder
  data::Shard shard;
  data::Cursor start;
  int prefetch = 2;
  // Applied while prefetching; an example's draw is keyed by (plan.seed,
  // its epoch, its index), whichever replica loads it.
  data::Augmentation augment;
};

caf::behavior data_loader(caf::stateful_actor<struct LoaderState>* self, LoaderConfig config);

struct LoaderState {
  LoaderConfig config;
  std::unique_ptr<data::BatchIterator> batches;
  std::deque<Batch> ready;
  bool filling = false;  // a fill message is queued
  static inline const char* name = "data_loader";
};

}  // namespace troupe::actors
