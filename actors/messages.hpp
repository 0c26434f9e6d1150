// Every message the actors of one job exchange, and the one place where
// their types are made known to CAF.
//
// Inside one process CAF passes messages by reference counting and never
// serialises them: Tensor handles travel as they are. Between the nodes of a
// cluster (cluster/node.hpp) the messages a coordinator exchanges with remote
// device actors are serialised: Grant, StepReport, GradientPush,
// ReplicaState, Tensor and Mode have their own serialize() below, registered
// with CAF by register_message_types(). Every float and double in them goes
// as raw bytes (apply_raw), never through CAF's own float serialisation
// (../shared/CAF-0.17.md: NaN becomes 1 and +inf hangs the sender). Raw bytes
// are in host byte order: every node of a cluster must share it (x86-64 and
// aarch64 are both little-endian). Types marked CAF_ALLOW_UNSAFE_MESSAGE_TYPE
// at the end never leave their process: CAF would silently send them empty.
#pragma once

#include <caf/all.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "actors/mode.hpp"
#include "kernels/tensor.hpp"
#include "models/data/epoch_plan.hpp"
#include "models/optimizer.hpp"
#include "models/trainer.hpp"
#include "net/collective/collective.hpp"
#include "net/collective/nccl.hpp"
#include "net/push/frames.hpp"
#include "net/push/push_routes.hpp"

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
using digest_atom =
    caf::atom_constant<caf::atom("digest")>;  // -> SHA-256 (hex) of a replica's parameters and optimizer state
// Cluster membership (cluster/node.hpp).
using join_atom = caf::atom_constant<caf::atom("join")>;
using ready_atom = caf::atom_constant<caf::atom("ready")>;
using form_atom = caf::atom_constant<caf::atom("form")>;
using formed_atom = caf::atom_constant<caf::atom("formed")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using node_lost_atom = caf::atom_constant<caf::atom("nodelost")>;
// Elastic membership (actors/membership.hpp, docs/ARCHITECTURE.md).
// Each view change's message has an atom of its own, one payload each:
using reconfig_atom = caf::atom_constant<caf::atom("reconfig")>;       // a device enters a view (ViewAssignment)
using reshard_atom = caf::atom_constant<caf::atom("reshard")>;         // a loader takes its new shard (LoaderView)
using view_clocks_atom = caf::atom_constant<caf::atom("viewclocks")>;  // the ps enters a view at these clocks
using halt_atom = caf::atom_constant<caf::atom("halt")>;               // a device stops after its step -> clock
using step_aborted_atom = caf::atom_constant<caf::atom("stepabort")>;  // a step's all-reduce was aborted
using abort_view_atom = caf::atom_constant<caf::atom("abortview")>;    // a node aborts its collectives
using member_atom = caf::atom_constant<caf::atom("member")>;           // a membership event for the coordinator
using form_view_atom = caf::atom_constant<caf::atom("formview")>;      // coordinator -> job: form this view
using view_formed_atom = caf::atom_constant<caf::atom("viewformd")>;   // job -> coordinator: it is formed
using drain_atom = caf::atom_constant<caf::atom("drain")>;             // a node leaves at the next boundary
using host_shards_atom = caf::atom_constant<caf::atom("hostshard")>;   // coordinator -> ps task: run these shards
using standby_atom = caf::atom_constant<caf::atom("standby")>;       // coordinator -> a spare ps task: wait to be used
using abort_push_atom = caf::atom_constant<caf::atom("abortpush")>;  // coordinator -> node: fail every push in flight
using model_state_atom = caf::atom_constant<caf::atom("modelstate")>;  // a replica's running statistics
using watch_stop_atom = caf::atom_constant<caf::atom("watchstop")>;    // coordinator -> itself: look at should_stop

// A batch from a data loader, on the host.
struct Batch {
  Tensor features, labels;  // [b, ...]; rows n..b-1 unused
  std::int64_t examples = 0;
  // Of the global batch this one is part of, every replica's together: a
  // synchronous step's gradient is the mean over these (fewer than batch x
  // world in the last, partial batch of an epoch without drop_remainder).
  std::int64_t global_examples = 0;
  data::Cursor cursor;  // where this batch sits in the data order
  bool last_in_epoch = false;
};

// Permission for a device to run steps until its clock reaches `up_to`, in
// `mode`. The learning rate of the step starting at clock c is the schedule
// at global step global_at_base + (c - clock_at_base), epoch `epoch`.
struct Grant {
  std::uint32_t view = 0;  // the membership view it belongs to (older ones are dropped)
  std::int64_t up_to = 0;
  Mode mode;
  std::int64_t clock_at_base = 0;
  std::int64_t global_at_base = 0;
  std::int64_t epoch = 0;
};

// A device's report after each step.
struct StepReport {
  std::uint32_t view = 0;  // the view the step ran in
  int rank = 0;
  std::int64_t clock = 0;  // steps this replica has completed
  double loss_sum = 0;
  std::int64_t examples = 0;
  std::int64_t correct = 0;  // examples whose top-1 prediction was right (classification)
  bool pushed = false;       // the gradient went to the parameter server
  // Timings for /metrics (actors/job_metrics.hpp), measured on the device's
  // own node: the whole step from asking for its batch to its update
  // applied, and within it the wait for the all-reduce (sync) or for the
  // parameter server's answer to the push (async, ssp).
  double step_seconds = 0;
  double wait_seconds = 0;
  // A push's staleness as shard 0 measured it and answered on the data
  // plane (async, ssp; -1: not measured here, the shard recorded it itself).
  // The coordinator records it for /metrics when the shards run on ps tasks.
  std::int64_t staleness = -1;
};

// A gradient pushed to the parameter server (async / ssp).
using net::push::GradientPush;  // net/push/frames.hpp

// Parameters and optimizer state: what moves between the replicas and the
// parameter server at a mode switch, and what a checkpoint holds.
struct ReplicaState {
  // A device's clock when it was taken (steps it had completed), or, from
  // the parameter server, the global step its parameters are at; -1 unknown.
  std::int64_t clock = -1;
  Tensor parameters;
  std::vector<std::pair<std::string, Tensor>> buffers;
  std::vector<std::pair<std::string, double>> scalars;
  // The model's state that is not trained (BatchNorm's running statistics):
  // a replica's own. Undefined from the parameter server (it keeps none),
  // and then a replica taking the state keeps its own.
  Tensor model_state;
  // From the parameter server: each replica's clock as of the last push it
  // applied (by rank), i.e. the data positions its parameters reflect.
  std::vector<std::int64_t> replica_clocks;
};

// Copies parameters, and the optimizer state of the same names, into a
// replica or a parameter-server shard (whose state is its packed part of
// the whole, actors/ps/partition.hpp).
void restore_state(const Tensor& parameters, models::Optimizer& optimizer, const ReplicaState& state);
// Copies a model state (running statistics; ReplicaState::model_state)
// into `model`; an undefined one (from the parameter server) changes nothing.
void restore_model_state(models::Model& model, const Tensor& state);

// Where a replica stands in the job: the steps it has completed (its clock)
// and so the next batch of its shard. Sent with a state on resume (and, for
// elastic membership, when a replica joins): a replica handed parameters
// without its clock would count from 0 and redo every step.
struct ReplicaPosition {
  std::int64_t clock = 0;
  std::int64_t epoch = 0;   // data cursor (models/data/epoch_plan.hpp, 4. and 5.):
  std::int64_t batch = 0;   //   the next batch of its segment,
  std::int64_t offset = 0;  //   which starts at this permutation position
};

// A node's part of a new membership view, sent by the coordinator node to
// each node (serialised): its place in the data-plane ring, its replicas'
// ranks, and where every replica stands (all replicas of a view start at
// the same clock and data position: see actors/coordinator/coordinator.hpp).
struct FormView {
  std::uint32_t view = 0;
  std::int32_t node_rank = 0;   // in the ring of node leaders (addresses)
  std::int32_t first_rank = 0;  // this node's first replica
  std::int32_t world = 1;       // replicas in the view
  std::vector<std::string> addresses;
  std::int64_t clock = 0;                         // every replica's clock at the view's start
  std::int64_t epoch = 0, batch = 0, offset = 0;  // the data cursor (models/data/epoch_plan.hpp, 5.)
  std::int64_t batch_size = 1;                    // per replica in this view
  // The view's NCCL unique id as 256 hex digits (net::NcclId::hex) when the
  // whole view reduces through one NCCL group (job/collective_choice.hpp,
  // choose_across_nodes), else "": the node builds its hierarchical group.
  // Text, not a byte vector: CAF 0.17 has no safe binary blob type, and a
  // string crosses byte for byte.
  std::string nccl_id;
  // Shards on ps tasks: each shard's ps task data-plane address,
  // by shard index, and the shard count the partition was asked for (the
  // job's model and ps_split_above give the same partition on every node:
  // actors/ps/parameter_server.hpp, partition_for). Empty: the whole server
  // through the node's relay.
  std::vector<std::string> ps_addresses;
  std::int32_t ps_partition_shards = 0;
};

// What a device (and its loader) take on entering a view. Local only: the
// collective is this process's.
struct ViewAssignment {
  std::uint32_t view = 0;
  int rank = 0, world = 1;
  std::int64_t batch_size = 1;  // per replica
  std::int64_t clock = 0;       // the replica's clock from now on
  data::Cursor cursor;          // its loader's next batch
  std::shared_ptr<net::Collective> collective;
  // Where it pushes each shard's part from now on, when the shards run on
  // ps tasks (a view that re-placed them brings new routes); null: as before.
  std::shared_ptr<const net::push::PushRoutes> push_routes;
};

// A change of membership, from the job's thread to the coordinator actor.
//   joined, lost, drain    a node with replicas
//   ps_lost                a ps task is gone (its shards with it)
//   ps_leaving             a ps task asked to leave (its shards' state is whole)
//   ps_joined              a ps task came after the start: a spare
struct MemberEvent {
  enum class Kind { joined, lost, drain, ps_lost, ps_leaving, ps_joined } kind = Kind::joined;
  int node = 0;      // the membership's node index
  std::string what;  // for the log
};

// What a node is in a cluster job, said when it joins (never read from
// its name): a worker trains replicas; a ps task hosts parameter-server
// shards and runs none (troupe node --ps-task).
enum class NodeRole { worker, ps_task };
// The join request carries the role as text: "worker", "ps-task".
const char* role_text(NodeRole role);
// Throws std::invalid_argument naming the text and the roles there are.
NodeRole parse_role(const std::string& text);

// A node whose data plane listens, ready to take part: the membership
// actor tells the listener (the coordinator node's thread), in process.
struct ReadyNode {
  int index = 0;  // the membership's number
  std::string name;
  NodeRole role = NodeRole::worker;
  std::string data_address;          // its push server (a ps task) or data plane
  std::vector<std::string> devices;  // a worker's; a ps task has none
  std::string nccl;                  // "" when NCCL loads on the node, else why not
  caf::actor handle;                 // the node's actor (forms views, hosts shards)
};

// One node of a cluster, for /status and for view changes.
struct NodeInfo {
  int index = 0;                     // the membership's number (0: the coordinator)
  std::string name;                  // "coordinator", "worker/HOST:PORT", ...
  std::string address;               // its data-plane address
  int first_rank = 0, replicas = 0;  // its replicas' global ranks
  std::vector<std::string> devices;
};

// One replica, by node: the membership's node index and the replica's
// place among that node's devices (ranks change between views; this does not).
struct ReplicaRef {
  int node = 0;
  int local = 0;
  friend bool operator==(const ReplicaRef& a, const ReplicaRef& b) { return a.node == b.node && a.local == b.local; }
};

// What the coordinator asks the job's thread to form at a step boundary.
struct ViewPlan {
  std::uint32_t view = 0;
  std::int64_t clock = 0;  // every replica's clock in the new view
  // Sync: survivors a step behind `clock` take the state of `source` (a
  // survivor at `clock`), as joiners do (actors/coordinator/view_start.hpp).
  std::vector<ReplicaRef> behind;
  ReplicaRef source;
  data::Cursor cursor;            // the new segment: epoch, batch 0, offset
  std::int64_t batch = 1;         // per replica (elastic_batch "replica")
  std::int64_t global_batch = 0;  // >0: keep this global batch (elastic_batch "global")
  std::vector<int> remove;        // nodes that leave (lost or drained)
  // Shards on ps tasks: place every shard anew on the ps tasks there are
  // (a ps task was lost or leaves, or the shards' state must be rebuilt),
  // leaving out `ps_remove` (ps tasks that leave).
  bool replace_shards = false;
  std::vector<int> ps_remove;
};

// What the job's thread formed for a view: every replica in rank order and
// the nodes (for status), or why it could not.
struct FormedView {
  std::uint32_t view = 0;
  std::vector<caf::actor> devices;  // device actors (actors/device_protocol.hpp)
  std::vector<NodeInfo> nodes;
  std::int64_t batch = 1;  // per replica in the new view
  std::vector<int> lost;   // nodes found gone while forming
  std::string error;
  // The shards were placed anew: the parameter server's new front (its old
  // one is gone); null otherwise.
  caf::actor parameter_server;
  // No ps task is left to host the shards (error says so): training waits
  // for one to join.
  bool waiting_for_ps = false;
};

// Where the job is: set on the parameter server whenever training resumes.
struct Position {
  std::int64_t global_step = 0;
  std::int64_t epoch = 0;
};

// Counters for the accounting invariant (tests and /status).
struct ServerCounters {
  std::int64_t applied = 0;   // gradients applied by the parameter server
  std::int64_t max_lead = 0;  // largest observed (pusher's start clock - slowest clock)
  std::int64_t dropped = 0;   // pushes from an ended view, not applied
  // By parameter-server shard: the gradients each applied (every shard
  // applies every push; `applied` is the least of them).
  std::vector<std::int64_t> shard_applied;
  // Staleness of the pushes applied (shard 0's view): for each, the updates
  // applied between its replica's receiving parameters and the push.
  std::int64_t staleness_sum = 0, staleness_max = 0;
};

// ---- serialisation for the messages that cross nodes ----

namespace detail {
// Throws on a CAF serialisation error, which a message handler turns into an
// error reply (CAF catches it) instead of a half-read message.
inline void check(caf::error e, const char* what) {
  if (e) throw std::runtime_error(std::string("serialising ") + what + " failed");
}
template <class P, class T>
void raw(P& p, T& value, const char* what) {
  static_assert(std::is_trivially_copyable<T>::value, "raw bytes only for plain values");
  check(p.apply_raw(sizeof(T), &value), what);
}
}  // namespace detail

template <class P>
void serialize(P& p, Mode& m, const unsigned int) {
  auto kind = static_cast<std::uint8_t>(m.kind);
  detail::check(p(kind, m.staleness), "Mode");
  if constexpr (P::writes_state) {
    if (kind > static_cast<std::uint8_t>(Mode::Kind::ssp) || m.staleness < 0)
      throw std::runtime_error("a received Mode is out of range");
    m.kind = static_cast<Mode::Kind>(kind);
  }
}

template <class P>
void serialize(P& p, Grant& g, const unsigned int) {
  detail::check(p(g.view, g.up_to, g.mode, g.clock_at_base, g.global_at_base, g.epoch), "Grant");
}

template <class P>
void serialize(P& p, StepReport& r, const unsigned int) {
  detail::check(p(r.view, r.rank, r.clock, r.examples, r.correct, r.pushed, r.staleness), "StepReport");
  detail::raw(p, r.loss_sum, "StepReport");
  detail::raw(p, r.step_seconds, "StepReport");
  detail::raw(p, r.wait_seconds, "StepReport");
}

// Position and ServerCounters cross nodes between the parameter server's
// front and shards on ps tasks.
template <class P>
void serialize(P& p, Position& x, const unsigned int) {
  detail::check(p(x.global_step, x.epoch), "Position");
}

template <class P>
void serialize(P& p, ServerCounters& c, const unsigned int) {
  detail::check(p(c.applied, c.max_lead, c.dropped, c.shard_applied, c.staleness_sum, c.staleness_max),
                "ServerCounters");
}

template <class P>
void serialize(P& p, ReplicaState& s, const unsigned int) {
  detail::check(p(s.clock, s.parameters), "ReplicaState");
  std::size_t n = s.buffers.size();
  detail::check(p.begin_sequence(n), "ReplicaState");
  if constexpr (P::writes_state) s.buffers.resize(n);
  for (auto& [name, buffer] : s.buffers) detail::check(p(name, buffer), "ReplicaState");
  detail::check(p.end_sequence(), "ReplicaState");
  n = s.scalars.size();
  detail::check(p.begin_sequence(n), "ReplicaState");
  if constexpr (P::writes_state) s.scalars.resize(n);
  for (auto& [name, value] : s.scalars) {
    detail::check(p(name), "ReplicaState");
    detail::raw(p, value, "ReplicaState");
  }
  detail::check(p.end_sequence(), "ReplicaState");
  detail::check(p(s.replica_clocks), "ReplicaState");
  detail::check(p(s.model_state), "ReplicaState");
}

template <class P>
void serialize(P& p, ReplicaPosition& r, const unsigned int) {
  detail::check(p(r.clock, r.epoch, r.batch, r.offset), "ReplicaPosition");
  if constexpr (P::writes_state) {
    if (r.clock < 0 || r.epoch < 0 || r.batch < 0 || r.offset < 0)
      throw std::runtime_error("a received ReplicaPosition is negative");
  }
}

template <class P>
void serialize(P& p, FormView& f, const unsigned int) {
  detail::check(p(f.view, f.node_rank, f.first_rank, f.world, f.addresses, f.clock, f.epoch, f.batch, f.offset,
                  f.batch_size, f.nccl_id, f.ps_addresses, f.ps_partition_shards),
                "FormView");
  if constexpr (P::writes_state) {
    if (f.world < 1 || f.first_rank < 0 || f.node_rank < 0 || f.clock < 0 || f.epoch < 0 || f.batch < 0 ||
        f.offset < 0 || f.batch_size < 1 || static_cast<std::size_t>(f.node_rank) >= f.addresses.size())
      throw std::runtime_error("a received FormView is out of range");
    if (!f.nccl_id.empty()) (void)net::NcclId::from_hex(f.nccl_id);  // throws naming what is wrong
    if (!f.ps_addresses.empty() && (f.ps_partition_shards < 1 || f.ps_addresses.size() > 4096))
      throw std::runtime_error("a received FormView has " + std::to_string(f.ps_addresses.size()) +
                               " ps addresses for a partition of " + std::to_string(f.ps_partition_shards) + " shards");
  }
}

// Registers every type above with CAF (both ends of a connection need it).
void register_message_types(caf::actor_system_config& config);

}  // namespace troupe::actors

namespace troupe::net::push {

template <class P>
void serialize(P& p, GradientPush& g, const unsigned int) {
  actors::detail::check(p(g.view, g.rank, g.clock, g.gradient), "GradientPush");
}

}  // namespace troupe::net::push

namespace troupe::kernels {

// A tensor crosses nodes as dtype, dims and raw bytes; it arrives on the host.
// A received shape is checked before anything is allocated (the peer passed
// the cluster handshake, but a bug must not become a huge allocation).
template <class P>
void serialize(P& p, Tensor& t, const unsigned int) {
  std::uint8_t defined = 0, dtype = 0;
  std::vector<std::int64_t> dims;
  Tensor host;
  if constexpr (P::reads_state) {
    defined = t.defined() && t.raw() != nullptr ? 1 : 0;
    if (defined) {
      host = t.device().is_cpu() ? t : t.to(Device::cpu());
      dtype = static_cast<std::uint8_t>(t.dtype());
      dims = t.shape().dims();
    }
  }
  actors::detail::check(p(defined, dtype, dims), "Tensor");
  if (!defined) {
    if constexpr (P::writes_state) t = Tensor();
    return;
  }
  if constexpr (P::writes_state) {
    if (dtype > static_cast<std::uint8_t>(DType::i32))
      throw std::runtime_error("a received tensor has an unknown dtype");
    std::int64_t numel = 1;
    for (auto d : dims) {
      if (d < 0 || d > (std::int64_t{1} << 31) || numel > (std::int64_t{1} << 31) / std::max<std::int64_t>(d, 1))
        throw std::runtime_error("a received tensor has an implausible shape");
      numel *= d;
    }
    host = Tensor::empty(Shape(dims), static_cast<DType>(dtype));
  }
  if (host.bytes()) actors::detail::check(p.apply_raw(host.bytes(), host.raw()), "Tensor");
  if constexpr (P::writes_state) t = host;
}

}  // namespace troupe::kernels

namespace troupe::actors {}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::Batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::models::EpochResult)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::data::Cursor)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ViewAssignment)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::MemberEvent)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ReadyNode)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::FormedView)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ViewPlan)
