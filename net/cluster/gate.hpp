// The authenticated front door of a troupe node: the gate on the
// coordinator's public port and the join relay on each worker.
//
// Why it exists. The control plane is CAF 0.17 remoting (BASP). BASP has no
// authentication, and it sizes its receive buffers from a 32-bit length in
// each header it reads off the wire, so anyone who can reach a published CAF
// port can make the node allocate up to 4 GiB per message, or talk to its
// actors. troupe therefore publishes CAF on 127.0.0.1 only (an ephemeral
// port) and never lets an unauthenticated byte reach it:
//
//   worker host                                      coordinator host
//   CAF remote_actor("127.0.0.1", relay_port)
//     │                                              CAF publish(127.0.0.1:ephemeral)
//     ▼                                                  ▲
//   JoinRelay 127.0.0.1:relay_port ── TCP ──► Gate HOST:PORT
//             connect, handshake, splice        accept, handshake, splice
//
// The gate accepts TCP connections on the public HOST:PORT, runs the cluster
// handshake below in bounded frames (nothing it reads is larger than 4096
// bytes, nothing waits past the handshake timeout), and only when the peer
// passed it opens a connection to 127.0.0.1:forward_port and copies bytes
// both ways ("splices") until either side closes. The join relay is the
// other end: it connects to the gate and handshakes before it listens on
// 127.0.0.1, then splices its first local connection (the worker's CAF) onto
// that authenticated socket.
//
// The handshake (every frame is a u32 little-endian length, at most 4096,
// then that many bytes: one Cap'n Proto AuthMessage of auth.hpp, whose
// protocol field took the place of the old "TROUPE-GATE/1" magic):
//
//   acceptor (gate)                               joiner (relay)
//   ── Challenge{has_secret, nonce_a} ───────────►
//                                                 anything else in this frame:
//                                                 "not a troupe gate"
//   ◄── JoinResponse{..., identity, proof_j, troupe_version}
//   checks, in order: the proof (auth.hpp's Acceptor::verify: the secret on
//   one side only, or a proof that does not match, is refused),
//   peer_refusal (no secret: loopback peers only; the joiner checks the
//   same before it reads anything), the troupe version (must
//   be equal; only a peer that passed the first two learns it), then
//   GateConfig::admit
//   ── Verdict{admitted, identity, proof_a} ─────►   admitted
//   ── Verdict{refused, identity, reason} ───────►   refused
//                                                 the joiner checks the accept
//                                                 proof (mutual, with a secret)
//
// A length over 4096 is refused before anything more is read, and each
// message is read with a traversal limit of the same bound, so a client
// that is not troupe's costs the gate a few bytes. A refusal's reason is
// what the joiner's exception says, verbatim. Reasons and log lines name
// peers, identities, versions and where a secret came from, never the secret
// or a proof.
//
// After the handshake, with a cluster secret, every byte between the relay
// and the gate travels in sealed records (AES-256-GCM with per-direction
// keys from the handshake's session key and record numbers as nonces,
// net/transport/sealed.hpp): a man in the middle can neither read the CAF traffic
// nor alter, replay, reorder or drop a record without the connection being
// dropped (and logged) at the first such record. Without a secret, peers
// must be on loopback and the bytes are not sealed. With the secret and
// HandshakeConfig::clear_links (`troupe node --insecure`, a trusted
// network) the handshake is the same but the bytes after it are not sealed.
//
// What it does not do: a relay serves any local process on the worker host:
// a local user who can connect to 127.0.0.1:relay_port reaches the
// coordinator as that worker, just as a local user on the coordinator host
// can reach its CAF port directly. Both ends trust their own host.
//
// Threads: the gate and the relay each have one thread accepting (poll() on
// the listener and a wake-up pipe) and one thread per connection
// (handshake, then splice). Every socket is non-blocking and every wait is a
// poll() bounded by a deadline or woken by stop(), which shuts every socket
// down (the wake-up) and joins every thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "net/cluster/auth.hpp"
#include "net/crypto/aead.hpp"  // LinkKeys
#include "net/deadline.hpp"

namespace troupe::net {

// ---------------------------------------------------------------------------
// The handshake over one connected socket.

constexpr std::size_t kGateMaxFrameBytes = kMaxAuthMessageBytes;

struct HandshakeConfig {
  Secret secret;         // none: the acceptor admits loopback peers only
  std::string version;   // troupe's version; both ends must be equal
  std::string identity;  // "coordinator", "worker/host:port", ...
  // `troupe node --insecure`, for trusted networks: the peers still prove
  // the secret (needed: std::invalid_argument without one), but the link is
  // not sealed afterwards (HandshakeResult::keys empty); both ends must
  // agree, and the agreement is signed (auth.hpp, "Clear links").
  bool clear_links = false;
};

struct HandshakeResult {
  bool ok = false;
  // Why not: the peer's refusal (joiner), what the peer got wrong
  // (acceptor), or the I/O failure ("timed out", "end of stream").
  std::string reason;
  std::string peer_identity;  // as the peer stated it (known once its frame was read)
  std::string peer_host;      // the peer's IP address, without port or brackets
  std::string peer_address;   // "10.0.0.2:5555", "[::1]:5555"
  // Whether the handshake got as far as the acceptor's verdict (admitted or
  // refused); false when the connection was dropped on the way (I/O error,
  // timeout, malformed frame, a first frame that is not a challenge).
  bool verdict = false;
  // When ok with a cluster secret: this end's keys for the connection
  // (link_keys of the handshake's session key), for everything after the
  // handshake. Empty without a secret, and with clear_links.
  LinkKeys keys;
};

// Optional extra check on the acceptor after the peer authenticated: a
// refusal reason for this identity ("the job has started"), empty to admit.
using AdmitHook = std::function<std::string(const std::string& peer_identity)>;

// `fd` is a connected non-blocking socket (wire::prepare_socket). Never
// throw for anything the peer does; result.reason says what went wrong.
// Neither reads a byte past the handshake, so the socket can be spliced
// afterwards.
HandshakeResult accept_handshake(int fd, const HandshakeConfig& config, Deadline deadline, const AdmitHook& admit = {});
HandshakeResult join_handshake(int fd, const HandshakeConfig& config, Deadline deadline);

// For TcpGroupConfig::authenticate: runs accept_handshake or join_handshake
// (by `accepting`), throws std::runtime_error(reason) when it fails, and
// returns the connection's keys (empty without a secret).
std::function<LinkKeys(int fd, bool accepting, Deadline deadline)> handshake_hook(HandshakeConfig config);

// ---------------------------------------------------------------------------
// Splicing.

// Copies bytes both ways between two connected non-blocking sockets until
// one side reaches end of stream or fails, then delivers what is still
// buffered towards the other side (for at most `drain`) and shuts both down
// (the caller closes them). 256 KiB buffered each way. Returns at once when
// either socket is shut down by another thread (how stop() wakes it).
// Returns a short description of how it ended, for logs ("closed by a",
// "b: connection reset by peer", "b: record 7 failed authentication: ...").
//
// With keys that protect, `b` is the connection that crosses hosts: what
// goes to b is sealed into records of at most kSpliceRecordBytes
// (net/transport/sealed.hpp) and what comes from b is opened; a record that does
// not open ends the splice at once, and nothing of it or after it reaches a.
constexpr std::size_t kSpliceRecordBytes = std::size_t{64} << 10;
std::string splice(int a, int b, const LinkKeys& keys = {}, std::chrono::milliseconds drain = std::chrono::seconds(10));

// ---------------------------------------------------------------------------
// The gate.

struct GateConfig {
  // Where to listen: "0.0.0.0:7000", "[::]:7000", "127.0.0.1:0" (port 0
  // picks a free one; see Gate::port()).
  std::string listen_address;
  std::uint16_t forward_port = 0;  // the local CAF port on 127.0.0.1
  HandshakeConfig handshake;
  // Per connection, from accept to the verdict.
  std::chrono::milliseconds handshake_timeout{5000};
  // At most this many connections handshaking at once; more are dropped
  // (and logged) at once, so a flood of silent clients cannot pile up
  // threads. Spliced connections do not count.
  std::size_t max_handshaking = 64;
  // One line per admitted, refused or dropped connection and per spliced
  // connection that ends, naming the peer address and the reason, e.g.
  //   gate 0.0.0.0:7000: refused 10.0.0.2:5555 ('worker/b'): 'worker/b' did not prove ...
  //   gate 0.0.0.0:7000: dropped 10.0.0.9:4444: reading the joiner's response: timed out ...
  //   gate 0.0.0.0:7000: admitted 10.0.0.2:5556 ('worker/b'), spliced to 127.0.0.1:40123
  // Called from the gate's threads, one call at a time. Default: none.
  std::function<void(const std::string&)> log;
  // Optional: see AdmitHook.
  AdmitHook admit;
};

class Gate {
 public:
  // Binds and starts accepting on a background thread. Throws
  // std::runtime_error naming the address when it cannot listen (for an
  // address in use, saying so and how to find the process holding it), and
  // std::invalid_argument for a malformed address or forward_port 0.
  explicit Gate(GateConfig config);
  ~Gate();  // stop()
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  std::uint16_t port() const;
  // Closes the listener and every connection (handshaking or spliced) and
  // joins all threads. Idempotent; safe from any thread but the gate's own.
  void stop();

  // Connections that passed the handshake, and those that did not (refused
  // or dropped). A connection is counted once its handshake has ended.
  std::size_t admitted() const;
  std::size_t refused() const;

 private:
  struct State;  // shared with its threads (gate.cpp)
  std::shared_ptr<State> state_;
};

// ---------------------------------------------------------------------------
// The join relay.

struct JoinRelayConfig {
  std::string gate_address;  // "coordinator-host:7000"
  HandshakeConfig handshake;
  // For the first connection and handshake (a gate not listening yet is
  // retried until then, in attempts of 1, 2, 4, then 5 s, each failed one
  // logged with its number and the address) and for each later one.
  std::chrono::milliseconds timeout{10000};
  std::function<void(const std::string&)> log;  // default: none
};

class JoinRelay {
 public:
  // Connects to the gate and runs the handshake now (blocking, bounded by
  // timeout; a refused connection is retried until then, so a worker may
  // start before the coordinator). Throws std::runtime_error with the gate's
  // refusal reason, or the connection error. Then listens on 127.0.0.1:0:
  // the first local connection is spliced onto the authenticated socket;
  // each later one gets a fresh connection and handshake of its own (and is
  // closed, with a log line, when that fails).
  explicit JoinRelay(JoinRelayConfig config);
  ~JoinRelay();  // stop()
  JoinRelay(const JoinRelay&) = delete;
  JoinRelay& operator=(const JoinRelay&) = delete;

  std::uint16_t local_port() const;
  // The IP of our end of the connection to the gate (getsockname): the
  // address by which the gate's host reaches this one.
  std::string local_host() const;
  // The gate's identity from its verdict ("coordinator").
  std::string gate_identity() const;
  // As Gate::stop().
  void stop();

 private:
  struct State;  // shared with its threads (gate.cpp)
  std::shared_ptr<State> state_;
};

}  // namespace troupe::net
