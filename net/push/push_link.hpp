// Parameter-server pushes on the data plane: a replica sends each
// shard its part of the gradient over a TCP connection of its own and
// receives the part's fresh parameters on it, instead of a CAF message
// through the gate. Two plain classes: PushClient (one connection from a
// replica to one process hosting shards; no CAF) and PushServer (on that
// process: accepts, authenticates, and hands every push to a callback, which
// in troupe applies it to the shard, shard.hpp).
//
// Connection set-up, as the ring's (net/tcp/ring_setup.cpp):
//   1. TCP connect (the client retries refused connects until
//      PushClientConfig::connect_timeout);
//   2. the authentication hook on both ends (net::handshake_hook in a
//      cluster: the cluster handshake; without a secret it admits loopback
//      peers only, and a server without any hook refuses non-loopback peers
//      itself). When the keys it returns protect, every byte after it, either
//      way, travels in sealed records (net/transport/sealed.hpp);
//   3. Hellos (net/transport/hello.hpp: a length-prefixed Cap'n Proto Hello,
//      net/schema/handshake.capnp, with purpose pushLink, version kVersion
//      and rank = world = 0; one record when sealed): the client sends its
//      own, the server answers any readable Hello with its own, then drops
//      the connection (logged) when the client's purpose, version or job id
//      differ; the client checks the server's the same way, so a client of
//      another job fails at once naming both ids. A length prefix over
//      wire::kMaxHelloBytes is refused before anything more is read.
//
// Frames (all integers little-endian; every node of a cluster shares the
// host byte order of the floats, as messages.hpp's raw tensors do):
//
//   push (client -> server), a 44-byte header then `floats` f32:
//     0 u32 magic 'TPSP'   4 u32 shard      8 u32 view      12 i32 rank
//    16 i64 clock         24 i64 floats    32 u32 sequence 36 u32 flags
//    40 u32 crc32c
//     flags bit 0, kReadsNext: the client sends nothing more on this
//       connection before it has read every answer (its last push of a
//       step to this server); no other bit may be set.
//   answer (server -> client), a 40-byte header then a payload:
//     0 u32 magic 'TPSA'   4 u32 shard      8 u32 sequence  12 u32 status
//    16 i64 floats        24 i64 staleness  32 u32 reason bytes  36 u32 crc32c
//     status 0 (applied): `floats` f32, the part's fresh parameters;
//       `staleness` the push's staleness as the shard measured it (the
//       updates it applied between the pusher's last answer and this
//       push; -1: not measured), which the pusher reports to the
//       coordinator for /metrics (the shards of a ps task have no /metrics);
//     status 1 (refused): `reason bytes` (<= kMaxReasonBytes) of text.
//
// `sequence` numbers the pushes of one connection from 0; an answer names
// the push it answers, so an answer out of order or for another shard is a
// protocol error, never silently taken for another's. Plaintext: `crc32c`
// is the CRC-32C of the header's bytes before it, continued over the
// payload; header and payload go in one sendmsg. Sealed: `crc32c` is 0 (the
// AEAD tag covers every byte); the header is one record and the payload
// follows in records of at most kPushRecordBytes, sealed from the caller's
// buffer into the sealer's (which never holds more than one record) and
// opened in place in the receiver's buffer.
//
// Guarantees:
//   - Bounds before allocation: a push for a shard this server does not
//     host, or of another size than the shard's part, is refused with a
//     reason and its payload read and discarded (the connection and the
//     other shards go on); a push claiming more floats than the largest part
//     this server hosts, a bad magic or sequence, or a payload whose CRC or
//     record does not check is refused or dropped, and the connection
//     closed. Nothing of a frame reaches `apply` before all of it has been
//     read and checked, so an altered frame is never applied.
//   - Pipelining: a client may send several pushes (to different shards)
//     before receiving; the server reads on one thread and writes answers on
//     another, so a client that sends everything before it reads never
//     deadlocks against full socket buffers. Answers come in push order.
//     The answer to a push marked kReadsNext, when no earlier answer is
//     still queued, is written by the reading thread itself: that client
//     is reading, so the write cannot deadlock, and the push's round trip
//     saves the hand-off to the writer thread (a wake-up that, on a busy
//     host, waits for a core: docs/BENCHMARKS.md, "Parameter-server shards
//     on ps tasks"). A client that sends again after such a push without
//     first receiving every answer is refused by PushClient itself.
//   - Deadlines: every socket wait is a poll() bounded by a deadline
//     (client: a push's round trip, PushClientConfig::timeout, from its
//     send; server: io_timeout from a frame's first byte, and per answer),
//     except the server waiting for a connection's next push, which an idle
//     replica may take long to send: it is woken by stop() or the peer's
//     close, and TCP keep-alive drops a peer whose host vanished.
//   - A server that dies or stops: the client's blocked send or receive
//     fails at once (end of stream, reset), not at its timeout. abort()
//     shuts the socket down from any thread: a blocked call wakes at once.
//   - Errors name the address and the shard: "push to shard 1 at
//     127.0.0.1:4567: refused by the server: ..." or "...: timed out after
//     60 s waiting for the answer". After a transport failure (timeout,
//     reset, authentication, protocol) the client is unusable and every
//     later call says why; a refusal leaves it usable.
//
// Use (the worker side pushes every shard, then takes every answer; the
// hosting side serves its shard actors):
//
//   PushServerConfig sc;                        // on a process hosting shards 0 and 2
//   sc.listen_fd = net::listen_tcp("0.0.0.0:0", &port);
//   sc.job_id = job;
//   sc.authenticate = net::handshake_hook(handshake);
//   sc.shards = {{0, partition.size(0)}, {2, partition.size(2)}};
//   sc.apply = shard_apply({{0, shard0.core}, {2, shard2.core}});  // shard.hpp
//   PushServer server(sc);
//
//   // client_for(s): the PushClient of the process hosting shard s (one per process)
//   for (int s = 0; s < shards; ++s)                // pipelined: all sends first; the last
//     client_for(s).send(s, view, rank, clock + 1,   // one to each server says so
//                        staging + partition.packed_offset(s), partition.size(s), last_to_its_server(s));
//   for (int s = 0; s < shards; ++s)                // then the answers, in the same order
//     client_for(s).receive(s, fresh + partition.packed_offset(s), partition.size(s));
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "net/crypto/aead.hpp"  // LinkKeys
#include "net/deadline.hpp"
#include "net/push/frames.hpp"  // GradientPush, AppliedPush, Tensor

namespace troupe::net::wire {
class RecordSealer;
class RecordOpener;
}  // namespace troupe::net::wire

namespace troupe::net::push {

// Names the address and (where there is one) the shard.
struct PushError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- the wire format (exposed for the tests, which play a raw peer) ----
namespace push_wire {

// The push link's protocol version, in its Hello. 2: the Hello became a
// Cap'n Proto message (it was 24 fixed bytes with magic 'TPSH'), and the
// answer header carries the push's staleness (40 bytes, was 32). 3: the
// push header carries flags (44 bytes, was 40).
constexpr std::uint16_t kVersion = 3;
constexpr std::uint32_t kPushMagic = 0x50535054;    // "TPSP"
constexpr std::uint32_t kAnswerMagic = 0x41535054;  // "TPSA"
constexpr std::size_t kPushHeaderBytes = 44;
// Push flags: the client reads every answer before it sends again.
constexpr std::uint32_t kReadsNext = 1;
constexpr std::uint32_t kKnownPushFlags = kReadsNext;
constexpr std::size_t kAnswerHeaderBytes = 40;
constexpr std::size_t kMaxReasonBytes = 1024;
// Sealed payload records: 1 MiB, as the ring's chunks.
constexpr std::size_t kPushRecordBytes = std::size_t{1} << 20;

struct PushHeader {
  std::uint32_t magic = kPushMagic;
  std::uint32_t shard = 0;
  std::uint32_t view = 0;
  std::int32_t rank = 0;
  std::int64_t clock = 0;
  std::int64_t floats = 0;
  std::uint32_t sequence = 0;
  std::uint32_t flags = 0;
  std::uint32_t crc32c = 0;
};
enum class AnswerStatus : std::uint32_t { applied = 0, refused = 1 };
struct AnswerHeader {
  std::uint32_t magic = kAnswerMagic;
  std::uint32_t shard = 0;
  std::uint32_t sequence = 0;
  std::uint32_t status = 0;
  std::int64_t floats = 0;
  std::int64_t staleness = -1;
  std::uint32_t reason_bytes = 0;
  std::uint32_t crc32c = 0;
};
void encode(const PushHeader& h, unsigned char out[kPushHeaderBytes]);
PushHeader decode_push(const unsigned char in[kPushHeaderBytes]);
void encode(const AnswerHeader& h, unsigned char out[kAnswerHeaderBytes]);
AnswerHeader decode_answer(const unsigned char in[kAnswerHeaderBytes]);
// The plaintext checksum: CRC-32C of the header's bytes before its crc32c
// field, continued over the payload.
std::uint32_t push_crc(const unsigned char header[kPushHeaderBytes], const void* payload, std::size_t bytes);
std::uint32_t answer_crc(const unsigned char header[kAnswerHeaderBytes], const void* payload, std::size_t bytes);

}  // namespace push_wire

// ---------------------------------------------------------------------------
// The client: one connection to one server address, used by one replica
// (one thread) at a time; abort() from any thread.

struct PushClientConfig {
  std::string address;                               // HOST:PORT of the PushServer
  std::uint64_t job_id = 0;                          // both ends must agree (checked in the Hellos)
  std::chrono::milliseconds connect_timeout{30000};  // retries refused connects until then
  // false: a refused connect fails at once (ConnectionRefused in the
  // error). A replica's routes set it: a ps task listens from before it
  // reports ready until it ends, so a refusal means it is gone, and
  // retrying would hold the replica while the job places the shards anew.
  bool retry_refused = true;
  std::chrono::milliseconds timeout{60000};  // each push's round trip, from its send
  // Same contract as net::TcpGroupConfig::authenticate (net::handshake_hook
  // in a cluster); called once with `accepting` false. Throws to refuse.
  std::function<net::LinkKeys(int fd, bool accepting, net::Deadline deadline)> authenticate;
  // How long receive() polls the socket for its answer, without sleeping,
  // before it waits in poll() (0, the default: it waits at once). Where
  // cores are idle but slow to wake (a virtual CPU halts when idle), it
  // saves the replica's wake-up on each answer; where they are all busy it
  // takes a core from the ps task it waits for (docs/BENCHMARKS.md,
  // "Parameter-server shards on ps tasks"). push_poll_from_env() gives it for a process's replicas.
  std::chrono::microseconds answer_poll{0};
};

// TROUPE_PUSH_POLL_US, microseconds from 0 to 1,000,000, for
// PushClientConfig::answer_poll; unset or empty: 0. Anything else is
// ignored (0) with one warning on stderr naming it.
std::chrono::microseconds push_poll_from_env();

class PushClient {
 public:
  // Connects, authenticates and exchanges Hellos; throws PushError naming
  // the address and what failed.
  explicit PushClient(PushClientConfig config);
  ~PushClient();
  PushClient(const PushClient&) = delete;
  PushClient& operator=(const PushClient&) = delete;

  // Sends one push for `shard`: the header, then `floats` floats from `part`
  // (written straight from it in plaintext, sealed from it record by record
  // otherwise). Several sends may precede the receives (pipelined).
  // `reads_next`: this is the last send before the caller receives every
  // outstanding answer (the server then answers on its reading thread, a
  // thread hand-off less per round trip); a send before those receives
  // throws PushError (the client stays usable).
  void send(int shard, std::uint32_t view, int rank, std::int64_t clock, const float* part, std::int64_t floats,
            bool reads_next = false);
  // Receives the answer to the oldest unanswered send, which must be for
  // `shard` (answers come in send order): the shard's fresh parameters,
  // `floats` of them, straight into `out`. Throws PushError with the
  // server's reason for a refusal (the client stays usable), or the
  // transport's (timeout, reset, authentication, protocol: the client is
  // then unusable). `out` may hold garbage after a throw. Returns the
  // push's staleness as the shard measured it (-1: not measured).
  std::int64_t receive(int shard, float* out, std::int64_t floats);
  // Thread-safe: every blocked or later send/receive fails at once with a
  // PushError naming the address and shard and ending in `why`.
  void abort(const std::string& why);

  const std::string& address() const { return config_.address; }
  // Pushes sent and not yet answered.
  std::size_t outstanding() const { return pending_.size(); }
  // Whether the connection is sealed (the hook's keys protect).
  bool sealed() const { return sealer_ != nullptr; }

 private:
  struct Pending {
    int shard;
    std::uint32_t sequence;
    net::Deadline deadline;
  };
  std::string where(int shard) const;
  void check_usable(int shard) const;
  [[noreturn]] void fail(int shard, const std::string& what);  // marks the client unusable, then throws
  void read_bytes(void* out, std::size_t bytes, net::Deadline deadline);

  PushClientConfig config_;
  int fd_ = -1;
  std::unique_ptr<net::wire::RecordSealer> sealer_;  // null: plaintext
  std::unique_ptr<net::wire::RecordOpener> opener_;
  std::deque<Pending> pending_;
  std::uint32_t next_sequence_ = 0;
  bool reading_ = false;  // a reads_next push sent, answers outstanding
  std::string broken_;    // why the client is unusable; "" while it is usable
  mutable std::mutex abort_mutex_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // under abort_mutex_
};

// ---------------------------------------------------------------------------
// The server, on a process hosting shards.

struct PushServerConfig {
  int listen_fd = -1;  // bound and listening (net::listen_tcp); the server adopts and closes it
  std::uint64_t job_id = 0;
  // Called on every accepted connection with `accepting` true, on that
  // connection's thread, bounded by handshake_timeout; throw to refuse
  // (logged). Null: plaintext, and loopback peers only.
  std::function<net::LinkKeys(int fd, bool accepting, net::Deadline deadline)> authenticate;
  // Shard index -> its part's floats. A push for another shard, or of
  // another size, is refused with a reason.
  std::map<int, std::int64_t> shards;
  // Applies one push, on the connection's thread (so concurrently for
  // several connections). Returns the fresh parameters of the part (a cpu
  // f32 tensor of exactly the part's floats) and the push's staleness, or
  // throws std::exception whose what() is the refusal the client sees.
  // Must return in bounded time: stop() waits for the calls in progress.
  std::function<AppliedPush(int shard, GradientPush push)> apply;
  std::chrono::milliseconds io_timeout{60000};         // a frame's reading once begun, and each answer's writing
  std::chrono::milliseconds handshake_timeout{10000};  // authentication and Hellos
  // Refused and dropped connections, with the reason; null: stderr.
  std::function<void(const std::string&)> log;
};

class PushServer {
 public:
  // Starts serving at once; throws std::invalid_argument for a missing
  // listen_fd or apply, or a shard of negative size.
  explicit PushServer(PushServerConfig config);
  ~PushServer();  // stop()
  PushServer(const PushServer&) = delete;
  PushServer& operator=(const PushServer&) = delete;

  // Stops accepting, shuts every connection down (which wakes every read,
  // write and poll at once: clients see end of stream) and joins every
  // thread. It returns as soon as the calls to `apply` in progress have
  // returned (their answers are not sent); with none, within milliseconds.
  // Idempotent.
  void stop();
  std::uint16_t port() const { return port_; }
  // Pushes `apply` returned from (applied), for tests and metrics.
  std::int64_t pushes() const { return pushes_.load(); }
  // Of their answers, those the reading thread took to write itself
  // (kReadsNext; counted before the write).
  std::int64_t answered_by_reader() const { return answered_by_reader_.load(); }
  // Connections open now (past or in their handshake).
  std::size_t connections() const;

  // Where an applied push's time went on this server, in ms (its last
  // kServiceSamples pushes, all connections pooled): `read` from the
  // moment its first bytes were seen to the whole payload read and checked
  // (the transfer, as the client writes it), `apply` the shard's step,
  // `answer` from the fresh part being ready to its answer written (the
  // writer thread's queue included, when that thread writes it). What a
  // client's round trip adds to `total` is the two wake-ups, the server's
  // for the push and its own for the answer, and its own copies
  // (docs/BENCHMARKS.md, "Parameter-server shards on ps tasks").
  struct ServiceTimes {
    std::int64_t pushes = 0;                                        // sampled
    double read_ms = 0, apply_ms = 0, answer_ms = 0, total_ms = 0;  // medians
    double total_p99_ms = 0;
  };
  ServiceTimes service_times() const;
  // "read 0.120 ms, apply 0.080 ms, answer 0.100 ms; all 0.310 ms, p99
  // 0.900 ms (medians of N pushes)", or "" before any push.
  static std::string describe(const ServiceTimes& t);
  static constexpr std::size_t kServiceSamples = std::size_t{1} << 16;  // 768 KiB of samples at most

 private:
  struct Connection;
  void accept_loop();
  void serve(Connection& c);  // serve_until_closed, then `done`
  void serve_until_closed(Connection& c);
  void reap();  // joins the threads of finished connections
  void log(const std::string& line) const;

  PushServerConfig config_;
  std::int64_t largest_part_ = 0;
  std::uint16_t port_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: stop() writes, the acceptor's poll() wakes
  std::atomic<bool> stopping_{false};
  std::atomic<std::int64_t> pushes_{0};
  std::atomic<std::int64_t> answered_by_reader_{0};
  mutable std::mutex mutex_;
  std::list<std::unique_ptr<Connection>> connections_;  // under mutex_
  // Per applied push: read, apply and answer (ms); at most kServiceSamples,
  // then the oldest overwritten (service_next_ wraps).
  mutable std::mutex service_mutex_;
  std::vector<std::array<float, 3>> service_;  // under service_mutex_
  std::size_t service_next_ = 0;               // under service_mutex_
  std::thread acceptor_;
  std::mutex stop_mutex_;  // one stop() at a time
  bool stopped_ = false;   // under stop_mutex_
};

}  // namespace troupe::net::push
