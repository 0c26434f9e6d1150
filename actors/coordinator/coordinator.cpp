#include "actors/coordinator/coordinator.hpp"
#include "actors/coordinator/view_start.hpp"

#include "actors/job_metrics.hpp"
#include "util/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

namespace troupe::actors {

namespace {
using Clock = std::chrono::steady_clock;
constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

enum class ActionKind { epoch_end, evaluate, view_change, switch_mode, checkpoint, stop };

struct Action {
  Action(ActionKind k, Mode m) : kind(k), mode(m) {}
  Action(ActionKind k, Mode m, caf::response_promise p) : kind(k), mode(m), has_promise(true), promise(std::move(p)) {}
  ActionKind kind;
  Mode mode;
  bool has_promise = false;
  caf::response_promise promise;
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

struct CoordinatorState {
  CoordinatorConfig config;
  Mode mode;
  std::vector<std::int64_t> clocks, grants;
  std::int64_t global_step = 0, epoch = 0;
  std::int64_t clock_at_base = 0, global_at_base = 0;
  std::size_t next_switch = 0;
  bool started = false, busy = false, pausing = false, finished = false;
  std::deque<Action> actions;
  std::int64_t last_checkpoint_step = -1;
  std::int64_t last_eval_step = -1;
  std::vector<std::int64_t> rank_examples;  // examples each replica trained on
  std::vector<StepReport> last_reports;     // by rank: a lost node's, undone when no survivor completed its step
  std::int64_t announced_epoch = -1;
  int idle_boundaries = 0;  // consecutive boundaries without a step in between
  // Throughput and loss.
  Clock::time_point t_start, t_resume, t_epoch;
  double train_seconds = 0, epoch_train_seconds = 0;
  std::int64_t examples = 0, epoch_examples = 0, epoch_correct = 0;
  // Of epoch_examples: used in a step no report counted (a lost node's last
  // step; actors/coordinator/view_start.hpp), so not in the loss sum and correct count.
  std::int64_t epoch_unscored = 0;
  double epoch_loss_sum = 0;
  Clock::time_point last_checkpoint_time;
  bool timed_checkpoint_queued = false;
  double last_loss = 0;
  float last_lr = 0;
  JobResult result;
  // Elastic membership: the view, which ranks of it are still there, the
  // data segment it trains (models/data/epoch_plan.hpp, 5.), and the
  // membership changes waiting for the next step boundary.
  std::uint32_t view = 0;
  std::vector<bool> alive;
  std::int64_t seg_start = 0;           // the clock at which the segment began
  std::int64_t seg_offset = 0;          // permutation positions of the epoch used before it
  std::int64_t seg_steps = 0;           // its steps (the epoch ends at seg_start + seg_steps)
  std::int64_t epoch_steps_before = 0;  // steps (clock) of the epoch's earlier segments
  int rolled_forward = 0;               // survivors that took the state of one that completed the step in flight
  std::int64_t batch = 1;               // per replica in this view
  std::vector<int> joins, leaves;       // node indices
  std::vector<std::string> leave_reasons;
  bool view_change_due = false, forming = false;
  int form_attempts = 0;
  std::int64_t stale_reports = 0;  // reports of an ended view, dropped
  int start_world = 1;             // replicas of the first view
  int views_in_epoch = 0;          // view changes during the current epoch
  bool resumed_mid_epoch = false;  // this epoch began before a resume
  bool paused = false;             // fewer than --min-nodes nodes, or no ps task for the shards
  std::uint32_t pause_id = 0;      // which pause a halt (its --wait-timeout) is for
  Clock::time_point paused_since;
  std::string pause_reason;
  // Shards on ps tasks (CoordinatorConfig::ps_tasks). A ps task lost or
  // leaving makes the next view place every shard anew (replace_due) and
  // then restore the rollback point on every replica and shard, as a resume
  // would. The point is the newest consistent state this actor has seen:
  // the job's start, the newest checkpoint it wrote, or the state gathered
  // at the boundary where a ps task left (restore_due: nothing is lost).
  // rollback_due: the shards' state is not whole (a ps task lost, or a
  // push that failed half-way in async), so it is neither gathered nor
  // checkpointed before the rollback.
  bool replace_due = false, rollback_due = false, restore_due = false;
  bool waiting_for_ps = false;  // no ps task left to host the shards
  std::vector<int> ps_leaving;  // ps tasks that asked to leave
  std::string rollback_reason;
  std::optional<checkpoint::State> rollback_point;
  std::string rollback_label;         // where the point came from, for the log
  bool rollback_point_saved = false;  // it is a checkpoint file
  std::int64_t server_base_step = 0;  // the global step the server's counters count from
  int rollbacks_in_a_row = 0;         // without a step reported in between
  int placements_in_a_row = 0;        // of the shards, the same
  static inline const char* name = "coordinator";
};

namespace {

using Self = caf::stateful_actor<CoordinatorState>;

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

void on_quiescent(Self* self);

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

void finish(Self* self);
void run_actions(Self* self);
void log_line(const std::string& line);

// ---- state gathering and transitions ----

void need_rollback(Self* self, const std::string& why);

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

// `skipped` (when given) is called instead of failing the job when a ps
// task was lost meanwhile (skipped_for_rollback).
template <class Then>
void fetch_state(Self* self, Then then, std::function<void()> skipped = nullptr) {
  auto& s = self->state;
  caf::actor source = s.mode.uses_server() ? s.config.parameter_server : s.config.devices[0];
  self->request(source, s.config.timeout, get_state_atom::value)
      .then([=](const ReplicaState& state) { then(state); },
            [=](caf::error& e) {
              if (skipped && skipped_for_rollback(self, "reading the model state", e)) {
                skipped();
                return;
              }
              self->state.result.error = "fetching the model state: " + self->system().render(e);
              finish(self);
            });
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

void checkpoint_now(Self* self, std::function<void(const std::string& path)> then, bool after_failure = false) {
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

void on_view_formed(Self* self, const ViewPlan& plan, const FormedView& f, std::function<void()> then);

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

void restore_rollback_point(Self* self, std::function<void()> then);

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
    s.config.parameter_server = f.parameter_server;
    s.replace_due = false;
    s.ps_leaving.clear();
    s.waiting_for_ps = false;
  }
  const int before = s.config.replicas;
  const std::size_t nodes_before = s.config.nodes.size();
  s.view = f.view;
  s.config.devices = f.devices;
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
  self->request(s.config.parameter_server, s.config.timeout, reconfig_atom::value, s.view, s.clocks)
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

// `skipped` (when given): a ps task was lost meanwhile (skipped_for_rollback).
void evaluate(Self* self, std::function<void(const models::EpochResult&)> then,
              std::function<void()> skipped = nullptr) {
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
    run();
    return;
  }
  // Evaluate the server's parameters: replica 0 takes them first (it would
  // receive them with its next push anyway).
  self->request(s.config.parameter_server, s.config.timeout, get_state_atom::value)
      .then(
          [=](const ReplicaState& state) {
            self->request(self->state.config.devices[0], self->state.config.timeout, set_state_atom::value, state)
                .then([=](caf::ok_atom) { run(); },
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
                st.config.classification && scored > 0 ? double(st.epoch_correct) / double(scored) : std::nan("");
            r.lr = st.last_lr;
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
  self->send(s.config.listener, s.result);
}

void conclude(Self* self);

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

// Written with nlohmann-json: names and addresses are escaped, and a
// non-finite number (a diverged loss) becomes null, never a bare nan.
std::string status_json(const CoordinatorState& s) {
  using Json = nlohmann::ordered_json;
  const double t = s.train_seconds + (s.busy || !s.started ? 0.0 : seconds(Clock::now() - s.t_resume));
  Json out;
  out["step"] = s.global_step;
  out["epoch"] = s.epoch;
  out["epochs"] = s.config.epochs;
  out["mode"] = s.mode.str();
  out["replicas"] = s.config.replicas;
  out["replica_clocks"] = s.clocks;
  out["samples_per_s"] = t > 0 ? double(s.examples) / t : 0.0;
  out["last_loss"] = s.last_loss;
  out["lr"] = double(s.last_lr);
  out["accuracy"] = s.result.epochs.empty() ? 0.0 : s.result.epochs.back().test_accuracy;
  out["pushes"] = s.result.pushes;
  out["sync_steps"] = s.result.sync_steps;
  if (s.config.ps_tasks) out["rollbacks"] = s.result.rollbacks.size();
  out["state"] = s.finished  ? "finished"
                 : s.paused  ? "paused: " + s.pause_reason
                 : s.busy    ? "at a step boundary"
                 : s.pausing ? "pausing"
                             : "training";
  if (s.config.elastic) {
    out["view"] = s.view;
    out["stale_reports"] = s.stale_reports;
    out["rolled_forward"] = s.result.rolled_forward;
  }
  if (!s.config.nodes.empty()) {
    // Every node of a cluster: its devices, its step (its slowest replica's
    // clock) and its samples/s.
    Json nodes = Json::array();
    for (const NodeInfo& node : s.config.nodes) {
      std::int64_t step = kNever, examples = 0;
      for (int r = node.first_rank; r < node.first_rank + node.replicas; ++r) {
        step = std::min(step, s.clocks[static_cast<std::size_t>(r)]);
        examples += s.rank_examples[static_cast<std::size_t>(r)];
      }
      Json entry;
      entry["index"] = node.index;
      entry["name"] = node.name;
      entry["address"] = node.address;
      entry["devices"] = node.devices;
      entry["ranks"] = {node.first_rank, node.first_rank + node.replicas - 1};
      entry["step"] = node.replicas ? step : 0;
      entry["samples_per_s"] = t > 0 ? double(examples) / t : 0.0;
      nodes.push_back(std::move(entry));
    }
    out["nodes"] = std::move(nodes);
  }
  if (!s.config.links.empty()) out["links"] = s.config.links;
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

caf::behavior coordinator_actor(Self* self, CoordinatorConfig config);

caf::actor spawn_coordinator(caf::actor_system& system, CoordinatorConfig config) {
  return system.spawn<caf::detached>(coordinator_actor, std::move(config));
}

caf::behavior coordinator_actor(Self* self, CoordinatorConfig config) {
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
          const double mean = scored > 0 ? st.epoch_loss_sum / double(scored) : st.last_loss;
          // Steps into the epoch: the segments before this one (each in its
          // own view's global batches) and this one's.
          st.config.callbacks.on_step_end(st.global_step, st.epoch_steps_before + min_clock(st) - st.seg_start, mean,
                                          t > 0 ? double(st.epoch_examples) / t : 0.0);
        }
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
        auto rp = self->make_response_promise();
        enqueue(self, Action{ActionKind::switch_mode, to, rp});
        return caf::delegated<ControlReply>{};
      },
      [=](checkpoint_atom) -> caf::result<ControlReply> {
        if (!self->state.config.checkpoints) return ControlReply{409, "no --checkpoint-dir configured"};
        if (self->state.finished) return ControlReply{409, "the job has finished"};
        auto rp = self->make_response_promise();
        enqueue(self, Action{ActionKind::checkpoint, self->state.mode, rp});
        return caf::delegated<ControlReply>{};
      },
      [=](stop_atom) -> caf::result<ControlReply> {
        if (self->state.finished) return ControlReply{409, "the job has finished"};
        auto rp = self->make_response_promise();
        enqueue(self, Action{ActionKind::stop, self->state.mode, rp});
        return caf::delegated<ControlReply>{};
      },
  };
}

}  // namespace troupe::actors
