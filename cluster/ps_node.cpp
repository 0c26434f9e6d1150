// A ps task (TF1's `--job_name ps`): joins the coordinator through the gate
// like a worker, runs no replica, and hosts the parameter-server shards the
// coordinator places on it when training starts:
//
//   coordinator ──(host_shards, indices, sizes, replicas)──► ps task   spawns the shards,
//       front ◄── get_state / set_state / position / counters ──► shard   over CAF (control,
//                                                                          step boundaries)
//   replica (any node) ══ push: its part ══► push server ──► shard     on the data plane
//                      ◄═ the part's fresh parameters ══                (net/push/push_link.hpp)
//
// The shards' state lives only here: when a ps task is lost, the
// coordinator places every shard anew on the ps tasks left (each told
// host_shards again: its old shards end, new ones start) and restores the
// newest consistent state it has (actors/coordinator/views.cpp). A ps task that
// joins after the start is a spare (standby) until a placement uses it. The
// ps task ends when the coordinator says the job is over, when it loses the
// coordinator, when it is let go (drain, after its shards moved), or on a
// second SIGINT / SIGTERM. The first signal while it hosts shards asks the
// coordinator to move them at the next step boundary (their state is whole:
// nothing is lost), and it serves until then. It stops its push server
// first (no push is applied after that), then its shards.
#include <unistd.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <map>
#include <optional>

#include "actors/membership.hpp"
#include "actors/ps/shard.hpp"
#include "cluster/node.hpp"
#include "cluster/node_support.hpp"
#include "job/job_file.hpp"
#include "job/replica.hpp"
#include "kernels/config.hpp"
#include "net/cluster/auth.hpp"
#include "net/cluster/gate.hpp"
#include "net/control/address.hpp"
#include "net/push/push_link.hpp"
#include "net/push/push_routes.hpp"

namespace troupe::actors {

namespace {

using namespace std::chrono_literals;
using namespace node_support;

std::atomic<int> ps_signal{0};
extern "C" void on_ps_signal(int signal) { ps_signal.store(signal); }

// The shards this task hosts and the push server in front of them.
struct Hosted {
  std::map<int, caf::actor> shards;                     // by shard index
  std::map<int, std::shared_ptr<ps::ShardCore>> cores;  // the same shards' cores
  std::unique_ptr<net::push::PushServer> server;
};

std::string list_of(const std::vector<std::int32_t>& xs) {
  std::string out;
  for (auto x : xs) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

}  // namespace

namespace {

// One membership of this ps task in a job, joined through `relay`: its exit
// status, and whether it ended because the coordinator was lost (it may
// then join a restarted one, as a worker does).
SessionEnd run_ps_session(const NodeOptions& options, net::JoinRelay* relay, const net::Secret& secret,
                          const std::string& name, const std::function<void(const std::string&)>& log) {
  int status = 1;
  bool coordinator_lost = false;
  int data_fd = -1;
  // The system's shutdown has a deadline, as a job's (run_with_bounded_
  // shutdown, replica.hpp): CAF 0.17 may keep an ended actor referenced
  // (here, shards the coordinator's front had handles to), and
  // ~actor_system would wait for it for ever. Past 2 s it is left behind,
  // and troupe's CLI exits without it.
  run_with_bounded_shutdown(
      [&](ActorSystemSlot& slot) {
        caf::actor_system& system = slot.create([](caf::actor_system_config& cfg) {
          configure_actor_system(cfg);
          configure_cluster(cfg);
        });
        caf::scoped_actor self{system};
        Hosted hosted;
        // Ends the shards this task hosts (a new placement, or the end).
        auto drop_shards = [&] {
          if (hosted.server) hosted.server->stop();  // no push is applied after this
          hosted.server.reset();
          for (auto& [i, a] : hosted.shards) {
            (void)i;
            self->send_exit(a, caf::exit_reason::user_shutdown);
          }
          hosted.shards.clear();
          hosted.cores.clear();
        };
        auto shutdown = [&] {
          drop_shards();
          if (data_fd >= 0) ::close(data_fd);
          data_fd = -1;
        };
        try {
          auto membership_or = system.middleman().remote_actor<membership_actor_t>("127.0.0.1", relay->local_port());
          if (!membership_or)
            throw std::runtime_error("cannot reach the coordinator at " + options.join + ": " +
                                     system.render(membership_or.error()));
          membership_actor_t membership = *membership_or;
          self->monitor(membership);
          bool ok = false;
          std::int32_t index = -1;
          std::string text, error;
          // With --job, the coordinator refuses a ps task whose job differs.
          const std::string local_fingerprint =
              options.job_file.empty() ? std::string() : job_identity(load_job_file(options.job_file)).fingerprint;
          self->request(membership, options.timeout, join_atom::value, name, std::string(TROUPE_VERSION),
                        local_fingerprint, std::string(role_text(NodeRole::ps_task)))
              .receive(
                  [&](bool accepted, std::int32_t k, std::string& t) {
                    ok = accepted;
                    index = k;
                    text = std::move(t);
                  },
                  [&](caf::error& e) { error = system.render(e); });
          if (!error.empty()) throw std::runtime_error("joining: " + error);
          if (!ok) throw std::runtime_error("the coordinator refused this ps task: " + text);
          const JobConfig job = parse_job_text(text, "the job from " + options.join);
          const std::string fingerprint = job_identity(job).fingerprint;
          auto schedule =
              std::make_shared<const models::LrSchedule>(job.train.schedule, job.train.lr, job.train.warmup_steps);
          std::string data_address;
          data_fd = bind_data_plane(options.data_address, relay->local_host(), &data_address);
          self->request(membership, options.timeout, ready_atom::value, index, data_address, std::vector<std::string>{},
                        std::string("a ps task runs no replica"))
              .receive([](caf::ok_atom) {}, [&](caf::error& e) { error = system.render(e); });
          if (!error.empty()) throw std::runtime_error("reporting ready: " + error);
          log("joined " + options.join + " as ps task (node " + std::to_string(index) +
              "); its push server listens on " + data_address + "; waiting for shards");
          std::signal(SIGINT, on_ps_signal);
          std::signal(SIGTERM, on_ps_signal);

          const auto wait_until = std::chrono::steady_clock::now() + options.wait_timeout;
          bool placed = false;  // told host_shards or standby at least once: the job has started
          bool done = false;
          std::string failure;
          int stopped_by = 0;  // the signal that asked this task to stop
          std::optional<std::chrono::steady_clock::time_point> leave_deadline;
          while (!done && failure.empty()) {
            self->receive(
                // The shards this task hosts from now on (none: a spare). Those
                // it hosted before end first: a new placement gives every shard
                // a fresh actor and state (the coordinator restores the state).
                // The answer is a message (not a response), tagged with the
                // placement's number: the coordinator waits for it while it
                // watches for lost nodes, and never takes an answer to an
                // earlier placement for this one.
                [&](host_shards_atom, std::uint32_t placement, const std::vector<std::int32_t>& indices,
                    const std::vector<std::int64_t>& sizes, std::int32_t replicas,
                    const std::vector<std::int64_t>& decay) {
                  auto coordinator = caf::actor_cast<caf::actor>(self->current_sender());
                  std::vector<caf::actor> handles;
                  const std::string refused = [&]() -> std::string {
                    if (indices.size() != sizes.size() || replicas < 1)
                      return "host_shards: " + std::to_string(indices.size()) + " shards, " +
                             std::to_string(sizes.size()) + " sizes, " + std::to_string(replicas) + " replicas";
                    for (std::size_t j = 0; j < indices.size(); ++j)
                      if (sizes[j] < 1 || indices[j] < 0 ||
                          std::count(indices.begin(), indices.begin() + static_cast<std::ptrdiff_t>(j), indices[j]))
                        return "host_shards: a bad shard " + std::to_string(indices[j]) + " of " +
                               std::to_string(sizes[j]) + " floats";
                    const bool again = placed;
                    placed = true;
                    drop_shards();
                    if (indices.empty()) {
                      log("hosting no shard: a spare, used when a ps task is lost or leaves");
                      return "";
                    }
                    // Where weight decay applies in each shard (the
                    // coordinator's layout: count, then offset and length of
                    // each range, shard after shard), checked before use.
                    std::vector<models::FlatRanges> decayed(indices.size());
                    std::size_t at = 0;
                    for (std::size_t j = 0; j < indices.size(); ++j) {
                      if (at >= decay.size() || decay[at] < 0 ||
                          decay[at] > static_cast<std::int64_t>((decay.size() - at - 1) / 2))
                        return "host_shards: the weight-decay ranges of shard " + std::to_string(indices[j]) +
                               " are malformed";
                      const auto n = static_cast<std::size_t>(decay[at++]);
                      std::int64_t end = 0;
                      for (std::size_t r = 0; r < n; ++r, at += 2) {
                        const std::int64_t offset = decay[at], length = decay[at + 1];
                        if (offset < end || length < 1 || offset > sizes[j] - length)
                          return "host_shards: a weight-decay range [" + std::to_string(offset) + ", +" +
                                 std::to_string(length) + ") outside shard " + std::to_string(indices[j]) + " of " +
                                 std::to_string(sizes[j]) + " floats";
                        decayed[j].emplace_back(offset, length);
                        end = offset + length;
                      }
                    }
                    if (at != decay.size()) return std::string("host_shards: trailing weight-decay ranges");
                    std::map<int, std::int64_t> parts;
                    std::int64_t floats = 0;
                    for (std::size_t j = 0; j < indices.size(); ++j) {
                      ps::ShardConfig sc;
                      sc.index = indices[j];
                      sc.size = sizes[j];
                      sc.optimizer = job.train.optimizer;
                      sc.decayed = std::move(decayed[j]);
                      sc.schedule = schedule;
                      sc.replicas = replicas;
                      ps::LocalShard shard = ps::spawn_shard(system, std::move(sc), ps::ShardThread::scheduled);
                      hosted.shards[indices[j]] = caf::actor_cast<caf::actor>(shard.actor);
                      hosted.cores[indices[j]] = shard.core;
                      handles.push_back(caf::actor_cast<caf::actor>(shard.actor));
                      parts[indices[j]] = sizes[j];
                      floats += sizes[j];
                    }
                    net::push::PushServerConfig pc;
                    // The server adopts a duplicate: the listening socket stays
                    // (and its address with it) for the next placement.
                    pc.listen_fd = ::dup(data_fd);
                    if (pc.listen_fd < 0) {
                      handles.clear();
                      return "duplicating the data-plane socket failed";
                    }
                    pc.job_id = net::push::push_job_id(fingerprint);
                    pc.authenticate = net::handshake_hook(handshake_config(secret, options, name));
                    pc.shards = parts;
                    pc.io_timeout = options.timeout;
                    pc.log = log;
                    // On the connection's thread: the shard's core applies the
                    // push and answers its fresh part (no hop through the actor).
                    pc.apply = ps::shard_apply(hosted.cores);
                    hosted.server = std::make_unique<net::push::PushServer>(pc);
                    log(std::string(again ? "placed anew: " : "") + "hosting shard(s) " + list_of(indices) + " (" +
                        std::to_string(floats) + " floats) for " + std::to_string(replicas) +
                        " replica(s); pushes on the data plane, " + links_status(secret, options));
                    return "";
                  }();
                  self->send(coordinator, host_shards_atom::value, placement, handles, refused);
                },
                // A ps task that joined after the start: kept for a placement.
                [&](standby_atom) {
                  placed = true;
                  log("standing by: the shards are placed on the other ps tasks; this one hosts some when a ps task is "
                      "lost or leaves");
                },
                // Let go at a step boundary (its shards moved, or it asked to
                // leave): the job goes on without it.
                [&](drain_atom, const std::string& why) {
                  done = true;
                  status = 0;
                  log("left the job: " + why);
                },
                [&](done_atom, const std::string& why) -> caf::ok_atom {
                  done = true;
                  if (why.empty()) {
                    status = 0;
                    std::string applied;
                    if (hosted.server) {
                      applied = " (" + std::to_string(hosted.server->pushes()) + " pushes applied here";
                      const std::string service = net::push::PushServer::describe(hosted.server->service_times());
                      if (!service.empty()) applied += "; per push on this server: " + service;
                      applied += ")";
                    }
                    log("the job is done" + applied);
                  } else {
                    log("the job is over: " + why);
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
                      if (const int sig = ps_signal.load()) {
                        if (!placed || stopped_by) {
                          status = 128 + sig;
                          failure = "stopped by signal " + std::to_string(sig);
                        } else {
                          // The first signal once placed: its shards' state is whole,
                          // so the coordinator gathers it at the next step boundary
                          // and moves the shards to the other ps tasks (nothing is
                          // lost); this task serves until it is let go. A second
                          // signal, or no answer in time, stops it at once.
                          stopped_by = sig;
                          ps_signal.store(0);
                          leave_deadline = std::chrono::steady_clock::now() + options.timeout;
                          log("signal " + std::to_string(sig) +
                              ": asking the coordinator to move this task's shards at the next step boundary (again to "
                              "stop "
                              "at once)");
                          self->request(membership, 5s, leave_atom::value, index,
                                        "stopped by signal " + std::to_string(sig))
                              .receive([](caf::ok_atom) {},
                                       [&](caf::error& e) { failure = "leaving: " + system.render(e); });
                        }
                      }
                      if (leave_deadline && std::chrono::steady_clock::now() > *leave_deadline)
                        failure = "the coordinator did not let this task go within " +
                                  net::describe_seconds(std::chrono::duration<double>(options.timeout).count());
                      if (!placed && std::chrono::steady_clock::now() > wait_until)
                        failure = "the job did not start within " +
                                  net::describe_seconds(std::chrono::duration<double>(options.wait_timeout).count());
                    });
          }
          if (!failure.empty()) {
            log(failure);
            if (status == 0) status = 1;
          }
          // Stopped by a signal says so in the status, however the job ended.
          if (stopped_by) status = 128 + stopped_by;
        } catch (const std::exception& e) {
          log(e.what());
          status = ps_signal.load() ? 128 + ps_signal.load() : 1;
        }
        shutdown();
        relay->stop();
      },
      std::chrono::seconds(2));
  return SessionEnd{status, coordinator_lost};
}

}  // namespace

int run_ps_task(const NodeOptions& options) {
  auto log = logger(options);
  const net::Secret secret = net::Secret::load(options.secret_file);
  net::check_clear_links(secret, options.insecure);
  if (options.insecure) log(links_line(secret, options));
  const std::string name = node_name("ps");
  net::JoinRelayConfig rc;
  rc.gate_address = options.join;
  rc.handshake = handshake_config(secret, options, name);
  rc.timeout = std::min(options.join_timeout, options.wait_timeout);
  rc.log = log;
  // Coordinator loss: a coordinator started again there with --resume goes
  // on from its newest checkpoint and places the shards on the ps tasks
  // that join it: this one stays up and joins it again, for
  // --rejoin-timeout, as a worker does.
  return run_sessions(
      options, rc, log, [&](net::JoinRelay& relay) { return run_ps_session(options, &relay, secret, name, log); },
      [] { return ps_signal.load() != 0; });
}

}  // namespace troupe::actors
