// Parameter-server pushes on the data plane (push_link.hpp).
#include "net/push/push_link.hpp"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <utility>
#include <vector>

#include "net/cluster/auth.hpp"   // is_loopback
#include "net/tcp/ring_link.hpp"  // format_timeout, hex
#include "net/transport/hello.hpp"
#include "net/transport/sealed.hpp"
#include "net/transport/socket.hpp"
#include "util/crc32c.hpp"
#include "util/printable.hpp"
#include "util/spin.hpp"

namespace troupe::net::push {

namespace push_wire {

using net::wire::get_le;
using net::wire::put_u32;
using net::wire::put_u64;

void encode(const PushHeader& h, unsigned char out[kPushHeaderBytes]) {
  put_u32(out, h.magic);
  put_u32(out + 4, h.shard);
  put_u32(out + 8, h.view);
  put_u32(out + 12, static_cast<std::uint32_t>(h.rank));
  put_u64(out + 16, static_cast<std::uint64_t>(h.clock));
  put_u64(out + 24, static_cast<std::uint64_t>(h.floats));
  put_u32(out + 32, h.sequence);
  put_u32(out + 36, h.flags);
  put_u32(out + 40, h.crc32c);
}

PushHeader decode_push(const unsigned char in[kPushHeaderBytes]) {
  PushHeader h;
  h.magic = static_cast<std::uint32_t>(get_le(in, 4));
  h.shard = static_cast<std::uint32_t>(get_le(in + 4, 4));
  h.view = static_cast<std::uint32_t>(get_le(in + 8, 4));
  h.rank = static_cast<std::int32_t>(static_cast<std::uint32_t>(get_le(in + 12, 4)));
  h.clock = static_cast<std::int64_t>(get_le(in + 16, 8));
  h.floats = static_cast<std::int64_t>(get_le(in + 24, 8));
  h.sequence = static_cast<std::uint32_t>(get_le(in + 32, 4));
  h.flags = static_cast<std::uint32_t>(get_le(in + 36, 4));
  h.crc32c = static_cast<std::uint32_t>(get_le(in + 40, 4));
  return h;
}

void encode(const AnswerHeader& h, unsigned char out[kAnswerHeaderBytes]) {
  put_u32(out, h.magic);
  put_u32(out + 4, h.shard);
  put_u32(out + 8, h.sequence);
  put_u32(out + 12, h.status);
  put_u64(out + 16, static_cast<std::uint64_t>(h.floats));
  put_u64(out + 24, static_cast<std::uint64_t>(h.staleness));
  put_u32(out + 32, h.reason_bytes);
  put_u32(out + 36, h.crc32c);
}

AnswerHeader decode_answer(const unsigned char in[kAnswerHeaderBytes]) {
  AnswerHeader h;
  h.magic = static_cast<std::uint32_t>(get_le(in, 4));
  h.shard = static_cast<std::uint32_t>(get_le(in + 4, 4));
  h.sequence = static_cast<std::uint32_t>(get_le(in + 8, 4));
  h.status = static_cast<std::uint32_t>(get_le(in + 12, 4));
  h.floats = static_cast<std::int64_t>(get_le(in + 16, 8));
  h.staleness = static_cast<std::int64_t>(get_le(in + 24, 8));
  h.reason_bytes = static_cast<std::uint32_t>(get_le(in + 32, 4));
  h.crc32c = static_cast<std::uint32_t>(get_le(in + 36, 4));
  return h;
}

std::uint32_t push_crc(const unsigned char header[kPushHeaderBytes], const void* payload, std::size_t bytes) {
  const std::uint32_t crc = util::crc32c(header, kPushHeaderBytes - 4);
  return bytes ? util::crc32c(payload, bytes, crc) : crc;
}

std::uint32_t answer_crc(const unsigned char header[kAnswerHeaderBytes], const void* payload, std::size_t bytes) {
  const std::uint32_t crc = util::crc32c(header, kAnswerHeaderBytes - 4);
  return bytes ? util::crc32c(payload, bytes, crc) : crc;
}

}  // namespace push_wire

namespace {

using namespace push_wire;
using net::Clock;
using net::Deadline;
using net::ring::format_timeout;
using net::ring::hex;
namespace wire = net::wire;

// One end of a connection: its socket and, when sealed, the sealer of what
// it sends and the opener of what it receives (each direction used by one
// thread at a time).
struct Ends {
  int fd;
  wire::RecordSealer* sealer;  // null: plaintext
  wire::RecordOpener* opener;
};

// A header and its payload: in plaintext one sendmsg straight from both
// buffers; sealed, the header and the first payload record in one write,
// then a record per write, so the sealer never holds more than one record
// of the payload (no staging copy of the whole part).
void write_frame(const Ends& e, const void* header, std::size_t header_bytes, const void* payload, std::size_t bytes,
                 Deadline deadline) {
  if (!e.sealer) {
    wire::write_all(e.fd, header, header_bytes, payload, bytes, deadline);
    return;
  }
  e.sealer->append(header, header_bytes);
  const char* p = static_cast<const char*>(payload);
  std::size_t done = 0;
  do {
    const std::size_t n = std::min(bytes - done, kPushRecordBytes);
    if (n) e.sealer->append(p + done, n);
    e.sealer->flush(e.fd, deadline);
    done += n;
  } while (done < bytes);
}

// A header: one record when sealed.
void read_header(const Ends& e, void* out, std::size_t bytes, Deadline deadline) {
  if (e.opener)
    e.opener->read_exact(e.fd, out, bytes, deadline);
  else
    wire::read_all(e.fd, out, bytes, deadline);
}

// A payload straight into `out`: opened in place record by record when
// sealed (records of kPushRecordBytes, the last one shorter).
void read_payload(const Ends& e, void* out, std::size_t bytes, Deadline deadline) {
  if (!e.opener) {
    wire::read_all(e.fd, out, bytes, deadline);
    return;
  }
  char* p = static_cast<char*>(out);
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t n = std::min(bytes - done, kPushRecordBytes);
    e.opener->read_exact(e.fd, p + done, n, deadline);
    done += n;
  }
}

// A refused frame's payload, read (and, sealed, authenticated: the records
// are numbered) and thrown away, so the connection stays in step.
void skip_payload(const Ends& e, std::size_t bytes, Deadline deadline, std::vector<char>& scratch) {
  if (scratch.empty()) scratch.resize(kPushRecordBytes);
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t n = std::min(bytes - done, kPushRecordBytes);
    if (e.opener)
      e.opener->read_exact(e.fd, scratch.data(), n, deadline);
    else
      wire::read_all(e.fd, scratch.data(), n, deadline);
    done += n;
  }
}

wire::Hello push_hello(std::uint64_t job_id) {
  wire::Hello h;
  h.purpose = wire::Purpose::push_link;
  h.version = kVersion;
  h.job_id = job_id;
  return h;
}

// What is wrong with a peer's Hello, or "" when it is one of this job's.
std::string check_hello(const wire::Hello& h, std::uint64_t job_id, const char* peer) {
  if (h.purpose != wire::Purpose::push_link)
    return "wrong purpose '" + wire::purpose_name(h.purpose) + "' (expected 'push link'): not a troupe push-link " +
           peer;
  if (h.version != kVersion)
    return std::string("the ") + peer + " speaks push-link version " + std::to_string(h.version) + ", this end " +
           std::to_string(kVersion);
  if (h.job_id != job_id)
    return std::string("the ") + peer + " is in job " + hex(h.job_id) + ", this end in job " + hex(job_id);
  return {};
}

// Why a socket operation failed, for a message.
std::string io_text(const std::exception& e, const std::string& doing, std::chrono::milliseconds timeout) {
  if (const auto* io = dynamic_cast<const wire::IoError*>(&e); io && io->timed_out)
    return "timed out after " + format_timeout(timeout) + " " + doing;
  if (dynamic_cast<const wire::IoError*>(&e)) return "connection lost while " + doing + ": " + e.what();
  return doing + ": " + e.what();
}

// TCP keep-alive on a server connection: its wait for the next push has no
// deadline (an idle replica is legitimate), so a client whose host vanished
// without a FIN is noticed by the kernel after about 45 s of silence.
void keep_alive(int fd) {
  int one = 1, idle = 30, interval = 5, count = 3;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

// "127.0.0.1:5555" -> "127.0.0.1", "[::1]:5555" -> "::1".
std::string host_of(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

// Polls `fd` without sleeping until something is there to read (data, the
// end, an error) or `spin` has passed, so that the read after it finds the
// data without waking from poll(). A zero-timeout poll() looks at the
// socket without locking it (a peeking recv() would hold up the kernel's
// delivery of the very data it waits for).
void poll_for_data(int fd, std::chrono::microseconds spin) {
  util::spin_until(
      [fd] {
        pollfd p{fd, POLLIN, 0};
        return ::poll(&p, 1, 0) != 0;  // ready, or an error the read will name
      },
      spin);
}

}  // namespace

std::chrono::microseconds push_poll_from_env() {
  const char* text = std::getenv("TROUPE_PUSH_POLL_US");
  if (text == nullptr || *text == '\0') return {};
  char* end = nullptr;
  errno = 0;
  const long long us = std::strtoll(text, &end, 10);
  if (errno == 0 && end != text && *end == '\0' && us >= 0 && us <= 1000000) return std::chrono::microseconds(us);
  static std::once_flag warned;
  std::call_once(warned, [text] {
    std::fprintf(stderr,
                 "troupe: TROUPE_PUSH_POLL_US='%s' is not a number of microseconds from 0 to 1000000; ignored\n", text);
  });
  return {};
}

// ---------------------------------------------------------------------------
// PushClient

PushClient::PushClient(PushClientConfig config) : config_(std::move(config)) {
  const std::string where = "push link to " + config_.address + ": ";
  const Deadline deadline = Clock::now() + config_.connect_timeout;
  try {
    fd_ = config_.retry_refused ? wire::connect_tcp(config_.address, deadline)
                                : wire::connect_tcp_once(config_.address, deadline);
  } catch (const std::exception& e) {
    throw PushError(where + e.what());
  }
  try {
    net::LinkKeys keys;
    if (config_.authenticate) {
      try {
        keys = config_.authenticate(fd_, false, deadline);
      } catch (const std::exception& e) {
        throw std::runtime_error(std::string("authentication failed: ") + e.what());
      }
    }
    if (keys.protects()) {
      sealer_ = std::make_unique<wire::RecordSealer>(keys.send);
      opener_ = std::make_unique<wire::RecordOpener>(keys.receive);
    }
    wire::Hello hello;
    try {
      wire::write_hello(fd_, sealer_.get(), push_hello(config_.job_id), deadline);
      hello = wire::read_hello(fd_, opener_.get(), deadline);
    } catch (const std::exception& x) {
      throw std::runtime_error(io_text(x, "exchanging Hellos", config_.connect_timeout));
    }
    const std::string wrong = check_hello(hello, config_.job_id, "server");
    if (!wrong.empty()) throw std::runtime_error(wrong);
  } catch (const std::exception& e) {
    ::close(fd_);
    fd_ = -1;
    throw PushError(where + e.what());
  }
}

PushClient::~PushClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string PushClient::where(int shard) const {
  return "push to shard " + std::to_string(shard) + " at " + config_.address + ": ";
}

void PushClient::check_usable(int shard) const {
  if (aborted_) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    throw PushError(where(shard) + "aborted: " + abort_reason_);
  }
  if (!broken_.empty())
    throw PushError(where(shard) + "the connection is unusable after an earlier failure: " + broken_);
}

void PushClient::fail(int shard, const std::string& what) {
  if (aborted_) {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    broken_ = "aborted: " + abort_reason_;
  } else {
    broken_ = what;
  }
  throw PushError(where(shard) + broken_);
}

void PushClient::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_) return;
  abort_reason_ = why;
  aborted_ = true;
  // Wakes a poll() of send or receive at once (end of stream, broken pipe);
  // the socket stays open until the destructor, so the fd is never reused
  // under a call in progress.
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void PushClient::send(int shard, std::uint32_t view, int rank, std::int64_t clock, const float* part,
                      std::int64_t floats, bool reads_next) {
  check_usable(shard);
  if (shard < 0 || floats < 0 || (floats > 0 && part == nullptr))
    throw PushError(where(shard) + "invalid push (" + std::to_string(floats) + " floats" +
                    (part ? "" : " from a null buffer") + ")");
  // The server may be writing that push's answer on its reading thread,
  // blocked until this end reads: a further push could fill both socket
  // buffers and stall both ends.
  if (reading_)
    throw PushError(where(shard) + "a push sent before the answers to a push marked as the last before reading (" +
                    std::to_string(pending_.size()) + " unanswered)");
  PushHeader h;
  h.shard = static_cast<std::uint32_t>(shard);
  h.view = view;
  h.rank = rank;
  h.clock = clock;
  h.floats = floats;
  h.sequence = next_sequence_;
  h.flags = reads_next ? kReadsNext : 0;
  unsigned char header[kPushHeaderBytes];
  const std::size_t bytes = static_cast<std::size_t>(floats) * sizeof(float);
  encode(h, header);
  if (!sealer_) {
    h.crc32c = push_crc(header, part, bytes);
    encode(h, header);
  }
  const Deadline deadline = Clock::now() + config_.timeout;
  try {
    write_frame({fd_, sealer_.get(), opener_.get()}, header, sizeof header, part, bytes, deadline);
  } catch (const std::exception& e) {
    fail(shard, io_text(e, "sending the push", config_.timeout));
  }
  pending_.push_back({shard, next_sequence_++, deadline});
  reading_ = reads_next;
}

std::int64_t PushClient::receive(int shard, float* out, std::int64_t floats) {
  check_usable(shard);
  if (pending_.empty()) throw PushError(where(shard) + "receive without an unanswered push");
  const Pending expected = pending_.front();
  if (expected.shard != shard)
    throw PushError(where(shard) + "answers come in the order of the pushes: the oldest unanswered push is to shard " +
                    std::to_string(expected.shard));
  if (floats < 0 || (floats > 0 && out == nullptr))
    throw PushError(where(shard) + "invalid receive (" + std::to_string(floats) + " floats)");
  const Ends e{fd_, sealer_.get(), opener_.get()};
  const std::string waiting = "waiting for the answer";
  unsigned char header[kAnswerHeaderBytes];
  AnswerHeader h;
  if (config_.answer_poll.count() > 0) poll_for_data(fd_, config_.answer_poll);
  try {
    read_header(e, header, sizeof header, expected.deadline);
    h = decode_answer(header);
  } catch (const std::exception& x) {
    fail(shard, io_text(x, waiting, config_.timeout));
  }
  if (h.magic != kAnswerMagic) fail(shard, "not a push answer (magic " + hex(h.magic) + ")");
  if (h.sequence != expected.sequence || h.shard != static_cast<std::uint32_t>(shard))
    fail(shard, "an answer to push " + std::to_string(h.sequence) + " (shard " + std::to_string(h.shard) +
                    ") where push " + std::to_string(expected.sequence) + " was expected");
  if (h.status == static_cast<std::uint32_t>(AnswerStatus::refused)) {
    if (h.reason_bytes > kMaxReasonBytes)
      fail(shard, "a refusal of " + std::to_string(h.reason_bytes) + " bytes (at most " +
                      std::to_string(kMaxReasonBytes) + ")");
    if (h.floats != 0) fail(shard, "a refusal that claims " + std::to_string(h.floats) + " floats (it carries none)");
    std::string reason(h.reason_bytes, '\0');
    try {
      if (!reason.empty()) read_payload(e, reason.data(), reason.size(), expected.deadline);
    } catch (const std::exception& x) {
      fail(shard, io_text(x, waiting, config_.timeout));
    }
    if (!sealer_ && answer_crc(header, reason.data(), reason.size()) != h.crc32c)
      fail(shard, "the refusal's CRC-32C does not match (altered on the way)");
    pending_.pop_front();  // the stream is in step: the client stays usable
    if (pending_.empty()) reading_ = false;
    // The server's own words, but bytes from the network: no control
    // character of them reaches the replica's error or a log.
    throw PushError(where(shard) + "refused by the server: " + util::printable(reason, kMaxReasonBytes));
  }
  if (h.status != static_cast<std::uint32_t>(AnswerStatus::applied))
    fail(shard, "an answer of unknown status " + std::to_string(h.status));
  if (h.floats != floats)
    fail(shard, "the answer has " + std::to_string(h.floats) + " floats, the part " + std::to_string(floats));
  const std::size_t bytes = static_cast<std::size_t>(floats) * sizeof(float);
  try {
    read_payload(e, out, bytes, expected.deadline);
  } catch (const std::exception& x) {
    fail(shard, io_text(x, waiting, config_.timeout));
  }
  if (!sealer_ && answer_crc(header, out, bytes) != h.crc32c)
    fail(shard, "the answer's CRC-32C does not match (altered on the way)");
  pending_.pop_front();
  if (pending_.empty()) reading_ = false;
  return h.staleness < 0 ? -1 : h.staleness;
}

// ---------------------------------------------------------------------------
// PushServer

struct PushServer::Connection {
  int fd = -1;
  std::string from;
  std::thread thread;
  std::atomic<bool> done{false};
};

PushServer::PushServer(PushServerConfig config) : config_(std::move(config)) {
  if (config_.listen_fd < 0) throw std::invalid_argument("PushServer: no listen_fd");
  if (!config_.apply) throw std::invalid_argument("PushServer: no apply");
  for (const auto& [shard, floats] : config_.shards) {
    if (shard < 0 || floats < 0)
      throw std::invalid_argument("PushServer: shard " + std::to_string(shard) + " of " + std::to_string(floats) +
                                  " floats");
    largest_part_ = std::max(largest_part_, floats);
  }
  listen_fd_ = config_.listen_fd;
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
    port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error(std::string("PushServer: pipe: ") + std::strerror(errno));
  }
  acceptor_ = std::thread([this] { accept_loop(); });
}

PushServer::~PushServer() { stop(); }

void PushServer::log(const std::string& line) const {
  if (config_.log)
    config_.log(line);
  else
    std::cerr << line << "\n";
}

std::size_t PushServer::connections() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t open = 0;
  for (const auto& c : connections_) open += c->done ? 0 : 1;
  return open;
}

void PushServer::reap() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (!(*it)->done) {
      ++it;
      continue;
    }
    (*it)->thread.join();  // it has set `done` as its last act
    ::close((*it)->fd);
    it = connections_.erase(it);
  }
}

void PushServer::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    // Wakes at least every second to join the threads of closed connections.
    const int n = ::poll(fds, 2, 1000);
    if (stopping_) return;
    reap();
    if (n <= 0 || !(fds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    wire::prepare_socket(fd);
    keep_alive(fd);
    std::lock_guard<std::mutex> lock(mutex_);
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->from = wire::peer_address(fd);
    Connection& ref = *c;
    connections_.push_back(std::move(c));
    ref.thread = std::thread([this, &ref] { serve(ref); });
  }
}

void PushServer::stop() {
  std::lock_guard<std::mutex> stop_lock(stop_mutex_);
  if (stopped_) return;
  stopped_ = true;
  stopping_ = true;
  const char byte = 0;
  (void)!::write(wake_[1], &byte, 1);
  acceptor_.join();
  std::list<std::unique_ptr<Connection>> connections;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    connections.swap(connections_);
  }
  // Every read, write and poll of every connection wakes at once; a thread
  // inside `apply` finishes that call first.
  for (auto& c : connections) ::shutdown(c->fd, SHUT_RDWR);
  for (auto& c : connections) {
    c->thread.join();
    ::close(c->fd);
  }
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

// `done` is set only once every local of the connection's serving has been
// destroyed: whoever sees it (reap(), connections(), a test waiting for the
// server to be idle) sees a connection that holds nothing any more.
void PushServer::serve(Connection& c) {
  serve_until_closed(c);
  c.done = true;
}

void PushServer::serve_until_closed(Connection& c) {
  const std::string prefix = "troupe ps push server on port " + std::to_string(port_) + ": ";
  // Not logged once stop() has begun: it drops every connection on purpose.
  auto drop = [&](const std::string& why) {
    if (!stopping_) log(prefix + "dropped the connection from " + c.from + ": " + why);
  };
  std::unique_ptr<wire::RecordSealer> sealer;
  std::unique_ptr<wire::RecordOpener> opener;
  // Set-up: authentication, then the Hellos.
  try {
    if (!config_.authenticate && !net::is_loopback(host_of(c.from)))
      throw std::runtime_error("a peer not on loopback, and this server has no authentication");
    const Deadline deadline = Clock::now() + config_.handshake_timeout;
    net::LinkKeys keys;
    if (config_.authenticate) {
      try {
        keys = config_.authenticate(c.fd, true, deadline);
      } catch (const std::exception& e) {
        throw std::runtime_error(std::string("authentication failed: ") + e.what());
      }
    }
    if (keys.protects()) {
      sealer = std::make_unique<wire::RecordSealer>(keys.send);
      opener = std::make_unique<wire::RecordOpener>(keys.receive);
    }
    wire::Hello hello;
    try {
      hello = wire::read_hello(c.fd, opener.get(), deadline);
      // Answered whatever a readable Hello says, so that a client of
      // another job learns which job this server is in.
      wire::write_hello(c.fd, sealer.get(), push_hello(config_.job_id), deadline);
    } catch (const std::exception& x) {
      throw std::runtime_error(io_text(x, "exchanging Hellos", config_.handshake_timeout));
    }
    const std::string wrong = check_hello(hello, config_.job_id, "client");
    if (!wrong.empty()) throw std::runtime_error(wrong);
  } catch (const std::exception& e) {
    drop(e.what());
    ::shutdown(c.fd, SHUT_RDWR);
    return;
  }
  const Ends e{c.fd, sealer.get(), opener.get()};

  // The writer: answers in push order, on a thread of its own so that the
  // reader goes on reading a client that sends every push before it reads
  // (else both would block on full socket buffers).
  struct Answer {
    AnswerHeader header;
    Tensor fresh;        // applied
    std::string reason;  // refused
    bool close_after = false;
    // Applied: when its push was first seen, read whole, and applied
    // (service_times).
    Clock::time_point seen, read, ready;
  };
  // Writes one answer; false when the connection is lost (dropped, logged,
  // and shut down, which wakes the other thread).
  auto write_answer = [&](Answer& a) {
    try {
      unsigned char header[kAnswerHeaderBytes];
      const void* payload =
          a.header.floats ? static_cast<const void*>(a.fresh.f32()) : static_cast<const void*>(a.reason.data());
      const std::size_t bytes = a.header.floats ? a.fresh.bytes() : a.reason.size();
      encode(a.header, header);
      if (!sealer) {
        a.header.crc32c = answer_crc(header, payload, bytes);
        encode(a.header, header);
      }
      write_frame(e, header, sizeof header, payload, bytes, Clock::now() + config_.io_timeout);
    } catch (const std::exception& x) {
      drop(io_text(x, "writing an answer", config_.io_timeout));
      ::shutdown(c.fd, SHUT_RDWR);
      return false;
    }
    if (a.header.status == static_cast<std::uint32_t>(AnswerStatus::applied)) {
      const auto ms = [](Clock::duration d) { return std::chrono::duration<float, std::milli>(d).count(); };
      const std::array<float, 3> sample{ms(a.read - a.seen), ms(a.ready - a.read), ms(Clock::now() - a.ready)};
      std::lock_guard<std::mutex> lock(service_mutex_);
      if (service_.size() < kServiceSamples) {
        service_.push_back(sample);
      } else {
        service_[service_next_] = sample;
        service_next_ = (service_next_ + 1) % kServiceSamples;
      }
    }
    return true;
  };
  std::mutex m;
  std::condition_variable cv;
  std::deque<Answer> answers;  // under m
  bool writer_busy = false;    // under m: the writer is writing one it took
  bool reading_done = false;   // under m
  std::thread writer([&] {
    for (;;) {
      Answer a;
      {
        // Woken by each answer and by the reader's end (which stop() and
        // the peer's close bring about at once).
        std::unique_lock<std::mutex> lock(m);
        writer_busy = false;
        cv.wait(lock, [&] { return !answers.empty() || reading_done; });
        if (answers.empty()) return;
        a = std::move(answers.front());
        answers.pop_front();
        writer_busy = true;
      }
      if (!write_answer(a)) return;
      if (a.close_after) {
        ::shutdown(c.fd, SHUT_RDWR);
        return;
      }
    }
  });
  auto answer = [&](Answer a) {
    std::lock_guard<std::mutex> lock(m);
    answers.push_back(std::move(a));
    cv.notify_one();
  };
  // Whether the reader may write an answer itself: nothing queued before it
  // and the writer idle (the reader is the only one who queues, so neither
  // changes while it writes).
  auto writer_idle = [&] {
    std::lock_guard<std::mutex> lock(m);
    return answers.empty() && !writer_busy;
  };
  auto refuse = [&](const PushHeader& h, std::string reason, bool close_after) {
    if (reason.size() > kMaxReasonBytes) reason.resize(kMaxReasonBytes);
    Answer a;
    a.header.shard = h.shard;
    a.header.sequence = h.sequence;
    a.header.status = static_cast<std::uint32_t>(AnswerStatus::refused);
    a.header.reason_bytes = static_cast<std::uint32_t>(reason.size());
    a.reason = std::move(reason);
    a.close_after = close_after;
    answer(std::move(a));
  };

  // The reader: one push at a time, checked whole before `apply` sees it.
  std::vector<char> scratch;
  std::uint32_t expected_sequence = 0;
  for (;;) {
    // The next push may take as long as a step: no deadline here, but
    // stop() (shutdown) and the peer's close wake it; polled in slices so
    // that a stop is seen even without the wake-up.
    pollfd p{c.fd, POLLIN, 0};
    const int n = ::poll(&p, 1, 1000);
    if (stopping_) break;
    if (n < 0 && errno != EINTR) {
      drop(std::string("poll: ") + wire::errno_text(errno));
      break;
    }
    if (n <= 0) continue;
    char probe;
    const ssize_t peeked = ::recv(c.fd, &probe, 1, MSG_PEEK);
    if (peeked == 0) break;  // the client closed between pushes: its normal end
    if (peeked < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      drop(wire::errno_text(errno));
      break;
    }
    const Clock::time_point seen = Clock::now();
    const Deadline deadline = seen + config_.io_timeout;
    PushHeader h;
    unsigned char header[kPushHeaderBytes];
    try {
      read_header(e, header, sizeof header, deadline);
      h = decode_push(header);
    } catch (const std::exception& x) {
      drop(io_text(x, "reading a push", config_.io_timeout));
      break;
    }
    if (h.magic != kPushMagic) {
      drop("not a push frame (magic " + hex(h.magic) + ")");
      break;
    }
    if (h.flags & ~kKnownPushFlags) {
      drop("push " + std::to_string(h.sequence) + " has unknown flags " + hex(h.flags));
      break;
    }
    if (h.sequence != expected_sequence) {
      drop("push number " + std::to_string(h.sequence) + " where " + std::to_string(expected_sequence) +
           " was expected");
      break;
    }
    ++expected_sequence;
    const int shard = static_cast<int>(std::min<std::uint32_t>(h.shard, INT32_MAX));
    // Bounds first: nothing is allocated for a claim larger than any part.
    if (h.floats < 0 || h.floats > largest_part_) {
      const std::string why = "a push of " + std::to_string(h.floats) + " floats for shard " + std::to_string(shard) +
                              ", more than the largest part this server hosts (" + std::to_string(largest_part_) +
                              " floats)";
      drop(why);
      refuse(h, why, true);
      break;
    }
    const std::size_t bytes = static_cast<std::size_t>(h.floats) * sizeof(float);
    const auto hosted = config_.shards.find(shard);
    std::string refusal;
    if (hosted == config_.shards.end()) {
      refusal = "shard " + std::to_string(shard) + " is not hosted here (hosted:";
      for (const auto& [s, floats] : config_.shards) refusal += " " + std::to_string(s);
      refusal += ")";
    } else if (h.floats != hosted->second) {
      refusal = "a push of " + std::to_string(h.floats) + " floats for shard " + std::to_string(shard) +
                ", whose part has " + std::to_string(hosted->second);
    }
    if (!refusal.empty()) {
      try {
        skip_payload(e, bytes, deadline, scratch);
      } catch (const std::exception& x) {
        drop(io_text(x, "reading a refused push", config_.io_timeout));
        break;
      }
      refuse(h, refusal, false);
      continue;
    }
    GradientPush push;
    push.view = h.view;
    push.rank = h.rank;
    push.clock = h.clock;
    push.gradient = Tensor::empty({h.floats});
    try {
      read_payload(e, push.gradient.raw(), bytes, deadline);
    } catch (const std::exception& x) {
      drop(io_text(x, "reading a push", config_.io_timeout));
      break;
    }
    if (!sealer && push_crc(header, push.gradient.raw(), bytes) != h.crc32c) {
      const std::string why = "push " + std::to_string(h.sequence) + " for shard " + std::to_string(shard) +
                              ": its CRC-32C does not match (altered on the way); not applied";
      drop(why);
      refuse(h, why, true);
      break;
    }
    const Clock::time_point read = Clock::now();
    AppliedPush applied;
    try {
      applied = config_.apply(shard, std::move(push));
    } catch (const std::exception& x) {
      refuse(h, x.what(), false);
      continue;
    }
    const Clock::time_point ready = Clock::now();
    ++pushes_;
    Tensor& fresh = applied.fresh;
    if (!fresh.defined() || fresh.dtype() != kernels::DType::f32 || fresh.device().is_cuda() ||
        fresh.numel() != hosted->second) {
      refuse(h,
             "the server's shard " + std::to_string(shard) + " answered " + fresh.describe() + ", expected " +
                 std::to_string(hosted->second) + " floats on the host",
             false);
      continue;
    }
    Answer a;
    a.header.shard = h.shard;
    a.header.sequence = h.sequence;
    a.header.status = static_cast<std::uint32_t>(AnswerStatus::applied);
    a.header.floats = h.floats;
    a.header.staleness = applied.staleness < 0 ? -1 : applied.staleness;
    a.fresh = std::move(fresh);
    a.seen = seen;
    a.read = read;
    a.ready = ready;
    if ((h.flags & kReadsNext) && writer_idle()) {
      ++answered_by_reader_;  // before the write: the client may look as soon as it has the answer
      if (!write_answer(a)) break;
      continue;
    }
    answer(std::move(a));
  }
  {
    std::lock_guard<std::mutex> lock(m);
    reading_done = true;
    cv.notify_one();
  }
  writer.join();  // bounded: each answer's write has io_timeout, and stop() shuts the socket down
  ::shutdown(c.fd, SHUT_RDWR);
}

PushServer::ServiceTimes PushServer::service_times() const {
  std::vector<std::array<float, 3>> samples;
  {
    std::lock_guard<std::mutex> lock(service_mutex_);
    samples = service_;
  }
  ServiceTimes out;
  out.pushes = static_cast<std::int64_t>(samples.size());
  if (samples.empty()) return out;
  // The value at fraction q of the sorted values.
  auto at = [](std::vector<float> v, double q) {
    const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return static_cast<double>(v[k]);
  };
  std::vector<float> part(samples.size()), total(samples.size());
  double* medians[3] = {&out.read_ms, &out.apply_ms, &out.answer_ms};
  for (std::size_t j = 0; j < 3; ++j) {
    for (std::size_t i = 0; i < samples.size(); ++i) part[i] = samples[i][j];
    *medians[j] = at(part, 0.5);
  }
  for (std::size_t i = 0; i < samples.size(); ++i) total[i] = samples[i][0] + samples[i][1] + samples[i][2];
  out.total_ms = at(total, 0.5);
  out.total_p99_ms = at(total, 0.99);
  return out;
}

std::string PushServer::describe(const ServiceTimes& t) {
  if (t.pushes == 0) return {};
  char text[512];
  std::snprintf(text, sizeof text,
                "read %.3f ms, apply %.3f ms, answer %.3f ms; all %.3f ms, p99 %.3f ms (medians of %lld pushes)",
                t.read_ms, t.apply_ms, t.answer_ms, t.total_ms, t.total_p99_ms, static_cast<long long>(t.pushes));
  return text;
}

}  // namespace troupe::net::push
