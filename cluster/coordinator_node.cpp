// The coordinator node's side of a cluster job: the ClusterHooks that
// actors::Job calls (gather nodes, form the data plane, find their devices,
// tell them the job is over), behind the gate and the membership actor.
#include <unistd.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <map>
#include <optional>

#include "actors/membership.hpp"
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

namespace {

using namespace std::chrono_literals;
using namespace node_support;

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

class CoordinatorCluster final : public ClusterHooks {
 public:
  CoordinatorCluster(const NodeOptions& options, const JobConfig& job) : options_(options), log_(logger(options)) {
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

  ~CoordinatorCluster() override {
    if (data_fd_ >= 0) ::close(data_fd_);
  }

  void configure(caf::actor_system_config& cfg) override { configure_cluster(cfg); }

  std::vector<int> gather(caf::scoped_actor& self) override {
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

  // After a first view that did not form (FirstViewLost): its lost members
  // are gone, nodes that joined meanwhile are in; the job starts as soon as
  // --min-nodes are there (a loss right after the start would pause it
  // there too), on the next view number.
  std::vector<int> regather(caf::scoped_actor& self, const std::string& why) override {
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

  std::uint32_t first_view() const override { return first_view_; }
  bool may_start_again() const override { return first_view_ + 1 < kFirstViewTries; }
  int node_of_rank(int rank) const override {
    for (const auto& n : nodes_)
      if (rank >= n.first_rank && rank < n.first_rank + n.replicas) return n.index;
    return 0;
  }
  bool node_gone(int index) const override { return gone_->contains(index); }

  // Admits nodes and ps tasks until `nodes` nodes (this one included) and
  // --ps-tasks ps tasks are ready, within --wait-timeout; `flag` names the
  // option that asked for them in the error.
  void await_nodes(caf::scoped_actor& self, int nodes, const std::string& flag) {
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

  // A node ready to take part: a worker, or a ps task while the job wants
  // more.
  void admit(caf::scoped_actor& self, const ReadyNode& node) {
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

  // A node lost before the job started.
  void drop(std::int32_t index) {
    ready_.erase(std::remove_if(ready_.begin(), ready_.end(), [&](const ReadyNode& n) { return n.index == index; }),
                 ready_.end());
    ps_tasks_.erase(
        std::remove_if(ps_tasks_.begin(), ps_tasks_.end(), [&](const PsTask& t) { return t.index == index; }),
        ps_tasks_.end());
  }

  // Each other node's number of replicas, in node order, logged after `what`.
  std::vector<int> counts(const std::string& what) {
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

  std::vector<std::shared_ptr<net::Collective>> form(caf::scoped_actor& self, int local, int world,
                                                     const data::Cursor& start) override {
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
      // and the job starts without the lost one (Job::run_here), up to
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

  std::vector<device_actor_t> remote_devices(caf::scoped_actor& self) override {
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

  std::vector<NodeInfo> nodes() const override { return nodes_; }
  std::string links() const override { return links_status(secret_, options_); }

  void finish(caf::scoped_actor& self, const std::string& error) override {
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

  // ---- elastic membership ----

  void add_joiner(const ReadyNode& node) override {
    if (gone_->contains(node.index)) return;
    if (node.role == NodeRole::ps_task) return;  // Job::run_here turns a late ps task away
    pending_.push_back(node);
  }

  bool forget(int index) override {
    gone_->add(index);
    bool in_view = false;
    for (const auto& n : ready_) in_view = in_view || n.index == index;
    auto drop = [index](std::vector<ReadyNode>& v) {
      v.erase(std::remove_if(v.begin(), v.end(), [&](const ReadyNode& n) { return n.index == index; }), v.end());
    };
    drop(pending_);
    return in_view;
  }

  void abort_view(caf::scoped_actor& self, const std::string& why) override {
    for (const auto& n : ready_)
      if (!gone_->contains(n.index)) self->send(n.handle, abort_view_atom::value, view_, why);
  }

  FormedView reform(caf::scoped_actor& self, const ViewPlan& plan, int local,
                    std::vector<std::shared_ptr<net::Collective>>& collectives) override {
    FormedView out;
    out.view = plan.view;
    // The members: the view's nodes that stay, then the joiners in order.
    std::vector<ReadyNode> members, leaving;
    for (const auto& n : ready_) {
      const bool removed = std::find(plan.remove.begin(), plan.remove.end(), n.index) != plan.remove.end();
      if (gone_->contains(n.index)) continue;
      (removed ? leaving : members).push_back(n);
    }
    // The newcomers of a view that did not form have not taken the job's
    // state yet: they are newcomers of this one too.
    std::vector<int> carried;
    if (!last_formed_)
      for (int k : newcomers_)
        if (!gone_->contains(k)) carried.push_back(k);
    newcomers_ = carried;
    last_formed_ = false;
    for (const auto& n : pending_) {
      if (gone_->contains(n.index)) continue;
      if (options_.max_nodes > 0 && static_cast<int>(members.size()) + 1 >= options_.max_nodes) break;
      members.push_back(n);
      newcomers_.push_back(n.index);
    }
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [&](const ReadyNode& n) {
                                    return std::find(newcomers_.begin(), newcomers_.end(), n.index) != newcomers_.end();
                                  }),
                   pending_.end());
    ready_ = members;
    int world = local;
    for (const auto& n : ready_) world += static_cast<int>(n.devices.size());
    out.batch = plan.global_batch > 0 ? std::max<std::int64_t>(1, plan.global_batch / world) : plan.batch;
    batch_ = out.batch;
    view_ = plan.view;
    // A node drained: it is not in the view; tell it to go (exit 0).
    for (const auto& n : leaving) {
      // The membership first (and wait for it): the node ends right after
      // being told, and its end must not count as a failure.
      if (membership_)
        self->request(membership_, 5s, drain_atom::value, static_cast<std::int32_t>(n.index))
            .receive([](caf::ok_atom) {}, [](caf::error&) {});
      self->send(n.handle, drain_atom::value, std::string("left the job at a step boundary"));
      gone_->add(n.index);
    }
    try {
      const std::optional<net::NcclId> nccl_id = choose_view_collective(plan.view);
      send_view(self, plan, local, world, out.batch, nccl_id);
      collectives.clear();
      // Peers of a view that fails to form are found by the membership's
      // heartbeats within seconds: a shorter connect deadline than --timeout.
      connect_view(plan.view, local, world, collectives, std::min<std::chrono::milliseconds>(options_.timeout, 20s),
                   nccl_id);
    } catch (const std::exception& e) {
      out.error = e.what();
      return give_up(self, out);
    }
    // Every node's replicas, in rank order.
    std::map<int, std::vector<caf::actor>> by_node;
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (by_node.size() < ready_.size() && out.error.empty()) {
      bool timed_out = false;
      self->receive(
          [&](formed_atom, std::uint32_t view, std::int32_t k, const std::vector<caf::actor>& devices,
              const std::string& why) {
            if (view != plan.view) return;
            if (!why.empty())
              out.error = "node " + std::to_string(ready_[static_cast<std::size_t>(k - 1)].index) +
                          " could not enter view " + std::to_string(view) + ": " + why;
            by_node[k] = devices;
          },
          [&](node_lost_atom, std::int32_t index, const std::string& what) {
            if (is_ps_task(index)) {
              lost_meanwhile(self, index, what);
              return;
            }
            forget(index);
            events_.push_back(MemberEvent{MemberEvent::Kind::lost, index, what});
            for (const auto& n : ready_)
              if (n.index == index) {
                out.lost.push_back(index);
                out.error = what;
              }
          },
          [&](ready_atom, const ReadyNode& node) {
            if (node.role == NodeRole::ps_task) {
              if (local_routes_) {  // shards on ps tasks: a spare
                add_spare_ps(self, node.index, node.name, node.data_address, node.handle);
                events_.push_back(MemberEvent{MemberEvent::Kind::ps_joined, node.index, node.name});
              } else {
                turn_away(self, node.index, node.handle, "the parameter-server shards run on the coordinator");
              }
              return;
            }
            add_joiner(node);
            events_.push_back(MemberEvent{MemberEvent::Kind::joined, node.index, node.name});
          },
          [&](drain_atom, std::int32_t index, const std::string& why) {
            if (is_ps_task(index)) {
              if (hosts_shards(index))
                events_.push_back(MemberEvent{MemberEvent::Kind::ps_leaving, index, why});
              else
                release_ps(self, index, "left the job (a spare): " + why);
              return;
            }
            events_.push_back(MemberEvent{MemberEvent::Kind::drain, index, why});
          },
          caf::after(std::min<std::chrono::steady_clock::duration>(
              std::max<std::chrono::steady_clock::duration>(deadline - std::chrono::steady_clock::now(), 0s), 100ms)) >>
              [&] { timed_out = std::chrono::steady_clock::now() >= deadline; });
      if (timed_out)
        out.error = "the nodes did not enter view " + std::to_string(plan.view) + " within " +
                    net::describe_seconds(std::chrono::duration<double>(options_.timeout).count());
    }
    if (!out.error.empty()) {
      for (auto& c : collectives) c->abort(out.error);
      return give_up(self, out);
    }
    last_formed_ = true;
    for (auto& [k, devices] : by_node) {
      (void)k;
      for (auto& d : devices) out.devices.push_back(d);
    }
    out.nodes = nodes_;
    return out;
  }

  std::vector<int> newcomers() const override { return newcomers_; }

  // A view that will not form (out.error): the members lost meanwhile are
  // named, so that the coordinator forms the next view without them, and
  // the members still connecting the ring (to one that is gone, say) are
  // told (abort_view: this view's number) and give up now, waiting for the
  // next view (worker_node.cpp) instead of the connect deadline.
  FormedView give_up(caf::scoped_actor& self, FormedView& out) {
    if (out.lost.empty())
      for (const auto& n : ready_)
        if (gone_->contains(n.index)) out.lost.push_back(n.index);
    abort_view(self, out.error);
    return out;
  }

  std::vector<PsTask> ps_tasks() const override { return ps_tasks_; }

  bool is_ps_task(int index) const override {
    for (const auto& t : ps_tasks_)
      if (t.index == index) return true;
    return false;
  }

  Placement replace_shards(caf::scoped_actor& self, const ps::Partition& partition, int replicas,
                           const std::vector<int>& leaving, const models::FlatRanges& decayed) override {
    Placement out;
    // The leavers' state was gathered at this boundary: they go first.
    for (int index : leaving) release_ps(self, index, "its shards moved to the other ps tasks at a step boundary");
    // Losses heard here: a ps task's is handled (lost_meanwhile); another
    // node's goes back to the mailbox, for whoever waits for it next.
    struct Others {
      caf::scoped_actor& self;
      std::vector<std::pair<std::int32_t, std::string>> lost;
      ~Others() {
        for (auto& [index, what] : lost) self->send(self, node_lost_atom::value, index, what);
      }
    } others{self, {}};
    auto on_lost = [&](std::int32_t index, const std::string& what) {
      if (is_ps_task(index))
        lost_meanwhile(self, index, what);
      else
        others.lost.emplace_back(index, what);
    };
    // A ps task whose loss is known but not yet heard (a replica's failed
    // push can bring the job here first): heard now, so it is not asked.
    // This placement is the answer to its loss (the state it restores is
    // whole without the task: the rollback point, the state gathered at the
    // boundary, or the replicas' in sync), so the loss is no event of its
    // own: as one, it would place the shards a second time right after.
    for (bool more = true; more;)
      self->receive(
          [&](node_lost_atom, std::int32_t index, const std::string& what) {
            if (!is_ps_task(index)) {
              others.lost.emplace_back(index, what);
              return;
            }
            if (ps_gone(index)) abort_pushes(self, what);
          },
          caf::after(std::chrono::milliseconds(0)) >> [&] { more = false; });
    std::vector<PsTask> tasks;
    for (const auto& t : ps_tasks_)
      if (!gone_->contains(t.index)) tasks.push_back(t);
    if (tasks.empty()) {
      out.error = "no ps task is left to host the parameter-server shards (start one: troupe node --ps --join " +
                  options_.listen + ")";
      out.waiting_for_ps = true;
      return out;
    }
    const int shards = partition.shards();
    const int count = static_cast<int>(tasks.size());
    out.handles.resize(static_cast<std::size_t>(shards));
    out.addresses.resize(static_cast<std::size_t>(shards));
    std::string placed;
    const std::uint32_t placement = ++placements_;
    for (int k = 0; k < count; ++k) {
      const auto& task = tasks[static_cast<std::size_t>(k)];
      std::vector<std::int32_t> indices;
      std::vector<std::int64_t> sizes;
      // Where weight decay applies in each of its shards, as
      // [ranges of shard 1, then offset, count of each; ranges of shard 2, ...]:
      // a ps task knows sizes, not which floats are kernels and which biases.
      std::vector<std::int64_t> decay;
      for (int i = k; i < shards; i += count) {
        indices.push_back(i);
        sizes.push_back(partition.size(i));
        const auto ranges = partition.ranges_in(i, decayed);
        decay.push_back(static_cast<std::int64_t>(ranges.size()));
        for (const auto& [offset, length] : ranges) decay.insert(decay.end(), {offset, length});
      }
      // The answer is a message tagged with the placement (ps_node.cpp):
      // waited for with a deadline while a loss of the task is watched for,
      // since a request to a lost node fails only at its timeout.
      self->send(task.handle, host_shards_atom::value, placement, indices, sizes, static_cast<std::int32_t>(replicas),
                 decay);
      std::string error;
      std::vector<caf::actor> got;
      bool answered = false;
      const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
      while (!answered && error.empty()) {
        self->receive(
            [&](host_shards_atom, std::uint32_t id, std::vector<caf::actor>& handles, const std::string& refused) {
              if (id != placement || self->current_sender() != task.handle.address()) return;
              answered = true;
              got = std::move(handles);
              error = refused;
            },
            [&](node_lost_atom, std::int32_t index, const std::string& what) {
              on_lost(index, what);
              if (index == task.index) error = what;
            },
            caf::after(std::chrono::milliseconds(100)) >>
                [&] {
                  // The membership marks a lost node gone before its message
                  // reaches this thread.
                  if (gone_->contains(task.index))
                    error = "the membership lost it";
                  else if (std::chrono::steady_clock::now() >= deadline)
                    error = "no answer within " +
                            net::describe_seconds(std::chrono::duration<double>(options_.timeout).count());
                });
      }
      if (error.empty() && got.size() != indices.size())
        error = "it started " + std::to_string(got.size()) + " of " + std::to_string(indices.size()) + " shards";
      if (!error.empty()) {
        out.error =
            "ps task " + std::to_string(task.index) + " (" + task.name + ") could not host its shards: " + error;
        out.lost.push_back(task.index);
        return out;
      }
      for (std::size_t j = 0; j < indices.size(); ++j) {
        out.handles[static_cast<std::size_t>(indices[j])] = got[j];
        out.addresses[static_cast<std::size_t>(indices[j])] = task.address;
      }
      if (!indices.empty()) {
        std::string list;
        for (auto i : indices) list += (list.empty() ? "" : ",") + std::to_string(i);
        placed += (placed.empty() ? "" : "; ") + std::string("shard(s) ") + list + " on node " +
                  std::to_string(task.index) + " (" + task.name + ")";
      }
    }
    if (placement == 1) return out;  // the first, at the start: Job::run_here says where
    log_("parameter server placed anew on " + std::to_string(count) + " ps task(s): " + placed);
    return out;
  }

  void add_spare_ps(caf::scoped_actor& self, int index, const std::string& name, const std::string& address,
                    const caf::actor& handle) override {
    if (gone_->contains(index)) return;
    ps_tasks_.push_back(PsTask{index, name, address, handle});
    self->send(handle, standby_atom::value);
  }

  bool ps_gone(int index) override {
    gone_->add(index);
    const bool hosted = hosts_shards(index);
    ps_tasks_.erase(
        std::remove_if(ps_tasks_.begin(), ps_tasks_.end(), [&](const PsTask& t) { return t.index == index; }),
        ps_tasks_.end());
    hosting_.erase(std::remove(hosting_.begin(), hosting_.end(), index), hosting_.end());
    return hosted;
  }

  bool hosts_shards(int index) const override {
    return std::find(hosting_.begin(), hosting_.end(), index) != hosting_.end();
  }

  void release_ps(caf::scoped_actor& self, int index, const std::string& why) override {
    for (const auto& t : ps_tasks_) {
      if (t.index != index) continue;
      // The membership first (and wait for it): the task ends right after
      // being told, and its end must not count as a loss.
      if (membership_)
        self->request(membership_, 5s, drain_atom::value, static_cast<std::int32_t>(index))
            .receive([](caf::ok_atom) {}, [](caf::error&) {});
      self->send(t.handle, drain_atom::value, why);
      break;
    }
    ps_gone(index);
  }

  void abort_pushes(caf::scoped_actor& self, const std::string& why) override {
    for (const auto& n : ready_)
      if (!gone_->contains(n.index)) self->send(n.handle, abort_push_atom::value, why);
  }

  void serve_shards(const std::map<int, std::shared_ptr<ps::ShardCore>>& shards, const ps::Partition& partition,
                    int partition_shards) override {
    // On this host's data-plane address, another port (the ring keeps its
    // own listening socket across views).
    std::string address;
    const int fd = bind_data_plane("", net::parse_host_port(data_address_).host, &address);
    net::push::PushServerConfig pc;
    pc.listen_fd = fd;
    pc.job_id = net::push::push_job_id(identity_.fingerprint);
    pc.authenticate = net::handshake_hook(handshake_config(secret_, options_, "coordinator"));
    for (const auto& [index, shard] : shards) {
      (void)shard;
      pc.shards[index] = partition.size(index);
    }
    pc.apply = ps::shard_apply(shards);
    pc.io_timeout = options_.timeout;
    pc.log = log_;
    if (push_server_) push_server_->stop();  // a first view that did not form had one
    push_server_ = std::make_unique<net::push::PushServer>(std::move(pc));
    shard_addresses_.assign(shards.size(), address);
    partition_shards_ = partition_shards;
    log_("parameter server: the other nodes push to it on the data plane at " + address);
  }

  std::shared_ptr<const net::push::PushRoutes> place_shards(const std::vector<std::string>& addresses,
                                                            int partition_shards) override {
    shard_addresses_ = addresses;
    partition_shards_ = partition_shards;
    hosting_.clear();
    for (const auto& t : ps_tasks_)
      if (std::find(addresses.begin(), addresses.end(), t.address) != addresses.end()) hosting_.push_back(t.index);
    auto routes = std::make_shared<net::push::PushRoutes>();
    routes->addresses = addresses;
    routes->job_id = net::push::push_job_id(identity_.fingerprint);
    routes->authenticate = net::handshake_hook(handshake_config(secret_, options_, "coordinator"));
    routes->connect_timeout = std::min<std::chrono::milliseconds>(options_.timeout, 20s);
    routes->timeout = options_.timeout;
    local_routes_ = routes;
    return routes;
  }

  std::vector<MemberEvent> take_events() override {
    std::vector<MemberEvent> out;
    out.swap(events_);
    return out;
  }

 private:
  // How the view of this host and ready_ reduces (collective_choice.hpp,
  // choose_across_nodes), logged with why: a fresh NCCL id when one NCCL
  // group spans the nodes (every view makes its own: the old view's
  // communicators are aborted, and an elastic view has other ranks), else
  // nullopt for the hierarchical group.
  std::optional<net::NcclId> choose_view_collective(std::uint32_t view) {
    std::vector<NodeFacts> facts;
    facts.push_back(NodeFacts{"the coordinator", net::parse_host_port(data_address_).host, local_device_list_,
                              nccl_unavailable_for(local_device_list_)});
    for (const auto& n : ready_) {
      std::vector<kernels::Device> devices;
      for (const auto& d : n.devices) devices.push_back(kernels::Device::parse(d));
      facts.push_back(NodeFacts{"node " + std::to_string(n.index) + " (" + n.name + ")",
                                net::parse_host_port(n.data_address).host, devices, n.nccl});
    }
    const AcrossChoice choice = choose_across_nodes(facts, secret_.configured() && !options_.insecure);
    if (!ready_.empty()) log_("view " + std::to_string(view) + " reduces through " + choice.why);
    if (choice.kind != AcrossKind::nccl) return std::nullopt;
    return net::nccl_unique_id();
  }

  // Sends every member its part of the view (FormView) and records the
  // nodes (with their ranks) for status.
  void send_view(caf::scoped_actor& self, const ViewPlan& plan, int local, int world, std::int64_t batch,
                 const std::optional<net::NcclId>& nccl_id) {
    std::vector<std::string> addresses{data_address_};
    for (const auto& n : ready_) addresses.push_back(n.data_address);
    nodes_.clear();
    nodes_.push_back(NodeInfo{0, "coordinator", data_address_, 0, local, local_devices_});
    int first = local;
    for (std::size_t k = 0; k < ready_.size(); ++k) {
      const auto& n = ready_[k];
      nodes_.push_back(NodeInfo{n.index, n.name, n.data_address, first, static_cast<int>(n.devices.size()), n.devices});
      FormView f;
      f.view = plan.view;
      f.node_rank = static_cast<std::int32_t>(k + 1);
      f.first_rank = first;
      f.world = world;
      f.addresses = addresses;
      f.clock = plan.clock;
      f.epoch = plan.cursor.epoch;
      f.batch = plan.cursor.batch;
      f.offset = plan.cursor.offset;
      f.batch_size = batch;
      if (nccl_id) f.nccl_id = nccl_id->hex();
      f.ps_addresses = shard_addresses_;
      f.ps_partition_shards = partition_shards_;
      self->send(n.handle, form_atom::value, f);
      first += static_cast<int>(n.devices.size());
    }
  }

  // This host's side of the view's data plane: ranks 0 .. local - 1 of the
  // view's NCCL group when nccl_id is set, else the ring of node leaders (the
  // listening socket is kept across views; each view's group takes a
  // duplicate) under the local group.
  void connect_view(std::uint32_t view, int local, int world, std::vector<std::shared_ptr<net::Collective>>& out,
                    std::chrono::milliseconds connect_timeout, const std::optional<net::NcclId>& nccl_id) {
    if (static_cast<std::size_t>(local) != local_device_list_.size())
      throw std::logic_error("connect_view: " + std::to_string(local) + " local replicas, but this host has " +
                             std::to_string(local_device_list_.size()) + " devices");
    net::CollectiveOptions co{options_.timeout};
    if (nccl_id) {
      for (auto& c : net::make_nccl_group(*nccl_id, 0, world, local_device_list_, co)) out.emplace_back(std::move(c));
      return;
    }
    std::shared_ptr<net::Collective> across;
    if (!ready_.empty()) {
      net::TcpGroupConfig tc;
      tc.rank = 0;
      tc.addresses = {data_address_};
      for (const auto& n : ready_) tc.addresses.push_back(n.data_address);
      tc.job_id = ring_id_of(identity_.fingerprint, view);
      tc.options.timeout = options_.timeout;
      tc.connect_timeout = connect_timeout;
      tc.listen_fd = ::dup(data_fd_);
      if (tc.listen_fd < 0) throw std::runtime_error("duplicating the data-plane socket failed");
      tc.authenticate = net::handshake_hook(handshake_config(secret_, options_, "coordinator"));
      // A node of the view lost while the ring connects (the membership
      // marks it gone at once): give up now, and the view is formed again
      // without it, instead of waiting for the connect timeout.
      std::vector<int> members;
      for (const auto& n : ready_) members.push_back(n.index);
      tc.abandon = [gone = gone_, members]() -> std::string {
        for (int k : members)
          if (gone->contains(k)) return "node " + std::to_string(k) + " of the view was lost";
        return "";
      };
      across = net::make_tcp_group(tc);
    }
    // This host's replicas: local or nccl by their devices (collective_choice.hpp).
    for (auto& c : net::make_hierarchical_group(make_replica_group(local_device_list_, co), across, 0, world, co))
      out.emplace_back(std::move(c));
  }

  // A ps task lost while the hooks waited (forming a view, placing the
  // shards): as Job::run_here's own handler, pushes in flight fail now, and
  // the coordinator hears it with take_events().
  void lost_meanwhile(caf::scoped_actor& self, int index, const std::string& what) {
    if (!is_ps_task(index)) {
      forget(index);
      events_.push_back(MemberEvent{MemberEvent::Kind::lost, index, what});
      return;
    }
    if (ps_gone(index)) {
      abort_pushes(self, what);
      events_.push_back(MemberEvent{MemberEvent::Kind::ps_lost, index, what + ", a ps task hosting shards"});
    }
  }

  // A node the job has no use for: told the job is over for it (it exits
  // 1 with the reason) and forgotten.
  void turn_away(caf::scoped_actor& self, int index, const caf::actor& handle, const std::string& why) {
    log_("node " + std::to_string(index) + " is not used: " + why);
    gone_->add(index);
    self->send(handle, done_atom::value, "not used: " + why);
  }

  void release(caf::scoped_actor& self) {
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

  NodeOptions options_;
  std::function<void(const std::string&)> log_;
  net::HostPort listen_;
  net::Secret secret_;
  JobIdentity identity_;
  std::string job_text_;
  std::vector<std::string> local_devices_;
  std::vector<kernels::Device> local_device_list_;
  int data_fd_ = -1;
  std::string data_address_;
  membership_actor_t membership_;
  std::uint16_t caf_port_ = 0;
  std::unique_ptr<net::Gate> gate_;
  std::shared_ptr<std::atomic<bool>> started_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<GoneNodes> gone_ = std::make_shared<GoneNodes>();
  std::vector<ReadyNode> ready_;     // the current view's nodes, in rank order
  std::vector<ReadyNode> pending_;   // joined after the start, waiting for a view
  std::vector<int> newcomers_;       // entered the last view formed (or tried to)
  bool last_formed_ = true;          // the last view tried formed
  std::vector<MemberEvent> events_;  // heard while forming a view
  std::uint32_t view_ = 0;
  // The first view's number: 0, or 1 or 2 after members were lost while
  // the first tries formed (regather).
  static constexpr std::uint32_t kFirstViewTries = 3;
  std::uint32_t first_view_ = 0;
  std::int64_t batch_ = 1;  // per replica
  std::vector<NodeInfo> nodes_;
  bool finished_ = false;
  std::vector<PsTask> ps_tasks_;              // every ps task there is (hosting shards or a spare), in join order
  std::vector<int> hosting_;                  // of them, those hosting shards now
  std::uint32_t placements_ = 0;              // of the shards on the ps tasks, the first at the start
  std::vector<std::string> shard_addresses_;  // by shard: its ps task's push server
  int partition_shards_ = 0;
  std::shared_ptr<const net::push::PushRoutes> local_routes_;
  std::unique_ptr<net::push::PushServer> push_server_;  // shards in this process, for the other nodes
};

}  // namespace

std::shared_ptr<ClusterHooks> make_coordinator_cluster(const NodeOptions& options, const JobConfig& job) {
  return std::make_shared<CoordinatorCluster>(options, job);
}

}  // namespace troupe::actors
