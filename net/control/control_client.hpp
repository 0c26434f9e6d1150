// ControlClient: one HTTP request to a job's control endpoint, as `troupe ctl`
// sends it. Every request has a deadline covering connect, send and answer,
// on the sockets every troupe link shares (net/transport/socket.hpp).
#pragma once

#include <chrono>
#include <string>

#include "net/control/address.hpp"

namespace troupe::net {

struct ControlResponse {
  int status = 0;    // HTTP status
  std::string body;  // JSON from the server
};

class ControlClient {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{2000};

  // Parses "HOST:PORT" (std::invalid_argument when malformed); connects only
  // in request().
  explicit ControlClient(const std::string& address);

  // Sends METHOD PATH with `body` (text/plain) and returns the answer, of any
  // HTTP status. Throws ControlError when there is no answer:
  //   "nothing is listening at HOST:PORT (is the job running with --control HOST:PORT?)"
  //   "no answer from HOST:PORT within 2 s"
  //   "HOST:PORT is not a troupe control endpoint: it answered \"...\", not HTTP ..."
  // or another network error naming the address; std::invalid_argument for a
  // host that does not resolve.
  ControlResponse request(const std::string& method, const std::string& path, const std::string& body = "",
                          std::chrono::milliseconds timeout = kDefaultTimeout) const;

  const HostPort& address() const { return address_; }

  // Signs every later request with `key` (Secret::derive(kControlKeyLabel),
  // net/control/control_auth.hpp); empty: unsigned.
  void sign_with(std::string key) { auth_key_ = std::move(key); }

 private:
  HostPort address_;
  std::string auth_key_;
};

}  // namespace troupe::net
