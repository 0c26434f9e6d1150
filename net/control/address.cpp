#include "net/control/address.hpp"

#include <cstdio>

namespace troupe::net {

namespace {
[[noreturn]] void bad_address(const std::string& address, const std::string& why) {
  throw std::invalid_argument("control address '" + address + "': " + why +
                              " (expected HOST:PORT, e.g. 127.0.0.1:7070)");
}
}  // namespace

std::string HostPort::str() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HostPort parse_host_port(const std::string& address) {
  HostPort hp;
  std::string port;
  if (!address.empty() && address.front() == '[') {  // [v6]:port
    const auto close = address.find(']');
    if (close == std::string::npos) bad_address(address, "unclosed '[' around an IPv6 host");
    hp.host = address.substr(1, close - 1);
    if (close + 1 >= address.size() || address[close + 1] != ':') bad_address(address, "missing port");
    port = address.substr(close + 2);
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) bad_address(address, "missing port");
    if (address.find(':') != colon) bad_address(address, "an IPv6 host needs brackets, as in [::1]:7070");
    hp.host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (hp.host.empty()) bad_address(address, "missing host (use 0.0.0.0 to listen on every interface)");
  if (port.empty()) bad_address(address, "missing port");
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    bad_address(address, "port '" + port + "' is not a number in 0..65535");
  const unsigned long value = std::stoul(port);
  if (value > 65535) bad_address(address, "port " + port + " is not in 0..65535");
  hp.port = static_cast<std::uint16_t>(value);
  return hp;
}

std::string describe_seconds(double seconds) {
  char buf[32];
  if (seconds >= 1 || seconds <= 0)
    std::snprintf(buf, sizeof buf, "%g s", seconds);
  else
    std::snprintf(buf, sizeof buf, "%g ms", seconds * 1000);
  return buf;
}

}  // namespace troupe::net
