#include "actors/data_loader.hpp"

namespace troupe::actors {

namespace {

Batch gather(LoaderState& s) {
  data::BatchIterator::Batch b = s.batches->next();
  const data::Dataset& d = *s.config.dataset;
  Batch out;
  out.features = d.make_feature_batch(s.config.plan.batch_size);
  out.labels = d.make_label_batch(s.config.plan.batch_size);
  out.examples = d.gather(b.indices, out.features, out.labels);
  s.config.augment.apply(out.features, out.examples, b.indices, s.config.plan.seed, b.cursor.epoch);
  out.cursor = b.cursor;
  out.last_in_epoch = b.last_in_epoch;
  out.global_examples = b.global_examples;
  return out;
}

void request_fill(data_loader_actor::stateful_pointer<LoaderState> self) {
  auto& s = self->state;
  if (!s.filling && static_cast<int>(s.ready.size()) < s.config.prefetch) {
    s.filling = true;
    self->send(self, fill_atom::value);
  }
}

}  // namespace

data_loader_actor::behavior_type data_loader(data_loader_actor::stateful_pointer<LoaderState> self,
                                             LoaderConfig config) {
  self->state.config = std::move(config);
  auto& cfg = self->state.config;
  if (cfg.prefetch < 1) cfg.prefetch = 1;
  self->state.batches = std::make_unique<data::BatchIterator>(cfg.plan, cfg.shard, cfg.start);
  request_fill(self);
  return {
      [=](next_batch_atom) -> Batch {
        auto& s = self->state;
        Batch b = s.ready.empty() ? gather(s) : std::move(s.ready.front());
        if (!s.ready.empty()) s.ready.pop_front();
        request_fill(self);
        return b;
      },
      [=](fill_atom) {
        auto& s = self->state;
        s.filling = false;
        if (static_cast<int>(s.ready.size()) < s.config.prefetch) s.ready.push_back(gather(s));
        request_fill(self);
      },
      [=](seek_atom, data::Cursor cursor) -> caf::ok_atom {
        auto& s = self->state;
        s.ready.clear();
        s.batches = std::make_unique<data::BatchIterator>(s.config.plan, s.config.shard, cursor);
        request_fill(self);
        return caf::ok_atom::value;
      },
      // A new membership view: this replica's rank, the world and the
      // per-replica batch change, and the rest of the epoch is split anew
      // from the cursor's offset (models/data/epoch_plan.hpp, 5.).
      [=](reshard_atom, const LoaderView& v) -> caf::ok_atom {
        auto& s = self->state;
        s.ready.clear();
        s.config.plan.batch_size = v.batch_size;
        s.config.shard = data::Shard{v.rank, v.world};
        s.batches = std::make_unique<data::BatchIterator>(s.config.plan, s.config.shard, v.cursor);
        request_fill(self);
        return caf::ok_atom::value;
      },
  };
}

}  // namespace troupe::actors
