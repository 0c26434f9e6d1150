// The gate, the join relay, their handshake and the splice (gate.hpp).
#include "net/cluster/gate.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "net/control/address.hpp"
#include "net/transport/sealed.hpp"
#include "net/transport/socket.hpp"
#include "util/printable.hpp"

namespace troupe::net {

namespace {

constexpr std::size_t kSpliceBufferBytes = std::size_t{256} << 10;

using wire::errno_text;

// Text from the peer, fit for a log line.
using util::printable;

std::string quoted_identity(const std::string& identity) {
  return identity.empty() ? std::string("(no identity)") : "'" + printable(identity) + "'";
}

// The numeric host of either end of a connected socket.
std::string socket_host(int fd, bool peer) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) return "?";
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0)
    return "?";
  return host;
}

// ---------------------------------------------------------------------------
// Frames: a u32 little-endian length, then one AuthMessage (auth.hpp).

void write_frame(int fd, const std::string& body, Deadline deadline) {
  unsigned char prefix[wire::kLengthPrefixBytes];
  wire::put_u32(prefix, static_cast<std::uint32_t>(body.size()));
  wire::write_all(fd, prefix, sizeof prefix, body.data(), body.size(), deadline);
}

// One frame, never more than kGateMaxFrameBytes allocated whatever the
// length field says (std::invalid_argument before anything more is read).
// Reads exactly the frame, nothing after it.
std::string read_frame(int fd, Deadline deadline) {
  unsigned char prefix[wire::kLengthPrefixBytes];
  wire::read_all(fd, prefix, sizeof prefix, deadline);
  const std::uint64_t n = wire::get_le(prefix, sizeof prefix);
  if (n > kGateMaxFrameBytes)
    throw std::invalid_argument("a frame of " + std::to_string(n) + " bytes, more than the " +
                                std::to_string(kGateMaxFrameBytes) + " a handshake frame may have");
  std::string body(static_cast<std::size_t>(n), '\0');
  wire::read_all(fd, body.data(), body.size(), deadline);
  return body;
}

// "reading the joiner's response: timed out".
std::string io_reason(const char* doing, const std::exception& e) {
  if (const auto* io = dynamic_cast<const wire::IoError*>(&e); io && io->timed_out)
    return std::string(doing) + ": timed out (the handshake deadline passed)";
  return std::string(doing) + ": " + e.what();
}

// ---------------------------------------------------------------------------
// The threads of a gate or a relay: one per connection, each owning up to
// two sockets, which stop() shuts down to wake them.

class ConnectionSet {
 public:
  struct Connection {
    int fds[2] = {-1, -1};
    std::thread thread;
    std::atomic<bool> done{false};
  };

  // Runs body(connection) on a new thread that owns `fd` (as fds[0]);
  // closes fd and returns false when stopping.
  bool start(int fd, std::function<void(Connection&)> body) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      ::close(fd);
      return false;
    }
    reap_locked();
    connections_.push_back(std::make_unique<Connection>());
    Connection& c = *connections_.back();
    c.fds[0] = fd;
    c.thread = std::thread([this, &c, body = std::move(body)] {
      try {
        body(c);
      } catch (...) {  // body logs its own failures; nothing may escape a thread
      }
      std::lock_guard<std::mutex> guard(mutex_);
      for (int& f : c.fds)
        if (f >= 0) ::close(std::exchange(f, -1));
      c.done = true;
    });
    return true;
  }

  // Registers a second socket of `c` (so stop() shuts it down too); closes
  // it and returns false when stopping.
  bool adopt(Connection& c, int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      ::close(fd);
      return false;
    }
    c.fds[1] = fd;
    return true;
  }

  bool stopping() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stopping_;
  }

  // Shuts every socket down (which wakes every poll() on it) and joins every
  // thread. The threads close their own sockets.
  void stop() {
    std::list<std::unique_ptr<Connection>> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      for (auto& c : connections_)
        for (int f : c->fds)
          if (f >= 0) ::shutdown(f, SHUT_RDWR);
      all.swap(connections_);
    }
    for (auto& c : all)
      if (c->thread.joinable()) c->thread.join();
  }

 private:
  void reap_locked() {
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->done) {
        (*it)->thread.join();  // past its last use of the lock: returns at once
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }

  mutable std::mutex mutex_;
  bool stopping_ = false;
  std::list<std::unique_ptr<Connection>> connections_;
};

// A pipe whose read end a poll() watches; writing one byte wakes it.
struct WakePipe {
  int fds[2] = {-1, -1};
  WakePipe() {
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  ~WakePipe() {
    for (int f : fds)
      if (f >= 0) ::close(f);
  }
  void wake() {
    const char b = 1;
    [[maybe_unused]] const ssize_t n = ::write(fds[1], &b, 1);
  }
};

// listen_tcp (EADDRINUSE gets advice there), non-blocking: the accept
// loops poll() it with a wake-up pipe.
int listen_on(const std::string& address, std::uint16_t* port) {
  const int fd = listen_tcp(address, port);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
  return fd;
}

// Waits for a connection on listen_fd or a byte on wake_fd. Returns the
// accepted socket (prepared), -1 for nothing this time, -2 when woken.
int accept_or_wake(int listen_fd, int wake_fd, const std::function<void(const std::string&)>& log) {
  pollfd p[2] = {{listen_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  if (::poll(p, 2, -1) < 0) return -1;  // EINTR
  if (p[1].revents != 0) return -2;
  if (!(p[0].revents & POLLIN)) return -1;
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd >= 0) {
    wire::prepare_socket(fd);
    return fd;
  }
  const int err = errno;
  if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
    // Out of descriptors: the pending connection stays in the backlog and
    // poll() would report it again at once; back off instead of spinning.
    if (log) log(std::string("accept failed: ") + std::strerror(err) + "; retrying in 100 ms");
    pollfd w{wake_fd, POLLIN, 0};
    ::poll(&w, 1, 100);
  }
  return -1;
}

// wire::connect_tcp in slices of 250 ms, so that stop() (`set` stopping)
// is noticed between tries while nothing listens at `address` yet.
int connect_until(const std::string& address, Deadline deadline, const ConnectionSet& set) {
  for (;;) {
    const Deadline slice = std::min(deadline, Clock::now() + std::chrono::milliseconds(250));
    try {
      return wire::connect_tcp(address, slice);
    } catch (const wire::IoError& e) {
      if (slice >= deadline) throw;
      if (set.stopping()) throw wire::IoError("could not connect to " + address + ": stopped", false);
    }
  }
}

void call_log(std::mutex& mutex, const std::function<void(const std::string&)>& log, const std::string& line) {
  if (!log) return;
  std::lock_guard<std::mutex> lock(mutex);
  log(line);
}

}  // namespace

// ---------------------------------------------------------------------------
// The handshake.

HandshakeResult accept_handshake(int fd, const HandshakeConfig& config, Deadline deadline, const AdmitHook& admit) {
  HandshakeResult r;
  r.peer_address = wire::peer_address(fd);
  r.peer_host = socket_host(fd, true);
  const char* doing = "sending the challenge";
  try {
    Acceptor acceptor(config.secret, config.clear_links);
    write_frame(fd, acceptor.challenge().encode(), deadline);
    doing = "reading the joiner's response";
    const JoinResponse response = JoinResponse::decode(read_frame(fd, deadline));
    r.peer_identity = response.identity;

    const AuthResult auth = acceptor.verify(response);
    std::string refusal = auth.ok ? peer_refusal(config.secret, r.peer_host) : auth.reason;
    if (refusal.empty() && response.troupe_version != config.version)
      refusal = "troupe version mismatch: " + quoted_identity(response.identity) + " runs troupe " +
                printable(response.troupe_version) + " but " + quoted_identity(config.identity) + " runs troupe " +
                config.version + " (every node must run the same build)";
    if (refusal.empty() && admit) {
      try {
        refusal = admit(response.identity);
      } catch (const std::exception& e) {
        refusal = std::string("this node could not decide whether to admit it: ") + e.what();
      }
    }

    Verdict verdict;
    verdict.admitted = refusal.empty();
    verdict.identity = config.identity;
    if (verdict.admitted)
      verdict.proof = auth.proof;
    else
      verdict.reason = refusal;
    r.verdict = true;
    r.ok = refusal.empty();
    r.reason = refusal;
    if (r.ok && !config.clear_links) r.keys = link_keys(auth.session_key, true);
    doing = "sending the verdict";
    write_frame(fd, verdict.encode(), deadline);
  } catch (const std::exception& e) {
    // A refusal stays a refusal when the joiner hung up before reading it.
    if (r.verdict && !r.ok) return r;
    r.ok = false;
    r.reason = io_reason(doing, e);
  }
  return r;
}

HandshakeResult join_handshake(int fd, const HandshakeConfig& config, Deadline deadline) {
  HandshakeResult r;
  r.peer_address = wire::peer_address(fd);
  r.peer_host = socket_host(fd, true);
  // Without a secret both ends insist on loopback: a joiner would otherwise
  // talk, unauthenticated and unsealed, to whatever answers at a remote
  // address.
  if (std::string refusal = peer_refusal(config.secret, r.peer_host); !refusal.empty()) {
    r.reason = std::move(refusal);
    return r;
  }
  const char* doing = "reading the gate's challenge";
  try {
    Joiner joiner(config.secret, config.identity, config.clear_links);
    // Anything but a challenge of our protocol in the first frame (an
    // oversized or unreadable frame, another kind of message) means the
    // peer is not a troupe gate of this build: say so, not "malformed".
    Challenge challenge;
    try {
      challenge = Challenge::decode(read_frame(fd, deadline));
    } catch (const std::invalid_argument& e) {
      r.reason = "the peer at " + r.peer_address +
                 " is not a troupe gate (its first frame is not a challenge: " + e.what() + ")";
      return r;
    }
    JoinResponse response = joiner.respond(challenge);
    response.troupe_version = config.version;
    doing = "sending the response";
    write_frame(fd, response.encode(), deadline);

    doing = "reading the gate's verdict";
    std::string verdict_frame;
    try {
      verdict_frame = read_frame(fd, deadline);
    } catch (const std::exception&) {
      if (!response.error.empty()) {  // we refused first: that is the reason
        r.reason = response.error;
        return r;
      }
      throw;
    }
    const Verdict verdict = Verdict::decode(verdict_frame);
    r.peer_identity = verdict.identity;
    r.verdict = true;
    if (!response.error.empty()) {
      r.reason = response.error;
    } else if (!verdict.admitted) {
      r.reason = printable(verdict.reason);
    } else {
      const AuthResult checked = joiner.verify(verdict.proof);  // mutual: the gate proves the secret too
      r.ok = checked.ok;
      r.reason = checked.reason;
      if (r.ok && !config.clear_links) r.keys = link_keys(checked.session_key, false);
    }
  } catch (const std::exception& e) {
    r.ok = false;
    r.reason = io_reason(doing, e);
  }
  return r;
}

namespace {
// How a spliced connection travels, for the log.
std::string sealing_note(const LinkKeys& keys, const HandshakeConfig& config) {
  if (keys.protects()) return " (sealed)";
  return config.clear_links ? " (NOT sealed: --insecure)" : " (not sealed: no secret)";
}
}  // namespace

std::function<LinkKeys(int, bool, Deadline)> handshake_hook(HandshakeConfig config) {
  return [config = std::move(config)](int fd, bool accepting, Deadline deadline) {
    const HandshakeResult r = accepting ? accept_handshake(fd, config, deadline) : join_handshake(fd, config, deadline);
    if (!r.ok) throw std::runtime_error(r.reason);
    return r.keys;
  };
}

// ---------------------------------------------------------------------------
// Splicing.

std::string splice(int a, int b, const LinkKeys& keys, std::chrono::milliseconds drain) {
  // One direction: bytes read from `from` wait in [begin, end) of `buffer`
  // until `to` takes them; with keys, sealed into records on the way to b
  // and opened on the way from b (records still incomplete wait in `raw`).
  constexpr std::size_t kRawBytes = 2 * (kSpliceRecordBytes + wire::kRecordOverhead);
  struct Direction {
    Direction(int f, int t, const char* f_name, const char* t_name)
        : from(f), to(t), from_name(f_name), to_name(t_name) {}
    int from, to;
    const char* from_name;
    const char* to_name;
    std::unique_ptr<char[]> buffer{new char[kSpliceBufferBytes]};
    std::size_t begin = 0, end = 0;
    std::unique_ptr<wire::RecordSealer> sealer;
    std::unique_ptr<wire::RecordOpener> opener;
    std::unique_ptr<char[]> raw;
    std::size_t raw_bytes = 0;
    std::size_t pending() const { return end - begin; }
    // Room one read needs at the tail of `buffer`: a whole record when
    // sealing or opening.
    std::size_t needed() const {
      return sealer ? kSpliceRecordBytes + wire::kRecordOverhead : opener ? kSpliceRecordBytes : 1;
    }
    // Room at the tail, or enough at the front to be worth moving the
    // pending bytes there (at most once per half buffer drained).
    bool has_room() const {
      return kSpliceBufferBytes - end >= needed() ||
             (begin >= kSpliceBufferBytes / 2 && kSpliceBufferBytes - pending() >= needed());
    }
    void make_room() {
      if (kSpliceBufferBytes - end >= needed()) return;
      std::memmove(buffer.get(), buffer.get() + begin, pending());
      end -= begin;
      begin = 0;
    }
    bool can_read() const { return opener ? raw_bytes < kRawBytes : has_room(); }
    // Opens the whole records in `raw` while there is room for them; throws
    // as RecordOpener::open.
    void open_ready() {
      std::size_t used = 0;
      while (has_room()) {
        make_room();
        const auto opened = opener->open(raw.get() + used, raw_bytes - used, buffer.get() + end, kSpliceRecordBytes);
        if (opened.consumed == 0) break;
        end += opened.bytes;
        used += opened.consumed;
      }
      std::memmove(raw.get(), raw.get() + used, raw_bytes - used);
      raw_bytes -= used;
    }
  };
  Direction dirs[2] = {{a, b, "a", "b"}, {b, a, "b", "a"}};
  if (keys.protects()) {
    dirs[0].sealer = std::make_unique<wire::RecordSealer>(keys.send);
    dirs[1].opener = std::make_unique<wire::RecordOpener>(keys.receive);
    dirs[1].raw.reset(new char[kRawBytes]);
  }
  bool hung_up[2] = {false, false};  // POLLHUP/POLLERR seen while not reading it
  std::string ended;                 // set: no more reading, only draining
  Deadline drain_deadline{};
  auto finish = [&](std::string why) {
    if (ended.empty()) {
      ended = std::move(why);
      drain_deadline = Clock::now() + drain;
    }
  };
  // Records that arrived whole but waited for room.
  auto open_waiting = [&] {
    Direction& d = dirs[1];
    if (!d.opener || !ended.empty() || d.raw_bytes == 0) return;
    try {
      d.open_ready();
    } catch (const std::exception& e) {
      finish(std::string(d.from_name) + ": " + e.what());
    }
  };

  for (;;) {
    open_waiting();
    if (!ended.empty() && dirs[0].pending() == 0 && dirs[1].pending() == 0) break;
    pollfd p[2] = {{a, 0, 0}, {b, 0, 0}};
    for (int i = 0; i < 2; ++i) {
      Direction& d = dirs[i];
      if (ended.empty() && d.can_read()) p[i].events |= POLLIN;
      if (d.pending() > 0) p[1 - i].events |= POLLOUT;
    }
    for (int i = 0; i < 2; ++i)
      if (hung_up[i] && !(p[i].events & POLLIN)) p[i].fd = -1;  // it would report the hang-up at once, forever
    int ms = -1;
    if (!ended.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(drain_deadline - Clock::now()).count();
      if (left <= 0) break;
      ms = static_cast<int>(std::min<long long>(left + 1, INT_MAX));
    }
    const int n = ::poll(p, 2, ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      ended = std::string("poll: ") + std::strerror(errno);
      break;
    }
    for (int i = 0; i < 2; ++i)
      if ((p[i].revents & (POLLHUP | POLLERR)) && !(p[i].events & POLLIN)) hung_up[i] = true;

    // Read what is ready, then write what is pending (a write right after
    // a read saves a poll() round when the other side can take it).
    for (int i = 0; i < 2; ++i) {
      Direction& d = dirs[i];
      if (!ended.empty() || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)) || !(p[i].events & POLLIN)) continue;
      char* into;
      std::size_t room;
      if (d.opener) {
        into = d.raw.get() + d.raw_bytes;
        room = kRawBytes - d.raw_bytes;
      } else {
        d.make_room();
        // Sealing: read a record's worth just past where its length prefix
        // goes, and seal it in place.
        into = d.buffer.get() + d.end + (d.sealer ? wire::kRecordPrefixBytes : 0);
        room = d.sealer ? kSpliceRecordBytes : kSpliceBufferBytes - d.end;
      }
      const ssize_t got = ::recv(d.from, into, room, 0);
      if (got > 0) {
        const auto bytes = static_cast<std::size_t>(got);
        try {
          if (d.sealer) {
            d.sealer->seal(into, bytes, d.buffer.get() + d.end);
            d.end += bytes + wire::kRecordOverhead;
          } else if (d.opener) {
            d.raw_bytes += bytes;
            d.open_ready();
          } else {
            d.end += bytes;
          }
        } catch (const std::exception& e) {
          finish(std::string(d.from_name) + ": " + e.what());
        }
      } else if (got == 0) {
        finish(std::string("closed by ") + d.from_name +
               (d.raw_bytes > 0 ? " inside a record (" + std::to_string(d.raw_bytes) + " bytes of it dropped)" : ""));
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        finish(std::string(d.from_name) + ": " + errno_text(errno));
      }
    }
    for (int i = 0; i < 2; ++i) {
      Direction& d = dirs[i];
      while (d.pending() > 0) {
        const ssize_t put = ::send(d.to, d.buffer.get() + d.begin, d.pending(), MSG_NOSIGNAL);
        if (put > 0) {
          d.begin += static_cast<std::size_t>(put);
          continue;
        }
        if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (put < 0 && errno == EINTR) continue;
        finish(std::string(d.to_name) + ": " + errno_text(errno));
        d.begin = d.end;  // nobody left to take it
      }
      if (d.pending() == 0) d.begin = d.end = 0;
    }
  }
  ::shutdown(a, SHUT_RDWR);
  ::shutdown(b, SHUT_RDWR);
  if (ended.empty()) ended = "stopped";
  if (dirs[0].pending() + dirs[1].pending() > 0)
    ended += " (" + std::to_string(dirs[0].pending() + dirs[1].pending()) + " bytes not delivered)";
  return ended;
}

// ---------------------------------------------------------------------------
// The gate.

struct Gate::State {
  GateConfig config;
  std::string name;  // "gate 0.0.0.0:7000" for log lines
  int listen_fd = -1;
  std::uint16_t port = 0;
  WakePipe wake;
  ConnectionSet connections;
  std::atomic<std::size_t> handshaking{0}, admitted{0}, refused{0};
  std::mutex log_mutex, stop_mutex;
  std::thread acceptor;
  bool stopped = false;  // under stop_mutex

  void log(const std::string& line) { call_log(log_mutex, config.log, name + ": " + line); }
  void serve(ConnectionSet::Connection& c);
  void accept_loop();
};

void Gate::State::serve(ConnectionSet::Connection& c) {
  const int fd = c.fds[0];
  const HandshakeResult r =
      accept_handshake(fd, config.handshake, Clock::now() + config.handshake_timeout, config.admit);
  --handshaking;
  const std::string who =
      r.peer_address + (r.peer_identity.empty() ? "" : " (" + quoted_identity(r.peer_identity) + ")");
  // Logged before counted, so that a test that saw the count sees the line.
  if (!r.ok) {
    if (connections.stopping())
      log("dropped " + who + ": the gate stopped during the handshake");
    else
      log((r.verdict ? "refused " : "dropped ") + who + ": " + r.reason);
    ++refused;
    return;
  }
  ++admitted;
  const std::string forward = "127.0.0.1:" + std::to_string(config.forward_port);
  int fwd = -1;
  try {
    fwd = connect_until(forward, Clock::now() + config.handshake_timeout, connections);
  } catch (const std::exception& e) {
    log("dropped " + who + " after it was admitted: cannot reach the local control port " + forward + ": " + e.what());
    return;
  }
  if (!connections.adopt(c, fwd)) return;
  log("admitted " + who + ", spliced to " + forward + sealing_note(r.keys, config.handshake));
  log("closed " + who + ": " + splice(fwd, fd, r.keys));
}

void Gate::State::accept_loop() {
  for (;;) {
    const int fd = accept_or_wake(listen_fd, wake.fds[0], [this](const std::string& l) { log(l); });
    if (fd == -2) return;
    if (fd < 0) continue;
    if (handshaking >= config.max_handshaking) {
      log("dropped " + wire::peer_address(fd) + ": " + std::to_string(config.max_handshaking) +
          " connections are already handshaking");
      ++refused;
      ::close(fd);
      continue;
    }
    ++handshaking;
    if (!connections.start(fd, [this](ConnectionSet::Connection& c) { serve(c); })) {
      --handshaking;
      return;
    }
  }
}

Gate::Gate(GateConfig config) : state_(std::make_shared<State>()) {
  if (config.forward_port == 0) throw std::invalid_argument("gate " + config.listen_address + ": forward_port is 0");
  if (config.handshake_timeout.count() <= 0)
    throw std::invalid_argument("gate " + config.listen_address + ": handshake_timeout must be positive");
  State& s = *state_;
  s.config = std::move(config);
  s.listen_fd = listen_on(s.config.listen_address, &s.port);
  HostPort bound = parse_host_port(s.config.listen_address);
  bound.port = s.port;
  s.name = "gate " + bound.str();
  s.acceptor = std::thread([&s] { s.accept_loop(); });
}

Gate::~Gate() { stop(); }

std::uint16_t Gate::port() const { return state_->port; }
std::size_t Gate::admitted() const { return state_->admitted; }
std::size_t Gate::refused() const { return state_->refused; }

void Gate::stop() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.stop_mutex);
  if (s.stopped) return;
  s.stopped = true;
  s.wake.wake();
  if (s.acceptor.joinable()) s.acceptor.join();
  ::close(std::exchange(s.listen_fd, -1));
  s.connections.stop();
}

// ---------------------------------------------------------------------------
// The join relay.

struct JoinRelay::State {
  JoinRelayConfig config;
  std::string name;  // "join relay to HOST:PORT"
  int listen_fd = -1;
  std::uint16_t port = 0;
  std::string local_host, gate_identity;
  int first_fd = -1;    // the authenticated socket, until the first local connection takes it
  LinkKeys first_keys;  // its keys
  WakePipe wake;
  ConnectionSet connections;
  std::mutex log_mutex, stop_mutex;
  std::thread acceptor;
  bool stopped = false;  // under stop_mutex

  void log(const std::string& line) { call_log(log_mutex, config.log, name + ": " + line); }
  // Connects to the gate, and handshakes on that socket; both throw
  // std::runtime_error with the reason (the caller closes the socket).
  int connect(Deadline deadline);
  LinkKeys handshake(int fd, Deadline deadline);  // the connection's keys
  void accept_loop();
};

// Attempts of 1, 2, 4, then 5 s each (inside one, a refused connection is
// retried every 20 ms, so a gate that starts listening is reached at once);
// each failed attempt is logged with its number, so a worker waiting for a
// coordinator that is not there says so instead of staying silent.
int JoinRelay::State::connect(Deadline deadline) {
  auto slice = std::chrono::milliseconds(1000);
  for (int attempt = 1;; ++attempt) {
    const Deadline until = std::min(deadline, Clock::now() + slice);
    try {
      return wire::connect_tcp(config.gate_address, until);
    } catch (const wire::IoError& failure) {
      std::string why = failure.what();  // "could not connect to ADDRESS: Connection refused"
      const std::string prefix = "could not connect to " + config.gate_address + ": ";
      if (why.compare(0, prefix.size(), prefix) == 0) why = why.substr(prefix.size());
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left < 0.1 || connections.stopping())
        throw std::runtime_error("cannot reach the troupe gate at " + config.gate_address + " (" +
                                 std::to_string(attempt) + (attempt == 1 ? " attempt" : " attempts") + "): " + why);
      log("attempt " + std::to_string(attempt) + " to reach the coordinator at " + config.gate_address + " failed (" +
          why + "); retrying, giving up in " + describe_seconds(std::round(left * 10) / 10));
    } catch (const std::exception& e) {  // a malformed address: no point in retrying
      throw std::runtime_error("cannot reach the troupe gate at " + config.gate_address + ": " + e.what());
    }
    slice = std::min(slice * 2, std::chrono::milliseconds(5000));
  }
}

LinkKeys JoinRelay::State::handshake(int fd, Deadline deadline) {
  const HandshakeResult r = join_handshake(fd, config.handshake, deadline);
  if (!r.ok) {
    throw std::runtime_error("joining the troupe gate at " + config.gate_address +
                             (r.peer_identity.empty() ? "" : " (" + quoted_identity(r.peer_identity) + ")") +
                             " failed: " + r.reason);
  }
  if (gate_identity.empty()) gate_identity = printable(r.peer_identity);
  return r.keys;
}

void JoinRelay::State::accept_loop() {
  for (;;) {
    const int local = accept_or_wake(listen_fd, wake.fds[0], [this](const std::string& l) { log(l); });
    if (local == -2) return;
    if (local < 0) continue;
    const int first = std::exchange(first_fd, -1);
    const bool started = connections.start(
        local, [this, first, keys = std::exchange(first_keys, {})](ConnectionSet::Connection& c) mutable {
          int remote = first;
          if (remote < 0) {  // a later connection: a connection and a handshake of its own
            const Deadline deadline = Clock::now() + config.timeout;
            try {
              remote = connect(deadline);
              if (!connections.adopt(c, remote)) return;  // registered first, so stop() wakes the handshake
              keys = handshake(remote, deadline);
            } catch (const std::exception& e) {
              log(std::string("closed a local connection: ") + e.what());
              return;
            }
          } else if (!connections.adopt(c, remote)) {
            return;
          }
          log("spliced a local connection to " + config.gate_address + sealing_note(keys, config.handshake));
          log("closed a connection to " + config.gate_address + ": " + splice(c.fds[0], remote, keys));
        });
    if (!started) {
      if (first >= 0) ::close(first);
      return;
    }
  }
}

JoinRelay::JoinRelay(JoinRelayConfig config) : state_(std::make_shared<State>()) {
  if (config.timeout.count() <= 0)
    throw std::invalid_argument("join relay to " + config.gate_address + ": timeout must be positive");
  State& s = *state_;
  s.config = std::move(config);
  s.name = "join relay to " + s.config.gate_address;
  const Deadline deadline = Clock::now() + s.config.timeout;
  s.first_fd = s.connect(deadline);
  try {
    s.first_keys = s.handshake(s.first_fd, deadline);
  } catch (...) {
    ::close(std::exchange(s.first_fd, -1));
    throw;
  }
  s.local_host = socket_host(s.first_fd, false);
  try {
    s.listen_fd = listen_on("127.0.0.1:0", &s.port);
  } catch (...) {
    ::close(std::exchange(s.first_fd, -1));
    throw;
  }
  s.acceptor = std::thread([&s] { s.accept_loop(); });
}

JoinRelay::~JoinRelay() { stop(); }

std::uint16_t JoinRelay::local_port() const { return state_->port; }
std::string JoinRelay::local_host() const { return state_->local_host; }
std::string JoinRelay::gate_identity() const { return state_->gate_identity; }

void JoinRelay::stop() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.stop_mutex);
  if (s.stopped) return;
  s.stopped = true;
  s.wake.wake();
  if (s.acceptor.joinable()) s.acceptor.join();
  ::close(std::exchange(s.listen_fd, -1));
  if (s.first_fd >= 0) ::close(std::exchange(s.first_fd, -1));
  s.connections.stop();
}

}  // namespace troupe::net
