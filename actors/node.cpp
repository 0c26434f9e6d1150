#include "actors/node.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "actors/job_file.hpp"
#include "actors/replica.hpp"
#include "kernels/config.hpp"
#include "kernels/registry.hpp"
#include "models/data/load.hpp"
#include "net/cluster/auth.hpp"
#include "net/cluster/gate.hpp"
#include "net/collective/hierarchical.hpp"
#include "net/collective/local.hpp"
#include "net/control/address.hpp"
#include "net/tcp/tcp.hpp"

namespace troupe::actors {

namespace {

using namespace std::chrono_literals;

void default_log(const std::string& line) { std::fprintf(stderr, "troupe node: %s\n", line.c_str()); }

std::function<void(const std::string&)> logger(const NodeOptions& o) { return o.log ? o.log : default_log; }

// Remoting with heartbeats (../shared/CAF-0.17.md, section 3): a silent peer
// is declared down after about 5 s, a closed connection at once.
void configure_cluster(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(5)});
  register_message_types(cfg);
}

// Both ends of the data plane derive the ring's job id from the job.
std::uint64_t job_id_of(const std::string& fingerprint) {
  return std::stoull(fingerprint.substr(0, 15), nullptr, 16);
}

// The first non-loopback IPv4 address of this host, else 127.0.0.1.
std::string first_host_address() {
  ifaddrs* list = nullptr;
  std::string out = "127.0.0.1";
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    if (!net::is_loopback(text)) {
      out = text;
      break;
    }
  }
  freeifaddrs(list);
  return out;
}

bool is_wildcard(const std::string& host) { return host.empty() || host == "0.0.0.0" || host == "::"; }

// "HOST[:PORT]" -> a listening data-plane socket and its "host:port".
int bind_data_plane(const std::string& requested, const std::string& default_host, std::string* address) {
  std::string host = default_host;
  std::uint16_t port = 0;
  if (!requested.empty()) {
    if (requested.find(':') == std::string::npos) {
      host = requested;
    } else {
      const net::HostPort hp = net::parse_host_port(requested);  // throws naming the address
      host = hp.host;
      port = hp.port;
    }
  }
  const std::string bracketed = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  std::uint16_t bound = 0;
  const int fd = net::listen_tcp(bracketed + ":" + std::to_string(port), &bound);
  *address = bracketed + ":" + std::to_string(bound);
  return fd;
}

std::string node_name(const std::string& role) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return role + "/" + host + "/pid " + std::to_string(getpid());
}

// A worker that leaves on its own (SIGINT, SIGTERM) says so first:
// (leave, index, why) to the membership actor, which answers ok.
using leave_atom = caf::atom_constant<caf::atom("leave")>;

// The nodes that are gone (lost or left): the membership actor writes, the
// hooks read when they tell the nodes the job is over (a request to a node
// that is gone would only wait for its timeout).
struct GoneNodes {
  std::mutex mutex;
  std::set<int> indices;
  void add(int index) {
    std::lock_guard<std::mutex> lock(mutex);
    indices.insert(index);
  }
  bool contains(int index) {
    std::lock_guard<std::mutex> lock(mutex);
    return indices.count(index) > 0;
  }
};

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

// ---------------------------------------------------------------------------
// The membership actor (coordinator node): admits nodes, watches them.

struct Member {
  int index = 0;
  std::string name;
  caf::actor handle;
  bool ready = false;
};

struct MembershipState {
  std::string fingerprint, job_text;
  caf::actor listener;
  std::function<void(const std::string&)> log;
  std::shared_ptr<std::atomic<bool>> started;
  int next_index = 1;
  bool closing = false;  // the job is over: nodes leaving are not lost
  std::vector<Member> members;
  std::shared_ptr<GoneNodes> gone;
  static inline const char* name = "membership";
};

caf::behavior membership_actor(caf::stateful_actor<MembershipState>* self, MembershipState init) {
  self->state = std::move(init);
  self->set_down_handler([=](caf::down_msg& down) {
    auto& st = self->state;
    for (auto it = st.members.begin(); it != st.members.end(); ++it) {
      if (it->handle.address() != down.source) continue;
      if (st.closing) {
        st.members.erase(it);
        return;
      }
      const std::string what = "lost node " + std::to_string(it->index) + " (" + it->name + "): " +
                               (down.reason ? self->system().render(down.reason) : "it left");
      st.log(what);
      st.gone->add(it->index);
      self->send(st.listener, node_lost_atom::value, static_cast<std::int32_t>(it->index), what);
      st.members.erase(it);
      return;
    }
  });
  return {
      [=](join_atom, const std::string& name, const std::string& version, const std::string& fingerprint)
          -> std::tuple<bool, std::int32_t, std::string> {
        auto& st = self->state;
        auto refuse = [&](const std::string& why) {
          st.log("refused " + name + ": " + why);
          return std::make_tuple(false, std::int32_t{-1}, why);
        };
        if (st.started->load()) return refuse("the job has started; its membership is fixed");
        if (version != TROUPE_VERSION)
          return refuse("troupe version " + version + " cannot join a job run by troupe " + TROUPE_VERSION);
        if (!fingerprint.empty() && fingerprint != st.fingerprint)
          return refuse("incompatible job: its job file (fingerprint " + fingerprint.substr(0, 12) +
                        ") differs from the coordinator's (" + st.fingerprint.substr(0, 12) +
                        "); start the worker without --job, or with the same file");
        Member m;
        m.index = st.next_index++;
        m.name = name;
        m.handle = caf::actor_cast<caf::actor>(self->current_sender());
        self->monitor(m.handle);
        st.members.push_back(m);
        st.log("node " + std::to_string(m.index) + " joined: " + name);
        return std::make_tuple(true, static_cast<std::int32_t>(m.index), st.job_text);
      },
      [=](done_atom) {
        self->state.closing = true;
        return caf::ok_atom::value;
      },
      // A worker leaving on its own (a signal): lost like a node whose
      // process died, with its own reason, and never reported twice.
      [=](leave_atom, std::int32_t index, const std::string& why) {
        auto& st = self->state;
        for (auto it = st.members.begin(); it != st.members.end(); ++it) {
          if (it->index != index) continue;
          self->demonitor(it->handle);
          st.gone->add(it->index);
          if (!st.closing) {
            const std::string what = "lost node " + std::to_string(it->index) + " (" + it->name + "): " + why;
            st.log(what);
            self->send(st.listener, node_lost_atom::value, index, what);
          }
          st.members.erase(it);
          break;
        }
        return caf::ok_atom::value;
      },
      [=](ready_atom, std::int32_t index, const std::string& data_address, const std::vector<std::string>& devices) {
        auto& st = self->state;
        for (auto& m : st.members) {
          if (m.index != index) continue;
          m.ready = true;
          std::string list;
          for (const auto& d : devices) list += (list.empty() ? "" : ",") + d;
          st.log("node " + std::to_string(index) + " is ready: devices " + list + ", data plane " + data_address);
          self->send(st.listener, ready_atom::value, index, m.name, data_address, devices, m.handle);
        }
        return caf::ok_atom::value;
      },
  };
}

// ---------------------------------------------------------------------------
// The coordinator's hooks.

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
    // Tell every node that is still there, and wait for their
    // acknowledgements so the message is out before the gate closes the
    // connections. All requests go out at once and share one deadline; a
    // node that is gone is not asked (its request could only time out:
    // CAF 0.17 does not fail a request to a lost node early).
    using Asked = decltype(self->request(caf::actor{}, 5s, done_atom::value, error));
    std::vector<Asked> asked;
    for (const auto& n : ready_)
      if (!gone_->contains(n.index)) asked.push_back(self->request(n.handle, 5s, done_atom::value, error));
    for (auto& a : asked) a.receive([](caf::ok_atom) {}, [](caf::error&) {});
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

std::atomic<int> worker_signal{0};
extern "C" void on_worker_signal(int signal) { worker_signal.store(signal); }

// ---------------------------------------------------------------------------
// The parameter server as a worker's devices see it.
//
// A device awaits the answer to its push (`.await`: until it comes, the
// device handles no other message, not even an exit), and CAF 0.17 fails a
// request to a lost node only when its timeout expires (../shared/CAF-0.17.md
// section 3). Pushing straight to the coordinator's server, a worker whose
// job had failed kept its devices, hence its process, for the full
// --timeout. The relay forwards each push and answers every pending one with
// an error as soon as the server is lost or the worker stops, so that every
// device is free to end at once.

struct ServerRelayState {
  caf::actor server;
  std::chrono::milliseconds timeout{60000};
  std::string failure;  // once set, every push fails at once with it
  std::uint64_t next = 0;
  std::map<std::uint64_t, caf::typed_response_promise<Tensor>> pending;
  static inline const char* name = "server relay";
};
using ServerRelay = caf::stateful_actor<ServerRelayState>;

void fail_pushes(ServerRelay* self, const std::string& why) {
  auto& st = self->state;
  if (st.failure.empty()) st.failure = why;
  auto pending = std::move(st.pending);
  st.pending.clear();
  for (auto& entry : pending) entry.second.deliver(caf::make_error(caf::sec::runtime_error, st.failure));
}

caf::behavior server_relay(ServerRelay* self, caf::actor server, std::chrono::milliseconds timeout) {
  self->state.server = server;
  self->state.timeout = timeout;
  self->monitor(server);
  self->set_down_handler([=](caf::down_msg& down) {
    if (down.source == self->state.server.address())
      fail_pushes(self, "lost the parameter server: " + self->system().render(down.reason));
  });
  self->set_exit_handler([=](caf::exit_msg& exit) {
    fail_pushes(self, "the worker is stopping");
    self->quit(exit.reason);
  });
  return {
      [=](push_atom, GradientPush& push) {
        auto& st = self->state;
        auto rp = self->make_response_promise<Tensor>();
        if (!st.failure.empty()) {
          rp.deliver(caf::make_error(caf::sec::runtime_error, st.failure));
          return rp;
        }
        const std::uint64_t id = st.next++;
        st.pending.emplace(id, rp);
        auto settle = [=](auto&& outcome) {
          auto& pending = self->state.pending;
          auto it = pending.find(id);
          if (it == pending.end()) return;  // already failed
          auto promise = it->second;
          pending.erase(it);
          promise.deliver(std::forward<decltype(outcome)>(outcome));
        };
        self->request(st.server, st.timeout, push_atom::value, std::move(push))
            .then([=](Tensor& fresh) { settle(std::move(fresh)); }, [=](caf::error& e) { settle(std::move(e)); });
        return rp;
      },
      // The worker stops: fail what is pending, then end.
      [=](stop_atom, const std::string& why) {
        fail_pushes(self, why);
        self->quit(caf::exit_reason::user_shutdown);
      },
  };
}

// The last resort of a worker: ~actor_system waits for every actor without a
// deadline, so a wait that the shutdown above failed to end would keep the
// process forever. Armed once the worker has told its actors to end; says
// so and exits with the worker's status when they take longer than `limit`.
class ExitBackstop {
 public:
  explicit ExitBackstop(std::function<void(const std::string&)> log) : log_(std::move(log)) {}
  ~ExitBackstop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      disarmed_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  ExitBackstop(const ExitBackstop&) = delete;
  ExitBackstop& operator=(const ExitBackstop&) = delete;
  void arm(int status, std::chrono::milliseconds limit) {
    if (thread_.joinable()) return;
    thread_ = std::thread([this, status, limit] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (changed_.wait_for(lock, limit, [this] { return disarmed_; })) return;
      log_("the worker's actors did not stop within " +
           net::describe_seconds(std::chrono::duration<double>(limit).count()) + "; exiting without them");
      std::fflush(nullptr);
      std::_Exit(status);
    });
  }

 private:
  std::function<void(const std::string&)> log_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool disarmed_ = false;
  std::thread thread_;
};

}  // namespace

std::shared_ptr<ClusterHooks> make_coordinator_cluster(const NodeOptions& options, const JobConfig& job) {
  return std::make_shared<CoordinatorCluster>(options, job);
}

// ---------------------------------------------------------------------------
// A worker node.

int run_worker(const NodeOptions& options) {
  auto log = logger(options);
  const net::Secret secret = net::Secret::load(options.secret_file);
  const std::string name = node_name("worker");
  std::string local_fingerprint;
  if (!options.job_file.empty()) local_fingerprint = job_identity(load_job_file(options.job_file)).fingerprint;
  std::vector<kernels::Device> devices = options.devices.empty() ? default_devices() : options.devices;

  // The gate's handshake first: a wrong secret or version ends here, with
  // the coordinator's reason.
  net::JoinRelayConfig rc;
  rc.gate_address = options.join;
  rc.handshake = net::HandshakeConfig{secret, TROUPE_VERSION, name};
  // Reaching the coordinator is part of waiting for the job to start:
  // bounded by --wait-timeout too, whichever is shorter.
  rc.timeout = std::min(options.join_timeout, options.wait_timeout);
  rc.log = log;
  std::unique_ptr<net::JoinRelay> relay;
  try {
    relay = std::make_unique<net::JoinRelay>(rc);
  } catch (const std::exception& e) {
    log(std::string("cannot join ") + options.join + ": " + e.what());
    return 1;
  }

  ExitBackstop backstop(log);  // destroyed after the actor system
  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  configure_cluster(cfg);
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  auto membership_or = system.middleman().remote_actor("127.0.0.1", relay->local_port());
  if (!membership_or) {
    log("cannot reach the coordinator at " + options.join + ": " + system.render(membership_or.error()));
    relay->stop();
    return 1;
  }
  caf::actor membership = *membership_or;
  self->monitor(membership);

  std::vector<caf::actor> loaders, replicas, relays;
  std::vector<std::shared_ptr<net::Collective>> collectives;
  int data_fd = -1;
  int status = 1;
  std::int32_t index = -1;
  // Every way out of the job ends every actor the worker started: the
  // relay first (so no device waits for a push), the collectives (so none
  // waits in an all-reduce), then the replicas.
  auto shutdown = [&](const std::string& why) {
    for (auto& a : relays) self->send(a, stop_atom::value, why);
    for (auto& c : collectives) c->abort(why);
    for (auto& a : replicas) self->send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& a : loaders) self->send_exit(a, caf::exit_reason::user_shutdown);
    if (data_fd >= 0) ::close(data_fd);
    data_fd = -1;
  };
  int stopped_by = 0;  // the signal that stopped this worker
  try {
    // Join: the coordinator answers with our index and the job.
    bool ok = false;
    std::string text, error;
    self->request(membership, options.timeout, join_atom::value, name, std::string(TROUPE_VERSION), local_fingerprint)
        .receive(
            [&](bool accepted, std::int32_t k, std::string& t) {
              ok = accepted;
              index = k;
              text = std::move(t);
            },
            [&](caf::error& e) { error = system.render(e); });
    if (!error.empty()) throw std::runtime_error("joining: " + error);
    if (!ok) throw std::runtime_error("the coordinator refused this node: " + text);
    JobConfig job = parse_job_text(text, "the job from " + options.join);
    // Everything this node needs before it says it is ready: the data, the
    // model, the devices.
    data::Splits data = data::load_dataset(job.train.data, job.train.data_options);
    const models::ModelSpec spec = models::resolve_model(job.train.model, models::data_shape_of(data.train));
    for (const auto& d : devices)
      if (d.is_cuda() && d.index >= kernels::cuda_device_count())
        throw std::invalid_argument("--devices: " + d.str() + " requested, but this machine has " +
                                    std::to_string(kernels::cuda_device_count()) + " CUDA device(s)");
    std::string data_address;
    data_fd = bind_data_plane(options.data_address, relay->local_host(), &data_address);
    std::vector<std::string> device_names;
    for (const auto& d : devices) device_names.push_back(d.str());
    self->request(membership, options.timeout, ready_atom::value, index, data_address, device_names)
        .receive([](caf::ok_atom) {}, [&](caf::error& e) { error = system.render(e); });
    if (!error.empty()) throw std::runtime_error("reporting ready: " + error);
    log("joined " + options.join + " as node " + std::to_string(index) + " (job " + job.train.model + " on " +
        job.train.data + "); waiting for the job to start");

    std::signal(SIGINT, on_worker_signal);
    std::signal(SIGTERM, on_worker_signal);
    auto train = std::make_shared<const data::Dataset>(data.train);
    auto schedule = std::make_shared<const models::LrSchedule>(job.train.schedule, job.train.lr, job.train.warmup_steps);
    bool done = false;
    const auto wait_until = std::chrono::steady_clock::now() + options.wait_timeout;
    bool formed = false;
    std::string failure;  // handlers record a failure; the loop throws it
    while (!done && failure.empty()) {
      self->receive(
          [&](form_atom, std::int32_t k, std::int32_t first_rank, std::int32_t world,
              const std::vector<std::string>& addresses, const caf::actor& reducer, std::int64_t cursor_epoch,
              std::int64_t cursor_batch) {
            auto coordinator = caf::actor_cast<caf::actor>(self->current_sender());
            try {
              net::TcpGroupConfig tc;
              tc.rank = k;
              tc.addresses = addresses;
              tc.job_id = job_id_of(job_identity(job).fingerprint);
              tc.options.timeout = options.timeout;
              tc.connect_timeout = options.timeout;
              tc.listen_fd = data_fd;
              data_fd = -1;
              tc.authenticate = net::handshake_hook(net::HandshakeConfig{secret, TROUPE_VERSION, name});
              std::shared_ptr<net::Collective> across = net::make_tcp_group(tc);
              relays.push_back(system.spawn<caf::detached>(server_relay, reducer, options.timeout));
              net::CollectiveOptions co{options.timeout};
              for (auto& c : net::make_hierarchical_group(net::make_local_group(static_cast<int>(devices.size()), co),
                                                          across, first_rank, world, co))
                collectives.emplace_back(std::move(c));
              for (std::size_t r = 0; r < devices.size(); ++r) {
                ReplicaPlan plan;
                plan.rank = first_rank + static_cast<int>(r);
                plan.world = world;
                plan.device = devices[r];
                plan.train = job.train;
                plan.spec = spec;
                plan.train_data = train;
                plan.schedule = schedule;
                plan.collective = collectives[r];
                plan.reducer = relays.back();
                plan.start = data::Cursor{cursor_epoch, cursor_batch};
                plan.prefetch = options.prefetch;
                plan.threads = options.threads_per_device;
                plan.timeout = options.timeout;
                ReplicaActors a = spawn_replica(system, plan);
                loaders.push_back(a.loader);
                replicas.push_back(a.device);
              }
              self->send(coordinator, formed_atom::value, k, replicas, std::string());
              formed = true;
              log("training: replicas " + std::to_string(first_rank) + ".." +
                  std::to_string(first_rank + static_cast<int>(devices.size()) - 1) + " of " + std::to_string(world));
            } catch (const std::exception& e) {
              self->send(coordinator, formed_atom::value, k, std::vector<caf::actor>{}, std::string(e.what()));
              failure = e.what();
            }
          },
          [&](done_atom, const std::string& why) -> caf::ok_atom {
            done = true;
            if (why.empty()) {
              status = 0;
              log("the job is done");
            } else {
              log("the job failed: " + why);
            }
            return caf::ok_atom::value;
          },
          [&](caf::down_msg& down) {
            if (down.source == membership.address())
              failure = "lost the coordinator at " + options.join + ": " + system.render(down.reason);
          },
          caf::after(std::chrono::milliseconds(100)) >> [&] {
            if (const int sig = worker_signal.load()) {
              stopped_by = sig;
              failure = "stopped by signal " + std::to_string(sig);
            }
            if (!formed && std::chrono::steady_clock::now() > wait_until)
              failure = "the job did not start within " +
                        net::describe_seconds(std::chrono::duration<double>(options.wait_timeout).count());
          });
    }
    if (stopped_by) {
      // Say so before leaving, so that the coordinator names this node and
      // the signal (not a broken all-reduce), checkpoints and stops the job
      // as for a lost node. Bounded: the coordinator may be gone too.
      log(failure + "; telling the coordinator");
      self->request(membership, 1s, leave_atom::value, index, failure)
          .receive([](caf::ok_atom) {}, [](caf::error&) {});
      failure = "node " + std::to_string(index) + " (" + name + ") was " + failure;
    }
    if (!failure.empty()) throw std::runtime_error(failure);
    shutdown("the job is over");
  } catch (const std::exception& e) {
    log(e.what());
    shutdown(e.what());
    status = stopped_by ? 128 + stopped_by : 1;
  }
  relay->stop();
  backstop.arm(status, std::chrono::seconds(2));
  return status;
}

}  // namespace troupe::actors
