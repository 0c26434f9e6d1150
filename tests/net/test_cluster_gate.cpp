// net/cluster/gate: the gate and the join relay on real loopback sockets,
// with an echo server playing CAF's local port. Round trips (20 MB both ways,
// many small messages), every refusal (wrong secret, secret on one side,
// version, admit hook), misbehaving clients that must never reach the echo
// server, stop() with live connections, and the handshake as the tcp
// backend's authentication hook.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <list>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "net/cluster/gate.hpp"
#include "net/tcp/tcp.hpp"
#include "net/tcp/wire.hpp"
#include "tests/net/test_cluster_support.hpp"

namespace troupe::net {
namespace {

using namespace std::chrono_literals;
using namespace troupe::net::testing;

// The message of the exception `make` throws ("" when it throws none).
template <typename F>
std::string error_of(F make) {
  try {
    make();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string random_payload(std::size_t bytes, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::string out(bytes, '\0');
  for (std::size_t i = 0; i + 8 <= bytes; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(&out[i], &v, 8);
  }
  return out;
}

// Sends `payload` through fd on one thread while reading the echo on this
// one; whether it came back exactly.
bool echo_round_trip(int fd, const std::string& payload) {
  std::thread writer([&] { send_all(fd, payload.data(), payload.size()); });
  std::string back(payload.size(), '\0');
  const bool got = recv_all(fd, back.data(), back.size());
  writer.join();
  return got && back == payload;
}

// Through one relay: 20 MB both ways, then 1000 small messages.
void check_round_trips(JoinRelay& relay) {
  const int fd = connect_blocking(relay.local_port());
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(echo_round_trip(fd, random_payload(20 << 20, 1))) << "20 MB did not come back exactly";
  for (int i = 0; i < 1000; ++i) {
    const std::string message = "message " + std::to_string(i) + std::string(static_cast<std::size_t>(i % 97), 'x');
    ASSERT_TRUE(send_all(fd, message.data(), message.size()));
    std::string back(message.size(), '\0');
    ASSERT_TRUE(recv_all(fd, back.data(), back.size())) << "message " << i;
    ASSERT_EQ(back, message);
  }
  ::close(fd);
}

// ---------------------------------------------------------------------------
// Round trips.

TEST(ClusterGate, RoundTripsWithoutSecretOnLoopback) {
  EchoServer echo;
  Log log;
  Gate gate(gate_config(echo.port(), handshake("coordinator"), &log));
  JoinRelay relay(relay_config(gate.port(), handshake("worker/a")));
  EXPECT_EQ(relay.local_host(), "127.0.0.1");
  EXPECT_EQ(relay.gate_identity(), "coordinator");
  check_round_trips(relay);
  EXPECT_EQ(gate.admitted(), 1u);
  EXPECT_EQ(gate.refused(), 0u);
  EXPECT_TRUE(log.has({"admitted", "127.0.0.1:", "'worker/a'"})) << log.all();
}

// An IPv4 address of this host that is not loopback, "" when it has none.
std::string non_loopback_ipv4() {
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return "";
  std::string found;
  for (ifaddrs* a = all; a && found.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    if (!is_loopback(text)) found = text;
  }
  ::freeifaddrs(all);
  return found;
}

// Without a secret nothing crosses hosts: the joiner refuses a gate at a
// non-loopback address before it reads a byte (so it never talks,
// unauthenticated and unsealed, to whatever answers there), and the gate
// would refuse it too.
TEST(ClusterGate, WithoutSecretTheJoinerRefusesAGateThatIsNotOnLoopback) {
  const std::string host = non_loopback_ipv4();
  if (host.empty()) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  EchoServer echo;
  Log log;
  GateConfig g = gate_config(echo.port(), handshake("coordinator"), &log);
  g.listen_address = "0.0.0.0:0";
  Gate gate(g);
  JoinRelayConfig r = relay_config(gate.port(), handshake("worker/a"));
  r.gate_address = host + ":" + std::to_string(gate.port());
  const std::string error = error_of([&] { JoinRelay relay(r); });
  EXPECT_NE(error.find("refusing peer " + host), std::string::npos) << error;
  EXPECT_NE(error.find("only loopback peers"), std::string::npos) << error;
  EXPECT_TRUE(eventually([&] { return gate.refused() == 1; })) << log.all();
  EXPECT_EQ(gate.admitted(), 0u);
  EXPECT_EQ(echo.connections(), 0u);
}

TEST(ClusterGate, RoundTripsWithSecretAndLaterConnectionsHandshakeAgain) {
  EchoServer echo;
  Log log;
  Gate gate(gate_config(echo.port(), handshake("coordinator", kSecretText), &log));
  JoinRelay relay(relay_config(gate.port(), handshake("worker/a", kSecretText), &log));
  check_round_trips(relay);
  // A second local connection: a fresh connection to the gate and handshake.
  const int fd = connect_blocking(relay.local_port());
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(echo_round_trip(fd, "second connection"));
  ::close(fd);
  EXPECT_EQ(gate.admitted(), 2u);
  EXPECT_EQ(echo.connections(), 2u);
  EXPECT_EQ(log.all().find(kSecretText), std::string::npos);
}

// ---------------------------------------------------------------------------
// Refusals.

TEST(ClusterGate, WrongSecretIsRefusedAndTheGateKeepsServing) {
  EchoServer echo;
  Log log;
  Gate gate(gate_config(echo.port(), handshake("coordinator", kSecretText), &log));
  const std::string error =
      error_of([&] { JoinRelay relay(relay_config(gate.port(), handshake("worker/a", "another secret"))); });
  EXPECT_NE(error.find("did not prove the cluster secret"), std::string::npos) << error;
  EXPECT_NE(error.find("does not match"), std::string::npos) << error;
  EXPECT_NE(error.find("127.0.0.1:" + std::to_string(gate.port())), std::string::npos) << error;
  ASSERT_TRUE(eventually([&] { return gate.refused() == 1; }));
  EXPECT_TRUE(log.has({"refused", "127.0.0.1:", "'worker/a'", "did not prove the cluster secret"})) << log.all();
  EXPECT_EQ(echo.bytes_received(), 0u);
  EXPECT_EQ(echo.connections(), 0u);

  JoinRelay good(relay_config(gate.port(), handshake("worker/b", kSecretText)));
  const int fd = connect_blocking(good.local_port());
  EXPECT_TRUE(echo_round_trip(fd, "after a refusal"));
  ::close(fd);
  EXPECT_EQ(gate.admitted(), 1u);
  EXPECT_EQ(log.all().find(kSecretText), std::string::npos);
  EXPECT_EQ(log.all().find("another secret"), std::string::npos);
}

TEST(ClusterGate, SecretOnOneSideOnlyIsRefusedEitherWay) {
  EchoServer echo;
  {
    Gate gate(gate_config(echo.port(), handshake("coordinator", kSecretText)));
    const std::string error = error_of([&] { JoinRelay relay(relay_config(gate.port(), handshake("worker/a"))); });
    EXPECT_NE(error.find("requires a cluster secret but the joiner has none"), std::string::npos) << error;
    EXPECT_TRUE(eventually([&] { return gate.refused() == 1; }));
  }
  {
    Log log;
    Gate gate(gate_config(echo.port(), handshake("coordinator"), &log));
    const std::string error =
        error_of([&] { JoinRelay relay(relay_config(gate.port(), handshake("worker/a", kSecretText))); });
    EXPECT_NE(error.find("has a cluster secret"), std::string::npos) << error;
    EXPECT_NE(error.find("the acceptor has none"), std::string::npos) << error;
    EXPECT_TRUE(eventually([&] { return gate.refused() == 1; }));
    EXPECT_TRUE(log.has({"refused", "'worker/a'", "has a cluster secret"})) << log.all();
  }
  EXPECT_EQ(echo.bytes_received(), 0u);
}

TEST(ClusterGate, VersionMismatchNamesBothVersions) {
  EchoServer echo;
  Gate gate(gate_config(echo.port(), handshake("coordinator", kSecretText, "0.4.0")));
  const std::string error =
      error_of([&] { JoinRelay relay(relay_config(gate.port(), handshake("worker/a", kSecretText, "0.3.9"))); });
  EXPECT_NE(error.find("version mismatch"), std::string::npos) << error;
  EXPECT_NE(error.find("0.4.0"), std::string::npos) << error;
  EXPECT_NE(error.find("0.3.9"), std::string::npos) << error;
  EXPECT_EQ(echo.bytes_received(), 0u);
}

TEST(ClusterGate, AdmitHookRefusalReachesTheJoiner) {
  EchoServer echo;
  GateConfig c = gate_config(echo.port(), handshake("coordinator", kSecretText));
  std::mutex asked_mutex;
  std::vector<std::string> asked;
  c.admit = [&](const std::string& identity) -> std::string {
    std::lock_guard<std::mutex> lock(asked_mutex);
    asked.push_back(identity);
    return identity == "worker/late" ? "the job has started; restart it to add workers" : "";
  };
  Gate gate(std::move(c));
  const std::string error =
      error_of([&] { JoinRelay relay(relay_config(gate.port(), handshake("worker/late", kSecretText))); });
  EXPECT_NE(error.find("the job has started; restart it to add workers"), std::string::npos) << error;
  JoinRelay early(relay_config(gate.port(), handshake("worker/early", kSecretText)));
  EXPECT_TRUE(eventually([&] { return gate.admitted() == 1 && gate.refused() == 1; }));
  std::lock_guard<std::mutex> lock(asked_mutex);
  EXPECT_EQ(asked, (std::vector<std::string>{"worker/late", "worker/early"}));
}

// The hook is asked about authenticated peers only: a wrong secret never
// reaches it.
TEST(ClusterGate, AdmitHookSeesAuthenticatedPeersOnly) {
  EchoServer echo;
  GateConfig c = gate_config(echo.port(), handshake("coordinator", kSecretText));
  std::atomic<int> asked{0};
  c.admit = [&](const std::string&) -> std::string {
    ++asked;
    return "";
  };
  Gate gate(std::move(c));
  EXPECT_FALSE(error_of([&] { JoinRelay relay(relay_config(gate.port(), handshake("worker/a", "wrong"))); }).empty());
  EXPECT_EQ(asked, 0);
}

// ---------------------------------------------------------------------------
// Misbehaving clients: dropped, logged, and the echo server sees nothing.

TEST(ClusterGate, MisbehavingClientsAreDroppedAndNeverReachThePort) {
  EchoServer echo;
  Log log;
  GateConfig c = gate_config(echo.port(), handshake("coordinator", kSecretText), &log);
  c.handshake_timeout = 300ms;
  Gate gate(std::move(c));

  struct Case {
    const char* name;
    std::string bytes;
    bool close_after;  // close our side at once (else wait for the gate to drop us)
    const char* logged;
  };
  std::string huge = "\xff\xff\xff\xff";
  // Frames are a u32 little-endian length, then a Cap'n Proto AuthMessage.
  std::string truncated("\x64\x00\x00\x00", 4);
  truncated += "only ten b";
  const Case cases[] = {
      {"garbage", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, "bytes, more than the 4096"},
      {"length 0xFFFFFFFF", huge + std::string(64, 'A'), false, "4294967295 bytes, more than the 4096"},
      {"truncated frame, then close", truncated, true, "end of stream"},
      {"silent", "", false, "timed out"},
      {"a frame that is not a response", std::string("\x08\x00\x00\x00hello!!!", 12), false,
       "malformed handshake response"},
  };
  std::size_t expected_refusals = 0;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const int fd = connect_blocking(gate.port());
    ASSERT_GE(fd, 0);
    if (!k.bytes.empty()) {
      ASSERT_TRUE(send_all(fd, k.bytes.data(), k.bytes.size()));
    }
    if (k.close_after) ::shutdown(fd, SHUT_WR);
    EXPECT_TRUE(sees_eof(fd, 3s)) << "the gate did not drop the connection";
    ::close(fd);
    ++expected_refusals;
    EXPECT_TRUE(eventually([&] { return gate.refused() == expected_refusals; }));
    EXPECT_TRUE(log.has({"dropped", "127.0.0.1:", k.logged})) << log.all();
  }
  EXPECT_EQ(echo.bytes_received(), 0u);
  EXPECT_EQ(echo.connections(), 0u);
  EXPECT_EQ(gate.admitted(), 0u);

  // Still serving.
  JoinRelay relay(relay_config(gate.port(), handshake("worker/a", kSecretText)));
  const int fd = connect_blocking(relay.local_port());
  EXPECT_TRUE(echo_round_trip(fd, "still serving"));
  ::close(fd);
}

TEST(ClusterGate, SilentClientsDoNotHoldUpOthers) {
  EchoServer echo;
  GateConfig c = gate_config(echo.port(), handshake("coordinator"));
  c.handshake_timeout = 2s;
  Gate gate(std::move(c));
  std::vector<int> silent;
  for (int i = 0; i < 5; ++i) silent.push_back(connect_blocking(gate.port()));
  const auto start = std::chrono::steady_clock::now();
  JoinRelay relay(relay_config(gate.port(), handshake("worker/a")));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  for (int fd : silent) ::close(fd);
}

TEST(ClusterGate, TooManyHandshakingConnectionsAreDropped) {
  EchoServer echo;
  Log log;
  GateConfig c = gate_config(echo.port(), handshake("coordinator"), &log);
  c.max_handshaking = 2;
  Gate gate(std::move(c));
  const int a = connect_blocking(gate.port()), b = connect_blocking(gate.port());
  std::this_thread::sleep_for(50ms);  // both accepted and handshaking
  const int third = connect_blocking(gate.port());
  EXPECT_TRUE(sees_eof(third, 2s));
  EXPECT_TRUE(eventually([&] { return log.has({"dropped", "2 connections are already handshaking"}); })) << log.all();
  for (int fd : {a, b, third}) ::close(fd);
}

// ---------------------------------------------------------------------------
// Closing.

TEST(ClusterGate, StopIsPromptWithLiveConnections) {
  EchoServer echo;
  auto gate = std::make_unique<Gate>(gate_config(echo.port(), handshake("coordinator", kSecretText)));
  JoinRelay relay(relay_config(gate->port(), handshake("worker/a", kSecretText)));
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(connect_blocking(relay.local_port()));
    ASSERT_TRUE(echo_round_trip(clients.back(), "live " + std::to_string(i)));
  }
  const int handshaking = connect_blocking(gate->port());  // silent, mid-handshake
  // A big transfer in flight in one of them.
  std::thread busy([fd = clients[0]] { send_all(fd, std::string(8 << 20, 'z').data(), 8 << 20); });

  const auto start = std::chrono::steady_clock::now();
  gate->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  gate->stop();  // idempotent
  for (int fd : clients) EXPECT_TRUE(sees_eof(fd, 3s));
  EXPECT_TRUE(sees_eof(handshaking, 3s));
  for (int fd : clients) ::shutdown(fd, SHUT_RDWR);
  busy.join();

  const auto relay_start = std::chrono::steady_clock::now();
  relay.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - relay_start, 1s);
  gate.reset();
  for (int fd : clients) ::close(fd);
  ::close(handshaking);
}

TEST(ClusterGate, RelayStopIsPromptWithLiveConnections) {
  EchoServer echo;
  Gate gate(gate_config(echo.port(), handshake("coordinator")));
  JoinRelay relay(relay_config(gate.port(), handshake("worker/a")));
  const int fd = connect_blocking(relay.local_port());
  ASSERT_TRUE(echo_round_trip(fd, "live"));
  const auto start = std::chrono::steady_clock::now();
  relay.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_TRUE(sees_eof(fd, 3s));
  ::close(fd);
}

TEST(ClusterGate, PeerClosePropagates) {
  EchoServer echo;
  Gate gate(gate_config(echo.port(), handshake("coordinator")));
  JoinRelay relay(relay_config(gate.port(), handshake("worker/a")));
  const int fd = connect_blocking(relay.local_port());
  ASSERT_TRUE(echo_round_trip(fd, "before the close"));
  echo.close_connections();  // CAF's side closes
  EXPECT_TRUE(sees_eof(fd, 3s));
  ::close(fd);

  // And the other way: the local client closes, the echo server's
  // connection ends (its thread exits after reading EOF).
  const int second = connect_blocking(relay.local_port());
  ASSERT_TRUE(echo_round_trip(second, "second"));
  ::close(second);
  EXPECT_TRUE(eventually([&] { return gate.admitted() == 2; }));
}

TEST(ClusterGate, RelayWaitsForAGateThatStartsLater) {
  // A free port: bind one, note it, release it.
  std::uint16_t port = 0;
  ::close(listen_tcp("127.0.0.1:0", &port));
  EchoServer echo;
  auto relay = std::async(std::launch::async,
                          [&] { return std::make_unique<JoinRelay>(relay_config(port, handshake("worker/a"))); });
  std::this_thread::sleep_for(300ms);
  GateConfig c = gate_config(echo.port(), handshake("coordinator"));
  c.listen_address = "127.0.0.1:" + std::to_string(port);
  Gate gate(std::move(c));
  auto r = relay.get();
  const int fd = connect_blocking(r->local_port());
  EXPECT_TRUE(echo_round_trip(fd, "late gate"));
  ::close(fd);
}

TEST(ClusterGate, NoGateIsAConnectionErrorAfterTheTimeout) {
  std::uint16_t port = 0;
  ::close(listen_tcp("127.0.0.1:0", &port));
  JoinRelayConfig c = relay_config(port, handshake("worker/a"));
  c.timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  const std::string error = error_of([&] { JoinRelay relay(c); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_NE(error.find("cannot reach the troupe gate at 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << error;
}

TEST(ClusterGate, AddressInUseSaysSoAndHowToFindTheHolder) {
  EchoServer echo;
  Gate first(gate_config(echo.port(), handshake("coordinator")));
  GateConfig c = gate_config(echo.port(), handshake("coordinator"));
  c.listen_address = "127.0.0.1:" + std::to_string(first.port());
  const std::string error = error_of([&] { Gate second(c); });
  EXPECT_NE(error.find(c.listen_address), std::string::npos) << error;
  EXPECT_NE(error.find("already in use"), std::string::npos) << error;
  EXPECT_NE(error.find("ss -ltnp"), std::string::npos) << error;
  c.forward_port = 0;
  c.listen_address = "127.0.0.1:0";
  EXPECT_THROW(Gate bad(c), std::invalid_argument);
  c.forward_port = echo.port();
  c.listen_address = "no port";
  EXPECT_THROW(Gate bad(c), std::invalid_argument);
}

// ---------------------------------------------------------------------------
// The handshake itself, and as the tcp backend's authentication hook.

// One handshake over a real loopback connection: what each end concludes.
struct HandshakePair {
  HandshakeResult accepted, joined;
};
HandshakePair handshake_over_loopback(const HandshakeConfig& acceptor_config, const HandshakeConfig& joiner_config) {
  std::uint16_t port = 0;
  const int listener = listen_tcp("127.0.0.1:0", &port);
  HandshakePair out;
  std::thread acceptor([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    wire::prepare_socket(fd);
    out.accepted = accept_handshake(fd, acceptor_config, Clock::now() + 2s);
    ::close(fd);
  });
  const int fd = wire::connect_tcp("127.0.0.1:" + std::to_string(port), Clock::now() + 2s);
  out.joined = join_handshake(fd, joiner_config, Clock::now() + 2s);
  acceptor.join();
  ::close(fd);
  ::close(listener);
  return out;
}

TEST(ClusterGate, HandshakeReportsIdentitiesBothWays) {
  const auto [accepted, joined] =
      handshake_over_loopback(handshake("coordinator", kSecretText), handshake("worker/h:1", kSecretText));
  EXPECT_TRUE(accepted.ok) << accepted.reason;
  EXPECT_TRUE(joined.ok) << joined.reason;
  EXPECT_EQ(accepted.peer_identity, "worker/h:1");
  EXPECT_EQ(joined.peer_identity, "coordinator");
  EXPECT_EQ(accepted.peer_host, "127.0.0.1");
  EXPECT_TRUE(accepted.verdict);
}

// --insecure on both ends: the secret is proven as before, and the keys
// that would seal the link are not given (the link carries plain bytes);
// sealed on both ends they are. Over real sockets, one handshake each.
TEST(ClusterGate, ClearLinksProveTheSecretAndGiveNoKeys) {
  for (const bool clear : {false, true}) {
    const auto [accepted, joined] = handshake_over_loopback(
        clear ? clear_handshake("coordinator", kSecretText) : handshake("coordinator", kSecretText),
        clear ? clear_handshake("worker/h:1", kSecretText) : handshake("worker/h:1", kSecretText));
    EXPECT_TRUE(accepted.ok) << accepted.reason;
    EXPECT_TRUE(joined.ok) << joined.reason;
    EXPECT_EQ(accepted.keys.protects(), !clear);
    EXPECT_EQ(joined.keys.protects(), !clear);
  }
}

// Through a gate and a relay: clear links on both ends carry the traffic;
// one end clear and the other sealed are refused, either way round, naming
// the disagreement; the gate goes on serving.
TEST(ClusterGate, ClearLinksRoundTripAndBothEndsMustAgree) {
  EchoServer echo;
  Log log;
  Gate gate(gate_config(echo.port(), clear_handshake("coordinator", kSecretText), &log));
  {
    JoinRelay relay(relay_config(gate.port(), clear_handshake("worker/a", kSecretText)));
    check_round_trips(relay);
  }
  const std::string sealed_joiner =
      error_of([&] { JoinRelay relay(relay_config(gate.port(), handshake("worker/b", kSecretText))); });
  EXPECT_NE(sealed_joiner.find("the acceptor runs with --insecure"), std::string::npos) << sealed_joiner;
  EXPECT_NE(sealed_joiner.find("every node of a cluster must agree"), std::string::npos) << sealed_joiner;
  ASSERT_TRUE(eventually([&] { return gate.refused() == 1; }));
  EXPECT_TRUE(log.has({"refused", "'worker/b'", "the acceptor runs with --insecure"})) << log.all();

  Gate sealed_gate(gate_config(echo.port(), handshake("coordinator", kSecretText), &log));
  const std::string clear_joiner =
      error_of([&] { JoinRelay relay(relay_config(sealed_gate.port(), clear_handshake("worker/c", kSecretText))); });
  EXPECT_NE(clear_joiner.find("the acceptor seals its links and this node runs with --insecure"), std::string::npos)
      << clear_joiner;
  EXPECT_EQ(echo.connections(), 1u);  // the first relay's only
  EXPECT_EQ(log.all().find(kSecretText), std::string::npos);
}

// A joiner's handshake with a fake gate that sends `first_frame` and waits
// for the joiner to hang up.
HandshakeResult join_a_fake_gate(const std::string& first_frame) {
  std::uint16_t port = 0;
  const int listener = listen_tcp("127.0.0.1:0", &port);
  std::thread fake([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    send_all(fd, first_frame.data(), first_frame.size());
    sees_eof(fd, 2s);
    ::close(fd);
  });
  const int fd = wire::connect_tcp("127.0.0.1:" + std::to_string(port), Clock::now() + 2s);
  const HandshakeResult r = join_handshake(fd, handshake("worker/a"), Clock::now() + 2s);
  ::close(fd);
  fake.join();
  ::close(listener);
  return r;
}

// A joiner that talks to something that is not a gate says so.
TEST(ClusterGate, JoinerRefusesAPeerThatIsNotAGate) {
  const HandshakeResult r = join_a_fake_gate(std::string("\x00\x00\x00\x05HELLO", 9));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("is not a troupe gate"), std::string::npos) << r.reason;
}

// A well-formed handshake message of the wrong kind first (a verdict where
// the challenge belongs) is no gate either, and the reason says what came.
TEST(ClusterGate, JoinerRefusesAFirstFrameThatIsNotAChallenge) {
  Verdict v;
  v.admitted = true;
  v.identity = "coordinator";
  const std::string message = v.encode();
  unsigned char prefix[wire::kLengthPrefixBytes];
  wire::put_u32(prefix, static_cast<std::uint32_t>(message.size()));
  const HandshakeResult r =
      join_a_fake_gate(std::string(reinterpret_cast<const char*>(prefix), sizeof prefix) + message);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.verdict);
  EXPECT_NE(r.reason.find("is not a troupe gate (its first frame is not a challenge: malformed handshake challenge: "
                          "a handshake verdict instead)"),
            std::string::npos)
      << r.reason;
}

// Two ranks as threads, each with the hook and its own secret; the errors
// of make_tcp_group (and a barrier), "" for none.
std::vector<std::string> tcp_ring_errors(const std::string& secret0, const std::string& secret1) {
  std::vector<int> fds;
  std::vector<std::string> addresses;
  for (int r = 0; r < 2; ++r) {
    std::uint16_t port = 0;
    fds.push_back(listen_tcp("127.0.0.1:0", &port));
    addresses.push_back("127.0.0.1:" + std::to_string(port));
  }
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      TcpGroupConfig c;
      c.rank = r;
      c.addresses = addresses;
      c.job_id = 42;
      c.options.timeout = 2s;
      c.connect_timeout = 1500ms;
      c.listen_fd = fds[static_cast<std::size_t>(r)];
      c.authenticate = handshake_hook(handshake("rank/" + std::to_string(r), r == 0 ? secret0 : secret1));
      try {
        auto group = make_tcp_group(c);
        group->barrier()->wait(Clock::now() + 5s);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST(ClusterGate, HandshakeHookAuthenticatesATcpGroup) {
  const auto same = tcp_ring_errors(kSecretText, kSecretText);
  EXPECT_EQ(same[0], "");
  EXPECT_EQ(same[1], "");
  // Each accepting rank drops the other's connections (and says why on
  // stderr) until the connect timeout, so both fail.
  ::testing::internal::CaptureStderr();
  const auto different = tcp_ring_errors(kSecretText, "something else");
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(different[0], "");
  EXPECT_NE(different[1], "");
  EXPECT_NE(logged.find("authentication failed"), std::string::npos) << logged.substr(0, 2000);
  EXPECT_NE(logged.find("did not prove the cluster secret"), std::string::npos) << logged.substr(0, 2000);
  EXPECT_EQ(logged.find(kSecretText), std::string::npos);
}

}  // namespace
}  // namespace troupe::net
