// The coordinator actor's state and the functions its behaviour is made of,
// shared by the files of actors/coordinator/ (each a concern of the
// coordinator, coordinator.hpp has the protocol): grants.cpp,
// boundaries.cpp (the step boundary's actions), switches.cpp (state,
// checkpoints, mode switches), views.cpp (membership views and rollback),
// status.cpp, and coordinator.cpp (the behaviour: which message does what).
// Internal to actors/coordinator/: nothing else includes it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/coordinator/coordinator.hpp"
#include "actors/coordinator/view_start.hpp"
#include "actors/job_metrics.hpp"
#include "util/timeline.hpp"

namespace troupe::actors::coord {

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

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

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
  bool stop_asked = false;
  // The replicas' mean model state at the last agree_model_state (what a
  // checkpoint stores when the state comes from the parameter server).
  std::vector<float> model_state_mean;  // callbacks.should_stop() said yes: a stop is queued
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
  // hurry() (grants.cpp): which round of halts the replicas' answers are
  // for, who has answered, and (sync) the clock every replica stops at.
  std::uint32_t hurry_round = 0;
  std::vector<bool> hurry_answered;
  std::int64_t hurry_target = 0;
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

using Self = coordinator_actor_t::stateful_base<CoordinatorState>;

// grants.cpp
bool alive(const CoordinatorState& s, std::size_t r);
std::int64_t min_clock(const CoordinatorState& s);
std::int64_t max_clock(const CoordinatorState& s);
bool quiescent(const CoordinatorState& s);
std::int64_t segment_steps(const CoordinatorState& s, std::int64_t offset, int world, std::int64_t batch);
std::int64_t next_event_global(const CoordinatorState& s);
std::int64_t next_boundary(const CoordinatorState& s);
float current_lr(const CoordinatorState& s);
void enter_segment(CoordinatorState& s, const DataStart& d);
void send_grant(Self* self, int r);
void extend(Self* self);
void hurry(Self* self);

// switches.cpp
bool skipped_for_rollback(Self* self, const std::string& action, const caf::error& e);
void fail_job(Self* self, const std::string& what);
checkpoint::State make_checkpoint(const CoordinatorState& st, const ReplicaState& state, bool after_failure);
void keep_rollback_point(CoordinatorState& st, checkpoint::State c, std::string label, bool saved);
void checkpoint_now(Self* self, std::function<void(const std::string& path)> then, bool after_failure = false);
// checkpoint_now's second half: the state as it stands now, saved.
void save_checkpoint(Self* self, std::function<void(const std::string& path)> then, bool after_failure);
bool state_is_whole(const CoordinatorState& s);
void switch_mode(Self* self, Mode to, std::function<void()> then, std::function<void()> skipped);

// views.cpp
void log_line(const std::string& line);
std::pair<int, int> ranks_of(const CoordinatorState& s, int index);
std::string node_label(const CoordinatorState& s, int index);
void queue_view_change(Self* self);
void need_rollback(Self* self, const std::string& why);
void ps_event(Self* self, const MemberEvent& e);
void member_event(Self* self, const MemberEvent& e);
void change_view(Self* self, std::function<void()> then);
void on_view_formed(Self* self, const ViewPlan& plan, const FormedView& f, std::function<void()> then);
void restore_rollback_point(Self* self, std::function<void()> then);

// switches.cpp (with the other state moves)
void agree_model_state(Self* self, std::function<void()> then);

// boundaries.cpp
void evaluate(Self* self, std::function<void(const models::EpochResult&)> then,
              std::function<void()> skipped = nullptr);
void reply(Action& a, int status, const std::string& message);
void run_actions(Self* self);
bool align_before_sync(Self* self);
void on_quiescent(Self* self);
void send_result(Self* self);
void finish(Self* self);
void conclude(Self* self);
void enqueue(Self* self, Action a);

// status.cpp
std::string status_json(const CoordinatorState& s);

// ---- used by several files ----

void finish(Self* self);
// `skipped` (when given) is called instead of failing the job when a ps
// task was lost meanwhile (skipped_for_rollback).
template <class Then>
void fetch_state(Self* self, Then then, std::function<void()> skipped = nullptr) {
  auto& s = self->state;
  caf::actor source = s.mode.uses_server() ? caf::actor_cast<caf::actor>(s.config.parameter_server)
                                           : caf::actor_cast<caf::actor>(s.config.devices[0]);
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

coordinator_actor_t::behavior_type coordinator_actor(Self* self, CoordinatorConfig config);

}  // namespace troupe::actors::coord
