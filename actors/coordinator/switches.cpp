// The coordinator actor: gathering the model state, checkpoints and mode switches at a step
// boundary (a switch moves the parameters and optimizer state between the
// replicas and the parameter server, so that nothing is lost or applied twice).
#include "actors/coordinator/state.hpp"

namespace troupe::actors::coord {

// ---- state gathering and transitions ----

// A step-boundary action could not reach the parameter server's shards on
// ps tasks: a ps task was lost (the front hears of it from its link before
// the job's thread hears it from the membership) or leaves. The shards are
// placed anew first (and, in async, the state rolled back), which replaces
// what the action would have read or written, so it is skipped (said in
// the log) instead of failing the job.
bool skipped_for_rollback(Self* self, const std::string& action, const caf::error& e) {
  auto& s = self->state;
  if (!s.config.ps_tasks) return false;
  const std::string why = self->system().render(e);
  if (!s.replace_due) {
    if (s.mode.uses_server()) {
      need_rollback(self, action + " failed (" + why + ")");
    } else {
      s.replace_due = true;
      log_line(action + " failed (" + why + "): a ps task is lost; its shards are placed anew at the next step " +
               "boundary (in sync mode the replicas hold the state: nothing is lost)");
    }
  }
  log_line(action + " skipped: " + why + " (the parameter-server shards are placed anew first)");
  return true;
}

void fail_job(Self* self, const std::string& what) {
  self->state.result.error = what;
  finish(self);
}

// The checkpoint of `state` (the replicas' or the server's, fetched at a
// step boundary) at the coordinator's position.
// after_failure: the job is failing (a replica or a node is lost), so the
// clocks the coordinator saw may lag what the state holds: in sync a replica
// may have completed a step whose report never arrived. The position is then
// taken from the state itself (replica 0's clock, or the server's step).
checkpoint::State make_checkpoint(const CoordinatorState& st, const ReplicaState& state, bool after_failure) {
  checkpoint::State c;
  c.model.name = st.config.model_name;
  c.model.spec = st.config.model_spec;
  c.parameters = state.parameters.to_vector();
  // The state's own model state (a replica's, in sync just after the
  // replicas agreed), else the replicas' mean (the state is the server's).
  c.model_state = state.model_state.defined() ? state.model_state.to_vector() : st.model_state_mean;
  c.optimizer.name = st.config.optimizer.name;
  c.optimizer.spec = st.config.optimizer.text();
  for (const auto& [name, buffer] : state.buffers) c.optimizer.buffers.push_back({name, buffer.to_vector()});
  for (const auto& [name, value] : state.scalars) c.optimizer.scalars[name] = value;
  std::int64_t global_step = st.global_step;
  // Every replica's place in its shard (equal in sync mode).
  std::vector<std::int64_t> clocks = st.clocks;
  if (after_failure && state.clock >= 0) {
    if (st.mode.uses_server()) {
      // The server's parameters reflect exactly the pushes it applied:
      // its step, and each replica's clock as of its last applied push.
      global_step = state.clock;
      if (state.replica_clocks.size() == clocks.size()) clocks = state.replica_clocks;
    } else {
      clocks.assign(clocks.size(), state.clock);
      global_step = st.global_at_base + (state.clock - st.clock_at_base);
    }
  }
  const std::int64_t clock = clocks[0];
  // The data cursor: the epoch, and the batch within it as if the current
  // world had trained the whole epoch (exact without membership changes;
  // after one, the positions used are seg_offset + steps * global batch).
  for (std::int64_t r : clocks) c.position.replica_clocks.push_back(static_cast<std::uint64_t>(r));
  c.position.global_step = static_cast<std::uint64_t>(global_step);
  c.position.epoch = static_cast<std::uint64_t>(st.epoch);
  {
    const std::int64_t in_segment = std::max<std::int64_t>(0, clock - st.seg_start);
    const std::int64_t global = std::max<std::int64_t>(1, st.batch * st.config.replicas);
    const std::int64_t used = std::min(st.config.dataset_examples, st.seg_offset + in_segment * global);
    const bool at_end = clock >= st.seg_start + st.seg_steps;
    c.position.cursor.epoch = static_cast<std::uint64_t>(at_end ? st.epoch + 1 : st.epoch);
    c.position.cursor.batch_in_epoch = static_cast<std::uint64_t>(at_end ? 0 : used / global);
  }
  c.position.cursor.shuffle_seed = st.config.seed;
  // The segment, so a resume continues every replica's data exactly
  // (actors/coordinator/resume.hpp), whatever views came before.
  c.position.segment.start_clock = static_cast<std::uint64_t>(st.seg_start);
  c.position.segment.offset = static_cast<std::uint64_t>(st.seg_offset);
  c.position.segment.world = static_cast<std::uint32_t>(st.config.replicas);
  c.position.segment.batch = static_cast<std::uint64_t>(st.batch);
  c.position.segment.steps_before = static_cast<std::uint64_t>(st.epoch_steps_before);
  c.position.segment.epoch_examples = static_cast<std::uint64_t>(st.epoch_examples);
  c.position.segment.epoch_unscored = static_cast<std::uint64_t>(st.epoch_unscored);
  c.position.segment.epoch_loss_sum = st.epoch_loss_sum;
  c.position.segment.epoch_correct = static_cast<std::uint64_t>(st.epoch_correct);
  c.schedule.spec = st.config.schedule->spec();
  c.schedule.evaluated_at_step = static_cast<std::uint64_t>(global_step);
  c.schedule.evaluated_at_epoch = static_cast<std::uint64_t>(st.epoch);
  c.schedule.learning_rate = current_lr(st);
  c.rng.seed = st.config.seed;
  c.rng.counter = static_cast<std::uint64_t>(clock);
  c.update_mode = st.mode.str();
  return c;
}

// The newest consistent state, kept for a rollback when the shards run on
// ps tasks.
void keep_rollback_point(CoordinatorState& st, checkpoint::State c, std::string label, bool saved) {
  if (!st.config.ps_tasks) return;
  st.rollback_point = std::move(c);
  st.rollback_label = std::move(label);
  st.rollback_point_saved = saved;
}

void checkpoint_now(Self* self, std::function<void(const std::string& path)> then, bool after_failure) {
  // The replicas' running statistics agree first (not while the job fails:
  // a replica may be gone, and the state is saved as it stands).
  if (!after_failure && self->state.config.model_state_count > 0) {
    agree_model_state(self, [=]() { save_checkpoint(self, then, after_failure); });
    return;
  }
  save_checkpoint(self, then, after_failure);
}

void save_checkpoint(Self* self, std::function<void(const std::string& path)> then, bool after_failure) {
  auto& s = self->state;
  fetch_state(
      self,
      [=](const ReplicaState& state) {
        auto& st = self->state;
        checkpoint::State c = make_checkpoint(st, state, after_failure);
        const std::int64_t global_step = static_cast<std::int64_t>(c.position.global_step);
        std::string path;
        try {
          path = st.config.checkpoints->save(c);
        } catch (const std::exception& e) {
          fail_job(self, e.what());
          return;
        }
        keep_rollback_point(st, std::move(c), path, true);
        st.last_checkpoint_step = st.global_step;
        st.last_checkpoint_time = Clock::now();
        st.timed_checkpoint_queued = false;
        if (st.config.callbacks.on_checkpoint) st.config.callbacks.on_checkpoint(path, global_step);
        if (st.config.timeline) st.config.timeline->instant("checkpoint", global_step, path);
        then(path);
      },
      [=]() { then(""); });
  (void)s;
}

// BatchNorm's running statistics are each replica's own (without sync
// batch norm each normalises by its own batch): before an evaluation or a
// checkpoint every replica takes their mean, so that both see one estimate
// and, in sync, the replicas agree again. A replica that cannot be asked
// (lost meanwhile) is left out; if none answers, nothing changes.
void agree_model_state(Self* self, std::function<void()> then) {
  auto& s = self->state;
  if (s.config.model_state_count == 0) {
    then();
    return;
  }
  std::vector<std::size_t> ranks;
  for (std::size_t r = 0; r < s.config.devices.size(); ++r)
    if (alive(s, r)) ranks.push_back(r);
  struct Gathered {
    std::vector<double> sum;
    int answers = 0;
    std::size_t pending = 0;
  };
  auto g = std::make_shared<Gathered>();
  g->sum.assign(static_cast<std::size_t>(s.config.model_state_count), 0.0);
  g->pending = ranks.size();
  auto hand_out = [=]() {
    auto& st = self->state;
    if (g->answers == 0) {
      log_line("the replicas' running statistics could not be read; each keeps its own");
      then();
      return;
    }
    st.model_state_mean.assign(g->sum.size(), 0.0f);
    for (std::size_t i = 0; i < g->sum.size(); ++i) st.model_state_mean[i] = static_cast<float>(g->sum[i] / g->answers);
    const Tensor mean =
        Tensor::from_vector({static_cast<std::int64_t>(st.model_state_mean.size())}, st.model_state_mean);
    auto left = std::make_shared<std::size_t>(ranks.size());
    for (std::size_t r : ranks)
      self->request(st.config.devices[r], st.config.timeout, model_state_atom::value, mean)
          .then(
              [=](caf::ok_atom) {
                if (--*left == 0) then();
              },
              [=](caf::error&) {
                if (--*left == 0) then();
              });
  };
  if (ranks.empty()) {
    then();
    return;
  }
  for (std::size_t r : ranks)
    self->request(s.config.devices[r], s.config.timeout, model_state_atom::value)
        .then(
            [=](const Tensor& t) {
              if (t.numel() == static_cast<std::int64_t>(g->sum.size())) {
                const auto v = t.to_vector();
                for (std::size_t i = 0; i < v.size(); ++i) g->sum[i] += v[i];
                ++g->answers;
              }
              if (--g->pending == 0) hand_out();
            },
            [=](caf::error&) {
              if (--g->pending == 0) hand_out();
            });
}

// Whether the state the job would checkpoint is whole: not while a ps task's
// shards are lost and the rollback that restores a consistent one is due.
bool state_is_whole(const CoordinatorState& s) { return !(s.rollback_due && s.mode.uses_server()); }

// `skipped`: a ps task was lost meanwhile (skipped_for_rollback), no switch.
void switch_mode(Self* self, Mode to, std::function<void()> then, std::function<void()> skipped) {
  auto& s = self->state;
  const Mode from = s.mode;
  auto failed = [=](const caf::error& e) {
    if (skipped_for_rollback(self, "switching to " + to.str(), e))
      skipped();
    else
      fail_job(self, "switching to " + to.str() + ": " + self->system().render(e));
  };
  auto done = [=]() {
    auto& st = self->state;
    st.mode = to;
    st.result.mode_history.push_back(to.str() + "@" + std::to_string(st.global_step));
    if (st.config.timeline) st.config.timeline->instant("mode switch", st.global_step, from.str() + " -> " + to.str());
    if (st.config.callbacks.on_mode_switch) st.config.callbacks.on_mode_switch(st.global_step, to.str());
    then();
  };
  if (from.uses_server() == to.uses_server()) {
    done();
  } else if (s.replace_due) {
    // The shards are not placed (a ps task was lost, and none may be left):
    // neither direction can move the state through them now.
    log_line("switch to " + to.str() + " skipped: the parameter-server shards are being placed again");
    skipped();
  } else if (to.uses_server()) {
    // sync -> async/ssp: replicas are identical; the server takes replica 0's state.
    self->request(s.config.devices[0], s.config.timeout, get_state_atom::value)
        .then(
            [=](const ReplicaState& state) {
              self->request(self->state.config.parameter_server, self->state.config.timeout, set_state_atom::value,
                            state)
                  .then([=](caf::ok_atom) { done(); }, [=](caf::error& e) { failed(e); });
            },
            [=](caf::error& e) { failed(e); });
  } else {
    // async/ssp -> sync: every replica takes the server's parameters and
    // optimizer state, so they start the synchronous phase identical.
    self->request(s.config.parameter_server, s.config.timeout, get_state_atom::value)
        .then(
            [=](const ReplicaState& state) {
              auto remaining = std::make_shared<int>(self->state.config.replicas);
              for (auto& device : self->state.config.devices)
                self->request(device, self->state.config.timeout, set_state_atom::value, state)
                    .then(
                        [=](caf::ok_atom) {
                          if (--*remaining == 0) done();
                        },
                        [=](caf::error& e) { fail_job(self, "switching to sync: " + self->system().render(e)); });
            },
            [=](caf::error& e) { failed(e); });
  }
}

}  // namespace troupe::actors::coord
