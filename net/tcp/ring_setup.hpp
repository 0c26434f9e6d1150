// Inside the tcp backend: the ring's connections, set up apart from the
// ring algorithm that uses them (tcp.cpp). Rank r connects to rank r+1
// (retrying until the connect timeout while nothing listens) and accepts
// from rank r-1 (connections still handshaking are polled together, each
// with its own deadline, so a silent one never holds up the right peer);
// both run TcpGroupConfig::authenticate, then exchange Hellos (wire.hpp),
// sealed when the hook gave keys. Refused connections are logged to stderr
// with the reason.
#pragma once

#include "net/tcp/ring_link.hpp"
#include "net/tcp/tcp.hpp"

namespace troupe::net {

struct RingLinks {
  ring::Link send;  // to rank r+1
  ring::Link recv;  // from rank r-1
};

// Takes (and closes) `listen_fd`, bound to config.addresses[rank]. Throws
// CollectiveError(timeout) naming the peer that did not come by
// config.connect_timeout, with the last reason.
RingLinks connect_ring(const TcpGroupConfig& config, int listen_fd);

}  // namespace troupe::net
