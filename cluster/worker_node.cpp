// A worker node: joins the coordinator through the gate, receives the job,
// connects the data plane, spawns its replicas and serves them until the
// job is over, then ends every actor it started within about a second.
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "actors/membership.hpp"
#include "actors/ps/parameter_server.hpp"
#include "cluster/node.hpp"
#include "cluster/node_support.hpp"
#include "job/collective_choice.hpp"
#include "job/job_file.hpp"
#include "job/replica.hpp"
#include "kernels/config.hpp"
#include "kernels/registry.hpp"
#include "models/data/load.hpp"
#include "net/cluster/auth.hpp"
#include "net/cluster/gate.hpp"
#include "net/collective/hierarchical.hpp"
#include "net/collective/nccl.hpp"
#include "net/control/address.hpp"
#include "net/push/push_routes.hpp"
#include "net/tcp/tcp.hpp"

namespace troupe::actors {

namespace {

using namespace std::chrono_literals;
using namespace node_support;

std::atomic<int> worker_signal{0};
extern "C" void on_worker_signal(int signal) { worker_signal.store(signal); }

// Why the coordinator gave up the view this node is connecting into, or ""
// (TcpGroupConfig::abandon): stored by the node's thread, read by the ring
// set-up's connecting thread too.
class ViewAbandon {
 public:
  void give_up(std::string why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (why_.empty()) why_ = std::move(why);
  }
  std::string reason() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return why_;
  }

 private:
  mutable std::mutex mutex_;
  std::string why_;
};

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
  // A worker that rejoins after losing its coordinator starts a new actor
  // system: the backstop of the last one must not fire during the next.
  void disarm() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      disarmed_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::lock_guard<std::mutex> lock(mutex_);
    disarmed_ = false;
  }
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

// ---------------------------------------------------------------------------
// A worker node.

namespace {

// One membership of this worker in a job: join through `relay`, train until
// the job ends, end every actor. Says whether it ended because the
// coordinator was lost (the worker may then rejoin a restarted one).

SessionEnd run_session(const NodeOptions& options, net::JoinRelay& relay, ExitBackstop& backstop,
                       const std::string& name, const net::Secret& secret, const std::string& local_fingerprint,
                       const std::vector<kernels::Device>& devices,
                       const std::function<void(const std::string&)>& log) {
  caf::actor_system_config cfg;
  configure_actor_system(cfg);
  configure_cluster(cfg);
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  auto membership_or = system.middleman().remote_actor<membership_actor_t>("127.0.0.1", relay.local_port());
  if (!membership_or) {
    log("cannot reach the coordinator at " + options.join + ": " + system.render(membership_or.error()));
    relay.stop();
    return SessionEnd{1, true};
  }
  membership_actor_t membership = *membership_or;
  self->monitor(membership);

  std::vector<data_loader_actor> loaders;
  std::vector<device_actor_t> replicas;
  std::vector<std::shared_ptr<net::Collective>> collectives;
  int data_fd = -1;
  int status = 1;
  std::int32_t index = -1;
  // Every way out of the job ends every actor the worker started: the
  // pushes first (so no device waits for an answer), the collectives (so
  // none waits in an all-reduce), then the replicas.
  std::shared_ptr<net::push::PushRoutes> push_routes;          // the shards' addresses: pushes on the data plane
  std::shared_ptr<const ps::Partition> push_routes_partition;  // which part of a push goes to which of them
  auto shutdown = [&](const std::string& why) {
    if (push_routes) push_routes->registry->abort(why);
    for (auto& c : collectives) c->abort(why);
    for (auto& a : replicas) self->send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& a : loaders) self->send_exit(a, caf::exit_reason::user_shutdown);
    if (data_fd >= 0) ::close(data_fd);
    data_fd = -1;
  };
  int stopped_by = 0;  // the signal that stopped this worker
  bool coordinator_lost = false;
  bool drained = false;
  try {
    // Join: the coordinator answers with our index and the job.
    bool ok = false;
    std::string text, error;
    self->request(membership, options.timeout, join_atom::value, name, std::string(TROUPE_VERSION), local_fingerprint,
                  std::string(role_text(NodeRole::worker)))
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
    const models::ModelSpec spec = models::training_model(job.train, data.train);
    for (const auto& d : devices)
      if (d.is_cuda() && d.index >= kernels::cuda_device_count())
        throw std::invalid_argument("--devices: " + d.str() + " requested, but this machine has " +
                                    std::to_string(kernels::cuda_device_count()) + " CUDA device(s)");
    (void)choose_collective(devices, net::nccl_built());  // refuses mixed kinds before the node says it is ready
    std::string data_address;
    data_fd = bind_data_plane(options.data_address, relay.local_host(), &data_address);
    std::vector<std::string> device_names;
    for (const auto& d : devices) device_names.push_back(d.str());
    // Whether NCCL loads here: the coordinator runs a view of GPU nodes as one
    // NCCL group only when it does on every node (collective_choice.hpp).
    const std::string nccl = nccl_unavailable_for(devices);
    self->request(membership, options.timeout, ready_atom::value, index, data_address, device_names, nccl)
        .receive([](caf::ok_atom) {}, [&](caf::error& e) { error = system.render(e); });
    if (!error.empty()) throw std::runtime_error("reporting ready: " + error);
    log("joined " + options.join + " as node " + std::to_string(index) + " (job " + job.train.model + " on " +
        job.train.data + "); waiting for the job to start");

    std::signal(SIGINT, on_worker_signal);
    std::signal(SIGTERM, on_worker_signal);
    auto train = std::make_shared<const data::Dataset>(data.train);
    auto schedule =
        std::make_shared<const models::LrSchedule>(job.train.schedule, job.train.lr, job.train.warmup_steps);
    bool done = false;
    const auto wait_until = std::chrono::steady_clock::now() + options.wait_timeout;
    bool formed = false;
    std::optional<std::chrono::steady_clock::time_point> leave_deadline;  // draining on a signal
    std::string failure;  // handlers record a failure; the loop throws it
    while (!done && failure.empty()) {
      self->receive(
          // A membership view: the first spawns this node's replicas, every
          // one connects the data plane anew and moves the replicas into it.
          [&](form_atom, const FormView& f) {
            auto coordinator = caf::actor_cast<caf::actor>(self->current_sender());
            // Set when the coordinator gives this view up while the ring
            // connects (another member was lost): this node then waits for
            // the next view instead of ending (ViewAbandon below).
            auto abandoned = std::make_shared<ViewAbandon>();
            try {
              // The collectives of the view before are done with.
              for (auto& c : collectives) c->abort("view " + std::to_string(f.view) + " replaces it");
              collectives.clear();
              net::CollectiveOptions co{options.timeout};
              if (!f.nccl_id.empty()) {
                // One NCCL group across the view (the coordinator chose it and
                // made the id): this node's ranks join it, no tcp ring.
                for (auto& c :
                     net::make_nccl_group(net::NcclId::from_hex(f.nccl_id), f.first_rank, f.world, devices, co))
                  collectives.emplace_back(std::move(c));
              } else {
                net::TcpGroupConfig tc;
                tc.rank = f.node_rank;
                tc.addresses = f.addresses;
                tc.job_id = ring_id_of(job_identity(job).fingerprint, f.view);
                tc.options.timeout = options.timeout;
                tc.connect_timeout =
                    f.view == 0 ? options.timeout : std::min<std::chrono::milliseconds>(options.timeout, 20s);
                tc.listen_fd = ::dup(data_fd);  // the socket stays for the next view
                if (tc.listen_fd < 0) throw std::runtime_error("duplicating the data-plane socket failed");
                tc.authenticate = net::handshake_hook(handshake_config(secret, options, name));
                // The coordinator's abort of this view (a member lost while
                // the ring connects, whose peers would otherwise wait out
                // the connect deadline and end): read from the mailbox on
                // this thread, which the ring set-up asks every 100 ms; its
                // connecting thread sees the reason once it is stored.
                tc.abandon = [&self, abandoned, owner = std::this_thread::get_id(), view = f.view]() -> std::string {
                  if (std::this_thread::get_id() == owner && abandoned->reason().empty())
                    self->receive(
                        [&](abort_view_atom, std::uint32_t v, const std::string& why) {
                          if (v == view)
                            abandoned->give_up("the coordinator gave view " + std::to_string(v) + " up: " + why);
                        },
                        caf::after(std::chrono::milliseconds(0)) >> [] {});
                  return abandoned->reason();
                };
                std::shared_ptr<net::Collective> across = net::make_tcp_group(tc);
                // This node's replicas: local or nccl by their devices (collective_choice.hpp).
                for (auto& c :
                     net::make_hierarchical_group(make_replica_group(devices, co), across, f.first_rank, f.world, co))
                  collectives.emplace_back(std::move(c));
              }
              const data::Cursor cursor{f.epoch, f.batch, f.offset};
              // Every view names the shards (on ps tasks, or the coordinator's
              // server on its data plane): this node's replicas push each its
              // part there, in the partition every node computes alike; a
              // replica has no other way to push. A view that placed the
              // shards anew (a ps task lost or leaving) brings other
              // addresses, and routes a lost ps task aborted are done with:
              // the replicas take new routes with the view.
              if (f.ps_addresses.empty())
                throw std::runtime_error("view " + std::to_string(f.view) +
                                         " names no parameter-server shards to push to");
              const bool new_routes =
                  !push_routes || push_routes->addresses != f.ps_addresses || !push_routes->registry->aborted().empty();
              if (new_routes) {
                auto partition = std::make_shared<const ps::Partition>(
                    ps::partition_for(spec, f.ps_partition_shards, job.ps_split_above));
                if (static_cast<std::size_t>(partition->shards()) != f.ps_addresses.size())
                  throw std::runtime_error("the coordinator placed " + std::to_string(f.ps_addresses.size()) +
                                           " shards, but this node's partition of the model has " +
                                           std::to_string(partition->shards()));
                if (push_routes)
                  push_routes->registry->abort("view " + std::to_string(f.view) + " placed the shards anew");
                push_routes = std::make_shared<net::push::PushRoutes>();
                push_routes->addresses = f.ps_addresses;
                push_routes->job_id = net::push::push_job_id(job_identity(job).fingerprint);
                push_routes->authenticate = net::handshake_hook(handshake_config(secret, options, name));
                push_routes->connect_timeout = std::min<std::chrono::milliseconds>(options.timeout, 20s);
                push_routes->timeout = options.timeout;
                push_routes_partition = partition;
              }
              if (replicas.empty()) {
                for (std::size_t r = 0; r < devices.size(); ++r) {
                  ReplicaPlan plan;
                  plan.rank = f.first_rank + static_cast<int>(r);
                  plan.world = f.world;
                  plan.device = devices[r];
                  plan.train = job.train;
                  plan.train.batch = f.batch_size;
                  plan.spec = spec;
                  plan.train_data = train;
                  plan.schedule = schedule;
                  plan.collective = collectives[r];
                  plan.partition = push_routes_partition;
                  plan.push_routes = push_routes;
                  plan.start = cursor;
                  plan.prefetch = options.prefetch;
                  plan.threads = options.threads_per_device;
                  plan.timeout = options.timeout;
                  plan.elastic = true;
                  plan.view = f.view;
                  plan.timeline = options.timeline;
                  plan.track = static_cast<int>(r);
                  ReplicaActors a = spawn_replica(system, plan);
                  loaders.push_back(a.loader);
                  replicas.push_back(a.device);
                }
              }
              if (f.view > 0) {
                for (std::size_t r = 0; r < replicas.size(); ++r) {
                  ViewAssignment a;
                  a.view = f.view;
                  a.rank = f.first_rank + static_cast<int>(r);
                  a.world = f.world;
                  a.batch_size = f.batch_size;
                  a.clock = f.clock;
                  a.cursor = cursor;
                  a.collective = collectives[r];
                  if (new_routes) a.push_routes = push_routes;
                  std::string refused;
                  self->request(replicas[r], options.timeout, reconfig_atom::value, a)
                      .receive([](caf::ok_atom) {}, [&](caf::error& e) { refused = system.render(e); });
                  if (!refused.empty()) throw std::runtime_error("replica " + std::to_string(a.rank) + ": " + refused);
                }
              }
              self->send(coordinator, formed_atom::value, f.view, f.node_rank, to_actors(replicas), std::string());
              formed = true;
              log((f.view == 0 ? "training: replicas " : "view " + std::to_string(f.view) + ": replicas ") +
                  std::to_string(f.first_rank) + ".." +
                  std::to_string(f.first_rank + static_cast<int>(devices.size()) - 1) + " of " +
                  std::to_string(f.world) + (f.nccl_id.empty() ? "" : ", one NCCL group across the nodes"));
            } catch (const std::exception& e) {
              if (!abandoned->reason().empty()) {
                // The coordinator forms the next view without the lost
                // member; this node is in it.
                log("view " + std::to_string(f.view) + " did not form (" + abandoned->reason() +
                    "); waiting for the next");
                return;
              }
              self->send(coordinator, formed_atom::value, f.view, f.node_rank, std::vector<caf::actor>{},
                         std::string(e.what()));
              // Not entering a view is this node's end in the job (the
              // coordinator forms another without it).
              failure = e.what();
            }
          },
          // A member of the view was lost: every pending all-reduce fails now.
          [&](abort_view_atom, std::uint32_t, const std::string& why) {
            for (auto& c : collectives) c->abort(why);
          },
          // A ps task was lost: every push in flight fails now (a silent
          // task would otherwise hold a replica until the push's timeout);
          // the next view brings new routes.
          [&](abort_push_atom, const std::string& why) {
            if (push_routes) push_routes->registry->abort(why);
          },
          // Drained (troupe ctl drain, or this node's own SIGTERM): it is not
          // in the next view; it leaves with no step lost.
          [&](drain_atom, const std::string& why) {
            done = true;
            drained = true;
            status = 0;
            log("left the job: " + why);
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
            if (down.source == membership.address()) {
              failure = "lost the coordinator at " + options.join + ": " + system.render(down.reason);
              coordinator_lost = true;
            }
          },
          caf::after(std::chrono::milliseconds(100)) >>
              [&] {
                if (const int sig = worker_signal.load()) {
                  if (!formed || stopped_by) {
                    stopped_by = sig;
                    failure = "stopped by signal " + std::to_string(sig);
                  } else if (!leave_deadline) {
                    // The first signal drains this node: it trains on until the
                    // next step boundary, when the coordinator lets it go (no
                    // step lost). A second signal, or no answer, ends it at once.
                    stopped_by = sig;
                    worker_signal.store(0);
                    leave_deadline = std::chrono::steady_clock::now() + options.timeout;
                    log("signal " + std::to_string(sig) +
                        ": leaving the job at the next step boundary (again to stop at once)");
                    self->request(membership, 5s, leave_atom::value, index, "stopped by signal " + std::to_string(sig))
                        .receive([](caf::ok_atom) {}, [&](caf::error& e) { failure = "leaving: " + system.render(e); });
                  }
                }
                if (leave_deadline && std::chrono::steady_clock::now() > *leave_deadline)
                  failure = "the coordinator did not let this node leave within " +
                            net::describe_seconds(std::chrono::duration<double>(options.timeout).count());
                if (!formed && std::chrono::steady_clock::now() > wait_until)
                  failure = "the job did not start within " +
                            net::describe_seconds(std::chrono::duration<double>(options.wait_timeout).count());
              });
    }
    if (stopped_by && !failure.empty()) {
      // Stopped at once (a second signal, or before training): say so
      // before leaving, so that the coordinator names this node and the
      // signal rather than a broken all-reduce. Bounded: the coordinator may
      // be gone too.
      log(failure + "; telling the coordinator");
      self->request(membership, 1s, leave_atom::value, index, failure).receive([](caf::ok_atom) {}, [](caf::error&) {});
      failure = "node " + std::to_string(index) + " (" + name + ") was " + failure;
    }
    if (!failure.empty()) throw std::runtime_error(failure);
    shutdown(drained ? "this node left the job" : "the job is over");
    // A node stopped by a signal says so in its status, drained or not.
    if (stopped_by) status = 128 + stopped_by;
  } catch (const std::exception& e) {
    log(e.what());
    shutdown(e.what());
    status = stopped_by ? 128 + stopped_by : 1;
  }
  relay.stop();
  // Armed before ~actor_system (at this function's end) waits for the actors.
  backstop.arm(status, std::chrono::seconds(2));
  return SessionEnd{status, coordinator_lost};
}

}  // namespace

int run_worker(const NodeOptions& options) {
  auto log = node_support::logger(options);
  const net::Secret secret = net::Secret::load(options.secret_file);
  net::check_clear_links(secret, options.insecure);
  if (options.insecure) log(links_line(secret, options));
  const std::string name = node_name("worker");
  std::string local_fingerprint;
  if (!options.job_file.empty()) local_fingerprint = job_identity(load_job_file(options.job_file)).fingerprint;
  std::vector<kernels::Device> devices = options.devices.empty() ? default_devices() : options.devices;

  // The gate's handshake first: a wrong secret or version ends here, with
  // the coordinator's reason.
  net::JoinRelayConfig rc;
  rc.gate_address = options.join;
  rc.handshake = handshake_config(secret, options, name);
  // Reaching the coordinator is part of waiting for the job to start:
  // bounded by --wait-timeout too, whichever is shorter.
  rc.timeout = std::min(options.join_timeout, options.wait_timeout);
  rc.log = log;
  ExitBackstop backstop(log);
  // Coordinator loss: the coordinator is the job's chief, and one started
  // again with --resume goes on from its newest checkpoint. This node stays
  // up and joins it again (the coordinator installs the checkpoint's state
  // on every replica), for --rejoin-timeout.
  return run_sessions(
      options, rc, log,
      [&](net::JoinRelay& relay) {
        return run_session(options, relay, backstop, name, secret, local_fingerprint, devices, log);
      },
      [] { return worker_signal.load() != 0; }, [&] { backstop.disarm(); });
}

}  // namespace troupe::actors
