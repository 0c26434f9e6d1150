// The coordinator actor's step boundaries: the actions run when the job is quiescent (epoch end,
// evaluation, view change, switch, checkpoint, stop), in order, and the
// job's end.
#include "actors/coordinator/state.hpp"

namespace troupe::actors::coord {

// `skipped` (when given): a ps task was lost meanwhile (skipped_for_rollback).
void evaluate(Self* self, std::function<void(const models::EpochResult&)> then, std::function<void()> skipped) {
  auto& s = self->state;
  auto run = [=]() {
    self->request(self->state.config.devices[0], self->state.config.timeout, evaluate_atom::value)
        .then(
            [=](const models::EpochResult& r) {
              auto& st = self->state;
              if (st.config.timeline)
                st.config.timeline->instant(
                    "evaluation", st.global_step,
                    "test loss " + std::to_string(r.test_loss) + ", test accuracy " + std::to_string(r.test_accuracy));
              then(r);
            },
            [=](caf::error& e) { fail_job(self, "evaluating: " + self->system().render(e)); });
  };
  if (!s.mode.uses_server()) {
    agree_model_state(self, run);
    return;
  }
  // Evaluate the server's parameters: replica 0 takes them first (it would
  // receive them with its next push anyway), with the replicas' mean
  // running statistics.
  auto run_agreed = [=]() { agree_model_state(self, run); };
  self->request(s.config.parameter_server, s.config.timeout, get_state_atom::value)
      .then(
          [=](const ReplicaState& state) {
            self->request(self->state.config.devices[0], self->state.config.timeout, set_state_atom::value, state)
                .then([=](caf::ok_atom) { run_agreed(); },
                      [=](caf::error& e) { fail_job(self, "evaluating: " + self->system().render(e)); });
          },
          [=](caf::error& e) {
            if (skipped && skipped_for_rollback(self, "evaluating", e))
              skipped();
            else
              fail_job(self, "evaluating: " + self->system().render(e));
          });
}

void reply(Action& a, int status, const std::string& message) {
  if (a.has_promise) a.promise.deliver(ControlReply{status, message});
}

void run_actions(Self* self) {
  auto& s = self->state;
  if (s.finished) return;
  // A membership change that arrived while the boundary's actions ran.
  if (s.actions.empty() && s.view_change_due && !s.forming) s.actions.push_back({ActionKind::view_change, s.mode});
  if (s.actions.empty() && s.waiting_for_ps) {
    // No ps task for the shards: nothing runs until one joins (ps_joined
    // forms the view again) or --wait-timeout passes (halt).
    s.busy = false;
    s.pausing = true;
    return;
  }
  if (s.actions.empty()) {
    // Resume: new bases, tell the server where training stands, grant again.
    s.busy = false;
    s.pausing = false;
    s.clock_at_base = s.clocks[0];
    s.global_at_base = s.global_step;
    s.last_lr = current_lr(s);
    if (s.announced_epoch != s.epoch && s.epoch < s.config.epochs) {
      s.announced_epoch = s.epoch;
      if (s.config.callbacks.on_epoch_begin) s.config.callbacks.on_epoch_begin(s.epoch, s.seg_steps, s.last_lr);
    }
    self->request(s.config.parameter_server, s.config.timeout, position_atom::value, Position{s.global_step, s.epoch},
                  s.clocks)
        .then(
            [=](caf::ok_atom) {
              self->state.t_resume = Clock::now();
              extend(self);
            },
            [=](caf::error& e) {
              // A ps task lost as training resumed: the boundary that places
              // its shards anew is already running, or starts now.
              if (skipped_for_rollback(self, "resuming", e)) {
                auto& st = self->state;
                st.view_change_due = true;
                st.pausing = true;
                if (!st.busy && !st.forming && quiescent(st)) on_quiescent(self);
                return;
              }
              fail_job(self, "resuming: " + self->system().render(e));
            });
    return;
  }
  Action a = std::move(s.actions.front());
  s.actions.pop_front();
  auto next = [=]() { run_actions(self); };
  switch (a.kind) {
    case ActionKind::epoch_end:
      evaluate(
          self,
          [=](const models::EpochResult& eval) {
            auto& st = self->state;
            models::EpochResult r = eval;
            r.epoch = st.epoch;
            r.step = st.global_step;
            const std::int64_t scored = st.epoch_examples - st.epoch_unscored;
            r.train_loss = scored > 0 ? st.epoch_loss_sum / double(scored) : 0;
            r.train_accuracy =
                st.config.classification && scored > 0
                    ? double(st.epoch_correct) / (double(scored) * double(st.config.positions_per_example))
                    : std::nan("");
            // The rate of the epoch's last step, as models::Trainer reports.
            r.lr = st.config.schedule->at(std::max<std::int64_t>(0, st.global_step - 1), st.epoch);
            r.seconds = seconds(Clock::now() - st.t_epoch);
            r.samples_per_s = st.epoch_train_seconds > 0 ? double(st.epoch_examples) / st.epoch_train_seconds : 0;
            st.result.epochs.push_back(r);
            st.result.final = r;
            st.last_eval_step = st.global_step;
            if (st.config.callbacks.on_evaluate) {
              models::EpochResult e = r;
              e.seconds = st.train_seconds;
              st.config.callbacks.on_evaluate(e);
            }
            if ((st.config.elastic && st.views_in_epoch > 0) || st.resumed_mid_epoch)
              log_line("epoch " + std::to_string(st.epoch + 1) + " trained on " + std::to_string(st.epoch_examples) +
                       " examples (the data set has " + std::to_string(st.config.dataset_examples) + ") in " +
                       std::to_string(st.views_in_epoch + 1) + " views");
            st.views_in_epoch = 0;
            st.resumed_mid_epoch = false;
            ++st.epoch;
            // The next epoch is one segment, in this view.
            st.seg_start += st.seg_steps;
            st.epoch_steps_before = 0;
            st.seg_offset = 0;
            st.seg_steps = segment_steps(st, 0, st.config.replicas, st.batch);
            st.epoch_examples = 0;
            st.epoch_unscored = 0;
            st.epoch_correct = 0;
            st.epoch_loss_sum = 0;
            st.epoch_train_seconds = 0;
            st.t_epoch = Clock::now();
            if (st.config.callbacks.on_epoch_end) st.config.callbacks.on_epoch_end(r);
            const bool last = st.epoch >= st.config.epochs;
            if (last) st.actions.push_back({ActionKind::stop, st.mode});
            if (st.config.checkpoints && st.config.checkpoint_each_epoch && st.last_checkpoint_step != st.global_step)
              checkpoint_now(self, [=](const std::string&) { next(); });
            else
              next();
          },
          next);
      return;
    case ActionKind::evaluate:
      evaluate(
          self,
          [=](const models::EpochResult& eval) {
            auto& st = self->state;
            models::EpochResult r = eval;
            r.epoch = st.epoch;
            r.step = st.global_step;
            r.train_loss = st.last_loss;
            r.train_accuracy = std::nan("");
            r.lr = current_lr(st);
            r.seconds = st.train_seconds;
            st.last_eval_step = st.global_step;
            if (st.config.callbacks.on_evaluate) st.config.callbacks.on_evaluate(r);
            next();
          },
          next);
      return;
    case ActionKind::view_change:
      change_view(self, next);
      return;
    case ActionKind::switch_mode: {
      const Mode to = a.mode;
      switch_mode(
          self, to,
          [=]() mutable {
            reply(a, 200, "mode is " + to.str() + " from step " + std::to_string(self->state.global_step));
            next();
          },
          [=]() mutable {
            reply(a, 409,
                  "not switched: a ps task was lost and the job rolls back to " + self->state.rollback_label +
                      " first; ask again");
            next();
          });
      return;
    }
    case ActionKind::checkpoint:
      if (!s.config.checkpoints) {
        reply(a, 409, "no --checkpoint-dir configured");
        next();
        return;
      }
      checkpoint_now(self, [=](const std::string& path) mutable {
        if (path.empty())
          reply(a, 409,
                "no checkpoint written: a ps task was lost and the job rolls back to " + self->state.rollback_label +
                    " first; ask again");
        else
          reply(a, 200, "checkpoint written: " + path);
        next();
      });
      return;
    case ActionKind::stop: {
      auto stop = [=]() mutable {
        reply(a, 200, "stopped at step " + std::to_string(self->state.global_step));
        finish(self);
      };
      if (s.config.checkpoints && s.last_checkpoint_step != s.global_step && state_is_whole(s)) {
        checkpoint_now(self, [=](const std::string&) mutable { stop(); });
      } else {
        if (!state_is_whole(s))
          log_line(
              "stopping without a checkpoint: a ps task was lost with its shards' state; the newest "
              "consistent state is " +
              s.rollback_label);
        stop();
      }
      return;
    }
  }
}

// Synchronous steps pair the k-th step of every replica in one all-reduce,
// so replicas enter sync mode with equal clocks. After an async or ssp
// phase their clocks differ: before switching to sync, the replicas that
// are behind catch up, still in the current mode (their gradients still go
// to the server), so the switch happens at the first boundary where every
// replica has done the same number of steps. Returns true while catching up.
bool align_before_sync(Self* self) {
  auto& s = self->state;
  if (!s.mode.uses_server()) return false;
  // Placing the shards anew restores every replica's own clock from the
  // rollback point (or the state gathered here): no catching up first.
  if (s.replace_due) return false;
  bool to_sync = false;
  for (std::size_t i = s.next_switch; i < s.config.switches.size() && s.config.switches[i].step <= s.global_step; ++i)
    to_sync = to_sync || !s.config.switches[i].mode.uses_server();
  for (const auto& a : s.actions) to_sync = to_sync || (a.kind == ActionKind::switch_mode && !a.mode.uses_server());
  // A view change starts every replica at one clock and data position.
  if (!to_sync && !s.view_change_due) return false;
  const std::int64_t ahead = max_clock(s);
  bool behind = false;
  for (int r = 0; r < s.config.replicas; ++r) {
    if (alive(s, static_cast<std::size_t>(r)) && s.grants[r] < ahead) {
      s.grants[r] = ahead;
      send_grant(self, r);
      behind = true;
    }
  }
  return behind;
}

void on_quiescent(Self* self) {
  auto& s = self->state;
  if (s.busy || s.finished) return;
  if (align_before_sync(self)) return;
  s.busy = true;
  const double dt = seconds(Clock::now() - s.t_resume);
  s.train_seconds += dt;
  s.epoch_train_seconds += dt;
  std::deque<Action> due;
  if (s.rollback_due) {
    // The shards' state is lost: nothing reads it before the rollback,
    // after which the position is earlier and these events come again.
    due.push_back({ActionKind::view_change, s.mode});
    s.view_change_due = true;
    for (auto& a : s.actions) due.push_back(std::move(a));
    s.actions = std::move(due);
    run_actions(self);
    return;
  }
  const bool epoch_end = min_clock(s) >= next_boundary(s);
  if (epoch_end)
    due.push_back({ActionKind::epoch_end, s.mode});
  else if (s.config.eval_every > 0 && s.global_step > 0 && s.global_step % s.config.eval_every == 0 &&
           s.last_eval_step != s.global_step)
    due.push_back({ActionKind::evaluate, s.mode});
  if (s.view_change_due && !s.forming) due.push_back({ActionKind::view_change, s.mode});
  while (s.next_switch < s.config.switches.size() && s.config.switches[s.next_switch].step <= s.global_step) {
    const Mode to = s.config.switches[s.next_switch++].mode;
    if (to != s.mode) due.push_back({ActionKind::switch_mode, to});
  }
  if (s.config.checkpoints && s.config.checkpoint_every > 0 && s.global_step > 0 &&
      s.global_step % s.config.checkpoint_every == 0 && s.last_checkpoint_step != s.global_step)
    due.push_back({ActionKind::checkpoint, s.mode});
  if (s.config.max_steps > 0 && s.global_step >= s.config.max_steps) due.push_back({ActionKind::stop, s.mode});
  // Requests from the control endpoint run after the due events.
  for (auto& a : s.actions) due.push_back(std::move(a));
  s.actions = std::move(due);
  // A boundary with nothing to do and nothing to grant would loop forever:
  // fail loudly instead (a bug in the grant rules, never expected).
  if (s.actions.empty() && !s.paused && ++s.idle_boundaries > 3) {
    fail_job(self, "internal error: no step can be granted at global step " + std::to_string(s.global_step) +
                       " (mode " + s.mode.str() + ")");
    return;
  }
  run_actions(self);
}

void send_result(Self* self) {
  auto& s = self->state;
  s.result.steps = s.global_step;
  s.result.examples = s.examples;
  s.result.train_seconds = s.train_seconds;
  s.result.wall_seconds = seconds(Clock::now() - s.t_start);
  s.result.samples_per_s = s.train_seconds > 0 ? double(s.examples) / s.train_seconds : 0;
  s.result.final_mode = s.mode;
  // The listener is the job's thread, a dynamically typed (blocking) actor,
  // which a typed actor reaches by anon_send.
  caf::anon_send(s.config.listener, s.result);
}

void finish(Self* self) {
  auto& s = self->state;
  if (s.finished) return;
  s.finished = true;
  for (auto& a : s.actions)
    reply(a, 409, s.result.error.empty() ? "the job finished" : "the job failed: " + s.result.error);
  s.actions.clear();
  if (!s.result.error.empty()) {
    send_result(self);
    return;
  }
  s.result.stopped_early =
      s.epoch < s.config.epochs && !(s.config.max_steps > 0 && s.global_step >= s.config.max_steps);
  // Sync's promise, checked before the last word: every replica holds the
  // same bits (across view changes too). A difference is a bug, reported.
  if (!s.mode.uses_server() && s.config.devices.size() > 1) {
    auto digests = std::make_shared<std::vector<std::string>>(s.config.devices.size());
    auto pending = std::make_shared<std::size_t>(s.config.devices.size());
    for (std::size_t r = 0; r < s.config.devices.size(); ++r) {
      auto settle = [=](std::string d) {
        (*digests)[r] = std::move(d);
        if (--*pending > 0) return;
        auto& st = self->state;
        std::string differ;
        for (std::size_t i = 1; i < digests->size(); ++i)
          if ((*digests)[i] != (*digests)[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(i);
        if (differ.empty()) {
          st.result.replica_digest = (*digests)[0];
          log_line("the " + std::to_string(digests->size()) +
                   " replicas agree bitwise (parameters and optimizer state, sha256 " + (*digests)[0].substr(0, 16) +
                   ")");
          conclude(self);
        } else {
          st.result.error = "the replicas diverged in sync: replica(s) " + differ +
                            " differ from replica 0 (a bug: please report it)";
          send_result(self);
        }
      };
      self->request(s.config.devices[r], s.config.timeout, digest_atom::value)
          .then([=](std::string& d) { settle(std::move(d)); },
                [=](caf::error& e) { settle("unreadable: " + self->system().render(e)); });
    }
    return;
  }
  conclude(self);
}

// Counters for the accounting invariant, then the final evaluation unless
// the last epoch end just evaluated this very state.
void conclude(Self* self) {
  auto& s = self->state;
  if (s.replace_due) {
    // The job ends before the shards were placed again (a ps task lost or
    // leaving): there is no server to count or evaluate.
    log_line("the job ends before the parameter-server shards were placed again: no final evaluation");
    send_result(self);
    return;
  }
  self->request(s.config.parameter_server, s.config.timeout, counters_atom::value)
      .then(
          [=](const ServerCounters& c) {
            self->state.result.server = c;
            if (!self->state.result.epochs.empty() && self->state.result.final.step == self->state.global_step) {
              send_result(self);
              return;
            }
            self->state.finished = false;  // evaluate() reports errors through finish()
            evaluate(self, [=](const models::EpochResult& r) {
              auto& st = self->state;
              st.finished = true;
              st.result.final = r;
              st.result.final.step = st.global_step;
              st.result.final.epoch = st.epoch;
              send_result(self);
            });
          },
          [=](caf::error& e) {
            self->state.result.error = "reading the server's counters: " + self->system().render(e);
            send_result(self);
          });
}

void enqueue(Self* self, Action a) {
  auto& s = self->state;
  s.actions.push_back(std::move(a));
  s.pausing = true;
  if (!s.busy && s.started && quiescent(s)) on_quiescent(self);
}

}  // namespace troupe::actors::coord
