// A loopback port for a test's server (util/loopback_port.hpp: one that was
// free a moment ago, below the kernel's ephemeral range).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/loopback_port.hpp"

namespace troupe::testing {
using util::free_loopback_port;

// A port that something holds: a socket listening on 127.0.0.1 (a port of
// the kernel's choice) for as long as the object lives. For tests of what
// a server does when its port is taken. `port` is 0 when it could not.
struct HeldPort {
  int fd = -1;
  int port = 0;
  HeldPort() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(fd, 1) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port = ntohs(addr.sin_port);
  }
  ~HeldPort() {
    if (fd >= 0) ::close(fd);
  }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
};
}  // namespace troupe::testing
