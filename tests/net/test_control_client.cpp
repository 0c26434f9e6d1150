// ControlClient against peers that are not a troupe job, on real loopback
// sockets: one that accepts and never answers, one that speaks another
// protocol, one that closes at once, one that refuses a request (413) before
// taking its body, answers over the client's body limit or broken off after
// the header, and answers that arrive in pieces or end with the connection.
// The fake peers are raw POSIX sockets, every wait bounded.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "net/control/control_client.hpp"
#include "tests/support/ports.hpp"

namespace troupe::net {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "text was:\n" << (haystack)

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A peer that takes one connection on its own thread and hands it, blocking
// with 5 s send and receive timeouts, to `serve`.
class FakePeer {
 public:
  explicit FakePeer(std::function<void(int fd)> serve) : listen_fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd_, 4) != 0)
      throw std::runtime_error("fake peer: cannot listen on loopback");
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    address_ = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    thread_ = std::thread([this, serve = std::move(serve)] {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 5000) != 1) return;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      accepted_ = true;
      timeval tv{5, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      serve(fd);
      ::close(fd);
    });
  }
  ~FakePeer() {
    finish();
    ::close(listen_fd_);
  }
  FakePeer(const FakePeer&) = delete;
  FakePeer& operator=(const FakePeer&) = delete;

  const std::string& address() const { return address_; }
  bool accepted() const { return accepted_; }
  // Waits for `serve` to return: what it wrote down may be read after this.
  void finish() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  int listen_fd_;
  std::string address_;
  std::atomic<bool> accepted_{false};
  std::thread thread_;
};

void send_text(int fd, const std::string& text) { ::send(fd, text.data(), text.size(), MSG_NOSIGNAL); }

// The request's header (through the blank line), and no more than that of
// its body; "" when the client closed first or 5 s passed.
std::string read_header(int fd) {
  std::string got;
  char c;
  while (got.size() < 64 * 1024 && ::recv(fd, &c, 1, 0) == 1) {
    got += c;
    if (got.size() >= 4 && got.compare(got.size() - 4, 4, "\r\n\r\n") == 0) return got;
  }
  return "";
}

// Everything the client sends until it closes (or 5 s pass); its size.
std::size_t drain(int fd) {
  std::size_t total = 0;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return total;
    total += static_cast<std::size_t>(n);
  }
}

std::string error_of(const std::string& address, const std::string& method = "GET", const std::string& path = "/status",
                     std::chrono::milliseconds timeout = 2s) {
  try {
    const ControlResponse r = ControlClient(address).request(method, path, "", timeout);
    return "answered HTTP " + std::to_string(r.status) + ": " + r.body;
  } catch (const ControlError& e) {
    return e.what();
  }
}

const std::string kGiveAt = " (give --at the address the job serves with --control)";

TEST(ControlClientOnSockets, APeerThatAcceptsAndNeverAnswersIsNoAnswerWithinTheTimeout) {
  std::string request;
  FakePeer peer([&](int fd) {
    request = read_header(fd);
    drain(fd);  // until the client gives up and closes
  });
  const auto start = Clock::now();
  const std::string error = error_of(peer.address(), "GET", "/status", 500ms);
  const double waited = seconds_since(start);
  EXPECT_EQ(error, "no answer from " + peer.address() + " within 500 ms");
  EXPECT_GE(waited, 0.45);
  EXPECT_LT(waited, 1.5) << "the deadline did not bound the wait for the answer";
  EXPECT_TRUE(peer.accepted());
  // The request went out whole before the client waited.
  peer.finish();
  EXPECT_EQ(request.rfind("GET /status HTTP/1.1\r\n", 0), 0u) << request;
  EXPECT_CONTAINS(request, "User-Agent: troupe-ctl\r\n");
  EXPECT_CONTAINS(request, "Host: " + peer.address() + "\r\n");
}

TEST(ControlClientOnSockets, APeerSpeakingAnotherProtocolIsNotAControlEndpoint) {
  FakePeer peer([](int fd) {
    send_text(fd, "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n");
    ::shutdown(fd, SHUT_WR);
    drain(fd);
  });
  EXPECT_EQ(error_of(peer.address()), peer.address() +
                                          " is not a troupe control endpoint: it answered "
                                          "\"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3..\", not HTTP" +
                                          kGiveAt);
}

TEST(ControlClientOnSockets, BinaryBytesAreQuotedPrintably) {
  FakePeer peer([](int fd) {
    send_text(fd, std::string("\x16\x03\x01\x00\x05hi", 7));
    ::shutdown(fd, SHUT_WR);
    drain(fd);
  });
  EXPECT_EQ(error_of(peer.address()),
            peer.address() + " is not a troupe control endpoint: it answered \".....hi\", not HTTP" + kGiveAt);
}

TEST(ControlClientOnSockets, APeerThatClosesAtOnceSentNoHttpAnswer) {
  FakePeer peer([](int fd) {
    ::shutdown(fd, SHUT_WR);  // its end at once; then take the request so that close() is a FIN, not a reset
    drain(fd);
  });
  const auto start = Clock::now();
  EXPECT_EQ(error_of(peer.address()), peer.address() +
                                          " is not a troupe control endpoint: it closed the connection without an "
                                          "HTTP answer" +
                                          kGiveAt);
  EXPECT_LT(seconds_since(start), 1.5) << "an end of stream was waited on until the deadline";
}

TEST(ControlClientOnSockets, A413BeforeTheBodyIsTakenIsStillTheAnswer) {
  // Larger than loopback's socket buffers, so the client is still sending
  // when the peer answers, closes, and the send fails.
  const std::string body(32 << 20, 'x');
  const std::string refusal = R"({"ok":false,"message":"body over 64 KiB"})";
  std::size_t header_bytes = 0;
  FakePeer peer([&](int fd) {
    header_bytes = read_header(fd).size();
    send_text(fd, "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: " +
                      std::to_string(refusal.size()) + "\r\nConnection: close\r\n\r\n" + refusal);
  });
  const auto start = Clock::now();
  ControlResponse r;
  try {
    r = ControlClient(peer.address()).request("POST", "/mode", body, 5000ms);
  } catch (const ControlError& e) {
    FAIL() << "the 413 was lost: " << e.what();
  }
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.body, refusal);
  EXPECT_LT(seconds_since(start), 4.0);
  peer.finish();
  EXPECT_GT(header_bytes, 0u) << "the peer never saw the request's header";
}

TEST(ControlClientOnSockets, AnAnswerOverTheBodyLimitIsRefusedNotRead) {
  // Chunked, so that the limit is met while reading, not from a length.
  std::atomic<std::size_t> sent{0};
  FakePeer peer([&](int fd) {
    read_header(fd);
    send_text(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n");
    const std::string chunk(1 << 20, 'm');
    char size_line[32];
    std::snprintf(size_line, sizeof size_line, "%zx\r\n", chunk.size());
    for (int i = 0; i < 64; ++i) {  // 64 MiB at most; the client stops reading at 16
      const std::string piece = size_line + chunk + "\r\n";
      if (::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(piece.size())) return;
      sent += piece.size();
    }
  });
  EXPECT_EQ(error_of(peer.address(), "GET", "/metrics", 5000ms),
            "control request GET /metrics to " + peer.address() + " failed: body limit exceeded");
  peer.finish();
  EXPECT_LT(sent.load(), std::size_t{40} << 20) << "the client went on reading past its limit";
}

TEST(ControlClientOnSockets, AnAnswerWhoseLengthIsOverTheBodyLimitIsRefusedFromItsHeader) {
  FakePeer peer([](int fd) {
    read_header(fd);
    send_text(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 20000000\r\n\r\nabc");
    drain(fd);  // the client closes without waiting for the 20 MB
  });
  const auto start = Clock::now();
  EXPECT_EQ(error_of(peer.address(), "GET", "/status", 5000ms),
            "control request GET /status to " + peer.address() + " failed: body limit exceeded");
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(ControlClientOnSockets, AnAnswerBrokenOffAfterItsHeaderIsNotCalledNonHttp) {
  FakePeer peer([](int fd) {
    read_header(fd);
    send_text(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"step\":");
    ::shutdown(fd, SHUT_WR);
    drain(fd);
  });
  EXPECT_EQ(error_of(peer.address()), "control request GET /status to " + peer.address() + " failed: partial message");
}

TEST(ControlClientOnSockets, AnAnswerInPiecesIsPutTogether) {
  const std::string json = R"({"step":120,"epoch":1,"mode":"sync"})";
  FakePeer peer([&](int fd) {
    read_header(fd);
    const std::string whole =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(json.size()) +
        "\r\n\r\n" + json;
    // Cut inside the status line, inside the header, at the blank line and
    // inside the body.
    const std::size_t cuts[] = {0, 6, 30, whole.size() - json.size(), whole.size() - 5, whole.size()};
    for (std::size_t i = 0; i + 1 < std::size(cuts); ++i) {
      send_text(fd, whole.substr(cuts[i], cuts[i + 1] - cuts[i]));
      std::this_thread::sleep_for(30ms);
    }
    drain(fd);
  });
  const ControlResponse r = ControlClient(peer.address()).request("GET", "/status");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, json);
}

TEST(ControlClientOnSockets, AnAnswerThatEndsWithTheConnectionIsWhole) {
  FakePeer peer([](int fd) {
    read_header(fd);
    send_text(fd, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"ok\":true}");
  });
  const ControlResponse r = ControlClient(peer.address()).request("POST", "/checkpoint");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "{\"ok\":true}");
}

TEST(ControlClientOnSockets, NothingListeningIsARefusalAtOnce) {
  const std::string address = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
  const auto start = Clock::now();
  try {
    ControlClient(address).request("GET", "/status", "", 5000ms);
    FAIL() << "a request to " << address << " succeeded";
  } catch (const ControlError& e) {
    EXPECT_TRUE(e.connection_refused) << "troupe ctl retries only a refusal";
    EXPECT_EQ(std::string(e.what()),
              "nothing is listening at " + address + " (is the job running with --control " + address + "?)");
  }
  EXPECT_LT(seconds_since(start), 1.0) << "the client retried or waited for its deadline";
}

TEST(ControlClientOnSockets, AnUnknownHostIsAnInvalidAddressNamingIt) {
  try {
    ControlClient("no-such-host.invalid:7070").request("GET", "/status");
    FAIL() << "no-such-host.invalid resolved";
  } catch (const ControlError& e) {
    FAIL() << "a network error instead of a bad address: " << e.what();
  } catch (const std::invalid_argument& e) {
    EXPECT_CONTAINS(e.what(), "control address 'no-such-host.invalid:7070': unknown host 'no-such-host.invalid' (");
  }
}

TEST(ControlClientOnSockets, TroupeCtlSaysItWaitedItsWholeTimeoutForAPeerThatNeverAnswers) {
  FakePeer peer([](int fd) { drain(fd); });
  const std::string err_file = ::testing::TempDir() + "troupe_ctl_silent_" + std::to_string(::getpid());
  const std::string cmd = TROUPE_BINARY " ctl --at " + peer.address() + " --timeout 1 status 2>" + err_file;
  const auto start = Clock::now();
  const int status = std::system(cmd.c_str());
  const double waited = seconds_since(start);
  std::string err;
  if (FILE* f = std::fopen(err_file.c_str(), "r")) {
    char buf[1024];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) err.append(buf, n);
    std::fclose(f);
  }
  std::remove(err_file.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "status " << status << ", stderr: " << err;
  EXPECT_EQ(err, "troupe: no answer from " + peer.address() + " within 1 s\n");
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 2.5);
}

}  // namespace
}  // namespace troupe::net
