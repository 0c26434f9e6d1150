// Every message the actors of one job exchange, and the one place where
// their types are made known to CAF.
//
// These messages stay inside one process: CAF passes them by reference
// counting and never serialises them, so Tensor handles travel as they are
// (CAF_ALLOW_UNSAFE_MESSAGE_TYPE). Float payloads must never go through CAF's
// own float serialisation (../shared/CAF-0.17.md: NaN becomes 1 and +inf
// hangs); what crosses hosts goes through net/ instead.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "actors/mode.hpp"
#include "kernels/tensor.hpp"
#include "models/data/epoch_plan.hpp"
#include "models/trainer.hpp"

namespace troupe::actors {

using kernels::Tensor;

// ---- atoms (CAF 0.17: at most 10 characters) ----
using step_atom = caf::atom_constant<caf::atom("step")>;
using grant_atom = caf::atom_constant<caf::atom("grant")>;
using next_batch_atom = caf::atom_constant<caf::atom("nextbatch")>;
using fill_atom = caf::atom_constant<caf::atom("fill")>;
using seek_atom = caf::atom_constant<caf::atom("seek")>;
using push_atom = caf::atom_constant<caf::atom("push")>;
using step_done_atom = caf::atom_constant<caf::atom("stepdone")>;
using get_state_atom = caf::atom_constant<caf::atom("getstate")>;
using set_state_atom = caf::atom_constant<caf::atom("setstate")>;
using position_atom = caf::atom_constant<caf::atom("position")>;
using evaluate_atom = caf::atom_constant<caf::atom("evaluate")>;
using failed_atom = caf::atom_constant<caf::atom("failed")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using mode_atom = caf::atom_constant<caf::atom("mode")>;
using checkpoint_atom = caf::atom_constant<caf::atom("checkpnt")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using counters_atom = caf::atom_constant<caf::atom("counters")>;

// A batch from a data loader, on the host.
struct Batch {
  Tensor features, labels;  // [b, ...]; rows n..b-1 unused
  std::int64_t examples = 0;
  data::Cursor cursor;      // where this batch sits in the data order
  bool last_in_epoch = false;
};

// Permission for a device to run steps until its clock reaches `up_to`, in
// `mode`. The learning rate of the step starting at clock c is the schedule
// at global step global_at_base + (c - clock_at_base), epoch `epoch`.
struct Grant {
  std::int64_t up_to = 0;
  Mode mode;
  std::int64_t clock_at_base = 0;
  std::int64_t global_at_base = 0;
  std::int64_t epoch = 0;
};

// A device's report after each step.
struct StepReport {
  int rank = 0;
  std::int64_t clock = 0;      // steps this replica has completed
  double loss_sum = 0;
  std::int64_t examples = 0;
  bool pushed = false;         // the gradient went to the parameter server
};

// A gradient pushed to the parameter server (async / ssp).
struct GradientPush {
  int rank = 0;
  std::int64_t clock = 0;      // the replica's clock after this step
  Tensor gradient;             // a copy: the replica reuses its buffer
};

// Parameters and optimizer state: what moves between the replicas and the
// parameter server at a mode switch, and what a checkpoint holds.
struct ReplicaState {
  Tensor parameters;
  std::vector<std::pair<std::string, Tensor>> buffers;
  std::vector<std::pair<std::string, double>> scalars;
};

// Where the job is: set on the parameter server whenever training resumes.
struct Position {
  std::int64_t global_step = 0;
  std::int64_t epoch = 0;
};

// Counters for the accounting invariant (tests and /status).
struct ServerCounters {
  std::int64_t applied = 0;     // gradients applied by the parameter server
  std::int64_t max_lead = 0;    // largest observed (pusher's start clock - slowest clock)
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::kernels::Tensor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::Batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::Grant)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::StepReport)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::GradientPush)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ReplicaState)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::Position)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ServerCounters)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::Mode)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::models::EpochResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::data::Cursor)
