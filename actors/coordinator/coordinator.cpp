// The coordinator actor's behaviour: what each message does. The protocol
// is in coordinator.hpp; the concerns the handlers call are the other files
// of this folder (state.hpp lists them).
#include "actors/coordinator/coordinator.hpp"

#include "actors/coordinator/state.hpp"

namespace troupe::actors {

coordinator_actor_t spawn_coordinator(caf::actor_system& system, CoordinatorConfig config) {
  return system.spawn<caf::detached>(coord::coordinator_actor, std::move(config));
}

}  // namespace troupe::actors

namespace troupe::actors::coord {
namespace {

// How often the callbacks' should_stop is looked at while no step reports
// come (paused below --min-nodes, a long step): a signal's flag.
constexpr auto kStopWatchInterval = std::chrono::milliseconds(50);

// The callbacks' should_stop (a signal's flag, Strategy::stop() from a
// callback) is looked at after every step, and every kStopWatchInterval
// besides; a stop then halts the replicas (hurry), so it takes effect at
// the next step boundary. Says whether a stop is queued.
bool look_for_stop(Self* self) {
  auto& st = self->state;
  if (st.stop_asked || st.finished) return true;
  if (!st.config.callbacks.should_stop || !st.config.callbacks.should_stop()) return false;
  st.stop_asked = true;
  enqueue(self, Action{ActionKind::stop, st.mode});
  hurry(self);
  return true;
}

}  // namespace

coordinator_actor_t::behavior_type coordinator_actor(Self* self, CoordinatorConfig config) {
  auto& s = self->state;
  s.config = std::move(config);
  s.mode = s.config.mode;
  s.clocks = s.config.start_clocks;
  s.clocks.resize(static_cast<std::size_t>(s.config.replicas), 0);
  s.rank_examples.assign(static_cast<std::size_t>(s.config.replicas), 0);
  s.last_reports.assign(static_cast<std::size_t>(s.config.replicas), StepReport{});
  s.alive.assign(static_cast<std::size_t>(s.config.replicas), true);
  s.start_world = s.config.replicas;
  s.view = s.config.first_view;
  s.batch = s.config.batch;
  s.grants = s.clocks;
  s.global_step = s.config.start.global_step;
  s.server_base_step = s.global_step;
  s.result.counted_from_step = s.global_step;
  s.epoch = s.config.start.epoch;
  // The first segment: the whole epoch in the first view, or on resume the
  // segment the checkpoint recorded (or a new one from where it stood).
  enter_segment(s, s.config.start_data);
  s.result.mode_history.push_back(s.mode.str() + "@" + std::to_string(s.global_step));
  // Scheduled switches already in the past (a resumed job) are skipped.
  while (s.next_switch < s.config.switches.size() && s.config.switches[s.next_switch].step < s.global_step)
    ++s.next_switch;
  return {
      [=](start_atom) {
        auto& st = self->state;
        st.t_start = st.t_resume = st.t_epoch = st.last_checkpoint_time = Clock::now();
        st.started = true;
        st.busy = true;
        if (st.config.callbacks.should_stop) self->delayed_send(self, kStopWatchInterval, watch_stop_atom::value);
        // A cluster's first view: its world size, for plots of it over time.
        if (st.config.elastic && st.config.callbacks.on_view_change)
          st.config.callbacks.on_view_change(st.global_step, static_cast<int>(st.view),
                                             static_cast<int>(st.config.devices.size()), st.config.batches_per_epoch);
        auto begin = [=]() { run_actions(self); };  // no actions yet: resumes, i.e. starts granting
        if (st.mode.uses_server() || st.config.ps_tasks) {
          // The server starts from the replicas' (identical) initial state,
          // which is also the first rollback point with shards on ps tasks.
          self->request(st.config.devices[0], st.config.timeout, get_state_atom::value)
              .then(
                  [=](const ReplicaState& state) {
                    auto& s2 = self->state;
                    keep_rollback_point(s2, make_checkpoint(s2, state, false),
                                        "the job's start at step " + std::to_string(s2.global_step), false);
                    if (!s2.mode.uses_server()) {
                      begin();
                      return;
                    }
                    self->request(s2.config.parameter_server, s2.config.timeout, set_state_atom::value, state)
                        .then([=](caf::ok_atom) { begin(); },
                              [=](caf::error& e) {
                                fail_job(self, "initialising the server: " + self->system().render(e));
                              });
                  },
                  [=](caf::error& e) { fail_job(self, "initialising the server: " + self->system().render(e)); });
        } else {
          begin();
        }
      },
      [=](step_done_atom, const StepReport& r) {
        auto& st = self->state;
        if (st.finished) return;
        if (r.view != st.view || r.rank < 0 || static_cast<std::size_t>(r.rank) >= st.clocks.size() ||
            !alive(st, static_cast<std::size_t>(r.rank))) {
          ++st.stale_reports;  // from a view that has ended, or a replica that left it
          ++st.result.stale_reports;
          return;
        }
        st.idle_boundaries = 0;
        st.rollbacks_in_a_row = 0;
        st.placements_in_a_row = 0;
        if (st.config.metrics) st.config.metrics->record_step(r);
        st.last_reports[static_cast<std::size_t>(r.rank)] = r;
        const std::int64_t before = min_clock(st);
        st.clocks[static_cast<std::size_t>(r.rank)] = r.clock;
        st.rank_examples[static_cast<std::size_t>(r.rank)] += r.examples;
        st.examples += r.examples;
        st.epoch_examples += r.examples;
        st.epoch_correct += r.correct;
        st.epoch_loss_sum += r.loss_sum;
        if (r.examples) st.last_loss = r.loss_sum / double(r.examples);
        std::int64_t advanced = 0;
        if (r.pushed) {
          ++st.result.pushes;
          advanced = 1;
        } else {
          advanced = min_clock(st) - before;  // a synchronous step completes when every replica reports it
          st.result.sync_steps += advanced;
        }
        st.global_step += advanced;
        if (advanced && st.config.callbacks.on_step_end) {
          const double t = st.epoch_train_seconds + seconds(Clock::now() - st.t_resume);
          // The epoch's mean loss so far, as Keras shows it: the bar and the
          // epoch's summary line then agree.
          const std::int64_t scored = st.epoch_examples - st.epoch_unscored;
          models::StepEnd e;
          e.step = st.global_step;
          // Steps into the epoch: the segments before this one (each in its
          // own view's global batches) and this one's.
          e.step_in_epoch = st.epoch_steps_before + min_clock(st) - st.seg_start;
          e.loss = scored > 0 ? st.epoch_loss_sum / double(scored) : st.last_loss;
          e.accuracy = st.config.classification && scored > 0
                           ? double(st.epoch_correct) / (double(scored) * double(st.config.positions_per_example))
                           : std::nan("");
          e.samples_per_s = t > 0 ? double(st.epoch_examples) / t : 0.0;
          // The schedule at the step just counted (the step before it in the
          // schedule's count, which starts at 0), as the replicas used.
          e.lr = st.config.schedule->at(st.global_step - 1, st.epoch);
          st.config.callbacks.on_step_end(e);
        }
        if (advanced) look_for_stop(self);  // queues a stop; extend() below then grants no more
        // A checkpoint by time bounds what a crash loses when no step-based
        // interval is set: ask for one at the next step boundary.
        if (st.config.checkpoints && st.config.checkpoint_interval.count() > 0 && !st.timed_checkpoint_queued &&
            Clock::now() - st.last_checkpoint_time >= st.config.checkpoint_interval) {
          st.timed_checkpoint_queued = true;
          enqueue(self, Action{ActionKind::checkpoint, st.mode});
          return;
        }
        extend(self);
      },
      // A replica failed (rank >= 0), or a node of the cluster was lost
      // (rank -1). The job ends with the error, after a checkpoint of the
      // last consistent state when checkpoints are configured.
      [=](failed_atom, int rank, const std::string& message) {
        (void)rank;
        auto& st = self->state;
        if (!st.result.error.empty() || st.finished) return;
        st.result.error = message;
        if (!st.config.checkpoints || !st.started || !state_is_whole(st)) {
          if (!state_is_whole(st) && st.config.checkpoints)
            log_line(
                "no checkpoint before stopping: a ps task was lost with its shards' state; the newest "
                "consistent state is " +
                st.rollback_label);
          finish(self);
          return;
        }
        checkpoint_now(
            self,
            [=](const std::string& path) {
              if (!path.empty())
                std::fprintf(stderr, "coordinator: wrote %s before stopping (resume with --resume)\n", path.c_str());
              self->state.result.error = message;
              finish(self);
            },
            /*after_failure=*/true);
      },
      [=](watch_stop_atom) {
        if (!look_for_stop(self)) self->delayed_send(self, kStopWatchInterval, watch_stop_atom::value);
      },
      [=](status_atom) -> std::string { return status_json(self->state); },
      [=](member_atom, const MemberEvent& e) { member_event(self, e); },
      // troupe ctl drain NODE: by index ("2") or name.
      [=](drain_atom, const std::string& which) -> ControlReply {
        auto& st = self->state;
        if (st.finished) return ControlReply{409, "the job has finished"};
        if (!st.config.elastic) return ControlReply{409, "this job runs on one host; there is no node to drain"};
        for (const auto& n : st.config.nodes) {
          if (which != std::to_string(n.index) && which != n.name) continue;
          if (n.index == 0)
            return ControlReply{409, "the coordinator cannot be drained (it owns the job); stop the job instead"};
          member_event(self, MemberEvent{MemberEvent::Kind::drain, n.index, "troupe ctl drain"});
          return ControlReply{200,
                              "node " + std::to_string(n.index) + " (" + n.name + ") leaves at the next step boundary"};
        }
        std::string known;
        for (const auto& n : st.config.nodes)
          known += (known.empty() ? "" : ", ") + std::to_string(n.index) + " (" + n.name + ")";
        return ControlReply{404, "no node '" + which + "' in the job; its nodes: " + known};
      },
      // A sync step's all-reduce failed: the replica is idle at `clock`. A
      // membership change explains it (a lost node); otherwise the view is
      // formed again with the same members (a peer that stalls is found by
      // the membership's heartbeats meanwhile).
      // An async or ssp step's push failed (shards on ps tasks): some shards
      // may have applied its part and others not, so their state is no
      // longer one consistent state, and the job rolls back.
      [=](step_aborted_atom, std::uint32_t view, int rank, std::int64_t clock, const std::string& why) {
        auto& st = self->state;
        if (st.finished || view != st.view || rank < 0 || static_cast<std::size_t>(rank) >= st.clocks.size()) return;
        st.clocks[static_cast<std::size_t>(rank)] = clock;
        st.grants[static_cast<std::size_t>(rank)] = clock;
        if (st.mode.uses_server() && st.config.ps_tasks) {
          if (!st.rollback_due) need_rollback(self, "replica " + std::to_string(rank) + "'s push failed (" + why + ")");
          if (!st.forming) st.view_change_due = true;  // else on_view_formed sees replace_due
          st.pausing = true;
        } else if (!st.view_change_due && !st.forming) {
          log_line("replica " + std::to_string(rank) + "'s all-reduce failed (" + why + "); forming the view again");
          st.view_change_due = true;
          st.pausing = true;
        }
        extend(self);
      },
      // Paused (below --min-nodes, or without a ps task for the shards)
      // since pause `id`: if still so, stop.
      [=](halt_atom, std::uint32_t id) {
        auto& st = self->state;
        if (!st.paused || st.finished || id != st.pause_id) return;
        if (st.forming) {  // a view may end the pause: look again after it
          self->delayed_send(self, std::chrono::seconds(1), halt_atom::value, id);
          return;
        }
        const std::string waited =
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(st.config.wait_timeout).count()) +
            " s (--wait-timeout): the job stops";
        const std::string why =
            st.waiting_for_ps ? st.pause_reason + " for " + waited : "only " + st.pause_reason + " for " + waited;
        log_line(why);
        self->send(self, failed_atom::value, -1, why);
      },
      [=](mode_atom, const std::string& text) -> caf::result<ControlReply> {
        Mode to;
        try {
          to = Mode::parse(text);
        } catch (const std::exception& e) {
          return ControlReply{400, e.what()};
        }
        if (self->state.finished) return ControlReply{409, "the job has finished"};
        if (!self->state.config.sync_only.empty() && to.kind != Mode::Kind::sync)
          return ControlReply{409, self->state.config.sync_only + ": a switch to " + text + " is refused"};
        auto rp = self->make_response_promise();
        enqueue(self, Action{ActionKind::switch_mode, to, rp});
        hurry(self);  // at the next step boundary, not after the grants handed out
        return caf::delegated<ControlReply>{};
      },
      [=](checkpoint_atom) -> caf::result<ControlReply> {
        if (!self->state.config.checkpoints) return ControlReply{409, "no --checkpoint-dir configured"};
        if (self->state.finished) return ControlReply{409, "the job has finished"};
        auto rp = self->make_response_promise();
        enqueue(self, Action{ActionKind::checkpoint, self->state.mode, rp});
        hurry(self);  // at the next step boundary, not after the grants handed out
        return caf::delegated<ControlReply>{};
      },
      [=](stop_atom) -> caf::result<ControlReply> {
        if (self->state.finished) return ControlReply{409, "the job has finished"};
        auto rp = self->make_response_promise();
        enqueue(self, Action{ActionKind::stop, self->state.mode, rp});
        hurry(self);  // at the next step boundary, not after the grants handed out
        return caf::delegated<ControlReply>{};
      },
  };
}

}  // namespace troupe::actors::coord
