// Inside the tcp backend (net/tcp/): what the ring (tcp.cpp) and its
// connection set-up (ring_setup.cpp) share: one ring connection with its
// sealer and opener, the fixed-size messages on it, and two formatters.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>

#include "net/crypto/aead.hpp"
#include "net/tcp/wire.hpp"
#include "net/transport/sealed.hpp"

namespace troupe::net::ring {

inline std::string format_timeout(std::chrono::milliseconds timeout) {
  const auto ms = timeout.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

inline std::string hex(std::uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// One ring connection: its socket and, when the handshake gave keys, the
// sealer and opener of its records (sealed.hpp). Each direction is used by
// one thread at a time: frames by the sender or receiver thread, the small
// messages of the handshake and of send/recv's acknowledgement by the
// calling thread, never at once with frames the same way.
struct Link {
  int fd = -1;
  std::unique_ptr<wire::RecordSealer> sealer;  // null: plaintext
  std::unique_ptr<wire::RecordOpener> opener;
  bool sealed() const { return sealer != nullptr; }
};

inline Link make_link(int fd, const LinkKeys& keys) {
  Link link;
  link.fd = fd;
  if (keys.protects()) {
    link.sealer = std::make_unique<wire::RecordSealer>(keys.send);
    link.opener = std::make_unique<wire::RecordOpener>(keys.receive);
  }
  return link;
}

// A message of a fixed size (the Ack): one record when sealed. (The Hello,
// whose size its length prefix gives, has wire::write_hello and read_hello.)
inline void send_message(Link& link, const void* data, std::size_t bytes, Deadline deadline) {
  if (link.sealed())
    link.sealer->write(link.fd, data, bytes, deadline);
  else
    wire::write_all(link.fd, data, bytes, nullptr, 0, deadline);
}
inline void receive_message(Link& link, void* data, std::size_t bytes, Deadline deadline) {
  if (link.sealed())
    link.opener->read_exact(link.fd, data, bytes, deadline);
  else
    wire::read_all(link.fd, data, bytes, deadline);
}

}  // namespace troupe::net::ring
