// Where a synchronous job's next membership view starts (elastic
// membership): roll forward, not back.
//
// When a node is lost during a sync step k+1, its all-reduce fails on some
// survivors and may already have completed on others: a ring rank completes
// once the last chunk reached it, so it holds the full sum of every rank's
// gradient, the lost node's included, and applied step k+1. No survivor can
// be further ahead (step k+2's all-reduce needs every survivor's gradient),
// and one whose all-reduce failed applied nothing of k+1 (device.cpp throws
// before the optimizer step). So survivors stand at k or k+1, all at k
// bitwise identical, all at k+1 bitwise identical.
//
// The new view starts at the NEWEST clock a survivor reached. A survivor one
// step behind takes the state (parameters, optimizer state) of one that
// completed the step, over the same path a joining node takes it. This
// replaces keeping, on every survivor and every step, a copy of the state
// the step started from to roll it back: a full copy of parameters and
// optimizer state per step cost 10 to 14% of the steady-state step rate on
// two cores, and the roll-forward costs nothing until a node is lost. It
// also keeps a completed step's work instead of redoing it.
//
// Data: a completed step used the batches of every rank of the old view,
// including those whose report never reached the coordinator (a lost
// node's, a survivor whose all-reduce failed after the others completed).
// They are counted as used (in sync every example of an epoch is used
// once), without a loss or a correct count (nobody reported one). The
// reverse happens too: a lost node can complete step k+1 and report it just
// before it dies while no survivor completed it; the survivors redo k+1 with
// its data, so that report is taken back.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/messages.hpp"
#include "models/data/epoch_plan.hpp"

namespace troupe::actors {

struct ViewEnd {
  std::vector<std::int64_t> clocks;  // by rank of the ending view: each replica's last reported (or aborted) step
  std::vector<bool> alive;           // by rank: still a member (false: its node was lost or drained)
  std::vector<NodeInfo> nodes;       // the ending view's nodes (first rank, replicas)
  data::PlanOptions data;            // the dataset size, per-replica batch and drop_remainder of the segment
  std::int64_t segment_clock = 0;    // the clock at which the segment began
  std::int64_t segment_offset = 0;   // its first permutation position
};

struct ViewStart {
  std::int64_t clock = 0;                // every replica's clock in the new view
  std::vector<ReplicaRef> behind;        // survivors that did not complete step `clock`: they take `source`'s state
  ReplicaRef source;                     // a survivor at `clock`
  std::int64_t unreported_examples = 0;  // examples of completed steps no report counted
  std::int64_t unreported_batches = 0;   // replica-steps behind them
  std::vector<std::size_t> undone;       // lost ranks whose last report is of step clock + 1, which is redone
};

// Throws std::logic_error when the clocks break the invariant above (a
// survivor two steps behind another), which would mean replicas that
// differ: the job must stop rather than train on.
ViewStart plan_view_start(const ViewEnd& end);

}  // namespace troupe::actors
