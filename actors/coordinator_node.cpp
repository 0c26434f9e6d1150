// The coordinator node's side of a cluster job: the ClusterHooks that
// actors::Job calls (gather nodes, form the data plane, find their devices,
// tell them the job is over), behind the gate and the membership actor.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <map>

#include "actors/job_file.hpp"
#include "actors/membership.hpp"
#include "actors/node.hpp"
#include "actors/node_support.hpp"
#include "kernels/config.hpp"
#include "net/cluster/auth.hpp"
#include "net/cluster/gate.hpp"
#include "net/collective/hierarchical.hpp"
#include "net/collective/local.hpp"
#include "net/control/address.hpp"
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

struct ReadyNode {
  int index = 0;
  std::string name, data_address;
  std::vector<std::string> devices;
  caf::actor handle;
};

class CoordinatorCluster final : public ClusterHooks {
 public:
  CoordinatorCluster(const NodeOptions& options, const JobConfig& job) : options_(options), log_(logger(options)) {
    if (options_.min_nodes < 1) throw std::invalid_argument("--min-nodes must be at least 1");
    if (options_.max_nodes != 0 && options_.max_nodes < options_.min_nodes)
      throw std::invalid_argument("--max-nodes " + std::to_string(options_.max_nodes) + " is below --min-nodes " +
                                  std::to_string(options_.min_nodes));
    listen_ = net::parse_host_port(options_.listen);  // throws naming the address
    secret_ = net::Secret::load(options_.secret_file);
    identity_ = job_identity(job);
    job_text_ = to_job_text(job);
    for (const auto& d : job.devices) local_devices_.push_back(d.str());
  }

  ~CoordinatorCluster() override {
    if (data_fd_ >= 0) ::close(data_fd_);
  }

  void configure(caf::actor_system_config& cfg) override { configure_cluster(cfg); }

  std::vector<int> gather(caf::scoped_actor& self) override {
    auto& system = self->system();
    data_fd_ = bind_data_plane(options_.data_address,
                               is_wildcard(listen_.host) ? first_host_address() : listen_.host, &data_address_);
    MembershipState init;
    init.fingerprint = identity_.fingerprint;
    init.job_text = job_text_;
    init.listener = caf::actor_cast<caf::actor>(self);
    init.log = log_;
    init.started = started_;
    init.gone = gone_;
    init.max_nodes = options_.max_nodes;
    membership_ = system.spawn<caf::detached>(membership_actor, init);
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
      g.handshake.secret = secret_;
      g.handshake.version = TROUPE_VERSION;
      g.handshake.identity = "coordinator";
      g.log = log_;
      auto started = started_;
      g.admit = [started](const std::string&) -> std::string {
        return started->load() ? "the job has started; its membership is fixed" : "";
      };
      gate_ = std::make_unique<net::Gate>(g);
    } catch (...) {
      release(self);
      throw;
    }
    log_("coordinator listening on " + options_.listen + " (troupe " + TROUPE_VERSION + ", job " +
         identity_.fingerprint.substr(0, 12) + ", data plane " + data_address_ + ")");
    if (!secret_.configured())
      log_("no cluster secret (--secret-file or TROUPE_SECRET): only loopback peers are accepted");
    else
      log_("cluster secret from " + secret_.origin());
    if (options_.min_nodes > 1) log_("waiting for " + std::to_string(options_.min_nodes - 1) + " more node(s)");

    const auto deadline = std::chrono::steady_clock::now() + options_.wait_timeout;
    SignalWatch signals;
    while (static_cast<int>(ready_.size()) + 1 < options_.min_nodes) {
      const auto left = deadline - std::chrono::steady_clock::now();
      bool timed_out = false;
      if (const int sig = signals.signal()) {
        const std::string why = "stopped by signal " + std::to_string(sig) + " while waiting for --min-nodes (" +
                                std::to_string(ready_.size() + 1) + " of " + std::to_string(options_.min_nodes) +
                                " nodes ready)";
        finish(self, why);
        throw std::runtime_error(why);
      }
      self->receive(
          [&](ready_atom, std::int32_t index, const std::string& name, const std::string& address,
              const std::vector<std::string>& devices, const caf::actor& handle) {
            ready_.push_back(ReadyNode{index, name, address, devices, handle});
          },
          [&](node_lost_atom, std::int32_t index, const std::string&) {
            for (auto it = ready_.begin(); it != ready_.end(); ++it)
              if (it->index == index) {
                ready_.erase(it);
                break;
              }
          },
          caf::after(std::min<std::chrono::steady_clock::duration>(std::max<std::chrono::steady_clock::duration>(left, 0s),
                                                                   100ms)) >>
              [&] { timed_out = std::chrono::steady_clock::now() >= deadline; });
      if (timed_out) {
        const std::string why = "only " + std::to_string(ready_.size() + 1) + " of --min-nodes " +
                                std::to_string(options_.min_nodes) + " nodes were ready after " +
                                net::describe_seconds(std::chrono::duration<double>(options_.wait_timeout).count());
        finish(self, why);
        throw std::runtime_error(why);
      }
    }
    started_->store(true);
    std::vector<int> counts;
    int total = static_cast<int>(local_devices_.size());
    for (const auto& n : ready_) {
      counts.push_back(static_cast<int>(n.devices.size()));
      total += counts.back();
    }
    log_("starting with " + std::to_string(ready_.size() + 1) + " node(s), " + std::to_string(total) + " replica(s)");
    return counts;
  }

  std::vector<std::shared_ptr<net::Collective>> form(caf::scoped_actor& self, const caf::actor& reducer, int local,
                                                      int world, const data::Cursor& start) override {
    std::vector<std::string> addresses{data_address_};
    for (const auto& n : ready_) addresses.push_back(n.data_address);
    nodes_.push_back(NodeInfo{"coordinator", data_address_, 0, local, local_devices_});
    int first = local;
    for (std::size_t k = 0; k < ready_.size(); ++k) {
      const auto& n = ready_[k];
      nodes_.push_back(NodeInfo{n.name, n.data_address, first, static_cast<int>(n.devices.size()), n.devices});
      self->send(n.handle, form_atom::value, static_cast<std::int32_t>(k + 1), static_cast<std::int32_t>(first),
                 static_cast<std::int32_t>(world), addresses, reducer, start.epoch, start.batch);
      first += static_cast<int>(n.devices.size());
    }
    std::shared_ptr<net::Collective> across;
    if (addresses.size() > 1) {
      net::TcpGroupConfig tc;
      tc.rank = 0;
      tc.addresses = addresses;
      tc.job_id = job_id_of(identity_.fingerprint);
      tc.options.timeout = options_.timeout;
      tc.connect_timeout = options_.timeout;
      tc.listen_fd = data_fd_;
      data_fd_ = -1;  // the group owns it now
      tc.authenticate = net::handshake_hook(net::HandshakeConfig{secret_, TROUPE_VERSION, "coordinator"});
      across = net::make_tcp_group(tc);
    }
    net::CollectiveOptions co{options_.timeout};
    std::vector<std::shared_ptr<net::Collective>> out;
    for (auto& c : net::make_hierarchical_group(net::make_local_group(local, co), across, 0, world, co))
      out.emplace_back(std::move(c));
    return out;
  }

  std::vector<caf::actor> remote_devices(caf::scoped_actor& self) override {
    std::map<int, std::vector<caf::actor>> by_node;
    std::string error;
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    SignalWatch signals;
    while (by_node.size() < ready_.size() && error.empty()) {
      bool timed_out = false;
      if (const int sig = signals.signal()) {
        error = "stopped by signal " + std::to_string(sig) + " while the nodes started their replicas";
        break;
      }
      self->receive(
          [&](formed_atom, std::int32_t k, const std::vector<caf::actor>& devices, const std::string& why) {
            if (!why.empty()) error = "node " + std::to_string(k) + " could not start its replicas: " + why;
            by_node[k] = devices;
          },
          [&](node_lost_atom, std::int32_t, const std::string& what) { error = what; },
          caf::after(std::min<std::chrono::steady_clock::duration>(
              std::max<std::chrono::steady_clock::duration>(deadline - std::chrono::steady_clock::now(), 0s), 100ms)) >>
              [&] { timed_out = std::chrono::steady_clock::now() >= deadline; });
      if (timed_out) error = "the nodes did not start their replicas within " +
                             net::describe_seconds(std::chrono::duration<double>(options_.timeout).count());
    }
    if (!error.empty()) throw std::runtime_error(error);
    std::vector<caf::actor> out;
    for (auto& [k, devices] : by_node) {
      (void)k;
      // A lost device means a lost node: run()'s loop hears it from the
      // membership actor, which monitors every node.
      for (auto& d : devices) out.push_back(d);
    }
    return out;
  }

  std::vector<NodeInfo> nodes() const override { return nodes_; }

  void finish(caf::scoped_actor& self, const std::string& error) override {
    if (finished_) return;
    finished_ = true;
    started_->store(true);
    // From here on, nodes that leave are not lost: they were told to go.
    if (membership_)
      self->request(membership_, 5s, done_atom::value).receive([](caf::ok_atom) {}, [](caf::error&) {});
    // Tell every node that is still there, and wait for its acknowledgement
    // so the message is out before the gate closes the connections. A node
    // that is gone is not asked (its request could only time out: CAF 0.17
    // does not fail a request to a lost node early), and one that leaves
    // right after being told counts as told: a worker may end before its
    // acknowledgement crossed the wire, so the wait goes in short slices
    // that look at whether the membership saw it go, up to one deadline.
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    for (const auto& n : ready_) {
      bool acknowledged = false;
      while (!acknowledged && !gone_->contains(n.index) && std::chrono::steady_clock::now() < deadline)
        self->request(n.handle, 200ms, done_atom::value, error)
            .receive([&](caf::ok_atom) { acknowledged = true; }, [](caf::error&) {});
    }
    release(self);
  }

 private:
  void release(caf::scoped_actor& self) {
    auto& system = self->system();
    if (gate_) gate_->stop();
    if (membership_) {
      if (caf_port_) system.middleman().unpublish(membership_, caf_port_);
      self->send_exit(membership_, caf::exit_reason::user_shutdown);
      membership_ = caf::actor{};
    }
  }

  NodeOptions options_;
  std::function<void(const std::string&)> log_;
  net::HostPort listen_;
  net::Secret secret_;
  JobIdentity identity_;
  std::string job_text_;
  std::vector<std::string> local_devices_;
  int data_fd_ = -1;
  std::string data_address_;
  caf::actor membership_;
  std::uint16_t caf_port_ = 0;
  std::unique_ptr<net::Gate> gate_;
  std::shared_ptr<std::atomic<bool>> started_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<GoneNodes> gone_ = std::make_shared<GoneNodes>();
  std::vector<ReadyNode> ready_;
  std::vector<NodeInfo> nodes_;
  bool finished_ = false;
};

}  // namespace

std::shared_ptr<ClusterHooks> make_coordinator_cluster(const NodeOptions& options, const JobConfig& job) {
  return std::make_shared<CoordinatorCluster>(options, job);
}

}  // namespace troupe::actors
