// Request signatures for the HTTP control endpoint.
//
// With a cluster secret, every control request carries
//
//   Authorization: TROUPE-HMAC ts=UNIX_SECONDS,nonce=HEX32,mac=HEX64
//
// mac = HMAC-SHA256(k, "troupe-control-v1\n" METHOD "\n" TARGET "\n" ts "\n"
//                      nonce "\n" hex(SHA-256(body)))
// with k = HKDF-SHA256(secret, info "troupe-control-v1"): a key of its own,
// so a control MAC is never valid as a handshake proof or the other way
// round. The server refuses (401, and does nothing) a request without the
// header, with a MAC that does not match, with ts more than the window
// (60 s) away from its clock, or with a nonce it has seen within the window
// (a replay). All primitives are OpenSSL's (net/crypto).
//
//   std::string k = secret.derive(kControlKeyLabel);       // both sides
//   req.set("Authorization", sign_control_request(k, "POST", "/stop", "", now));
//   ControlAuth auth(k);                                   // server
//   std::string why = auth.check(header, "POST", "/stop", "", now);  // "" = ok
//
// GET /metrics also takes `Authorization: Bearer TOKEN` with the token of the
// job's --metrics-token-file (ControlServerOptions::metrics_token): a
// Prometheus server sends one from its `authorization: credentials_file:`
// but cannot sign. It opens /metrics only, and is its own file, not derived
// from the secret, so it can be changed without touching the cluster.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace troupe::net {

constexpr const char* kControlKeyLabel = "troupe-control-v1";
constexpr const char* kControlAuthScheme = "TROUPE-HMAC";

std::int64_t unix_seconds_now();

// The Authorization header value for one request (a fresh nonce each call).
std::string sign_control_request(const std::string& key, const std::string& method, const std::string& target,
                                 const std::string& body, std::int64_t unix_seconds);

// The bearer token in `path` (--metrics-token-file): the file's text less
// leading and trailing whitespace, as Prometheus reads a credentials_file.
// Throws util::ConfigFileError (a std::invalid_argument) naming the file when
// it cannot be read, is not a regular file or is over 4 KiB, or when the
// token is shorter than 16 characters or holds a character other than
// visible ASCII (it travels in an HTTP header).
std::string load_metrics_token(const std::string& path);

class ControlAuth {
 public:
  explicit ControlAuth(std::string key, std::chrono::seconds window = std::chrono::seconds(60));
  // Empty when `authorization` (the header value, empty when absent) is a
  // valid, fresh, unused credential for this request; otherwise why not
  // (never the key or the expected MAC). Thread-safe.
  std::string check(const std::string& authorization, const std::string& method, const std::string& target,
                    const std::string& body, std::int64_t now_unix_seconds);

 private:
  std::string key_;
  std::int64_t window_;
  std::mutex mutex_;
  std::multimap<std::int64_t, std::string> seen_by_time_;  // ts -> nonce, pruned past the window
  std::map<std::string, std::int64_t> seen_;               // nonce -> ts
};

}  // namespace troupe::net
