// `troupe node`: the same actors spanning hosts.
//
// The coordinator node (TF's "chief") runs the Job: it owns the job spec,
// membership, step grants, evaluation and checkpoints, and the parameter
// server. Worker nodes join it by address, receive the job text and the
// current parameters, and run replicas (a data loader and a device actor per
// device) that the coordinator drives exactly as it drives its own:
//
//   coordinator node                              worker node k
//   ┌───────────────────────────────┐            ┌──────────────────────────┐
//   │ membership ◄── join/ready ────┼── CAF ─────┼─ worker (this file)      │
//   │ coordinator ── grant ─────────┼────────────┼► device ◄─ data loader   │
//   │   ▲   ◄──── step_done ────────┼────────────┼─ device                  │
//   │ ps front ◄──── push (async) ──┼────────────┼─ device (or to ps tasks) │
//   │ devices ═ local ═╗            │            │ devices ═ local ═╗       │
//   └══════════════════╬════════════┘            └══════════════════╬═══════┘
//                      ╚═══════ tcp ring (data plane, leaders) ═════╝
//
// Control plane: CAF remoting, published on 127.0.0.1 only, behind the gate
// (net/cluster/gate.hpp): the public --listen port runs the cluster-secret
// handshake and the version check with bounded frames before any byte
// reaches CAF, whose BASP trusts its length fields. Heartbeats every second
// and a 5 s connection timeout on every node; every remote actor is
// monitored; every remote request has a finite timeout.
//
// Data plane: sync all-reduce is hierarchical (net/collective/hierarchical):
// inside a node through the `local` backend, across nodes on the `tcp` ring
// between node leaders. Async and ssp push gradients to the parameter
// server's shards on the data plane (net/push/push_link.hpp): each replica
// pushes each shard its part, to the ps task that hosts it (run_ps_task
// below) or, without ps tasks, to the coordinator's PushServer, which
// applies it to the shards in the coordinator's process.
//
// Membership is fixed once training starts: a node that joins later is
// refused with the reason. A lost node (its process killed, its host gone:
// CAF's down message at once on a closed connection, within the heartbeat
// timeout on a silent one; a worker stopped by SIGINT or SIGTERM says so
// before it leaves) stops the job with an error naming the node, after a
// checkpoint of the last consistent state when a checkpoint directory is
// configured; resume with --resume.
//
// Ending. Every way out of a job ends every actor the node started, and a
// node exits within about a second of learning that its job is over: the
// registry of a node's push clients fails its devices' pending pushes at
// once (net/push/push_routes.hpp; a device awaiting its push handles
// nothing else, not even an exit), the collectives are aborted, and a backstop exits a worker whose
// actors still have not stopped 2 s later (saying so). The coordinator does
// not wait for nodes that are gone, and SIGINT / SIGTERM end it while it
// waits for nodes too.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "job/job.hpp"

namespace troupe::actors {

struct NodeOptions {
  std::string listen;   // coordinator: HOST:PORT of the gate
  std::string join;     // worker: the coordinator's HOST:PORT
  int min_nodes = 1;    // coordinator: nodes (itself included) to train; fewer pause the job
  int start_nodes = 0;  // coordinator: nodes before training starts (0: min_nodes)
  int max_nodes = 0;    // coordinator: nodes (itself included) at most; 0: no limit
  // coordinator: ps tasks (`troupe node --ps`) to wait for before training;
  // the parameter-server shards then run on them. 0: none, the
  // shards run in the coordinator's process.
  int ps_tasks = 0;
  std::string secret_file;  // else $TROUPE_SECRET, else none (loopback peers only)
  // --insecure, for trusted networks: members still prove the secret (one
  // is required), but links between nodes carry their bytes unsealed after
  // the handshake (every node of the cluster must agree; net/cluster/auth.hpp).
  // The tcp ring then runs at plaintext speed, and NCCL may carry gradients
  // between nodes (collective_choice.hpp).
  bool insecure = false;
  std::string job_file;                  // worker: optional; refused when it differs from the coordinator's
  std::vector<kernels::Device> devices;  // this node's (default: actors::default_devices())
  int threads_per_device = 1;
  int prefetch = 2;
  // This node's data-plane address HOST[:PORT] (port 0 or none: a free
  // one). Default: the coordinator's --listen host (or, for 0.0.0.0, this
  // host's first non-loopback IPv4 address); a worker's own address on the
  // connection to the coordinator.
  std::string data_address;
  std::chrono::milliseconds join_timeout{30000};   // worker: reaching the coordinator (at most wait_timeout)
  std::chrono::milliseconds wait_timeout{600000};  // waiting for nodes / for the job to start
  // worker: after losing the coordinator, keep trying to join it again for
  // this long (a coordinator restarted with --resume takes the node back);
  // 0: exit at once.
  std::chrono::milliseconds rejoin_timeout{120000};
  std::chrono::milliseconds timeout{60000};     // any one collective or remote request
  std::function<void(const std::string&)> log;  // default: stderr, "troupe node: ..."
  // worker: --timeline, this node's replicas' spans (the coordinator's go
  // through JobConfig::timeline). Null: none.
  std::shared_ptr<Timeline> timeline;
};

// The coordinator's side: hooks for JobConfig::cluster. Throws
// std::invalid_argument for bad options (addresses, secret file).
std::shared_ptr<ClusterHooks> make_coordinator_cluster(const NodeOptions& options, const JobConfig& job);

// A worker node: joins, trains until the coordinator says the job is done.
// Returns the process exit status: 0 when the job completed, 1 when it
// failed, was refused or lost the coordinator (the reason is logged), 128 +
// the signal when SIGINT or SIGTERM stopped it.
int run_worker(const NodeOptions& options);

// A ps task (`troupe node --ps --join HOST:PORT`): joins the coordinator
// like a worker, runs no replica, and hosts the parameter-server shards the
// coordinator places on it, serving the replicas' pushes on the data plane
// (net/push/push_link.hpp). Returns 0 when the job completed, 1 when it
// failed or the coordinator was lost, 128 + the signal for SIGINT / SIGTERM.
int run_ps_task(const NodeOptions& options);

}  // namespace troupe::actors
