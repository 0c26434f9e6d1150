// ControlServer: the HTTP control endpoint of a running troupe job.
//
//   GET  /status       -> the job's status object (JSON built by the job)
//   POST /mode         body "sync" | "async" | "ssp:N" -> {"ok":..,"message":..}
//   POST /checkpoint   -> {"ok":..,"message":..}
//   POST /stop         -> {"ok":..,"message":..}
//   POST /drain        body NODE (index or name) -> {"ok":..,"message":..}
//                      a cluster node leaves at the next step boundary
//   GET  /metrics      -> the job's metrics in the Prometheus text format 0.0.4
//                      (net/control/prometheus.hpp), as the job wrote them
//
// Every response but /metrics' is JSON (Content-Type application/json), and
// every response closes the connection. Errors: malformed HTTP 400, unknown path 404 (listing the
// endpoints), wrong method 405, header over 8 KiB 431, body over 64 KiB 413
// (refused from its Content-Length, never allocated), a handler that throws
// 500 with its message, a handler the job did not supply 501. A client that
// sends nothing, or half a request, is dropped after the read timeout (5 s).
//
// Threads: one thread runs the io_context (accepts, reads, writes); the
// handlers run one at a time on a second thread, so a handler that blocks
// for a few seconds (talking to actors) delays other handlers but never
// accepts, reads or timeouts.
//
// Security: with ControlServerOptions::auth_key (derived from the cluster
// secret) every request must carry a credential (net/control/control_auth.hpp):
// one without, with a wrong MAC, older than the window or replayed is
// answered 401 before it is routed, and nothing happens. Without a key the
// endpoint binds loopback addresses only (std::invalid_argument otherwise).
// Requests and answers travel in the clear either way: the credential proves
// who asks and that the request is unaltered, it hides nothing.
// GET /metrics alone also takes `Authorization: Bearer TOKEN` with
// ControlServerOptions::metrics_token, because a Prometheus server cannot
// sign requests but can send a token from a file. The token opens nothing
// else, and is compared in constant time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "net/control/address.hpp"

namespace troupe::net {

// What a POST handler answers: an HTTP status (200 on success, 400 for a bad
// request such as an unknown mode, 409/503 when the job cannot do it now) and
// a message for the user. Sent as {"ok": status is 2xx, "message": message}.
struct Reply {
  int status = 200;
  std::string message;
};

// The job's side. Each is optional; a missing one answers 501. They run on the
// server's handler thread, one at a time, and may throw (answered with 500).
// They must not call ControlServer::stop() (std::logic_error if they do).
struct Handlers {
  std::function<std::string()> status;                  // GET /status: a JSON object, sent as is
  std::function<Reply(const std::string& body)> mode;   // POST /mode: body "sync", "async", "ssp:3"
  std::function<Reply()> checkpoint;                    // POST /checkpoint
  std::function<Reply()> stop;                          // POST /stop
  std::function<Reply(const std::string& body)> drain;  // POST /drain: body "2" or a node's name
  std::function<std::string()> metrics;                 // GET /metrics: Prometheus text, sent as is
};

// How long the client waits for the answer, in whole milliseconds: troupe
// ctl sends a little less than what its --timeout leaves. A handler that
// would answer only when something takes effect (a switch, a checkpoint,
// a stop: the next step boundary) answers before then that the request is
// pending, so that the client never gives up on a request that then
// happens. Not part of the signature: it only bounds how long the server
// waits.
inline constexpr const char* kWaitHeader = "Troupe-Wait";

// Inside a handler: the request's Troupe-Wait, if it sent one (a malformed
// one is answered 400 before any handler runs). Elsewhere: none.
std::optional<std::chrono::milliseconds> request_wait();

struct ControlServerOptions {
  // A client that has not sent a whole request this long after connecting
  // (or has not read the response this long after it was sent) is dropped.
  std::chrono::milliseconds io_timeout{5000};
  // HKDF(secret, kControlKeyLabel) (Secret::derive): every request must be
  // signed with it. Empty: no credential, and loopback addresses only.
  std::string auth_key;
  // How far a credential's timestamp may be from this clock, and how long a
  // used nonce is remembered.
  std::chrono::seconds auth_window{60};
  // With auth_key: a bearer token that GET /metrics accepts instead of a
  // signed request (--metrics-token-file; load_metrics_token). Empty: none,
  // /metrics must be signed like every other request.
  std::string metrics_token;
};

class ControlServer {
 public:
  // Resolves and binds `address` ("HOST:PORT"; port 0 picks a free port) and
  // listens; serving starts with start(). Throws std::invalid_argument for a
  // malformed address, an unknown host, a non-loopback address without
  // options.auth_key, or a metrics_token without one, ControlError naming the address and
  // the OS error when it cannot listen there (in use, not a local address).
  ControlServer(const std::string& address, Handlers handlers, ControlServerOptions options = {});
  ~ControlServer();  // stop()
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Starts the io thread and the handler thread. Once only.
  void start();
  // Closes the listener and every connection and joins both threads. Returns
  // within milliseconds unless a handler is running, which it lets finish
  // (handlers keep their own timeouts of a few seconds). Idempotent.
  void stop();

  std::uint16_t port() const;   // the bound port (the one picked when asked for 0)
  std::string address() const;  // "HOST:PORT" with the bound port

  struct Impl;  // opaque; public only so the connection code in the .cpp can name it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::net
