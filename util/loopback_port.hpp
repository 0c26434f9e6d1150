// A loopback port for a server that a launcher is about to start: one that
// was free a moment ago. Shared by the tests that start real processes on
// real sockets (tests/support/ports.hpp) and the examples that launch
// clusters (examples/launch.hpp). Header-only, nothing of troupe's API.
//
// Chosen below the kernel's ephemeral range (ip_local_port_range), as
// tests/faults/node_faults.sh does: every connection the tests make (rings,
// relays, pushes, CAF) and every bind to port 0 takes a port from that
// range, so a port picked there could be taken by one of them between the
// pick and the server's bind (seen once in a chaos run beside other tests:
// "port ... is already in use"). Below it, only another test's pick can
// collide, and the pick checks with a bind that the port is free now.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

namespace troupe::util {

namespace ports_detail {

// Binds 127.0.0.1:port (0: any) without SO_REUSEADDR and returns the port
// bound, or 0 when it could not (*error: the errno of the call that failed).
inline int bind_loopback(int port, int* error = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    if (error) *error = errno;
    return 0;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof addr;
  int bound = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    bound = ntohs(addr.sin_port);
  else if (error)
    *error = errno;
  ::close(fd);
  return bound;
}

// The first port of the kernel's ephemeral range (32768 when unreadable).
inline int ephemeral_low() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return in >> low && low > 0 ? low : 32768;
}

}  // namespace ports_detail

// Throws std::runtime_error when not even the kernel's choice binds.
inline int free_loopback_port() {
  constexpr int kLowest = 10000;
  const int below = ports_detail::ephemeral_low();
  if (below > kLowest + 1000) {
    static thread_local std::mt19937 pick(
        static_cast<unsigned>(std::random_device{}() ^ static_cast<unsigned>(::getpid()) ^
                              static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())));
    std::uniform_int_distribution<int> in_range(kLowest, below - 1);
    for (int attempt = 0; attempt < 100; ++attempt) {
      const int port = in_range(pick);
      if (ports_detail::bind_loopback(port) == port) return port;
    }
  }
  // The kernel's choice, from its ephemeral range.
  int error = 0;
  if (const int port = ports_detail::bind_loopback(0, &error)) return port;
  // Loudly: a 0 handed on would fail later as a server on a port nobody
  // expected, or a "missing port" far from the cause.
  throw std::runtime_error(std::string("no free loopback port: a socket on 127.0.0.1 could not be bound (") +
                           std::strerror(error) + ")");
}

}  // namespace troupe::util
