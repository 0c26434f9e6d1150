// Sockets with deadlines: the transport every link between troupe nodes
// uses (the tcp ring, net/tcp/; the gate and the join relay,
// net/cluster/gate.hpp; the parameter server's push link,
// net/push/push_link.hpp), and `troupe ctl`'s control client
// (net/control/control_client.hpp), so that a ctl request is bounded the
// same way. Non-blocking sockets, every wait a poll() bounded by a
// deadline; errors say what happened in a reader's words
// ("connection reset by peer", "end of stream (the peer closed the
// connection)", "timed out") and whether the deadline passed.
//
// Example:
//   std::uint16_t port = 0;
//   const int listen_fd = net::listen_tcp("127.0.0.1:0", &port);
//   const int fd = wire::connect_tcp("127.0.0.1:" + std::to_string(port), Clock::now() + 5s);
//   wire::write_all(fd, header, 16, payload, bytes, Clock::now() + 5s);
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "net/deadline.hpp"

namespace troupe::net {
namespace wire {

// Little-endian integers in frame headers (wire frames here, push frames in
// net/push/push_link.cpp).
inline void put_u16(unsigned char* p, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void put_u32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void put_u64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::uint64_t get_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The u32 little-endian length before a Hello, a frame header or a gate
// message.
constexpr std::size_t kLengthPrefixBytes = 4;

// A failed socket operation. `timed_out` when the deadline passed first.
struct IoError : std::runtime_error {
  IoError(const std::string& what, bool timed_out_) : std::runtime_error(what), timed_out(timed_out_) {}
  bool timed_out;
};

// On a non-blocking socket, bounded by `deadline`; throw IoError ("end of
// stream", "connection reset by peer", "timed out").
void write_all(int fd, const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes, Deadline deadline);
void read_all(int fd, void* data, std::size_t bytes, Deadline deadline);
// Into two buffers, `a` then `b`, in as few system calls as the data's
// arrival allows (a sealed record's ciphertext, then its tag and the next
// record's length).
void read_all(int fd, void* a, std::size_t a_bytes, void* b, std::size_t b_bytes, Deadline deadline);

// Up to `capacity` (> 0) bytes, as soon as any have arrived: returns how many, 0
// at end of stream (a framing of its own, such as HTTP's, decides whether
// that end came too early). IoError on a socket error or when `deadline`
// passes first (timed_out).
std::size_t read_some(int fd, void* data, std::size_t capacity, Deadline deadline);

// A host name getaddrinfo could not resolve; `reason` is its gai_strerror.
struct UnknownHost : std::invalid_argument {
  UnknownHost(const std::string& host_, const std::string& reason_)
      : std::invalid_argument("unknown host '" + host_ + "' (" + reason_ + ")"), host(host_), reason(reason_) {}
  std::string host;
  std::string reason;
};

// The last address a connect tried refused it: nothing listens there.
struct ConnectionRefused : IoError {
  explicit ConnectionRefused(const std::string& what) : IoError(what, false) {}
};

// "host:port" -> a connected non-blocking socket, retrying while nothing
// listens (or the name does not resolve yet), until `deadline` (IoError).
// Sets TCP_NODELAY.
int connect_tcp(const std::string& address, Deadline deadline);
// One try of connect_tcp, for a caller that reports a refusal at once (or
// retries on its own terms): each address the host resolves to in turn,
// bounded by `deadline`. Throws UnknownHost, ConnectionRefused, IoError
// (timed_out when the deadline passed first), std::invalid_argument when
// `address` is not host:port.
int connect_tcp_once(const std::string& address, Deadline deadline);
// Makes fd non-blocking with TCP_NODELAY.
void prepare_socket(int fd);
// "127.0.0.1:45678" for the peer of a connected socket.
std::string peer_address(int fd);
// strerror, with the words a reader of a socket error wants for ECONNRESET
// and EPIPE.
std::string errno_text(int err);

}  // namespace wire

// A TCP socket bound to `address` ("127.0.0.1:0" picks a free port) and
// listening; returns the fd and stores the bound port. Throws
// std::runtime_error naming the address on failure (a port in use says how
// to find who holds it).
int listen_tcp(const std::string& address, std::uint16_t* port);

}  // namespace troupe::net
