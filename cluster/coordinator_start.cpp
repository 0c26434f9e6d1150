// CoordinatorCluster as ClusterStart: the nodes gathered, the first view,
// the nodes' devices, the end (coordinator_cluster.hpp).
#include <unistd.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <map>
#include <optional>

#include "actors/membership.hpp"
#include "cluster/coordinator_cluster.hpp"
#include "cluster/node.hpp"
#include "cluster/node_support.hpp"
#include "job/collective_choice.hpp"
#include "job/job_file.hpp"
#include "kernels/config.hpp"
#include "net/cluster/auth.hpp"
#include "net/cluster/gate.hpp"
#include "net/collective/hierarchical.hpp"
#include "net/collective/nccl.hpp"
#include "net/control/address.hpp"
#include "net/push/push_link.hpp"
#include "net/push/push_routes.hpp"
#include "net/tcp/tcp.hpp"

namespace troupe::actors {

using namespace std::chrono_literals;
using namespace node_support;

namespace {

// SIGINT and SIGTERM while the coordinator's hooks wait (for --min-nodes,
// for the nodes' replicas): noticed within 100 ms. The handler that was
// installed before (the CLI's stop flag) still runs, and is back in place
// when the watch ends.
std::atomic<int> hook_signal{0};
struct sigaction previous_sigint, previous_sigterm;
extern "C" void on_hook_signal(int sig) {
  hook_signal.store(sig);
  const struct sigaction& before = sig == SIGINT ? previous_sigint : previous_sigterm;
  if (!(before.sa_flags & SA_SIGINFO) && before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN)
    before.sa_handler(sig);
}
class SignalWatch {
 public:
  SignalWatch() {
    hook_signal.store(0);
    struct sigaction mine {};
    mine.sa_handler = on_hook_signal;
    sigemptyset(&mine.sa_mask);
    sigaction(SIGINT, &mine, &previous_sigint);
    sigaction(SIGTERM, &mine, &previous_sigterm);
  }
  ~SignalWatch() {
    sigaction(SIGINT, &previous_sigint, nullptr);
    sigaction(SIGTERM, &previous_sigterm, nullptr);
  }
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  int signal() const { return hook_signal.load(); }
};

}  // namespace

CoordinatorCluster::CoordinatorCluster(const NodeOptions& options, const JobConfig& job)
    : options_(options), log_(logger(options)) {
  if (options_.min_nodes < 1) throw std::invalid_argument("--min-nodes must be at least 1");
  if (options_.start_nodes < options_.min_nodes) options_.start_nodes = options_.min_nodes;
  if (options_.max_nodes != 0 && options_.max_nodes < options_.start_nodes)
    throw std::invalid_argument("--max-nodes " + std::to_string(options_.max_nodes) + " is below --start-nodes " +
                                std::to_string(options_.start_nodes));
  if (options_.max_nodes != 0 && options_.max_nodes < options_.min_nodes)
    throw std::invalid_argument("--max-nodes " + std::to_string(options_.max_nodes) + " is below --min-nodes " +
                                std::to_string(options_.min_nodes));
  listen_ = net::parse_host_port(options_.listen);  // throws naming the address
  secret_ = net::Secret::load(options_.secret_file);
  net::check_clear_links(secret_, options_.insecure);
  identity_ = job_identity(job);
  job_text_ = to_job_text(job);
  for (const auto& d : job.devices) local_devices_.push_back(d.str());
  local_device_list_ = job.devices;
  batch_ = job.train.batch;
}

CoordinatorCluster::~CoordinatorCluster() {
  if (data_fd_ >= 0) ::close(data_fd_);
}

std::vector<int> CoordinatorCluster::gather(caf::scoped_actor& self) {
  auto& system = self->system();
  data_fd_ = bind_data_plane(options_.data_address, is_wildcard(listen_.host) ? first_host_address() : listen_.host,
                             &data_address_);
  MembershipState init;
  init.fingerprint = identity_.fingerprint;
  init.job_text = job_text_;
  init.listener = caf::actor_cast<caf::actor>(self);
  init.log = log_;
  init.started = started_;
  init.gone = gone_;
  init.max_nodes = options_.max_nodes;
  // On CAF's scheduler, not detached: it only keeps lists and answers at
  // once, and a detached actor that CAF 0.17 leaves referenced after it
  // ended holds ~actor_system (await_detached_threads) until
  // run_with_bounded_shutdown gives up, which cores of lingering
  // coordinators showed for this actor (docs/ARCHITECTURE.md, "Ending").
  membership_ = system.spawn(membership_actor, init);
  auto port = system.middleman().publish(membership_, 0, "127.0.0.1", true);
  if (!port) {
    release(self);
    throw std::runtime_error("cannot publish the coordinator on 127.0.0.1: " + system.render(port.error()));
  }
  caf_port_ = *port;
  try {
    net::GateConfig g;
    g.listen_address = options_.listen;
    g.forward_port = caf_port_;
    g.handshake = handshake_config(secret_, options_, "coordinator");
    g.log = log_;
    // Elastic membership: a node may join at any time (the membership
    // actor refuses one beyond --max-nodes, with the reason).
    g.admit = [](const std::string&) -> std::string { return ""; };
    gate_ = std::make_unique<net::Gate>(g);
  } catch (...) {
    release(self);
    throw;
  }
  log_("coordinator listening on " + options_.listen + " (troupe " + TROUPE_VERSION + ", job " +
       identity_.fingerprint.substr(0, 12) + ", data plane " + data_address_ + ")");
  log_(links_line(secret_, options_));
  if (options_.start_nodes > 1) log_("waiting for " + std::to_string(options_.start_nodes - 1) + " more node(s)");
  if (options_.ps_tasks > 0) log_("waiting for " + std::to_string(options_.ps_tasks) + " ps task(s) (--ps-tasks)");
  await_nodes(self, options_.start_nodes, "--start-nodes / --min-nodes");
  started_->store(true);
  return counts("starting with ");
}

std::vector<int> CoordinatorCluster::regather(caf::scoped_actor& self, const std::string& why) {
  log_(why);
  abort_view(self, why);
  ++first_view_;
  std::vector<int> known;  // the members lost are dropped as a loss before the start is
  for (const auto& n : ready_) known.push_back(n.index);
  for (const auto& t : ps_tasks_) known.push_back(t.index);
  for (int index : known)
    if (gone_->contains(index)) drop(index);
  // What the membership said meanwhile (joins, losses) first.
  for (bool more = true; more;)
    self->receive([&](ready_atom, const ReadyNode& node) { admit(self, node); },
                  [&](node_lost_atom, std::int32_t index, const std::string&) { drop(index); },
                  caf::after(std::chrono::milliseconds(0)) >> [&] { more = false; });
  if (static_cast<int>(ready_.size()) + 1 < options_.min_nodes)
    log_("waiting for " + std::to_string(options_.min_nodes - static_cast<int>(ready_.size()) - 1) +
         " more node(s) (--min-nodes " + std::to_string(options_.min_nodes) + ") to start without the lost one(s)");
  await_nodes(self, options_.min_nodes, "--min-nodes");
  return counts("starting again, as view " + std::to_string(first_view_) + ", with ");
}

int CoordinatorCluster::node_of_rank(int rank) const {
  for (const auto& n : nodes_)
    if (rank >= n.first_rank && rank < n.first_rank + n.replicas) return n.index;
  return 0;
}

void CoordinatorCluster::await_nodes(caf::scoped_actor& self, int nodes, const std::string& flag) {
  const auto deadline = std::chrono::steady_clock::now() + options_.wait_timeout;
  SignalWatch signals;
  while (static_cast<int>(ready_.size()) + 1 < nodes || static_cast<int>(ps_tasks_.size()) < options_.ps_tasks) {
    const auto left = deadline - std::chrono::steady_clock::now();
    bool timed_out = false;
    if (const int sig = signals.signal()) {
      const std::string why = "stopped by signal " + std::to_string(sig) + " while waiting for --min-nodes (" +
                              std::to_string(ready_.size() + 1) + " of " + std::to_string(nodes) + " nodes ready)";
      finish(self, why);
      throw std::runtime_error(why);
    }
    self->receive([&](ready_atom, const ReadyNode& node) { admit(self, node); },
                  [&](node_lost_atom, std::int32_t index, const std::string&) { drop(index); },
                  caf::after(std::min<std::chrono::steady_clock::duration>(
                      std::max<std::chrono::steady_clock::duration>(left, 0s), 100ms)) >>
                      [&] { timed_out = std::chrono::steady_clock::now() >= deadline; });
    if (timed_out) {
      const std::string why =
          static_cast<int>(ready_.size()) + 1 < nodes
              ? "only " + std::to_string(ready_.size() + 1) + " of " + std::to_string(nodes) + " nodes (" + flag +
                    ") were ready after " +
                    net::describe_seconds(std::chrono::duration<double>(options_.wait_timeout).count())
              : "only " + std::to_string(ps_tasks_.size()) + " of " + std::to_string(options_.ps_tasks) +
                    " ps tasks (--ps-tasks) had joined after " +
                    net::describe_seconds(std::chrono::duration<double>(options_.wait_timeout).count());
      finish(self, why);
      throw std::runtime_error(why);
    }
  }
}

void CoordinatorCluster::admit(caf::scoped_actor& self, const ReadyNode& node) {
  if (gone_->contains(node.index)) return;
  if (node.role == NodeRole::ps_task) {
    if (static_cast<int>(ps_tasks_.size()) < options_.ps_tasks) {
      ps_tasks_.push_back(PsTask{node.index, node.name, node.data_address, node.handle});
    } else {
      turn_away(self, node.index, node.handle,
                "the job has its --ps-tasks " + std::to_string(options_.ps_tasks) + " ps task(s) already");
    }
    return;
  }
  ready_.push_back(node);
}

void CoordinatorCluster::drop(std::int32_t index) {
  ready_.erase(std::remove_if(ready_.begin(), ready_.end(), [&](const ReadyNode& n) { return n.index == index; }),
               ready_.end());
  ps_tasks_.erase(std::remove_if(ps_tasks_.begin(), ps_tasks_.end(), [&](const PsTask& t) { return t.index == index; }),
                  ps_tasks_.end());
}

std::vector<int> CoordinatorCluster::counts(const std::string& what) {
  std::vector<int> counts;
  int total = static_cast<int>(local_devices_.size());
  for (const auto& n : ready_) {
    counts.push_back(static_cast<int>(n.devices.size()));
    total += counts.back();
  }
  log_(what + std::to_string(ready_.size() + 1) + " node(s), " + std::to_string(total) + " replica(s)" +
       (ps_tasks_.empty() ? std::string() : " and " + std::to_string(ps_tasks_.size()) + " ps task(s)"));
  return counts;
}

std::vector<std::shared_ptr<net::Collective>> CoordinatorCluster::form(caf::scoped_actor& self, int local, int world,
                                                                       const data::Cursor& start) {
  ViewPlan plan;
  plan.view = first_view_;
  view_ = plan.view;
  plan.cursor = start;
  plan.clock = 0;  // the job installs each replica's clock and position after this
  plan.batch = batch_;
  std::vector<std::shared_ptr<net::Collective>> out;
  const std::optional<net::NcclId> nccl_id = choose_view_collective(plan.view);
  send_view(self, plan, local, world, batch_, nccl_id);
  try {
    connect_view(plan.view, local, world, out, options_.timeout, nccl_id);
  } catch (const std::exception& e) {
    // A member lost while the first view formed: the members still
    // connecting give up now (they wait for the next view, or hear at
    // once that the job failed, instead of after their connect deadline),
    // and the job starts without the lost one (JobRun::start), up to
    // kFirstViewTries views in all.
    abort_view(self, e.what());
    bool lost = false;
    for (const auto& n : ready_) lost = lost || gone_->contains(n.index);
    if (lost && may_start_again())
      throw FirstViewLost("view " + std::to_string(plan.view) + ", the first, did not form: " + e.what());
    throw;
  }
  return out;
}

std::vector<device_actor_t> CoordinatorCluster::remote_devices(caf::scoped_actor& self) {
  std::map<int, std::vector<caf::actor>> by_node;
  std::string error;
  bool lost_member = false;
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  SignalWatch signals;
  while (by_node.size() < ready_.size() && error.empty()) {
    bool timed_out = false;
    if (const int sig = signals.signal()) {
      error = "stopped by signal " + std::to_string(sig) + " while the nodes started their replicas";
      break;
    }
    self->receive(
        [&](formed_atom, std::uint32_t view, std::int32_t k, const std::vector<caf::actor>& devices,
            const std::string& why) {
          if (view != first_view_) return;
          if (!why.empty()) error = "node " + std::to_string(k) + " could not start its replicas: " + why;
          by_node[k] = devices;
        },
        [&](node_lost_atom, std::int32_t index, const std::string& what) {
          for (const auto& n : ready_)
            if (n.index == index) lost_member = true;
          error = what;
        },
        caf::after(std::min<std::chrono::steady_clock::duration>(
            std::max<std::chrono::steady_clock::duration>(deadline - std::chrono::steady_clock::now(), 0s), 100ms)) >>
            [&] { timed_out = std::chrono::steady_clock::now() >= deadline; });
    if (timed_out)
      error = "the nodes did not start their replicas within " +
              net::describe_seconds(std::chrono::duration<double>(options_.timeout).count());
  }
  if (!error.empty()) {
    // A member lost between the ring's forming and its replicas' start:
    // the job starts again without it, as after a first view that did
    // not form.
    if (lost_member && may_start_again())
      throw FirstViewLost("view " + std::to_string(first_view_) +
                          ", the first, lost a member before training: " + error);
    throw std::runtime_error(error);
  }
  std::vector<device_actor_t> out;
  for (auto& [k, devices] : by_node) {
    (void)k;
    // A lost device means a lost node: run()'s loop hears it from the
    // membership actor, which monitors every node.
    for (auto& d : to_devices(devices)) out.push_back(d);
  }
  return out;
}

void CoordinatorCluster::finish(caf::scoped_actor& self, const std::string& error) {
  if (finished_) return;
  finished_ = true;
  started_->store(true);
  // From here on, nodes that leave are not lost: they were told to go.
  if (membership_) self->request(membership_, 5s, done_atom::value).receive([](caf::ok_atom) {}, [](caf::error&) {});
  // Tell every node that is still there, and wait for its acknowledgement
  // so the message is out before the gate closes the connections. A node
  // that is gone is not asked (its request could only time out: CAF 0.17
  // does not fail a request to a lost node early), and one that leaves
  // right after being told counts as told: a worker may end before its
  // acknowledgement crossed the wire, so the wait goes in short slices
  // that look at whether the membership saw it go, up to one deadline.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  std::vector<ReadyNode> everyone = ready_;
  everyone.insert(everyone.end(), pending_.begin(), pending_.end());
  for (const auto& t : ps_tasks_)
    everyone.push_back(ReadyNode{t.index, t.name, NodeRole::ps_task, t.address, {}, {}, t.handle});
  for (const auto& n : everyone) {
    bool acknowledged = false;
    while (!acknowledged && !gone_->contains(n.index) && std::chrono::steady_clock::now() < deadline)
      self->request(n.handle, 200ms, done_atom::value, error)
          .receive([&](caf::ok_atom) { acknowledged = true; }, [](caf::error&) {});
  }
  release(self);
}

void CoordinatorCluster::release(caf::scoped_actor& self) {
  auto& system = self->system();
  // No push is applied after this; and the server's apply holds handles
  // to the shards, which must not outlive the actor system.
  if (push_server_) push_server_->stop();
  push_server_.reset();
  if (gate_) gate_->stop();
  if (membership_) {
    if (caf_port_) system.middleman().unpublish(membership_, caf_port_);
    self->send_exit(membership_, caf::exit_reason::user_shutdown);
    membership_ = membership_actor_t{};
  }
}

std::shared_ptr<ClusterHooks> make_coordinator_cluster(const NodeOptions& options, const JobConfig& job) {
  return std::make_shared<CoordinatorCluster>(options, job);
}

}  // namespace troupe::actors
