// The ring's connection set-up (ring_setup.hpp): rank r connects to r+1
// and accepts from r-1 at once, each connection authenticated by the hook,
// then greeted with a Hello both ways (sealed when the hook gave keys).
#include "net/tcp/ring_setup.hpp"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <future>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace troupe::net {

namespace {

using namespace troupe::net::ring;

void log_drop(const TcpGroupConfig& c, const std::string& from, const std::string& why) {
  std::cerr << "troupe tcp: rank " << c.rank << " of " << c.addresses.size() << " dropped a connection from " << from
            << ": " << why << "\n";
}

// What is wrong with a peer's Hello, or "" when it is the one expected.
std::string check_hello(const wire::Hello& h, const TcpGroupConfig& c, int expected_rank) {
  if (h.purpose != wire::Purpose::ring)
    return "wrong purpose '" + wire::purpose_name(h.purpose) + "' (expected 'ring'): not a troupe data-plane peer";
  if (h.version != wire::kProtocolVersion)
    return "protocol version " + std::to_string(h.version) + ", this rank speaks " +
           std::to_string(wire::kProtocolVersion);
  if (h.job_id != c.job_id) return "wrong job id " + hex(h.job_id) + " (expected " + hex(c.job_id) + ")";
  if (h.world != c.addresses.size())
    return "world size " + std::to_string(h.world) + " (expected " + std::to_string(c.addresses.size()) + ")";
  if (static_cast<int>(h.rank) != expected_rank)
    return "sender rank " + std::to_string(h.rank) + " (expected rank " + std::to_string(expected_rank) + ")";
  return {};
}

wire::Hello my_hello(const TcpGroupConfig& c) {
  wire::Hello h;
  h.purpose = wire::Purpose::ring;
  h.version = wire::kProtocolVersion;
  h.job_id = c.job_id;
  h.rank = static_cast<std::uint32_t>(c.rank);
  h.world = static_cast<std::uint32_t>(c.addresses.size());
  return h;
}

// Throws CollectiveError(aborted) when the group's `abandon` says why.
void give_up_if_abandoned(const TcpGroupConfig& c) {
  if (!c.abandon) return;
  const std::string why = c.abandon();
  if (!why.empty())
    throw CollectiveError(CollectiveErrorKind::aborted, "tcp group rank " + std::to_string(c.rank) + " of " +
                                                            std::to_string(c.addresses.size()) +
                                                            ": gave up connecting: " + why);
}

// With `abandon`: waits until the peer on `fd` has sent something (or
// closed), asking `abandon` every 100 ms, and returns at `deadline` at the
// latest (the read that follows then times out and says so). Without it:
// returns at once.
void await_peer(const TcpGroupConfig& c, int fd, Deadline deadline) {
  if (!c.abandon) return;
  for (;;) {
    give_up_if_abandoned(c);
    const auto now = Clock::now();
    if (now >= deadline) return;
    const auto slice = std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(100));
    pollfd p{fd, POLLIN, 0};
    const int n =
        ::poll(&p, 1, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(slice).count()) + 1);
    if (n > 0 || (n < 0 && errno != EINTR)) return;  // readable, closed or failed: the read says which
  }
}

// Connects to rank r+1 until `deadline`; returns the link or throws
// CollectiveError(timeout) with the last reason, or CollectiveError(aborted)
// as soon as `abandon` answers.
Link connect_next(const TcpGroupConfig& c, Deadline deadline) {
  const int world = static_cast<int>(c.addresses.size());
  const int next = (c.rank + 1) % world;
  const std::string& address = c.addresses[static_cast<std::size_t>(next)];
  std::string last = "nothing tried";
  while (Clock::now() < deadline) {
    give_up_if_abandoned(c);
    int fd = -1;
    try {
      // With `abandon`, one TCP connect lasts at most a second (a refused
      // one returns at once and is retried; a second is far above any
      // round trip a cluster has), so that `abandon` is asked between
      // attempts even when SYNs to a dead host go unanswered; and while
      // the peer has said nothing yet (a stopped process's kernel takes the
      // connection, and nothing answers), it is asked every 100 ms. A slow
      // peer is never given up on: a connection this rank dropped could be
      // the one the peer takes.
      fd =
          wire::connect_tcp(address, c.abandon ? std::min(deadline, Clock::now() + std::chrono::seconds(1)) : deadline);
      if (c.authenticate) await_peer(c, fd, deadline);  // the acceptor speaks first
      Link link = make_link(fd, c.authenticate ? c.authenticate(fd, false, deadline) : LinkKeys{});
      wire::write_hello(link.fd, link.sealer.get(), my_hello(c), deadline);
      await_peer(c, link.fd, deadline);
      const std::string wrong = check_hello(wire::read_hello(link.fd, link.opener.get(), deadline), c, next);
      if (wrong.empty()) return link;
      last = "its answer has " + wrong;
      std::cerr << "troupe tcp: rank " << c.rank << " dropped its connection to rank " << next << " (" << address
                << "): " << last << "\n";
    } catch (const std::exception& e) {
      last = e.what();
    }
    if (fd >= 0) ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw CollectiveError(CollectiveErrorKind::timeout, "tcp group rank " + std::to_string(c.rank) + " of " +
                                                          std::to_string(world) + ": timed out after " +
                                                          format_timeout(c.connect_timeout) + " connecting to rank " +
                                                          std::to_string(next) + " (" + address + "): " + last);
}

// Accepts connections until rank r-1's passes the handshake. Connections
// still handshaking are polled together, each with its own deadline (the
// group's timeout), so a silent or slow one never holds up the right peer.
Link accept_prev(const TcpGroupConfig& c, int listen_fd, Deadline deadline) {
  const int world = static_cast<int>(c.addresses.size());
  const int prev = (c.rank + world - 1) % world;
  // Both the Hello's length and a sealed record's come first, in 4 bytes.
  static_assert(wire::kRecordPrefixBytes == wire::kLengthPrefixBytes);
  struct Pending {
    int fd;
    std::string from;
    Deadline until;
    Link link;  // sealed: the Hello (its length prefix and message) comes as one record
    unsigned char hello[wire::kRecordOverhead + wire::kLengthPrefixBytes + wire::kMaxHelloBytes];
    std::size_t got = 0;
    // The 4-byte prefix until it is in, then the whole Hello (or record);
    // never past it, so no byte of what follows is taken.
    std::size_t expected = wire::kLengthPrefixBytes;
  };
  // The bytes of a whole Hello (sealed: of its record) from its prefix;
  // throws when the prefix announces more than a Hello may have.
  auto whole_hello = [](const Pending& p) -> std::size_t {
    if (!p.link.sealed()) return wire::kLengthPrefixBytes + wire::hello_length(p.hello);
    const std::uint64_t record = wire::get_le(p.hello, wire::kRecordPrefixBytes);
    if (record > wire::kLengthPrefixBytes + wire::kMaxHelloBytes)
      throw std::runtime_error("a Hello record of " + std::to_string(record) + " bytes (at most " +
                               std::to_string(wire::kLengthPrefixBytes + wire::kMaxHelloBytes) + ")");
    return wire::kRecordOverhead + static_cast<std::size_t>(record);
  };
  std::vector<Pending> pending;
  auto drop = [&](std::size_t i, const std::string& why) {
    log_drop(c, pending[i].from, why);
    ::close(pending[i].fd);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (;;) {
    const auto now = Clock::now();
    for (std::size_t i = pending.size(); i-- > 0;)
      if (pending[i].until <= now)
        drop(i, pending[i].got
                    ? "an incomplete handshake (" + std::to_string(pending[i].got) + " of " +
                          std::to_string(pending[i].expected) + " bytes) in " + format_timeout(c.options.timeout)
                    : "sent nothing within " + format_timeout(c.options.timeout));
    if (now >= deadline) break;
    try {
      give_up_if_abandoned(c);
    } catch (...) {
      for (auto& p : pending) ::close(p.fd);
      throw;
    }
    Deadline wake = c.abandon ? std::min(deadline, now + std::chrono::milliseconds(100)) : deadline;
    for (const auto& p : pending) wake = std::min(wake, p.until);
    std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
    for (const auto& p : pending) fds.push_back({p.fd, POLLIN, 0});
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1;
    if (::poll(fds.data(), fds.size(), static_cast<int>(ms)) < 0 && errno != EINTR)
      throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    for (std::size_t i = pending.size(); i-- > 0;) {
      if (!fds[i + 1].revents) continue;
      Pending& p = pending[i];
      const ssize_t n = ::recv(p.fd, p.hello + p.got, p.expected - p.got, 0);
      if (n == 0) {
        drop(i, "closed before its handshake was complete");
        continue;
      }
      if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) drop(i, std::strerror(errno));
        continue;
      }
      p.got += static_cast<std::size_t>(n);
      if (p.got == wire::kLengthPrefixBytes) {
        try {
          p.expected = whole_hello(p);
        } catch (const std::exception& e) {
          drop(i, std::string(e.what()) + ": not a troupe data-plane peer");
          continue;
        }
      }
      if (p.got < p.expected) continue;
      wire::Hello hello;
      try {
        if (p.link.sealed()) {
          unsigned char opened[wire::kLengthPrefixBytes + wire::kMaxHelloBytes];
          const auto o = p.link.opener->open(reinterpret_cast<const char*>(p.hello), p.got,
                                             reinterpret_cast<char*>(opened), sizeof opened);
          hello = wire::decode_framed_hello(opened, o.bytes);
        } else {
          hello = wire::decode_framed_hello(p.hello, p.got);
        }
      } catch (const std::exception& e) {
        drop(i, e.what());
        continue;
      }
      const std::string wrong = check_hello(hello, c, prev);
      if (!wrong.empty()) {
        drop(i, wrong);
        continue;
      }
      try {
        wire::write_hello(p.link.fd, p.link.sealer.get(), my_hello(c), deadline);
      } catch (const std::exception& e) {
        drop(i, std::string("could not answer the handshake: ") + e.what());
        continue;
      }
      Link link = std::move(p.link);
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      for (auto& other : pending) {
        log_drop(c, other.from, "rank " + std::to_string(prev) + " has connected");
        ::close(other.fd);
      }
      return link;
    }
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      wire::prepare_socket(fd);
      const std::string from = wire::peer_address(fd);
      LinkKeys keys;
      if (c.authenticate) {
        try {
          keys = c.authenticate(fd, true, std::min(deadline, Clock::now() + c.options.timeout));
        } catch (const std::exception& e) {
          log_drop(c, from, std::string("authentication failed: ") + e.what());
          ::close(fd);
          continue;
        }
      }
      Pending p;
      p.fd = fd;
      p.from = from;
      p.until = std::min(deadline, Clock::now() + c.options.timeout);
      p.link = make_link(fd, keys);
      pending.push_back(std::move(p));
    }
  }
  for (auto& p : pending) ::close(p.fd);
  throw CollectiveError(CollectiveErrorKind::timeout,
                        "tcp group rank " + std::to_string(c.rank) + " of " + std::to_string(world) +
                            ": timed out after " + format_timeout(c.connect_timeout) + " waiting for rank " +
                            std::to_string(prev) + " (" + c.addresses[static_cast<std::size_t>(prev)] + ") to connect");
}

}  // namespace

RingLinks connect_ring(const TcpGroupConfig& config, int listen_fd) {
  const Deadline deadline = Clock::now() + config.connect_timeout;
  // Connect and accept at once: both sides' handshakes (and an
  // authentication hook's round trips) need the peer to be accepting.
  Link send_link;
  std::exception_ptr connect_error;
  std::promise<void> connected;
  std::future<void> connector_done = connected.get_future();
  std::thread connector([&] {
    try {
      send_link = connect_next(config, deadline);
    } catch (...) {
      connect_error = std::current_exception();
    }
    connected.set_value();
  });
  Link recv_link;
  std::exception_ptr accept_error;
  try {
    recv_link = accept_prev(config, listen_fd, deadline);
  } catch (...) {
    accept_error = std::current_exception();
  }
  // `abandon` goes on being asked on this thread while the connector
  // works: it may learn the answer only here (a worker reads its mailbox
  // on its own thread), and the connector sees it once it is known.
  while (connector_done.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (!config.abandon) continue;
    try {
      (void)config.abandon();
    } catch (...) {  // only asked here for the connector's sake; it asks again itself
    }
  }
  connector.join();
  ::close(listen_fd);
  if (accept_error || connect_error) {
    if (send_link.fd >= 0) ::close(send_link.fd);
    if (recv_link.fd >= 0) ::close(recv_link.fd);
    std::rethrow_exception(accept_error ? accept_error : connect_error);
  }
  return {std::move(send_link), std::move(recv_link)};
}

}  // namespace troupe::net
