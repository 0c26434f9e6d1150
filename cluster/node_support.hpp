// What both sides of a cluster share (cluster/coordinator_cluster.hpp,
// cluster/worker_node.cpp, actors/membership.cpp): remoting settings, the
// data-plane socket, node names and the log.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "cluster/node.hpp"
#include "net/cluster/gate.hpp"      // HandshakeConfig
#include "net/push/push_routes.hpp"  // job_id_of

namespace troupe::actors::node_support {

// Lines go to stderr as "troupe node: ..." unless the options carry a log.
std::function<void(const std::string&)> logger(const NodeOptions& o);

// Remoting with heartbeats (../shared/CAF-0.17.md, section 3): a silent peer
// is declared down after about 5 s, a closed connection at once.
void configure_cluster(caf::actor_system_config& cfg);

// Both ends of the data plane derive the ring's job id from the job
// (defined beside the pushes' id, which mixes it too).
using net::push::job_id_of;
// The data-plane ring of one membership view: the job's id mixed with the
// view number, so the handshake and every frame (both carry it) of another
// view are rejected.
std::uint64_t ring_id_of(const std::string& fingerprint, std::uint32_t view);

// The first non-loopback IPv4 address of this host, else 127.0.0.1.
std::string first_host_address();

bool is_wildcard(const std::string& host);

// "HOST[:PORT]" -> a listening data-plane socket and its "host:port".
int bind_data_plane(const std::string& requested, const std::string& default_host, std::string* address);

// "worker/HOST/pid N": how logs and the coordinator name a node.
std::string node_name(const std::string& role);

// This node's side of the cluster handshake on every link it makes or
// accepts: `secret`, troupe's version, `identity`, and --insecure.
net::HandshakeConfig handshake_config(const net::Secret& secret, const NodeOptions& options,
                                      const std::string& identity);

// The log line that says how this node's links are protected; with
// --insecure a loud warning of what that gives away.
std::string links_line(const net::Secret& secret, const NodeOptions& options);
// The same in a few words, for the status: "sealed (AES-256-GCM)", "NOT
// sealed (--insecure)", "not sealed (no secret: loopback peers only)".
std::string links_status(const net::Secret& secret, const NodeOptions& options);

// One membership of a worker or ps task in a job: its exit status, and
// whether it ended because the coordinator was lost.
struct SessionEnd {
  int status = 1;
  bool coordinator_lost = false;
};

// A worker's or ps task's sessions (worker_node.cpp, ps_node.cpp): joins
// through a relay made from `rc` and runs `session` on it. When a session
// ends because the coordinator was lost, the node stays up and joins the
// same address again for --rejoin-timeout (a coordinator restarted there
// with --resume takes it back, from its newest checkpoint), with default
// signal handling while it waits; not when `stopped` (a signal asked this
// node to stop). `before_rejoin` runs before each new attempt. Returns the
// exit status of the last session (1 when a join fails).
int run_sessions(const NodeOptions& options, net::JoinRelayConfig rc,
                 const std::function<void(const std::string&)>& log,
                 const std::function<SessionEnd(net::JoinRelay&)>& session, const std::function<bool()>& stopped,
                 const std::function<void()>& before_rejoin = nullptr);

}  // namespace troupe::actors::node_support
