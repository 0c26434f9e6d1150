// "HOST:PORT" addresses of the control endpoint, parsed with errors that say
// what was wrong ("127.0.0.1:7070", "localhost:0", "[::1]:7070").
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace troupe::net {

// A network failure of the control endpoint or its client: an address in use,
// nothing listening, no answer in time. (A malformed address is
// std::invalid_argument instead.)
struct ControlError : std::runtime_error {
  using std::runtime_error::runtime_error;
  ControlError(const std::string& what, bool refused) : std::runtime_error(what), connection_refused(refused) {}
  // Nothing listens at the address (yet): a job that was just started binds
  // its endpoint a moment later, so a caller may try again.
  bool connection_refused = false;
};

struct HostPort {
  std::string host;  // a name or an IP address, without IPv6 brackets
  std::uint16_t port = 0;

  // "HOST:PORT", with brackets around an IPv6 host.
  std::string str() const;
};

// Splits "HOST:PORT". Throws std::invalid_argument naming the address when the
// host or the port is missing or the port is not a number in 0..65535.
HostPort parse_host_port(const std::string& address);

// A duration for messages: "2 s", "1.5 s", "250 ms".
std::string describe_seconds(double seconds);

}  // namespace troupe::net
