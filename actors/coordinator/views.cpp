// The coordinator actor: membership views and rollback: membership events, forming a new view at a
// step boundary, and restoring the rollback point when a ps task was lost.
#include "actors/coordinator/state.hpp"

namespace troupe::actors::coord {

// ---- elastic membership ----

void log_line(const std::string& line) { std::fprintf(stderr, "coordinator: %s\n", line.c_str()); }

// The first rank and the number of replicas of node `index` in this view
// (first -1: not in it).
std::pair<int, int> ranks_of(const CoordinatorState& s, int index) {
  for (const auto& n : s.config.nodes)
    if (n.index == index) return {n.first_rank, n.replicas};
  return {-1, 0};
}

std::string node_label(const CoordinatorState& s, int index) {
  for (const auto& n : s.config.nodes)
    if (n.index == index) return "node " + std::to_string(index) + " (" + n.name + ")";
  return "node " + std::to_string(index);
}

void queue_view_change(Self* self) {
  auto& s = self->state;
  s.view_change_due = true;
  s.pausing = true;
  if (!s.busy && s.started && quiescent(s)) on_quiescent(self);
}

// The shards' state is lost or half-updated (server mode): the next view
// places them anew and restores the rollback point.
void need_rollback(Self* self, const std::string& why) {
  auto& s = self->state;
  s.replace_due = true;
  if (s.rollback_due) return;
  s.rollback_due = true;
  s.restore_due = false;  // a state gathered for a ps task that leaves is no longer to be had
  s.rollback_reason = why;
  log_line(why + "; the parameter server's state is not whole any more: the job rolls back to " + s.rollback_label +
           " and places the shards anew on the ps tasks left");
}

void ps_event(Self* self, const MemberEvent& e) {
  auto& s = self->state;
  switch (e.kind) {
    case MemberEvent::Kind::ps_lost:
      s.ps_leaving.erase(std::remove(s.ps_leaving.begin(), s.ps_leaving.end(), e.node), s.ps_leaving.end());
      if (s.mode.uses_server()) {
        need_rollback(self, e.what);
      } else {
        s.replace_due = true;
        log_line(e.what +
                 "; in sync mode the replicas hold the state, so nothing is lost: its shards are placed anew "
                 "on the ps tasks left at the next step boundary");
      }
      queue_view_change(self);
      return;
    case MemberEvent::Kind::ps_leaving:
      if (std::find(s.ps_leaving.begin(), s.ps_leaving.end(), e.node) != s.ps_leaving.end()) return;
      s.ps_leaving.push_back(e.node);
      s.replace_due = true;
      log_line("ps task " + std::to_string(e.node) + " leaves at the next step boundary" +
               (e.what.empty() ? "" : " (" + e.what + ")") + ": its shards move to the ps tasks left, nothing is lost");
      queue_view_change(self);
      return;
    case MemberEvent::Kind::ps_joined:
      if (s.waiting_for_ps) {
        log_line("ps task " + std::to_string(e.node) +
                 " joined: the shards are placed on it at the next step boundary");
        queue_view_change(self);
      } else {
        log_line("ps task " + std::to_string(e.node) + " joined: a spare, used when a ps task is lost or leaves");
      }
      return;
    default:
      return;
  }
}

void member_event(Self* self, const MemberEvent& e) {
  auto& s = self->state;
  if (s.finished) return;
  if (e.kind == MemberEvent::Kind::ps_lost || e.kind == MemberEvent::Kind::ps_leaving ||
      e.kind == MemberEvent::Kind::ps_joined) {
    ps_event(self, e);
    return;
  }
  auto forget_join = [&] { s.joins.erase(std::remove(s.joins.begin(), s.joins.end(), e.node), s.joins.end()); };
  const bool leaving = std::find(s.leaves.begin(), s.leaves.end(), e.node) != s.leaves.end();
  const auto [first, count] = ranks_of(s, e.node);
  switch (e.kind) {
    case MemberEvent::Kind::joined:
      s.joins.push_back(e.node);
      log_line("node " + std::to_string(e.node) + " joins at the next step boundary" +
               (e.what.empty() ? "" : ": " + e.what));
      queue_view_change(self);
      return;
    case MemberEvent::Kind::drain:
      forget_join();
      if (first < 0 || leaving) return;
      s.leaves.push_back(e.node);
      log_line(node_label(s, e.node) + " leaves at the next step boundary" + (e.what.empty() ? "" : ": " + e.what));
      queue_view_change(self);
      return;
    case MemberEvent::Kind::lost:
      forget_join();
      if (first < 0) return;  // not in this view (it had left already)
      for (int r = first; r < first + count; ++r) s.alive[static_cast<std::size_t>(r)] = false;
      if (leaving) {
        // Already left out of the view that is due or forming (it drained,
        // or a view that could not form lost it): that view is enough.
        log_line(e.what + " (already left out of the next view)");
        return;
      }
      s.leaves.push_back(e.node);
      log_line(e.what + "; the survivors go on in a new view");
      queue_view_change(self);
      return;
    default:  // the ps kinds, above
      return;
  }
}

// At a step boundary: the survivors' clock, the rest of the epoch, and the
// members; the job's thread forms the view.
void change_view(Self* self, std::function<void()> then) {
  auto& s = self->state;
  s.view_change_due = false;
  const bool sync = !s.mode.uses_server();
  // Sync: the survivors are at most one step apart and the view starts at
  // the newest clock; those behind take the state of one that completed the
  // step (actors/coordinator/view_start.hpp). Async and ssp: aligned by on_quiescent.
  ViewStart start;
  if (sync) {
    ViewEnd end;
    end.clocks = s.clocks;
    end.alive = s.alive;
    end.nodes = s.config.nodes;
    end.data.examples = s.config.dataset_examples;
    end.data.batch_size = s.batch;
    end.data.drop_remainder = s.config.drop_remainder;
    end.segment_clock = s.seg_start;
    end.segment_offset = s.seg_offset;
    try {
      start = plan_view_start(end);
    } catch (const std::exception& e) {
      fail_job(self, std::string("forming view ") + std::to_string(s.view + 1) + ": " + e.what());
      return;
    }
  } else {
    start.clock = max_clock(s);
  }
  const std::int64_t clock = start.clock;
  auto proceed = [=]() {
    auto& st = self->state;
    ViewPlan plan;
    if (sync) {
      // The completed step's batches nobody reported were used all the same;
      // a lost node's report of a step no survivor completed is taken back
      // (that step is redone with its data).
      st.examples += start.unreported_examples;
      st.epoch_examples += start.unreported_examples;
      st.epoch_unscored += start.unreported_examples;
      for (std::size_t r : start.undone) {
        const StepReport& undo = st.last_reports[r];
        st.examples -= undo.examples;
        st.epoch_examples -= undo.examples;
        st.epoch_correct -= undo.correct;
        st.epoch_loss_sum -= undo.loss_sum;
      }
      st.rolled_forward = static_cast<int>(start.behind.size());
      st.result.rolled_forward += st.rolled_forward;
      st.global_step = st.global_at_base + (clock - st.clock_at_base);
      plan.behind = start.behind;
      plan.source = start.source;
    }
    plan.view = st.view + 1;
    plan.clock = clock;
    const std::int64_t used =
        std::min(st.config.dataset_examples,
                 st.seg_offset + std::max<std::int64_t>(0, clock - st.seg_start) * st.batch * st.config.replicas);
    plan.cursor = data::Cursor{st.epoch, 0, used >= st.config.dataset_examples ? st.config.dataset_examples : used};
    plan.batch = st.config.batch;
    plan.global_batch = st.config.fixed_global_batch ? st.config.batch * st.start_world : 0;
    plan.remove = st.leaves;
    plan.replace_shards = st.replace_due;
    plan.ps_remove = st.ps_leaving;
    st.forming = true;
    self->request(st.config.listener, st.config.timeout * 3, form_view_atom::value, plan)
        .then([=](const FormedView& f) { on_view_formed(self, plan, f, then); },
              [=](caf::error& e) {
                fail_job(self, "forming view " + std::to_string(plan.view) + ": " + self->system().render(e));
              });
  };
  if (sync || s.rollback_due || s.restore_due) {
    // A rollback restores its own position (the server's shards are lost);
    // so does a restore of the state gathered before (a ps task left, and
    // the view placing the shards without it waited for another).
    proceed();
    return;
  }
  // A ps task leaves while the shards' state is whole: it is gathered here
  // (and checkpointed when checkpoints are configured), the shards are
  // placed anew without the task, and the state is restored from it: no
  // step is lost. Should the gathering fail, the rollback point before it
  // is restored instead.
  auto gather = [=]() {
    auto& st = self->state;
    if (!st.replace_due) {
      proceed();
      return;
    }
    auto keep = [=](const ReplicaState& state) {
      auto& s2 = self->state;
      checkpoint::State c = make_checkpoint(s2, state, false);
      std::string label = "the state gathered at step " + std::to_string(s2.global_step) + " as the shards moved";
      if (s2.config.checkpoints) {
        try {
          label = s2.config.checkpoints->save(c);
          s2.last_checkpoint_step = s2.global_step;
          s2.last_checkpoint_time = Clock::now();
          if (s2.config.callbacks.on_checkpoint) s2.config.callbacks.on_checkpoint(label, s2.global_step);
          if (s2.config.timeline) s2.config.timeline->instant("checkpoint", s2.global_step, label);
        } catch (const std::exception& e) {
          log_line(std::string("the state gathered as the shards move is kept in memory only: ") + e.what());
        }
      }
      keep_rollback_point(s2, std::move(c), label, s2.last_checkpoint_step == s2.global_step);
      s2.restore_due = true;
      proceed();
    };
    self->request(st.config.parameter_server, st.config.timeout, get_state_atom::value).then(keep, [=](caf::error& e) {
      need_rollback(self, "gathering the parameter server's state failed: " + self->system().render(e));
      proceed();
    });
  };
  // Async: the global step is what the server applied (a lost node's push
  // may have been applied without its report ever arriving).
  self->request(s.config.parameter_server, s.config.timeout, counters_atom::value)
      .then(
          [=](const ServerCounters& c) {
            auto& st = self->state;
            st.global_step = st.server_base_step + st.result.sync_steps + c.applied;
            st.result.pushes = c.applied;
            gather();
          },
          [=](caf::error& e) {
            if (self->state.replace_due) {
              need_rollback(self, "reading the parameter server's counters failed: " + self->system().render(e));
              proceed();
              return;
            }
            fail_job(self, "reading the server's counters: " + self->system().render(e));
          });
}

void on_view_formed(Self* self, const ViewPlan& plan, const FormedView& f, std::function<void()> then) {
  auto& s = self->state;
  s.forming = false;
  if (f.waiting_for_ps) {
    // No ps task left for the shards: training pauses until one joins (a
    // ps_joined event forms the view again), for --wait-timeout.
    s.view = plan.view;  // that view number is used up
    s.waiting_for_ps = true;
    if (!s.paused) {
      s.paused = true;
      s.paused_since = Clock::now();
      log_line("training pauses: " + f.error + "; waiting up to " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(s.config.wait_timeout).count()) +
               " s (--wait-timeout)");
      self->delayed_send(self, s.config.wait_timeout, halt_atom::value, ++s.pause_id);
    }
    s.pause_reason = f.error;
    then();
    return;
  }
  if (!f.error.empty()) {
    // A node lost while the view formed: form another without it.
    if (!f.lost.empty() && ++s.form_attempts <= 3) {
      for (int k : f.lost)
        if (std::find(s.leaves.begin(), s.leaves.end(), k) == s.leaves.end()) s.leaves.push_back(k);
      s.view = plan.view;  // that view number is used up
      log_line("view " + std::to_string(plan.view) + " could not form (" + f.error + "); trying again");
      s.view_change_due = true;
      then();
      return;
    }
    fail_job(self, "forming view " + std::to_string(plan.view) + ": " + f.error);
    return;
  }
  s.form_attempts = 0;
  const bool was_waiting_for_ps = s.waiting_for_ps;
  if (f.parameter_server && ++s.placements_in_a_row > 4) {
    fail_job(self, "the parameter-server shards were placed anew " + std::to_string(s.placements_in_a_row - 1) +
                       " times in a row without a step between: the job stops");
    return;
  }
  if (f.parameter_server) {
    // The shards were placed anew: their new front from now on.
    s.config.parameter_server = caf::actor_cast<ps::ps_actor_t>(f.parameter_server);
    s.replace_due = false;
    s.ps_leaving.clear();
    s.waiting_for_ps = false;
  }
  const int before = s.config.replicas;
  const std::size_t nodes_before = s.config.nodes.size();
  s.view = f.view;
  s.config.devices = to_devices(f.devices);
  s.config.replicas = static_cast<int>(f.devices.size());
  s.config.nodes = f.nodes;
  s.batch = f.batch;
  s.config.global_batch = s.batch * s.config.replicas;
  const std::size_t w = f.devices.size();
  s.clocks.assign(w, plan.clock);
  s.grants.assign(w, plan.clock);
  s.alive.assign(w, true);
  s.rank_examples.assign(w, 0);
  s.last_reports.assign(w, StepReport{});
  s.epoch_steps_before += std::max<std::int64_t>(0, plan.clock - s.seg_start);
  s.seg_start = plan.clock;
  s.seg_offset = plan.cursor.offset;
  s.seg_steps = segment_steps(s, s.seg_offset, s.config.replicas, s.batch);
  s.clock_at_base = plan.clock;
  s.global_at_base = s.global_step;
  s.leaves.clear();
  std::string line = "view " + std::to_string(s.view) + " at step " + std::to_string(s.global_step) + ": " +
                     std::to_string(w) + " replica(s) on " + std::to_string(f.nodes.size()) + " node(s) (was " +
                     std::to_string(before) + " on " + std::to_string(nodes_before) + "); global batch " +
                     std::to_string(s.config.global_batch) + " (" + std::to_string(s.batch) +
                     " per replica), learning rate " + std::to_string(current_lr(s)) +
                     " (unchanged by the view); the rest of epoch " + std::to_string(s.epoch + 1) + " (" +
                     std::to_string(s.config.dataset_examples - s.seg_offset) + " examples) is split in " +
                     std::to_string(s.seg_steps) + " steps; " +
                     (s.rolled_forward ? std::to_string(s.rolled_forward) +
                                             " survivor(s) that had not completed the step in flight took the "
                                             "state of one that had (rolled forward)"
                                       : "no survivor behind");
  s.rolled_forward = 0;
  log_line(line);
  if (s.config.timeline) s.config.timeline->instant("view", s.global_step, line);
  s.result.view_history.push_back(line);
  ++s.views_in_epoch;
  if (s.config.callbacks.on_view_change) {
    s.config.callbacks.on_view_change(s.global_step, static_cast<int>(s.view), static_cast<int>(w),
                                      s.epoch_steps_before + s.seg_steps);
  }
  // Below --min-nodes: pause until enough are back, for --wait-timeout.
  const bool short_of_nodes = static_cast<int>(f.nodes.size()) < s.config.min_nodes;
  if (short_of_nodes && !s.paused) {
    s.paused = true;
    s.paused_since = Clock::now();
    s.pause_reason =
        std::to_string(f.nodes.size()) + " of --min-nodes " + std::to_string(s.config.min_nodes) + " nodes";
    log_line("training pauses: " + s.pause_reason + "; waiting up to " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(s.config.wait_timeout).count()) +
             " s (--wait-timeout) for nodes to join");
    self->delayed_send(self, s.config.wait_timeout, halt_atom::value, ++s.pause_id);
  } else if (!short_of_nodes && s.paused) {
    s.paused = false;
    log_line(was_waiting_for_ps ? "training goes on: the shards are placed on a ps task again"
                                : "training goes on: " + std::to_string(f.nodes.size()) + " node(s) present");
  } else if (short_of_nodes) {
    s.pause_reason =
        std::to_string(f.nodes.size()) + " of --min-nodes " + std::to_string(s.config.min_nodes) + " nodes";
  }
  self->request(s.config.parameter_server, s.config.timeout, view_clocks_atom::value, s.view, s.clocks)
      .then(
          [=](caf::ok_atom) {
            auto& st = self->state;
            if (plan.replace_shards && (st.rollback_due || st.restore_due)) {
              restore_rollback_point(self, then);
              return;
            }
            // Placed in sync mode: the replicas hold the state.
            if (plan.replace_shards && f.parameter_server && st.config.metrics)
              st.config.metrics->record_shards_placed(JobMetrics::Restored::none);
            // The shards must still be placed anew (a ps task was lost while
            // this view formed): the next view does it.
            if (st.replace_due) st.view_change_due = true;
            then();
          },
          [=](caf::error& e) {
            if (skipped_for_rollback(self, "telling the server about view " + std::to_string(self->state.view), e)) {
              self->state.view_change_due = true;  // the next view places the shards
              then();
              return;
            }
            fail_job(self, "telling the server about view " + std::to_string(self->state.view) + ": " +
                               self->system().render(e));
          });
}

// The view placed the shards anew: every replica and shard takes the
// rollback point's state, each replica its clock and data position in it
// (plan_resume, as a resume from that checkpoint on this view's world), and
// the coordinator's own position goes back to it. Epochs and steps after
// the point are trained again; the pushes and synchronous steps counted
// from then on start at the point's global step.
void restore_rollback_point(Self* self, std::function<void()> then) {
  auto& s = self->state;
  if (!s.rollback_point) {
    fail_job(self, "the parameter server's shards were placed anew, but there is no state to restore");
    return;
  }
  if (++s.rollbacks_in_a_row > 3) {
    fail_job(self, "the parameter server was rolled back " + std::to_string(s.rollbacks_in_a_row - 1) +
                       " times in a row without a step between (" + s.rollback_reason + "): the job stops");
    return;
  }
  const checkpoint::State& c = *s.rollback_point;
  const int world = s.config.replicas;
  ResumePlan plan;
  try {
    const data::PlanOptions data_plan{s.config.dataset_examples, s.batch, s.config.shuffle, s.config.seed,
                                      s.config.drop_remainder};
    plan = plan_resume(c, s.rollback_label, world, s.batch, data_plan);
  } catch (const std::exception& e) {
    fail_job(self, std::string("restoring the parameter server's state: ") + e.what());
    return;
  }
  Mode to = s.mode;
  try {
    to = Mode::parse(c.update_mode);
  } catch (const std::exception&) {}
  ReplicaState state;
  state.parameters = Tensor::from_vector({static_cast<std::int64_t>(c.parameters.size())}, c.parameters);
  for (const auto& b : c.optimizer.buffers)
    state.buffers.emplace_back(b.name, Tensor::from_vector({static_cast<std::int64_t>(b.values.size())}, b.values));
  for (const auto& [name, value] : c.optimizer.scalars) state.scalars.emplace_back(name, value);
  if (!c.model_state.empty())
    state.model_state = Tensor::from_vector({static_cast<std::int64_t>(c.model_state.size())}, c.model_state);
  auto finish_restore = [=]() {
    auto& st = self->state;
    const checkpoint::State& point = *st.rollback_point;
    const bool loss = st.rollback_due;
    const std::int64_t was = st.global_step;
    if (to != st.mode) st.result.mode_history.push_back(to.str() + "@" + std::to_string(point.position.global_step));
    st.mode = to;
    st.global_step = static_cast<std::int64_t>(point.position.global_step);
    st.epoch = static_cast<std::int64_t>(point.position.epoch);
    st.clocks = plan.clocks;
    st.grants = plan.clocks;
    st.last_reports.assign(st.clocks.size(), StepReport{});
    enter_segment(st, plan.start);
    st.views_in_epoch = 0;
    st.announced_epoch = -1;
    // Scheduled switches after the point happen again; evaluations and
    // epoch ends after it are done again.
    st.next_switch = 0;
    while (st.next_switch < st.config.switches.size() && st.config.switches[st.next_switch].step < st.global_step)
      ++st.next_switch;
    st.result.epochs.erase(std::remove_if(st.result.epochs.begin(), st.result.epochs.end(),
                                          [&](const models::EpochResult& r) { return r.epoch >= st.epoch; }),
                           st.result.epochs.end());
    st.result.final = st.result.epochs.empty() ? models::EpochResult{} : st.result.epochs.back();
    st.last_eval_step = -1;
    st.last_checkpoint_step = st.rollback_point_saved ? st.global_step : -1;
    st.last_checkpoint_time = Clock::now();
    st.timed_checkpoint_queued = false;
    st.server_base_step = st.global_step;
    st.result.counted_from_step = st.global_step;
    st.result.pushes = 0;
    st.result.sync_steps = 0;
    st.rollback_due = st.restore_due = false;
    std::string line = loss ? "rolled back to step " + std::to_string(st.global_step) + " (" + st.rollback_label +
                                  ") from step " + std::to_string(was) + " after " + st.rollback_reason +
                                  ": the shards are placed anew and every replica and shard goes on from that state"
                            : "the parameter-server shards moved at step " + std::to_string(st.global_step) +
                                  ": every replica and shard goes on from the state gathered there (nothing lost)";
    line += "; mode " + st.mode.str() + ", " + std::to_string(world) + " replica(s)";
    if (!plan.note.empty()) line += " (" + plan.note + ")";
    log_line(line);
    if (st.config.timeline) st.config.timeline->instant(loss ? "rollback" : "shards moved", st.global_step, line);
    st.result.rollbacks.push_back(line);
    if (st.config.metrics)
      st.config.metrics->record_shards_placed(loss ? JobMetrics::Restored::rollback : JobMetrics::Restored::gathered);
    // A ps task lost while this view formed: the next view places them again.
    if (st.replace_due) st.view_change_due = true;
    then();
  };
  auto left = std::make_shared<int>(world);
  auto failed = std::make_shared<bool>(false);
  // A replica or shard lost while the state is restored (a second fault):
  // nothing of the coordinator's position is changed, and the next view
  // restores the same point again on who is left (bounded above).
  auto again = [=](const std::string& what, const caf::error& e) {
    auto& st = self->state;
    log_line("restoring the state failed (" + what + ": " + self->system().render(e) +
             "); the next view places the shards and restores it again");
    if (!st.restore_due) st.rollback_due = true;
    st.replace_due = true;
    st.view_change_due = true;
    st.pausing = true;
    then();
  };
  for (int r = 0; r < world; ++r) {
    const data::Cursor at = plan.cursors[static_cast<std::size_t>(r)];
    self->request(s.config.devices[static_cast<std::size_t>(r)], s.config.timeout, set_state_atom::value, state,
                  ReplicaPosition{plan.clocks[static_cast<std::size_t>(r)], at.epoch, at.batch, at.offset})
        .then(
            [=](caf::ok_atom) {
              if (*failed || --*left > 0) return;
              if (!to.uses_server()) {
                finish_restore();
                return;
              }
              self->request(self->state.config.parameter_server, self->state.config.timeout, set_state_atom::value,
                            state)
                  .then([=](caf::ok_atom) { finish_restore(); },
                        [=](caf::error& e) { again("the parameter server", e); });
            },
            [=](caf::error& e) {
              if (*failed) return;
              *failed = true;
              again("replica " + std::to_string(r), e);
            });
  }
}

}  // namespace troupe::actors::coord
