// The HTTP control endpoint's request handling (net/control/
// control_server.hpp, control_auth.hpp): real ControlServers on loopback,
// fed one request per input on a fresh connection that the harness closes
// after sending (so a partial request ends at once). The first byte picks
// the server and the form of the input:
//   0  a server without a secret (everything is routed); the input is the
//      raw request bytes
//   1  a server with a secret and a metrics token; the raw request bytes
//   2  the same server, with a request the harness signs with the key: the
//      input gives the credential's timestamp (8 bytes, as an offset from
//      now or absolute) and "METHOD\nTARGET\nBODY"
//
// Properties: the server answers or closes (it never hangs once the client
// has sent everything: an exchange over 3 s is logged, over 60 s fails); an
// answer is well-formed HTTP/1.1 with a
// status from the documented set and a Content-Length that matches its
// body, and every body but /metrics' is a JSON object; without a signature
// nothing is routed on the server with a secret (401 or a parse error, or
// GET /metrics with the right bearer token); a signed request is routed
// when its timestamp is inside the window and refused with 401 outside it.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <set>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "net/control/control_auth.hpp"
#include "net/control/control_server.hpp"
#include "net/crypto/crypto.hpp"
#include "net/tcp/wire.hpp"

using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

constexpr const char* kMetricsToken = "fuzz-metrics-token-0123456789abcdef";
const std::string kKey(32, 'k');

Handlers handlers() {
  Handlers h;
  h.status = [] { return std::string(R"({"state":"running","step":7})"); };
  h.mode = [](const std::string& body) -> Reply {
    if (body == "sync" || body == "async") return {200, "mode " + body};
    if (body == "throw") throw std::runtime_error("the handler threw");
    return {400, "unknown mode '" + body + "'"};
  };
  h.checkpoint = [] { return Reply{409, "no checkpoint directory"}; };
  h.stop = [] { return Reply{200, "stopping"}; };
  // drain is left out: 501
  h.metrics = [] { return std::string("# TYPE troupe_step gauge\ntroupe_step 7\n"); };
  return h;
}

// The servers drop a client that has not sent a whole request after 2 s
// (kIoTimeout); the harness always closes its side at once, so an answer or
// a close comes at once, and waiting kPatience (a loaded machine can stall
// a thread for seconds: the long run at nice 19 under load 10 saw three
// waits past 15 s that no saved input reproduces) before calling it a hang
// is generous.
constexpr auto kIoTimeout = 2s;
constexpr auto kPatience = 60s;

ControlServerOptions options(bool with_key) {
  ControlServerOptions o;
  o.io_timeout = kIoTimeout;
  if (with_key) {
    o.auth_key = kKey;
    o.metrics_token = kMetricsToken;
  }
  return o;
}

struct Servers {
  ControlServer open{"127.0.0.1:0", handlers(), options(false)};
  ControlServer signed_{"127.0.0.1:0", handlers(), options(true)};
  Servers() {
    open.start();
    signed_.start();
  }
};

struct Answer {
  bool any = false;  // the server closed without answering when false
  int status = 0;
  std::string head, body;
};

Answer exchange(std::uint16_t port, std::string_view request) {
  const int fd = wire::connect_tcp("127.0.0.1:" + std::to_string(port), Clock::now() + 5s);
  try {
    wire::write_all(fd, request.data(), request.size(), nullptr, 0, Clock::now() + 5s);
  } catch (const wire::IoError&) {
    // The server may answer (413, 431, 400) and close before reading it all.
  }
  ::shutdown(fd, SHUT_WR);
  std::string got;
  char buffer[4096];
  const auto start = Clock::now();
  const auto deadline = start + kPatience;
  for (;;) {
    const int ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (!troupe::fuzz::wait_for_fd(fd, POLLIN, ms)) {
      // TROUPE_FUZZ_HANG_PAUSE=1 keeps the process for a debugger (gdb -p PID).
      if (std::getenv("TROUPE_FUZZ_HANG_PAUSE")) {
        std::fprintf(stderr, "control_http: hang, pid %d paused for 10 minutes\n", static_cast<int>(::getpid()));
        ::sleep(600);
      }
      troupe::fuzz::fail("no answer and no close within 60 s");
    }
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      got.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    break;  // end of stream, or a reset after the answer
  }
  troupe::fuzz::close_with_reset(fd);
  if (Clock::now() - start > kIoTimeout + 1s)  // slow, not (yet) a hang: say so, for the record
    std::fprintf(stderr, "control_http: the exchange took %.1f s\n",
                 std::chrono::duration<double>(Clock::now() - start).count());
  Answer a;
  if (got.empty()) return a;
  a.any = true;
  const auto end = got.find("\r\n\r\n");
  TROUPE_FUZZ_CHECK(end != std::string::npos, "an answer without the end of its header");
  a.head = got.substr(0, end + 2);
  a.body = got.substr(end + 4);
  TROUPE_FUZZ_CHECK(a.head.rfind("HTTP/1.1 ", 0) == 0 && a.head.size() > 12, "status line: " + a.head);
  a.status = std::atoi(a.head.substr(9, 3).c_str());
  static const std::set<int> documented = {200, 400, 401, 404, 405, 409, 413, 431, 500, 501};
  TROUPE_FUZZ_CHECK(documented.count(a.status) == 1, "status " + std::to_string(a.status));
  std::string lower = a.head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto length = lower.find("\r\ncontent-length: ");
  TROUPE_FUZZ_CHECK(length != std::string::npos, "no Content-Length");
  TROUPE_FUZZ_CHECK(std::strtoull(a.head.c_str() + length + 18, nullptr, 10) == a.body.size(),
                    "Content-Length differs from the body");
  if (lower.find("\r\ncontent-type: application/json") != std::string::npos) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(a.body);
    } catch (const nlohmann::json::exception& e) {
      troupe::fuzz::fail(std::string("a JSON answer that does not parse: ") + e.what() + "\n" + a.body);
    }
    TROUPE_FUZZ_CHECK(j.is_object(), "a JSON answer that is not an object");
  }
  return a;
}

// Made once, after OpenSSL has initialised (LLVMFuzzerInitialize), so that
// at exit the servers stop, and their threads end, before OpenSSL's own
// clean-up runs (atexit order): a thread still running after it would leave
// its per-thread OpenSSL state behind, which LeakSanitizer reports.
Servers& servers() {
  static Servers s;
  return s;
}

std::int64_t take_i64(troupe::fuzz::Input& in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | in.byte();
  return static_cast<std::int64_t>(v);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)random_bytes(1);
  (void)sha256("");
  servers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Servers& servers = ::servers();
  troupe::fuzz::Input in(data, size);
  const std::uint8_t mode = in.byte() % 3;
  if (mode == 0) {
    exchange(servers.open.port(), in.rest());
    return 0;
  }
  if (mode == 1) {
    const Answer a = exchange(servers.signed_.port(), in.rest());
    const bool token = in.rest().find(kMetricsToken) != std::string_view::npos;
    TROUPE_FUZZ_CHECK(!a.any || a.status == 401 || a.status == 400 || a.status == 413 || a.status == 431 ||
                          (token && (a.status == 200 || a.status == 404 || a.status == 405)),
                      "an unsigned request routed on a server with a secret: " + std::to_string(a.status));
    return 0;
  }
  // A request the harness signs, with a timestamp near now or anywhere.
  const std::uint8_t how = in.byte();
  const std::int64_t raw = take_i64(in);
  const std::int64_t now = unix_seconds_now();
  const std::int64_t ts = how & 1 ? raw : now + static_cast<std::int8_t>(raw & 0xff);
  const std::string rest(in.rest());
  const auto first = rest.find('\n');
  const auto second = first == std::string::npos ? std::string::npos : rest.find('\n', first + 1);
  const std::string method = rest.substr(0, first);
  const std::string target = first == std::string::npos ? "/" : rest.substr(first + 1, second - first - 1);
  const std::string body = second == std::string::npos ? "" : rest.substr(second + 1);
  const std::string request = method + " " + target + " HTTP/1.1\r\nHost: fuzz\r\nAuthorization: " +
                              sign_control_request(kKey, method, target, body, ts) +
                              "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const Answer a = exchange(servers.signed_.port(), request);
  if (!a.any || a.status == 400) return 0;  // not HTTP the parser takes (a space in the target, ...)
  // The server's clock may have moved on by a second or two.
  const bool fresh = ts >= now - 58 && ts <= now + 58;
  const bool stale = ts < now - 62 || ts > now + 62;
  if (fresh) TROUPE_FUZZ_CHECK(a.status != 401, "a fresh signed request refused: " + a.body);
  if (stale) TROUPE_FUZZ_CHECK(a.status == 401, "a stale signed request routed: " + std::to_string(a.status));
  return 0;
}
