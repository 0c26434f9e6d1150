// Data-loader actor: one per replica. Owns that replica's shard of the
// training data (data::BatchIterator for its rank) and keeps up to
// `prefetch` batches ready.
//
// Protocol (data_loader_actor below; the compiler checks both sides):
//   next_batch            -> Batch     the next batch of this replica's shard
//   seek, Cursor          -> ok        continue from a saved cursor (resume)
//   reshard, LoaderView   -> ok        a new membership view: shard anew
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

// What a loader takes on entering a membership view: its replica's rank,
// the world, the per-replica batch, and where the rest of the epoch begins
// (models/data/epoch_plan.hpp, 5.). Local only.
struct LoaderView {
  std::int64_t batch_size = 1;
  int rank = 0, world = 1;
  data::Cursor cursor;
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::LoaderView)

namespace troupe::actors {

// `fill` is in the interface only because the loader sends it to itself (a
// typed actor may only send what its own interface names); from anyone
// else it gathers a batch ahead of time, which is harmless.
using data_loader_actor =
    caf::typed_actor<caf::replies_to<next_batch_atom>::with<Batch>,
                     caf::replies_to<seek_atom, data::Cursor>::with<caf::ok_atom>,
                     caf::replies_to<reshard_atom, LoaderView>::with<caf::ok_atom>, caf::reacts_to<fill_atom>>;

struct LoaderState {
  LoaderConfig config;
  std::unique_ptr<data::BatchIterator> batches;
  std::deque<Batch> ready;
  bool filling = false;  // a fill message is queued
  static inline const char* name = "data_loader";
};

data_loader_actor::behavior_type data_loader(data_loader_actor::stateful_pointer<LoaderState> self,
                                             LoaderConfig config);

}  // namespace troupe::actors
