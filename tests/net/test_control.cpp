// The HTTP control endpoint on real loopback sockets: every endpoint reaches
// its handler, malformed and hostile requests are refused or dropped while the
// server keeps answering, stop() is prompt, and the client (and `troupe ctl`,
// run as a real process) says clearly when nothing answers.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "net/control/control_client.hpp"
#include "net/control/control_server.hpp"
#include "tests/support/ports.hpp"

namespace {

using namespace troupe::net;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "text was:\n" << (haystack)

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A plain TCP socket to 127.0.0.1:port, for sending bytes no HTTP client would.
class RawSocket {
 public:
  explicit RawSocket(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{5, 0};  // no test read waits longer than this
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawSocket() { ::close(fd_); }
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;

  bool connected() const { return connected_; }
  void send(const std::string& bytes) { ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  void close_write() { ::shutdown(fd_, SHUT_WR); }
  // Everything until the server closes (or 5 s pass).
  std::string read_all() {
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, static_cast<std::size_t>(n));
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

int http_status(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return 0;
  return std::stoi(response.substr(9, 3));
}

// A loopback port with nothing listening on it (bound once, then closed).
std::uint16_t closed_port() { return static_cast<std::uint16_t>(troupe::testing::free_loopback_port()); }

const char* kStatusJson =
    R"({"step":120,"epoch":1,"mode":"ssp:3","replicas":4,"samples_per_s":51234.5,"loss":0.4312,"accuracy":0.8731})";

// A job's handlers that record what reached them.
struct FakeJob {
  std::atomic<int> checkpoints{0};
  std::atomic<int> stops{0};
  // Written on the handler thread, read by the test after the reply: the reply
  // travels through a socket, which ThreadSanitizer cannot see as ordering.
  std::string last_mode() {
    std::lock_guard<std::mutex> lock(mutex);
    return mode;
  }
  std::mutex mutex;
  std::string mode;
  Handlers handlers() {
    Handlers h;
    h.status = [] { return std::string(kStatusJson); };
    h.mode = [this](const std::string& body) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        mode = body;
      }
      if (body == "sync" || body == "async" || body.rfind("ssp:", 0) == 0)
        return Reply{200, "mode " + body + " from the next step"};
      return Reply{400, "unknown mode '" + body + "'; expected sync, async or ssp:N"};
    };
    h.checkpoint = [this] {
      ++checkpoints;
      return Reply{200, "checkpoint written: runs/ckpt-000000000120.troupe"};
    };
    h.stop = [this] {
      ++stops;
      return Reply{200, "stopping after step 120"};
    };
    return h;
  }
};

struct Served {
  explicit Served(Handlers h, ControlServerOptions o = {}) : server("127.0.0.1:0", std::move(h), o) { server.start(); }
  ControlClient client() const { return ControlClient(server.address()); }
  ControlServer server;
};

TEST(ControlServer, EveryEndpointCallsItsHandlerAndReturnsItsReply) {
  FakeJob job;
  Served s(job.handlers());
  ASSERT_NE(s.server.port(), 0);
  EXPECT_EQ(s.server.address(), "127.0.0.1:" + std::to_string(s.server.port()));
  const ControlClient client = s.client();

  ControlResponse r = client.request("GET", "/status");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, std::string(kStatusJson) + "\n");  // passed through as the job built it

  r = client.request("POST", "/mode", "ssp:3\n");  // `echo ssp:3 | curl --data-binary @-` sends the newline
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(job.last_mode(), "ssp:3");
  EXPECT_EQ(r.body, "{\"ok\":true,\"message\":\"mode ssp:3 from the next step\"}\n");

  r = client.request("POST", "/mode", "bulk");
  EXPECT_EQ(r.status, 400);
  EXPECT_CONTAINS(r.body, "\"ok\":false");
  EXPECT_CONTAINS(r.body, "unknown mode 'bulk'");

  r = client.request("POST", "/checkpoint");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(job.checkpoints.load(), 1);
  EXPECT_CONTAINS(r.body, "checkpoint written");

  r = client.request("POST", "/stop");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(job.stops.load(), 1);
  EXPECT_CONTAINS(r.body, "stopping after step 120");
}

TEST(ControlServer, AnswersJsonWithContentTypeAndEscapesMessages) {
  Handlers h;
  h.checkpoint = [] { return Reply{503, "disk \"full\"\nretry"}; };
  Served s(std::move(h));
  RawSocket sock(s.server.port());
  sock.send("POST /checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  const std::string resp = sock.read_all();
  EXPECT_EQ(http_status(resp), 503);
  EXPECT_CONTAINS(resp, "Content-Type: application/json");
  EXPECT_CONTAINS(resp, R"({"ok":false,"message":"disk \"full\"\nretry"})");
}

// troupe ctl says how long it waits (Troupe-Wait: its timeout less a
// quarter, at most 300 ms), and a handler reads it while it runs, to answer
// "pending" in time; a malformed value is a 400 before any handler runs.
TEST(ControlServer, TheClientsWaitReachesTheHandlerAndAMalformedOneIs400) {
  std::atomic<int> calls{0};
  Handlers h;
  h.mode = [&calls](const std::string&) {
    ++calls;
    const auto wait = request_wait();
    return Reply{200, wait ? std::to_string(wait->count()) : std::string("none")};
  };
  Served s(std::move(h));
  const ControlClient client = s.client();
  EXPECT_CONTAINS(client.request("POST", "/mode", "sync", std::chrono::milliseconds(2000)).body, "\"1700\"");
  EXPECT_CONTAINS(client.request("POST", "/mode", "sync", std::chrono::milliseconds(400)).body, "\"300\"");
  EXPECT_FALSE(request_wait().has_value());  // outside a handler
  {
    RawSocket sock(s.server.port());  // curl: no Troupe-Wait
    sock.send("POST /mode HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nsync");
    EXPECT_CONTAINS(sock.read_all(), "\"none\"");
  }
  EXPECT_EQ(calls.load(), 3);
  for (const char* bad : {"soon", "-5", "0", "3600001", "12ms"}) {
    RawSocket sock(s.server.port());
    sock.send(std::string("POST /mode HTTP/1.1\r\nHost: x\r\nTroupe-Wait: ") + bad +
              "\r\nContent-Length: 4\r\n\r\nsync");
    const std::string resp = sock.read_all();
    EXPECT_EQ(http_status(resp), 400) << bad;
    EXPECT_CONTAINS(resp, "Troupe-Wait must be whole milliseconds from 1 to 3600000, got '" + std::string(bad) + "'");
  }
  EXPECT_EQ(calls.load(), 3);
}

TEST(ControlServer, UnknownPathIs404ListingEndpointsAndWrongMethodIs405) {
  FakeJob job;
  Served s(job.handlers());
  const ControlClient client = s.client();
  ControlResponse r = client.request("GET", "/metric");
  EXPECT_EQ(r.status, 404);
  for (const char* e : {"GET /status", "GET /metrics", "POST /mode", "POST /checkpoint", "POST /stop"})
    EXPECT_CONTAINS(r.body, e);

  r = client.request("POST", "/status");
  EXPECT_EQ(r.status, 405);
  EXPECT_CONTAINS(r.body, "use GET /status");
  r = client.request("GET", "/stop");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(job.stops.load(), 0);
  r = client.request("DELETE", "/checkpoint");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(job.checkpoints.load(), 0);

  RawSocket sock(s.server.port());
  sock.send("PUT /mode HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nsync");
  const std::string resp = sock.read_all();
  EXPECT_EQ(http_status(resp), 405);
  EXPECT_CONTAINS(resp, "Allow: POST");
  EXPECT_EQ(job.last_mode(), "");
}

TEST(ControlServer, MetricsAnswersThePrometheusTextAsIsWithItsContentType) {
  Handlers h;
  const std::string text = "# HELP troupe_step The global step.\n# TYPE troupe_step gauge\ntroupe_step 7\n";
  h.metrics = [&text] { return text; };
  Served s(std::move(h));
  RawSocket sock(s.server.port());
  sock.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string resp = sock.read_all();
  EXPECT_EQ(http_status(resp), 200) << resp;
  EXPECT_CONTAINS(resp, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n");
  // The body is the text, not one byte more (no extra blank line).
  EXPECT_EQ(resp.substr(resp.find("\r\n\r\n") + 4), text);

  const ControlClient client = s.client();
  EXPECT_EQ(client.request("GET", "/metrics?name[]=troupe_step").body, text);  // a query is ignored
  ControlResponse r = client.request("POST", "/metrics");
  EXPECT_EQ(r.status, 405);
  EXPECT_CONTAINS(r.body, "use GET /metrics");

  Served without(Handlers{});
  r = without.client().request("GET", "/metrics");
  EXPECT_EQ(r.status, 501);
  EXPECT_CONTAINS(r.body, "GET /metrics is not available in this job");
}

TEST(ControlServer, HandlerThatThrowsIs500AndTheServerLives) {
  Handlers h;
  h.checkpoint = []() -> Reply { throw std::runtime_error("checkpoint dir /ro is read-only"); };
  h.stop = []() -> Reply { throw 42; };
  h.status = [] { return std::string("{}"); };
  Served s(std::move(h));
  const ControlClient client = s.client();
  ControlResponse r = client.request("POST", "/checkpoint");
  EXPECT_EQ(r.status, 500);
  EXPECT_CONTAINS(r.body, "POST /checkpoint failed: checkpoint dir /ro is read-only");
  r = client.request("POST", "/stop");
  EXPECT_EQ(r.status, 500);
  EXPECT_CONTAINS(r.body, "unknown exception");
  EXPECT_EQ(client.request("GET", "/status").status, 200);
  // A handler the job left out is 501, not a crash.
  r = client.request("POST", "/mode", "sync");
  EXPECT_EQ(r.status, 501);
  EXPECT_CONTAINS(r.body, "POST /mode is not available");
}

TEST(ControlServer, MalformedRequestsGet400AndTheServerStillAnswers) {
  FakeJob job;
  Served s(job.handlers());
  const ControlClient client = s.client();
  const std::string garbage("\x00\x01\x02\xff\xfe garbage\r\n\r\n", 16);
  for (const std::string& bad : {garbage, std::string("GET /status\r\n\r\n"), std::string("GET\r\n\r\n"),
                                 std::string("GET /status HTTP/1.1\r\nno colon here\r\n\r\n"),
                                 std::string("POST /mode HTTP/1.1\r\nContent-Length: abc\r\n\r\n")}) {
    RawSocket sock(s.server.port());
    sock.send(bad);
    const std::string resp = sock.read_all();
    EXPECT_EQ(http_status(resp), 400) << "request: " << bad << "\nresponse: " << resp;
    EXPECT_CONTAINS(resp, "malformed HTTP request");
    EXPECT_EQ(client.request("GET", "/status").status, 200);
  }
}

TEST(ControlServer, TruncatedRequestThenCloseIsDroppedAndTheServerStillAnswers) {
  FakeJob job;
  Served s(job.handlers());
  {
    RawSocket sock(s.server.port());
    sock.send("POST /stop HTTP/1.1\r\nHost: x\r\nContent-Le");
    sock.close_write();
    EXPECT_EQ(sock.read_all(), "");  // nothing to answer: the connection just closes
  }
  {
    RawSocket sock(s.server.port());
    sock.send("POST /mode HTTP/1.1\r\nContent-Length: 10\r\n\r\nsyn");  // body cut short
    sock.close_write();
    EXPECT_EQ(sock.read_all(), "");
  }
  EXPECT_EQ(job.stops.load(), 0);
  EXPECT_EQ(job.last_mode(), "");
  EXPECT_EQ(s.client().request("GET", "/status").status, 200);
}

TEST(ControlServer, OversizedHeaderIs431AndOversizedBodyIs413) {
  FakeJob job;
  Served s(job.handlers());
  {
    RawSocket sock(s.server.port());
    sock.send("GET /status HTTP/1.1\r\nX-Big: " + std::string(16 * 1024, 'a') + "\r\n\r\n");
    const std::string resp = sock.read_all();
    EXPECT_EQ(http_status(resp), 431) << resp;
    EXPECT_CONTAINS(resp, "header over 8 KiB");
  }
  {
    // Refused from the Content-Length alone, before any body arrives (and so
    // never allocated): a client announcing 1 GiB gets its answer at once.
    RawSocket sock(s.server.port());
    sock.send("POST /mode HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n");
    const std::string resp = sock.read_all();
    EXPECT_EQ(http_status(resp), 413) << resp;
    EXPECT_CONTAINS(resp, "body over 64 KiB");
  }
  {
    // A chunked body has no length up front: refused once it passes 64 KiB.
    RawSocket sock(s.server.port());
    sock.send("POST /mode HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk(32 * 1024, 's');
    for (int i = 0; i < 3; ++i) sock.send("8000\r\n" + chunk + "\r\n");
    const std::string resp = sock.read_all();
    EXPECT_EQ(http_status(resp), 413) << resp;
  }
  // And through the client, which sends the whole 100 KiB body.
  const ControlResponse r = s.client().request("POST", "/mode", std::string(100 * 1024, 's'));
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(job.last_mode(), "");
  EXPECT_EQ(s.client().request("GET", "/status").status, 200);
}

TEST(ControlServer, ClientThatSendsNothingOrHalfARequestIsDroppedAfterTheTimeout) {
  FakeJob job;
  ControlServerOptions options;
  options.io_timeout = 300ms;
  Served s(job.handlers(), options);
  for (const std::string& partial : {std::string(), std::string("GET /status HTTP/1.1\r\nHost:")}) {
    RawSocket sock(s.server.port());
    ASSERT_TRUE(sock.connected());
    sock.send(partial);
    const auto start = Clock::now();
    EXPECT_EQ(sock.read_all(), "");  // the server closes; it does not wait for ever
    const double waited = seconds_since(start);
    EXPECT_GT(waited, 0.2);
    EXPECT_LT(waited, 2.0);
    EXPECT_EQ(s.client().request("GET", "/status").status, 200);
  }
}

TEST(ControlServer, SlowHandlerDoesNotBlockOtherConnections) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Handlers h;
  h.checkpoint = [released] {
    released.wait_for(5s);
    return Reply{200, "written"};
  };
  h.status = [] { return std::string("{}"); };
  Served s(std::move(h));
  const ControlClient client = s.client();
  auto slow = std::async(std::launch::async, [&] { return client.request("POST", "/checkpoint", "", 10s); });
  std::this_thread::sleep_for(100ms);
  // Accepting, parsing, 404s and 405s live on the io thread: answered at once.
  const auto start = Clock::now();
  EXPECT_EQ(client.request("GET", "/nowhere").status, 404);
  EXPECT_EQ(client.request("GET", "/checkpoint").status, 405);
  EXPECT_LT(seconds_since(start), 1.0);
  release.set_value();
  EXPECT_EQ(slow.get().status, 200);
  EXPECT_EQ(client.request("GET", "/status").status, 200);  // the handler thread is free again
}

TEST(ControlServer, StopReturnsQuicklyWithClientsConnected) {
  FakeJob job;
  auto s = std::make_unique<Served>(job.handlers());
  RawSocket idle(s->server.port());
  RawSocket half(s->server.port());
  ASSERT_TRUE(idle.connected());
  half.send("GET /status HTTP/1.1\r\n");
  std::this_thread::sleep_for(100ms);  // both accepted and waiting in reads
  const auto start = Clock::now();
  s->server.stop();
  EXPECT_LT(seconds_since(start), 1.0);
  EXPECT_EQ(idle.read_all(), "");  // their connections were closed
  EXPECT_EQ(half.read_all(), "");
  s->server.stop();  // idempotent
  const auto destroyed = Clock::now();
  s.reset();
  EXPECT_LT(seconds_since(destroyed), 1.0);
}

TEST(ControlServer, StopFromInsideAHandlerIsALogicError) {
  ControlServer* self = nullptr;
  Handlers h;
  h.stop = [&self] {
    self->stop();
    return Reply{200, "unreachable"};
  };
  ControlServer server("127.0.0.1:0", std::move(h));
  self = &server;  // before start(), so the handler thread sees it
  server.start();
  const ControlResponse r = ControlClient(server.address()).request("POST", "/stop");
  EXPECT_EQ(r.status, 500);
  EXPECT_CONTAINS(r.body, "called from a control handler");
}

TEST(ControlServer, PortInUseIsAClearError) {
  Served first{Handlers{}};
  const std::string address = "127.0.0.1:" + std::to_string(first.server.port());
  try {
    ControlServer second(address, Handlers{});
    FAIL() << "a second server bound " << address;
  } catch (const ControlError& e) {
    EXPECT_CONTAINS(e.what(), "cannot listen on " + address);
    EXPECT_CONTAINS(e.what(), "in use");
  }
}

TEST(ControlServer, BadAddressesAreClearErrors) {
  const auto error_of = [](const std::string& address) -> std::string {
    try {
      ControlServer s(address, Handlers{});
    } catch (const std::invalid_argument& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("wrong exception type: ") + e.what();
    }
    return "no error";
  };
  EXPECT_CONTAINS(error_of("127.0.0.1"), "control address '127.0.0.1': missing port");
  EXPECT_CONTAINS(error_of("127.0.0.1:"), "missing port");
  EXPECT_CONTAINS(error_of(":7070"), "missing host");
  EXPECT_CONTAINS(error_of("127.0.0.1:http"), "port 'http' is not a number in 0..65535");
  EXPECT_CONTAINS(error_of("127.0.0.1:70000"), "port 70000 is not in 0..65535");
  EXPECT_CONTAINS(error_of("::1:7070"), "needs brackets");
  EXPECT_CONTAINS(error_of("no-such-host.invalid:7070"), "unknown host 'no-such-host.invalid'");
  EXPECT_EQ(parse_host_port("[::1]:7070").host, "::1");
  EXPECT_EQ(parse_host_port("[::1]:7070").str(), "[::1]:7070");
  EXPECT_EQ(parse_host_port("localhost:0").port, 0);
}

TEST(ControlClient, NothingListeningFailsFastWithAClearMessage) {
  const std::string address = "127.0.0.1:" + std::to_string(closed_port());
  const auto start = Clock::now();
  try {
    ControlClient(address).request("GET", "/status");
    FAIL() << "a request to " << address << " succeeded";
  } catch (const ControlError& e) {
    EXPECT_EQ(std::string(e.what()),
              "nothing is listening at " + address + " (is the job running with --control " + address + "?)");
  }
  EXPECT_LT(seconds_since(start), 3.0);
}

TEST(ControlClient, ServerThatNeverAnswersTimesOutInTwoSeconds) {
  // A socket that listens but never accepts: the kernel completes the
  // connection, and then nothing ever answers.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  const auto start = Clock::now();
  try {
    ControlClient(address).request("GET", "/status");
    ADD_FAILURE() << "a request to " << address << " was answered";
  } catch (const ControlError& e) {
    EXPECT_EQ(std::string(e.what()), "no answer from " + address + " within 2 s");
  }
  const double waited = seconds_since(start);
  EXPECT_GT(waited, 1.5);
  EXPECT_LT(waited, 3.0);
  ::close(fd);
}

// ---- troupe ctl, as a real process -----------------------------------------

struct ProcessRun {
  int status;
  std::string out;  // stdout
  std::string err;  // stderr
};

ProcessRun troupe(const std::string& args) {
  const std::string err_file = ::testing::TempDir() + "troupe_ctl_stderr_" + std::to_string(::getpid());
  const std::string cmd = TROUPE_BINARY " " + args + " 2>" + err_file;
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  std::string err;
  if (FILE* f = std::fopen(err_file.c_str(), "r")) {
    while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) err.append(buf, n);
    std::fclose(f);
  }
  std::remove(err_file.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out, err};
}

TEST(TroupeCtl, StatusModeCheckpointStopAgainstARunningServer) {
  FakeJob job;
  Served s(job.handlers());
  const std::string at = "--at " + s.server.address() + " ";
  ProcessRun r = troupe("ctl " + at + "status");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, std::string(kStatusJson) + "\n");

  r = troupe("ctl " + at + "mode async");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(job.last_mode(), "async");
  EXPECT_CONTAINS(r.out, "mode async from the next step");

  r = troupe("ctl " + at + "mode bulk");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_CONTAINS(r.err, "answered HTTP 400");
  EXPECT_CONTAINS(r.err, "unknown mode 'bulk'");

  r = troupe("ctl " + at + "checkpoint");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(job.checkpoints.load(), 1);
  r = troupe("ctl " + at + "stop");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(job.stops.load(), 1);
}

TEST(TroupeCtl, NothingListeningExitsOneWithTheMessageQuickly) {
  const std::string address = "127.0.0.1:" + std::to_string(closed_port());
  const auto start = Clock::now();
  const ProcessRun r = troupe("ctl --at " + address + " --timeout 1 status");
  EXPECT_LT(seconds_since(start), 3.0);
  EXPECT_GE(seconds_since(start), 0.7) << "ctl did not keep trying while nothing listened";
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_CONTAINS(r.err,
                  "nothing is listening at " + address + " (is the job running with --control " + address + "?)");
}

TEST(TroupeCtl, UsageErrorsExitTwo) {
  EXPECT_EQ(troupe("ctl status").status, 2);                    // no --at
  EXPECT_EQ(troupe("ctl --at 127.0.0.1:7070").status, 2);       // no action
  EXPECT_EQ(troupe("ctl --at 127.0.0.1:7070 mode").status, 2);  // no MODE
  EXPECT_EQ(troupe("ctl --at 127.0.0.1:7070 --timeout 0 status").status, 2);
  const ProcessRun r = troupe("ctl --at localhost status");
  EXPECT_EQ(r.status, 2);
  EXPECT_CONTAINS(r.err, "control address 'localhost': missing port");
}

}  // namespace
