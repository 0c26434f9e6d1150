// net/transport/socket.hpp on real loopback sockets: the calls `troupe ctl`'s
// control client added to the transport (one connect try that tells a
// refusal and an unknown host apart from other failures; read_some, which
// returns what has arrived and 0 at end of stream), each bounded by its
// deadline, and connect_tcp's retrying that the ring and the gate rely on.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "net/transport/socket.hpp"
#include "tests/support/ports.hpp"

namespace troupe::net {
namespace {

using namespace std::chrono_literals;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string loopback(int port) { return "127.0.0.1:" + std::to_string(port); }

// A listening socket on a free loopback port, and the connections it
// accepts (each waited for with a deadline).
class Listener {
 public:
  Listener() : fd_(listen_tcp("127.0.0.1:0", &port_)) {}
  ~Listener() { ::close(fd_); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  std::string address() const { return loopback(port_); }
  // The next connection, or -1 when none came within 5 s.
  int accept_one() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return -1;
    return ::accept(fd_, nullptr, nullptr);
  }

 private:
  std::uint16_t port_ = 0;
  int fd_;
};

// Both ends of a loopback connection; `ours` from connect_tcp_once.
struct Pair {
  Listener listener;
  int ours = -1;
  int theirs = -1;
  Pair() {
    ours = wire::connect_tcp_once(listener.address(), Clock::now() + 5s);
    theirs = listener.accept_one();
  }
  ~Pair() {
    if (ours >= 0) ::close(ours);
    if (theirs >= 0) ::close(theirs);
  }
};

void send_text(int fd, const std::string& text) {
  wire::write_all(fd, text.data(), text.size(), nullptr, 0, Clock::now() + 5s);
}

TEST(TransportSocket, ConnectOnceConnectsANonBlockingSocket) {
  Pair p;
  ASSERT_GE(p.ours, 0);
  ASSERT_GE(p.theirs, 0);
  EXPECT_NE(::fcntl(p.ours, F_GETFL, 0) & O_NONBLOCK, 0) << "every wait on it must be a poll with a deadline";
  send_text(p.ours, "ping");
  char got[4] = {};
  wire::read_all(p.theirs, got, sizeof got, Clock::now() + 5s);
  EXPECT_EQ(std::string(got, 4), "ping");
}

TEST(TransportSocket, ConnectOnceToAClosedPortIsRefusedAtOnce) {
  const std::string address = loopback(troupe::testing::free_loopback_port());
  const auto start = Clock::now();
  try {
    ::close(wire::connect_tcp_once(address, Clock::now() + 5s));
    FAIL() << "connected to " << address << ", where nothing listens";
  } catch (const wire::ConnectionRefused& e) {
    EXPECT_EQ(std::string(e.what()), "could not connect to " + address + ": Connection refused");
    EXPECT_FALSE(e.timed_out);
  }
  EXPECT_LT(seconds_since(start), 1.0) << "a refusal must not be retried until the deadline";
}

TEST(TransportSocket, ConnectTcpStillRetriesARefusalUntilItsDeadline) {
  const std::string address = loopback(troupe::testing::free_loopback_port());
  const auto start = Clock::now();
  try {
    ::close(wire::connect_tcp(address, Clock::now() + 400ms));
    FAIL() << "connected to " << address << ", where nothing listens";
  } catch (const wire::ConnectionRefused&) {
    FAIL() << "connect_tcp gave up at the first refusal";
  } catch (const wire::IoError& e) {
    // The gate's join relay strips this prefix to log the reason.
    EXPECT_EQ(std::string(e.what()), "could not connect to " + address + ": Connection refused");
    EXPECT_TRUE(e.timed_out);
  }
  const double waited = seconds_since(start);
  EXPECT_GT(waited, 0.3);
  EXPECT_LT(waited, 2.0);
}

TEST(TransportSocket, ConnectTcpReachesAListenerThatStartsLate) {
  const int port = troupe::testing::free_loopback_port();
  auto connected =
      std::async(std::launch::async, [port] { return wire::connect_tcp(loopback(port), Clock::now() + 5s); });
  std::this_thread::sleep_for(200ms);
  std::uint16_t bound = 0;
  const int listen_fd = listen_tcp(loopback(port), &bound);
  ASSERT_EQ(connected.wait_for(5s), std::future_status::ready);
  const int fd = connected.get();
  EXPECT_GE(fd, 0);
  ::close(fd);
  ::close(listen_fd);
}

TEST(TransportSocket, ConnectOnceToAnUnknownHostNamesTheHost) {
  try {
    ::close(wire::connect_tcp_once("no-such-host.invalid:7070", Clock::now() + 5s));
    FAIL() << "no-such-host.invalid resolved";
  } catch (const wire::UnknownHost& e) {
    EXPECT_EQ(e.host, "no-such-host.invalid");
    EXPECT_FALSE(e.reason.empty());
    EXPECT_EQ(std::string(e.what()), "unknown host 'no-such-host.invalid' (" + e.reason + ")");
    const std::invalid_argument& as_argument = e;  // what callers that only know the standard types catch
    EXPECT_NE(std::string(as_argument.what()).find("no-such-host.invalid"), std::string::npos);
  }
}

TEST(TransportSocket, ConnectOnceRefusesAnAddressWithoutAPort) {
  EXPECT_THROW(wire::connect_tcp_once("127.0.0.1", Clock::now() + 1s), std::invalid_argument);
  try {
    wire::connect_tcp_once("127.0.0.1", Clock::now() + 1s);
  } catch (const wire::UnknownHost&) {
    FAIL() << "a malformed address is not an unknown host";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "address '127.0.0.1' is not host:port");
  }
}

TEST(TransportSocket, ReadSomeReturnsWhatHasArrivedWithoutWaitingForMore) {
  Pair p;
  ASSERT_GE(p.theirs, 0);
  send_text(p.theirs, "hello");
  char buf[1024];
  std::string got;
  const auto start = Clock::now();
  // Loopback may hand the 5 bytes over in more than one piece.
  while (got.size() < 5) {
    const std::size_t n = wire::read_some(p.ours, buf, sizeof buf, Clock::now() + 5s);
    ASSERT_GT(n, 0u) << "end of stream before the 5 bytes";
    got.append(buf, n);
  }
  EXPECT_EQ(got, "hello");
  EXPECT_LT(seconds_since(start), 1.0) << "read_some waited for its whole capacity";
}

TEST(TransportSocket, ReadSomeNeverReturnsMoreThanItsCapacity) {
  Pair p;
  ASSERT_GE(p.theirs, 0);
  send_text(p.theirs, "abcdefgh");
  char buf[8] = {};
  std::size_t n = wire::read_some(p.ours, buf, 3, Clock::now() + 5s);
  ASSERT_GE(n, 1u);
  ASSERT_LE(n, 3u);
  std::string got(buf, n);
  while (got.size() < 8) {
    n = wire::read_some(p.ours, buf, sizeof buf, Clock::now() + 5s);
    ASSERT_GT(n, 0u);
    got.append(buf, n);
  }
  EXPECT_EQ(got, "abcdefgh");
}

TEST(TransportSocket, ReadSomeIsZeroAtEndOfStreamAfterTheLastBytes) {
  Pair p;
  ASSERT_GE(p.theirs, 0);
  send_text(p.theirs, "bye");
  ::shutdown(p.theirs, SHUT_WR);
  char buf[64];
  std::string got;
  for (;;) {
    const std::size_t n = wire::read_some(p.ours, buf, sizeof buf, Clock::now() + 5s);
    if (n == 0) break;
    got.append(buf, n);
  }
  EXPECT_EQ(got, "bye");
  EXPECT_EQ(wire::read_some(p.ours, buf, sizeof buf, Clock::now() + 5s), 0u) << "end of stream stays the end";
}

TEST(TransportSocket, ReadSomeFromASilentPeerTimesOutAtItsDeadline) {
  Pair p;
  ASSERT_GE(p.theirs, 0);
  char buf[64];
  const auto start = Clock::now();
  try {
    wire::read_some(p.ours, buf, sizeof buf, Clock::now() + 300ms);
    FAIL() << "read_some returned with nothing sent";
  } catch (const wire::IoError& e) {
    EXPECT_TRUE(e.timed_out);
    EXPECT_EQ(std::string(e.what()), "timed out");
  }
  const double waited = seconds_since(start);
  EXPECT_GE(waited, 0.29);
  EXPECT_LT(waited, 1.5);
}

TEST(TransportSocket, ReadSomeAfterAResetSaysSoAndHasNotTimedOut) {
  Pair p;
  ASSERT_GE(p.theirs, 0);
  linger hard{1, 0};  // close() sends RST instead of FIN
  ::setsockopt(p.theirs, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  ::close(p.theirs);
  p.theirs = -1;
  char buf[64];
  try {
    wire::read_some(p.ours, buf, sizeof buf, Clock::now() + 5s);
    FAIL() << "read_some returned after a reset";
  } catch (const wire::IoError& e) {
    EXPECT_FALSE(e.timed_out);
    EXPECT_EQ(std::string(e.what()), "connection reset by peer");
  }
}

}  // namespace
}  // namespace troupe::net
