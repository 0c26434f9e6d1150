// Sockets with deadlines (net/transport/socket.hpp).
#include "net/transport/socket.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

namespace troupe::net {
namespace wire {

namespace {

// Milliseconds for poll(): at least 1 while the deadline is ahead.
int poll_ms(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left + 1, INT_MAX));
}

// Waits for `events` on fd; throws IoError on timeout.
void wait_fd(int fd, short events, Deadline deadline) {
  for (;;) {
    const int ms = poll_ms(deadline);
    if (ms == 0) throw IoError("timed out", true);
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms);
    if (n > 0) return;  // ready, or an error/hangup the next call reports
    if (n < 0 && errno != EINTR) throw IoError(std::string("poll: ") + errno_text(errno), false);
  }
}

}  // namespace

std::string errno_text(int err) {
  if (err == ECONNRESET) return "connection reset by peer";
  if (err == EPIPE) return "connection closed (broken pipe)";
  return std::strerror(err);
}

namespace {
// Moves two buffers, iov[0] then iov[1], through sendmsg (`sending`) or
// recvmsg until both are done, waiting for the socket up to `deadline`.
void transfer_all(int fd, iovec iov[2], bool sending, Deadline deadline) {
  int first = 0;
  while (first < 2) {
    if (iov[first].iov_len == 0) {
      ++first;
      continue;
    }
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = static_cast<std::size_t>(2 - first);
    const ssize_t n = sending ? ::sendmsg(fd, &msg, MSG_NOSIGNAL) : ::recvmsg(fd, &msg, 0);
    if (n == 0 && !sending) throw IoError("end of stream (the peer closed the connection)", false);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_fd(fd, sending ? POLLOUT : POLLIN, deadline);
        continue;
      }
      throw IoError(errno_text(errno), false);
    }
    auto left = static_cast<std::size_t>(n);
    while (first < 2 && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      iov[first].iov_len = 0;
      ++first;
    }
    if (first < 2) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
}
}  // namespace

void write_all(int fd, const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes, Deadline deadline) {
  iovec iov[2] = {{const_cast<void*>(a), a_bytes}, {const_cast<void*>(b), b_bytes}};
  transfer_all(fd, iov, /*sending=*/true, deadline);
}

void read_all(int fd, void* a, std::size_t a_bytes, void* b, std::size_t b_bytes, Deadline deadline) {
  iovec iov[2] = {{a, a_bytes}, {b, b_bytes}};
  transfer_all(fd, iov, /*sending=*/false, deadline);
}

void read_all(int fd, void* data, std::size_t bytes, Deadline deadline) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) throw IoError("end of stream (the peer closed the connection)", false);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, deadline);
      continue;
    }
    throw IoError(errno_text(errno), false);
  }
}

void prepare_socket(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return ss.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + port : std::string(host) + ":" + port;
}

namespace {

// "host:port" or "[v6]:port" -> host without brackets, port.
void split_address(const std::string& address, std::string* host, std::string* port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("address '" + address + "' is not host:port");
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
}

// What one pass over a host's addresses came to: connect_tcp retries most
// failures, connect_tcp_once tells its caller which one it was.
struct Attempt {
  enum class Failure { none, unresolved, refused, timed_out, other };
  int fd = -1;
  Failure failure = Failure::none;
  std::string error;  // gai_strerror, or strerror of the last address tried
};

Attempt attempt_connect(const std::string& host, const std::string& port, Deadline deadline) {
  Attempt out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    out.failure = Attempt::Failure::unresolved;
    out.error = ::gai_strerror(rc);
    return out;
  }
  out.failure = Attempt::Failure::other;
  out.error = "nothing tried";
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    prepare_socket(fd);
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        try {
          wait_fd(fd, POLLOUT, deadline);
          socklen_t len = sizeof err;
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        } catch (const IoError&) {
          err = ETIMEDOUT;
        }
      }
    }
    if (err == 0) {
      out.fd = fd;
      out.failure = Attempt::Failure::none;
      out.error.clear();
      break;
    }
    ::close(fd);
    out.error = std::strerror(err);
    out.failure = err == ECONNREFUSED ? Attempt::Failure::refused : Attempt::Failure::other;
    // The deadline covers every address: none is left for the next one.
    if (err == ETIMEDOUT && Clock::now() >= deadline) {
      out.failure = Attempt::Failure::timed_out;
      break;
    }
  }
  ::freeaddrinfo(found);
  return out;
}

}  // namespace

int connect_tcp(const std::string& address, Deadline deadline) {
  std::string host, port;
  split_address(address, &host, &port);
  for (;;) {
    const Attempt a = attempt_connect(host, port, deadline);
    if (a.fd >= 0) return a.fd;
    const std::string last_error = a.failure == Attempt::Failure::unresolved ? "cannot resolve: " + a.error : a.error;
    if (Clock::now() + std::chrono::milliseconds(20) >= deadline)
      throw IoError("could not connect to " + address + ": " + last_error, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // not listening yet: retry
  }
}

int connect_tcp_once(const std::string& address, Deadline deadline) {
  std::string host, port;
  split_address(address, &host, &port);
  const Attempt a = attempt_connect(host, port, deadline);
  const std::string what = "could not connect to " + address + ": " + a.error;
  switch (a.failure) {
    case Attempt::Failure::none:
      return a.fd;
    case Attempt::Failure::unresolved:
      throw UnknownHost(host, a.error);
    case Attempt::Failure::refused:
      throw ConnectionRefused(what);
    case Attempt::Failure::timed_out:
      throw IoError(what, true);
    case Attempt::Failure::other:
      break;
  }
  throw IoError(what, false);
}

std::size_t read_some(int fd, void* data, std::size_t capacity, Deadline deadline) {
  for (;;) {
    const ssize_t n = ::recv(fd, data, capacity, 0);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, deadline);
      continue;
    }
    throw IoError(errno_text(errno), false);
  }
}

}  // namespace wire

int listen_tcp(const std::string& address, std::uint16_t* port) {
  std::string host, service;
  wire::split_address(address, &host, &service);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) throw std::runtime_error("cannot resolve " + address + ": " + ::gai_strerror(rc));
  std::string error = "no address";
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      if (port)
        *port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      ::freeaddrinfo(found);
      return fd;
    }
    const int err = errno;
    ::close(fd);
    error = err == EADDRINUSE ? "port " + service +
                                    " is already in use by another process (see which one holds it with "
                                    "`ss -ltnp 'sport = :" +
                                    service + "'`), or choose another port"
                              : std::strerror(err);
  }
  ::freeaddrinfo(found);
  throw std::runtime_error("cannot listen on " + address + ": " + error);
}

}  // namespace troupe::net
