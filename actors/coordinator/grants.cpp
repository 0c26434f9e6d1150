// The coordinator actor's grants: how far each replica may run (sync: together; async: a window ahead;
// ssp:N: within N + 1 of the slowest), the next event grants never cross,
// and the data segment of a view.
#include "actors/coordinator/state.hpp"

namespace troupe::actors::coord {

bool alive(const CoordinatorState& s, std::size_t r) { return r < s.alive.size() && s.alive[r]; }

// Over the replicas still in the view (a lost one no longer holds anyone back).
std::int64_t min_clock(const CoordinatorState& s) {
  std::int64_t m = kNever;
  for (std::size_t r = 0; r < s.clocks.size(); ++r)
    if (alive(s, r)) m = std::min(m, s.clocks[r]);
  return m == kNever ? 0 : m;
}
std::int64_t max_clock(const CoordinatorState& s) {
  std::int64_t m = 0;
  for (std::size_t r = 0; r < s.clocks.size(); ++r)
    if (alive(s, r)) m = std::max(m, s.clocks[r]);
  return m;
}

bool quiescent(const CoordinatorState& s) {
  for (std::size_t r = 0; r < s.clocks.size(); ++r)
    if (alive(s, r) && s.clocks[r] != s.grants[r]) return false;
  return true;
}

std::int64_t segment_steps(const CoordinatorState& s, std::int64_t offset, int world, std::int64_t batch) {
  const std::int64_t left = std::max<std::int64_t>(0, s.config.dataset_examples - offset);
  const std::int64_t global = batch * world;
  return s.config.drop_remainder ? left / global : (left + global - 1) / global;
}

// The next global step at which something must happen at a step boundary.
std::int64_t next_event_global(const CoordinatorState& s) {
  std::int64_t next = kNever;
  if (s.next_switch < s.config.switches.size()) next = std::min(next, s.config.switches[s.next_switch].step);
  if (s.config.max_steps > 0) next = std::min(next, s.config.max_steps);
  // A periodic event due at exactly the current step and not yet done is
  // the next event (the grant must stop here), not the following multiple.
  auto periodic = [&](std::int64_t every, std::int64_t last_done) {
    if (s.global_step > 0 && s.global_step % every == 0 && last_done != s.global_step) return s.global_step;
    return (s.global_step / every + 1) * every;
  };
  if (s.config.checkpoint_every > 0 && s.config.checkpoints)
    next = std::min(next, periodic(s.config.checkpoint_every, s.last_checkpoint_step));
  if (s.config.eval_every > 0) next = std::min(next, periodic(s.config.eval_every, s.last_eval_step));
  return next;
}

// The clock at which the epoch ends: the end of its current data segment.
std::int64_t next_boundary(const CoordinatorState& s) { return s.seg_start + s.seg_steps; }

float current_lr(const CoordinatorState& s) { return s.config.schedule->at(s.global_step, s.epoch); }

// The data segment training starts in at s.epoch, and what that epoch
// trained before it: the segment a checkpoint recorded (a resume, or a
// rollback to it), or the epoch's beginning.
void enter_segment(CoordinatorState& s, const DataStart& d) {
  if (d.segment_clock >= 0) {
    s.seg_start = d.segment_clock;
    s.seg_offset = d.offset;
    s.seg_steps = segment_steps(s, d.offset, s.config.replicas, s.batch);
    s.epoch_steps_before = d.steps_before;
    s.epoch_examples = d.epoch_examples;
    s.epoch_unscored = d.epoch_unscored;
    s.epoch_correct = d.epoch_correct;
    s.epoch_loss_sum = d.epoch_loss_sum;
    s.resumed_mid_epoch = d.mid_epoch();
  } else {
    s.seg_start = s.epoch * s.config.batches_per_epoch;
    s.seg_offset = 0;
    s.seg_steps = s.config.batches_per_epoch;
    s.epoch_steps_before = 0;
    s.epoch_examples = s.epoch_unscored = s.epoch_correct = 0;
    s.epoch_loss_sum = 0;
    s.resumed_mid_epoch = false;
  }
}

void send_grant(Self* self, int r) {
  auto& s = self->state;
  if (!alive(s, static_cast<std::size_t>(r))) return;
  Grant g;
  g.view = s.view;
  g.up_to = s.grants[static_cast<std::size_t>(r)];
  g.mode = s.mode;
  g.clock_at_base = s.clock_at_base;
  g.global_at_base = s.global_at_base;
  g.epoch = s.epoch;
  self->send(s.config.devices[static_cast<std::size_t>(r)], grant_atom::value, g);
}

// Extends grants as far as the mode and the next event allow; when nothing
// can run any more, the job is at a step boundary.
void extend(Self* self) {
  auto& s = self->state;
  if (!s.started || s.busy || s.finished || s.paused) return;
  const std::int64_t boundary = next_boundary(s);
  const std::int64_t event = next_event_global(s);
  if (!s.pausing && s.actions.empty()) {
    if (s.mode.kind == Mode::Kind::sync) {
      const std::int64_t c = min_clock(s);
      std::int64_t up_to = std::min(boundary, c + s.config.window);
      if (event != kNever) up_to = std::min(up_to, s.clock_at_base + (event - s.global_at_base));
      if (up_to > s.grants[0]) {
        for (int r = 0; r < s.config.replicas; ++r) {
          s.grants[static_cast<std::size_t>(r)] = up_to;
          send_grant(self, r);
        }
      }
    } else {
      // Global steps still allowed before the next event, minus those granted
      // but not yet reported.
      std::int64_t outstanding = 0;
      for (int r = 0; r < s.config.replicas; ++r)
        if (alive(s, r)) outstanding += s.grants[r] - s.clocks[r];
      std::int64_t budget = event == kNever ? kNever : event - s.global_step - outstanding;
      const std::int64_t slowest = min_clock(s);
      const std::size_t n = static_cast<std::size_t>(s.config.replicas);
      std::vector<std::int64_t> limit(n);
      for (std::size_t r = 0; r < n; ++r) {
        limit[r] = std::min(boundary, s.clocks[r] + s.config.window);
        if (s.mode.kind == Mode::Kind::ssp) limit[r] = std::min(limit[r], slowest + s.mode.staleness + 1);
        if (!alive(s, r)) limit[r] = s.grants[r];
      }
      // The budget goes one step at a time to the replica with the fewest
      // steps granted: handed out in rank order, a budget smaller than the
      // window (frequent evaluations or checkpoints) would all go to replica
      // 0 and starve the others, which then have to catch up before a
      // switch to sync.
      std::vector<bool> extended(n, false);
      while (budget > 0) {
        std::size_t best = n;
        for (std::size_t r = 0; r < n; ++r)
          if (s.grants[r] < limit[r] && (best == n || s.grants[r] < s.grants[best])) best = r;
        if (best == n) break;
        ++s.grants[best];
        extended[best] = true;
        if (budget != kNever) --budget;
      }
      for (std::size_t r = 0; r < n; ++r)
        if (extended[r]) send_grant(self, static_cast<int>(r));
    }
  }
  if (quiescent(s)) on_quiescent(self);
}

// A stop, or a switch or checkpoint someone asked for (troupe ctl, the
// API), takes effect at the next step boundary, not after the grants
// already handed out (up to `window` steps per replica, or a whole epoch
// of fast steps): every replica is told to run no step beyond the one in
// progress (halt, answered with its clock between two steps), and its
// grant shrinks to that clock.
//
// In sync the replicas must stop at one clock, or the one that runs on
// waits in its all-reduce for those that stopped. A replica that answered
// is between steps; one that has not may be inside the step after the
// newest clock answered (waiting in its all-reduce for the others), so
// while some have not answered every replica runs to one past the newest
// clock answered; once all have, to the newest. The target only grows
// (a replica may already be inside the step it allowed) and never passes
// the grant the replicas had.
void hurry(Self* self) {
  auto& s = self->state;
  if (!s.started || s.finished || s.busy || s.forming || s.paused || quiescent(s)) return;
  const std::uint32_t round = ++s.hurry_round;
  const std::uint32_t view = s.view;
  const std::size_t n = s.clocks.size();
  s.hurry_answered.assign(n, false);
  s.hurry_target = 0;
  const std::int64_t granted = s.grants.empty() ? 0 : *std::max_element(s.grants.begin(), s.grants.end());
  for (std::size_t r = 0; r < n; ++r) {
    if (!alive(s, r)) continue;
    self->request(s.config.devices[r], s.config.timeout, halt_atom::value)
        .then(
            [=](std::int64_t clock) {
              auto& st = self->state;
              if (st.finished || round != st.hurry_round || view != st.view || !alive(st, r)) return;
              // The step reports before this answer came first (one sender,
              // one receiver): the clock is the one reported.
              st.grants[r] = std::max(clock, st.clocks[r]);
              st.hurry_answered[r] = true;
              if (st.mode.kind == Mode::Kind::sync) {
                bool all = true;
                std::int64_t newest = 0;
                for (std::size_t q = 0; q < st.clocks.size(); ++q) {
                  if (!alive(st, q)) continue;
                  if (st.hurry_answered[q])
                    newest = std::max(newest, st.grants[q]);
                  else
                    all = false;
                }
                st.hurry_target = std::max(st.hurry_target, std::min(granted, newest + (all ? 0 : 1)));
                for (std::size_t q = 0; q < st.clocks.size(); ++q) {
                  if (!alive(st, q) || !st.hurry_answered[q] || st.grants[q] >= st.hurry_target) continue;
                  st.grants[q] = st.hurry_target;
                  send_grant(self, static_cast<int>(q));
                }
              }
              if (!st.busy && quiescent(st)) on_quiescent(self);
            },
            // A replica lost meanwhile: the view change that follows deals
            // with it; its grant stays as it was.
            [](caf::error&) {});
  }
}

}  // namespace troupe::actors::coord
