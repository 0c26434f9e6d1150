// net/control/control_auth and the control endpoint with a cluster secret:
// requests without, with a wrong, with an expired or with a replayed
// credential get 401 and reach no handler; signed ones work, from
// ControlClient and from `troupe ctl --secret-file` / TROUPE_SECRET as a real
// process. Without a secret the endpoint binds loopback only.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "net/cluster/auth.hpp"
#include "net/control/control_auth.hpp"
#include "net/control/control_client.hpp"
#include "net/control/control_server.hpp"

namespace troupe::net {
namespace {

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "text was:\n" << (haystack)

const std::string kKey = Secret::from_text("correct horse battery staple").derive(kControlKeyLabel);

TEST(ControlAuth, SignedRequestPassesOnceAndAnythingElseIsRefusedWithTheReason) {
  ControlAuth auth(kKey, std::chrono::seconds(60));
  const std::int64_t now = 1700000000;
  const std::string good = sign_control_request(kKey, "POST", "/mode", "async", now);
  EXPECT_EQ(auth.check(good, "POST", "/mode", "async", now + 5), "");
  EXPECT_CONTAINS(auth.check(good, "POST", "/mode", "async", now + 5), "already used");  // replay
  // Altered method, path or body.
  const std::string other = sign_control_request(kKey, "POST", "/mode", "async", now);
  EXPECT_CONTAINS(auth.check(other, "POST", "/mode", "sync", now), "does not match");
  EXPECT_CONTAINS(auth.check(other, "POST", "/stop", "async", now), "does not match");
  EXPECT_CONTAINS(auth.check(other, "GET", "/mode", "async", now), "does not match");
  // Another secret, or the secret itself used as the key.
  const std::string wrong_key = Secret::from_text("another secret").derive(kControlKeyLabel);
  EXPECT_CONTAINS(auth.check(sign_control_request(wrong_key, "POST", "/stop", "", now), "POST", "/stop", "", now),
                  "does not match");
  EXPECT_CONTAINS(auth.check(sign_control_request("correct horse battery staple", "POST", "/stop", "", now), "POST",
                             "/stop", "", now),
                  "does not match");
  // Too old, or too far ahead.
  EXPECT_CONTAINS(auth.check(sign_control_request(kKey, "POST", "/stop", "", now - 61), "POST", "/stop", "", now),
                  "61 s old (at most 60 s");
  EXPECT_CONTAINS(auth.check(sign_control_request(kKey, "POST", "/stop", "", now + 90), "POST", "/stop", "", now),
                  "in the future");
  // Missing or malformed.
  EXPECT_CONTAINS(auth.check("", "POST", "/stop", "", now), "no credential");
  EXPECT_CONTAINS(auth.check("Bearer abc", "POST", "/stop", "", now), "malformed credential");
  EXPECT_CONTAINS(auth.check("TROUPE-HMAC ts=1,mac=00", "POST", "/stop", "", now), "malformed credential");
  EXPECT_CONTAINS(auth.check("TROUPE-HMAC ts=x,nonce=1,mac=00", "POST", "/stop", "", now), "not a number");
}

// fuzz/control_http found it: a correctly signed timestamp near either end
// of int64 made `now - ts` overflow (undefined behaviour; UBSan stopped the
// fuzzer). Only a holder of the key can sign one, but the server must still
// refuse it as out of the window, with the exact distance.
TEST(ControlAuth, TimestampsAtTheEndsOfInt64AreOutOfTheWindowNotAnOverflow) {
  ControlAuth auth(kKey, std::chrono::seconds(60));
  const std::int64_t now = 1700000000;
  const std::int64_t lowest = std::numeric_limits<std::int64_t>::min(),
                     highest = std::numeric_limits<std::int64_t>::max();
  EXPECT_CONTAINS(auth.check(sign_control_request(kKey, "POST", "/stop", "", lowest), "POST", "/stop", "", now),
                  "credential is 9223372038554775808 s old");
  EXPECT_CONTAINS(auth.check(sign_control_request(kKey, "POST", "/stop", "", highest), "POST", "/stop", "", now),
                  "credential is 9223372035154775807 s in the future");
  EXPECT_CONTAINS(auth.check(sign_control_request(kKey, "POST", "/stop", "", -now), "POST", "/stop", "", now),
                  "credential is 3400000000 s old");
  // The window's edges are unchanged: 60 s either way passes, 61 does not.
  EXPECT_EQ(auth.check(sign_control_request(kKey, "GET", "/status", "", now - 60), "GET", "/status", "", now), "");
  EXPECT_EQ(auth.check(sign_control_request(kKey, "GET", "/status", "", now + 60), "GET", "/status", "", now), "");
  EXPECT_CONTAINS(auth.check(sign_control_request(kKey, "GET", "/status", "", now + 61), "GET", "/status", "", now),
                  "61 s in the future");
}

TEST(ControlAuth, TheControlKeyIsNeitherTheSecretNorAnotherLabelsKey) {
  const Secret s = Secret::from_text("correct horse battery staple");
  EXPECT_EQ(kKey.size(), 32u);
  EXPECT_EQ(s.derive(kControlKeyLabel), kKey);
  EXPECT_NE(s.derive("troupe-other-v1"), kKey);
  EXPECT_THROW(Secret().derive(kControlKeyLabel), std::logic_error);
}

// ---- the server ---------------------------------------------------------

struct CountingJob {
  std::atomic<int> calls{0};
  Handlers handlers() {
    Handlers h;
    h.status = [this] {
      ++calls;
      return std::string(R"({"step":1})");
    };
    h.mode = [this](const std::string&) {
      ++calls;
      return Reply{200, "ok"};
    };
    h.checkpoint = [this] {
      ++calls;
      return Reply{200, "ok"};
    };
    h.stop = [this] {
      ++calls;
      return Reply{200, "stopping"};
    };
    return h;
  }
};

ControlServerOptions with_key() {
  ControlServerOptions o;
  o.auth_key = kKey;
  return o;
}

// One raw request with an optional Authorization header; the whole answer.
std::string raw_request(std::uint16_t port, const std::string& method, const std::string& target,
                        const std::string& authorization) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "connect failed";
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n";
  if (!authorization.empty()) req += "Authorization: " + authorization + "\r\n";
  req += "\r\n";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

TEST(ControlServerAuth, UnsignedWrongExpiredAndReplayedRequestsAre401AndDoNothing) {
  CountingJob job;
  ControlServer server("127.0.0.1:0", job.handlers(), with_key());
  server.start();

  ControlClient unsigned_client(server.address());
  for (const char* path : {"/stop", "/checkpoint", "/status", "/no-such-path"}) {
    const auto r = unsigned_client.request(std::string(path) == "/status" ? "GET" : "POST", path);
    EXPECT_EQ(r.status, 401) << path << ": " << r.body;
    EXPECT_CONTAINS(r.body, "no credential");
  }
  ControlClient wrong(server.address());
  wrong.sign_with(Secret::from_text("not the secret").derive(kControlKeyLabel));
  auto r = wrong.request("POST", "/stop");
  EXPECT_EQ(r.status, 401);
  EXPECT_CONTAINS(r.body, "does not match");

  const std::string expired = sign_control_request(kKey, "POST", "/stop", "", unix_seconds_now() - 120);
  std::string answer = raw_request(server.port(), "POST", "/stop", expired);
  EXPECT_CONTAINS(answer, "HTTP/1.1 401");
  EXPECT_CONTAINS(answer, "WWW-Authenticate: TROUPE-HMAC");
  EXPECT_CONTAINS(answer, "s old (at most 60 s");

  const std::string fresh = sign_control_request(kKey, "POST", "/checkpoint", "", unix_seconds_now());
  EXPECT_CONTAINS(raw_request(server.port(), "POST", "/checkpoint", fresh), "HTTP/1.1 200");
  EXPECT_EQ(job.calls.load(), 1);
  answer = raw_request(server.port(), "POST", "/checkpoint", fresh);  // the same bytes again
  EXPECT_CONTAINS(answer, "HTTP/1.1 401");
  EXPECT_CONTAINS(answer, "already used");
  EXPECT_EQ(job.calls.load(), 1) << "a refused request reached a handler";

  ControlClient signed_client(server.address());
  signed_client.sign_with(kKey);
  r = signed_client.request("GET", "/status");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_CONTAINS(r.body, R"({"step":1})");
  EXPECT_EQ(signed_client.request("GET", "/status").status, 200);  // a fresh nonce each time
  EXPECT_EQ(signed_client.request("POST", "/stop").status, 200);
  EXPECT_EQ(job.calls.load(), 4);
  server.stop();
}

TEST(ControlServerAuth, ABearerTokenOpensGetMetricsOnly) {
  CountingJob job;
  Handlers h = job.handlers();
  h.metrics = [] { return std::string("troupe_step 1\n"); };
  ControlServerOptions o = with_key();
  o.metrics_token = "0123456789abcdef0123456789abcdef";
  ControlServer server("127.0.0.1:0", h, o);
  server.start();
  const std::uint16_t port = server.port();

  std::string answer = raw_request(port, "GET", "/metrics", "Bearer 0123456789abcdef0123456789abcdef");
  EXPECT_CONTAINS(answer, "HTTP/1.1 200");
  EXPECT_CONTAINS(answer, "troupe_step 1");
  // The scheme is case-insensitive (RFC 7235); the same token works again (no nonce).
  EXPECT_CONTAINS(raw_request(port, "GET", "/metrics", "bearer 0123456789abcdef0123456789abcdef"), "HTTP/1.1 200");

  answer = raw_request(port, "GET", "/metrics", "Bearer 0123456789abcdef0123456789abcdeX");
  EXPECT_CONTAINS(answer, "HTTP/1.1 401");
  EXPECT_CONTAINS(answer, "does not match the job's --metrics-token-file");
  answer = raw_request(port, "GET", "/metrics", "");
  EXPECT_CONTAINS(answer, "HTTP/1.1 401");
  EXPECT_CONTAINS(answer, "no credential");
  // The token opens nothing else, not even a read.
  for (const auto& [method, path] : {std::pair<const char*, const char*>{"POST", "/stop"},
                                     {"GET", "/status"},
                                     {"POST", "/metrics"},
                                     {"POST", "/mode"}}) {
    answer = raw_request(port, method, path, "Bearer 0123456789abcdef0123456789abcdef");
    EXPECT_CONTAINS(answer, "HTTP/1.1 401");
    EXPECT_CONTAINS(answer, "a bearer token opens GET /metrics only");
  }
  EXPECT_EQ(job.calls.load(), 0) << "a refused request reached a handler";

  // A signed GET /metrics works too (troupe ctl metrics).
  ControlClient signed_client(server.address());
  signed_client.sign_with(kKey);
  const auto r = signed_client.request("GET", "/metrics");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "troupe_step 1\n");
  server.stop();

  // A job with a secret but no token file refuses every bearer token.
  ControlServer no_token("127.0.0.1:0", h, with_key());
  no_token.start();
  answer = raw_request(no_token.port(), "GET", "/metrics", "Bearer 0123456789abcdef0123456789abcdef");
  EXPECT_CONTAINS(answer, "HTTP/1.1 401");
  EXPECT_CONTAINS(answer, "this job takes no bearer token");
  no_token.stop();

  // Without a secret nothing asks for a credential, so a token would protect nothing: refused.
  ControlServerOptions token_only;
  token_only.metrics_token = o.metrics_token;
  try {
    ControlServer s("127.0.0.1:0", h, token_only);
    ADD_FAILURE() << "a metrics token without a secret was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_CONTAINS(e.what(), "a metrics token needs a cluster secret");
  }
}

TEST(ControlAuth, MetricsTokenFilesAreTrimmedAndCheckedLikeACredential) {
  const std::string dir = ::testing::TempDir() + "troupe_token_" + std::to_string(::getpid());
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  };
  // Prometheus trims the file's whitespace before sending it: so does the job.
  EXPECT_EQ(load_metrics_token(write("good", "  0123456789abcdef0123456789abcdef\r\n")),
            "0123456789abcdef0123456789abcdef");
  auto refused = [](const std::string& path, const std::string& why) {
    try {
      load_metrics_token(path);
      ADD_FAILURE() << "accepted " << path;
    } catch (const std::invalid_argument& e) {
      EXPECT_CONTAINS(e.what(), why);
      EXPECT_CONTAINS(e.what(), path);
    }
  };
  refused(write("short", "abc\n"), "holds 3 characters; a token needs at least 16");
  refused(write("empty", "\n"), "holds 0 characters");
  refused(write("space", "0123456789 abcdef0123\n"), "character 11 of the token is not visible ASCII");
  refused(write("utf8", "0123456789abcdef\xc3\xa9\n"), "character 17");
  refused(dir + "missing", "metrics token file");
  refused(write("big", std::string(5000, 'a')), "metrics token file");
  for (const char* name : {"good", "short", "empty", "space", "utf8", "big"}) std::remove((dir + name).c_str());
}

TEST(ControlServerAuth, WithoutASecretOnlyLoopbackAddressesBind) {
  try {
    ControlServer s("0.0.0.0:0", Handlers{});
    FAIL() << "bound 0.0.0.0 without a key";
  } catch (const std::invalid_argument& e) {
    EXPECT_CONTAINS(e.what(), "control address '0.0.0.0:0' (0.0.0.0) is not a loopback address");
    EXPECT_CONTAINS(e.what(), "--secret-file or TROUPE_SECRET");
  }
  ControlServer loopback("127.0.0.1:0", Handlers{});
  ControlServer with_secret("0.0.0.0:0", Handlers{}, with_key());
  EXPECT_NE(with_secret.port(), 0);
}

// ---- troupe ctl and troupe train, as real processes ---------------------------

struct ProcessRun {
  int status;
  std::string output;  // stdout and stderr
};

ProcessRun troupe(const std::string& env, const std::string& args) {
  const std::string cmd = env + " " TROUPE_BINARY " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

TEST(TroupeCtlAuth, CtlSignsWithTheSecretFileOrEnvironmentAndNothingElseGetsIn) {
  CountingJob job;
  ControlServer server("127.0.0.1:0", job.handlers(), with_key());
  server.start();
  const std::string at = "ctl --timeout 2 --at " + server.address() + " ";
  const std::string secret_file = ::testing::TempDir() + "troupe_ctl_secret_" + std::to_string(::getpid());
  std::ofstream(secret_file) << "correct horse battery staple\n";
  ::chmod(secret_file.c_str(), 0600);
  const std::string wrong_file = secret_file + ".wrong";
  std::ofstream(wrong_file) << "guess\n";
  ::chmod(wrong_file.c_str(), 0600);

  ProcessRun r = troupe("env -u TROUPE_SECRET", at + "stop");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "no credential");
  r = troupe("env -u TROUPE_SECRET", at + "--secret-file " + wrong_file + " stop");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "does not match");
  EXPECT_EQ(job.calls.load(), 0);

  r = troupe("env -u TROUPE_SECRET", at + "--secret-file " + secret_file + " status");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, R"({"step":1})");
  r = troupe("env TROUPE_SECRET='correct horse battery staple'", at + "stop");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(job.calls.load(), 2);
  server.stop();
  std::remove(secret_file.c_str());
  std::remove(wrong_file.c_str());
}

TEST(TroupeCtlAuth, TrainRefusesANonLoopbackControlAddressWithoutASecret) {
  const ProcessRun r = troupe("env -u TROUPE_SECRET", "train --model mlp --steps 1 --control 0.0.0.0:0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "is not a loopback address");
}

}  // namespace
}  // namespace troupe::net
