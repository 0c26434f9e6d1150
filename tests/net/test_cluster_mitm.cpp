// A man in the middle on real loopback sockets: a proxy between two ends of
// a protected link — the tcp ring (two ranks with the cluster secret) and
// the gate (relay, proxy, gate, echo server playing CAF) — that passes the
// handshake through untouched and then attacks the sealed records
// (net/tcp/sealed.hpp): flips one bit, replays a recorded frame, drops one,
// or swaps two. Every attack must end the connection with a logged reason
// naming the record that failed authentication, the all-reduce must fail on
// both ranks (never return a result computed from altered bytes), and the
// gate must deliver nothing of the attacked record or after it. The same
// proxy without an attack is transparent, so a test that expects a failure
// cannot pass because the proxy is broken.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/cluster/gate.hpp"
#include "net/tcp/sealed.hpp"
#include "net/tcp/tcp.hpp"
#include "tests/net/test_cluster_support.hpp"

namespace troupe::net {
namespace {

using namespace std::chrono_literals;
using namespace troupe::net::testing;
using kernels::Shape;
using kernels::Tensor;

// ---------------------------------------------------------------------------
// The proxy.

enum class Attack { none, flip_bit, replay_frame, drop_frame, swap_frames };

const char* attack_name(Attack a) {
  switch (a) {
    case Attack::none: return "none";
    case Attack::flip_bit: return "flip_bit";
    case Attack::replay_frame: return "replay_frame";
    case Attack::drop_frame: return "drop_frame";
    case Attack::swap_frames: return "swap_frames";
  }
  return "?";
}

struct AttackPlan {
  Attack attack = Attack::none;
  bool client_to_server = true;  // which direction is attacked
  std::size_t record = 0;        // the first record of the attacked frame (0: the first after the handshake)
  std::size_t records_per_frame = 1;  // the ring writes a frame as two records (header, payload)
};

// Listens on 127.0.0.1:0 and connects every client to 127.0.0.1:target.
// Each direction is parsed: first the gate handshake's frames (a 4-byte
// big-endian length, then the bytes: one from the joiner, two from the
// acceptor), then sealed records (a 4-byte little-endian length, the
// ciphertext, the tag), which is where the attack happens. The proxy knows
// no key: it does what an attacker on the network path can do.
class MitmProxy {
 public:
  MitmProxy(std::uint16_t target, AttackPlan plan) : target_(target), plan_(plan) {
    listen_fd_ = listen_tcp("127.0.0.1:0", &port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~MitmProxy() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : threads_) t.join();
    for (int fd : fds_) ::close(fd);
    ::close(listen_fd_);
  }
  std::uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Whether the attack was carried out (its records went by).
  bool attacked() const { return attacked_; }

 private:
  void accept_loop() {
    while (!stopping_) {
      const int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) {
        if (stopping_) return;
        continue;
      }
      const int server = connect_blocking(target_);
      std::lock_guard<std::mutex> lock(mutex_);
      fds_.push_back(client);
      if (server < 0) {
        ::shutdown(client, SHUT_RDWR);
        continue;
      }
      fds_.push_back(server);
      // Only the first connection is attacked (the ring and the relay make one).
      const bool first = connections_++ == 0;
      threads_.emplace_back([this, client, server, first] { pump(client, server, 1, first && plan_.client_to_server); });
      threads_.emplace_back([this, client, server, first] { pump(server, client, 2, first && !plan_.client_to_server); });
    }
  }

  // Copies one direction; `attack` says whether the plan applies to it.
  void pump(int from, int to, int handshake_frames, bool attack) {
    auto forward = [&](const std::string& bytes) { return send_all(to, bytes.data(), bytes.size()); };
    auto read = [&](std::size_t n, std::string& out) {
      out.assign(n, '\0');
      return n == 0 || recv_all(from, out.data(), n);
    };
    std::string prefix, body;
    for (int i = 0; i < handshake_frames; ++i) {
      if (!read(4, prefix)) return finish(from, to);
      const auto* p = reinterpret_cast<const unsigned char*>(prefix.data());
      const std::size_t n = (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
      if (!read(n, body) || !forward(prefix + body)) return finish(from, to);
    }
    const std::size_t first = plan_.record, n = plan_.records_per_frame;
    std::vector<std::string> held;  // swap_frames: the first frame, sent after the second
    for (std::size_t index = 0;; ++index) {
      if (!read(wire::kRecordPrefixBytes, prefix)) return finish(from, to);
      const auto* p = reinterpret_cast<const unsigned char*>(prefix.data());
      const std::size_t length = std::size_t{p[0]} | (std::size_t{p[1]} << 8) | (std::size_t{p[2]} << 16) |
                                 (std::size_t{p[3]} << 24);
      if (!read(length + kAeadTagBytes, body)) return finish(from, to);
      std::string record = prefix + body;
      if (attack && plan_.attack != Attack::none && index >= first && index < first + 2 * n) {
        const bool in_first_frame = index < first + n;
        switch (plan_.attack) {
          case Attack::flip_bit:
            if (index == first) {
              record[wire::kRecordPrefixBytes + body.size() / 2] ^= 0x10;  // ciphertext, or tag when empty
              attacked_ = true;
            }
            break;
          case Attack::replay_frame:
            if (in_first_frame) {
              held.push_back(record);
              if (held.size() == n) {  // the frame went through once: send it again
                if (!forward(record)) return finish(from, to);
                for (const auto& r : held)
                  if (!forward(r)) return finish(from, to);
                attacked_ = true;
                continue;
              }
            }
            break;
          case Attack::drop_frame:
            if (in_first_frame) {
              if (index + 1 == first + n) attacked_ = true;
              continue;
            }
            break;
          case Attack::swap_frames:
            if (in_first_frame) {
              held.push_back(record);
              continue;
            }
            if (index + 1 == first + 2 * n) {  // the second frame is through: now the first
              if (!forward(record)) return finish(from, to);
              for (const auto& r : held)
                if (!forward(r)) return finish(from, to);
              attacked_ = true;
              continue;
            }
            break;
          case Attack::none: break;
        }
      }
      if (!forward(record)) return finish(from, to);
    }
  }
  void finish(int from, int to) {
    ::shutdown(from, SHUT_RDWR);
    ::shutdown(to, SHUT_RDWR);
  }

  std::uint16_t target_;
  AttackPlan plan_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false}, attacked_{false};
  std::size_t connections_ = 0;  // under mutex_
  std::mutex mutex_;
  std::vector<int> fds_;
  std::list<std::thread> threads_;
  std::thread acceptor_;
};

// ---------------------------------------------------------------------------
// The tcp ring: rank 0 reaches rank 1 through the proxy (rank 1 reaches
// rank 0 directly), both with the same secret.

struct RingOutcome {
  std::string error[2];  // "" when the all-reduce returned
  bool correct[2] = {false, false};
  std::chrono::milliseconds took{0};
};

RingOutcome ring_through_proxy(const AttackPlan& plan, bool* attacked) {
  std::uint16_t ports[2] = {0, 0};
  int fds[2];
  for (int r = 0; r < 2; ++r) fds[r] = listen_tcp("127.0.0.1:0", &ports[r]);
  MitmProxy proxy(ports[1], plan);
  const std::vector<std::string> direct = {"127.0.0.1:" + std::to_string(ports[0]),
                                           "127.0.0.1:" + std::to_string(ports[1])};
  RingOutcome out;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      TcpGroupConfig c;
      c.rank = r;
      c.addresses = direct;
      if (r == 0) c.addresses[1] = proxy.address();
      c.job_id = 7;
      c.options.timeout = 10s;
      c.connect_timeout = 5s;
      c.listen_fd = fds[r];
      c.authenticate = handshake_hook(handshake("rank/" + std::to_string(r), kSecretText));
      // 2 Mi floats: each rank sends two 1 MiB chunks per step.
      const std::int64_t n = std::int64_t{2} << 20;
      Tensor t = Tensor::full(Shape{n}, static_cast<float>(r + 1));
      try {
        auto group = make_tcp_group(c);
        group->allreduce(t, ReduceOp::sum)->wait(Clock::now() + 15s);
        const float* v = t.f32();
        out.correct[r] = v[0] == 3.0f && v[n / 2] == 3.0f && v[n - 1] == 3.0f;
      } catch (const std::exception& e) {
        out.error[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  out.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  *attacked = proxy.attacked();
  return out;
}

TEST(ClusterMitm, TheProxyIsTransparentWithoutAnAttack) {
  bool attacked = true;
  const RingOutcome out = ring_through_proxy(AttackPlan{}, &attacked);
  EXPECT_EQ(out.error[0], "");
  EXPECT_EQ(out.error[1], "");
  EXPECT_TRUE(out.correct[0]);
  EXPECT_TRUE(out.correct[1]);
  EXPECT_FALSE(attacked);
}

class ClusterMitmRing : public ::testing::TestWithParam<Attack> {};

// Records rank 0 sends rank 1: 0 the Hello, then each frame a header and a
// payload record; the attack hits the first frame (records 1 and 2) or the
// first two.
TEST_P(ClusterMitmRing, FailsTheAllreduceOnBothRanksNamingTheRecord) {
  AttackPlan plan;
  plan.attack = GetParam();
  plan.record = 1;
  plan.records_per_frame = 2;
  if (plan.attack == Attack::flip_bit) plan.record = 2;  // a bit of the first payload
  bool attacked = false;
  const RingOutcome out = ring_through_proxy(plan, &attacked);
  ASSERT_TRUE(attacked) << "the proxy never saw the records it was to attack";
  // Rank 1 reads the attacked stream: its error names the record that did
  // not open. Rank 0 loses its connections when rank 1 gives up.
  EXPECT_NE(out.error[1].find("failed authentication"), std::string::npos) << out.error[1];
  EXPECT_NE(out.error[1].find("rank 0"), std::string::npos) << out.error[1];
  EXPECT_NE(out.error[0], "") << "rank 0 returned from an all-reduce whose other half was attacked";
  EXPECT_FALSE(out.correct[0] || out.correct[1]);
  // Dropped at once, not after the 10 s operation timeout.
  EXPECT_LT(out.took, 8s) << out.error[0] << " / " << out.error[1];
}

INSTANTIATE_TEST_SUITE_P(Attacks, ClusterMitmRing,
                         ::testing::Values(Attack::flip_bit, Attack::replay_frame, Attack::drop_frame,
                                           Attack::swap_frames),
                         [](const ::testing::TestParamInfo<Attack>& p) { return attack_name(p.param); });

// ---------------------------------------------------------------------------
// The gate: client -> relay -> proxy -> gate -> echo server (CAF's port).
// One-byte messages, each answered before the next is sent, so each is one
// record of its own.

struct GateRig {
  EchoServer echo;
  Log gate_log, relay_log;
  Gate gate;
  MitmProxy proxy;
  JoinRelay relay;
  explicit GateRig(const AttackPlan& plan)
      : gate(gate_config(echo.port(), handshake("coordinator", kSecretText), &gate_log)),
        proxy(gate.port(), plan),
        relay(relay_config(proxy.port(), handshake("worker/a", kSecretText), &relay_log)) {}
};

// Sends one byte and reads its echo; false when the connection ends first.
bool ping(int fd, char c) {
  char back = 0;
  return send_all(fd, &c, 1) && recv_all(fd, &back, 1) && back == c;
}

TEST(ClusterMitm, GateWithoutAnAttackEchoes) {
  GateRig rig(AttackPlan{});
  const int fd = connect_blocking(rig.relay.local_port());
  ASSERT_GE(fd, 0);
  for (char c : std::string("abc")) EXPECT_TRUE(ping(fd, c));
  ::close(fd);
  EXPECT_TRUE(rig.gate_log.has({"admitted", "(sealed)"})) << rig.gate_log.all();
}

TEST(ClusterMitm, GateDropsTheConnectionAtAFlippedBit) {
  AttackPlan plan;
  plan.attack = Attack::flip_bit;
  plan.record = 1;  // the second message
  GateRig rig(plan);
  const int fd = connect_blocking(rig.relay.local_port());
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(ping(fd, 'a'));
  const char b = 'b';
  ASSERT_TRUE(send_all(fd, &b, 1));
  EXPECT_TRUE(sees_eof(fd, 5s)) << "the connection stayed up after an altered record";
  ::close(fd);
  EXPECT_TRUE(rig.proxy.attacked());
  EXPECT_EQ(rig.echo.bytes_received(), 1u) << "the altered byte reached CAF's port";
  EXPECT_TRUE(eventually([&] { return rig.gate_log.has({"closed", "worker/a", "record 1 failed authentication"}); }))
      << rig.gate_log.all();
}

TEST(ClusterMitm, GateDropsTheConnectionAtAReplayedRecord) {
  AttackPlan plan;
  plan.attack = Attack::replay_frame;
  plan.record = 0;  // the first message, sent twice
  GateRig rig(plan);
  const int fd = connect_blocking(rig.relay.local_port());
  ASSERT_GE(fd, 0);
  const char a = 'a';
  ASSERT_TRUE(send_all(fd, &a, 1));
  EXPECT_TRUE(sees_eof(fd, 5s)) << "the connection stayed up after a replayed record";
  ::close(fd);
  EXPECT_TRUE(rig.proxy.attacked());
  EXPECT_TRUE(eventually([&] { return rig.gate_log.has({"record 1 failed authentication"}); })) << rig.gate_log.all();
  EXPECT_EQ(rig.echo.bytes_received(), 1u) << "the replayed byte reached CAF's port";
}

TEST(ClusterMitm, RelayDropsTheConnectionAtAnAlteredRecordFromTheGate) {
  AttackPlan plan;
  plan.attack = Attack::flip_bit;
  plan.client_to_server = false;
  plan.record = 0;  // the echo of the first message
  GateRig rig(plan);
  const int fd = connect_blocking(rig.relay.local_port());
  ASSERT_GE(fd, 0);
  const char a = 'a';
  ASSERT_TRUE(send_all(fd, &a, 1));
  char back = 0;
  const ssize_t got = ::recv(fd, &back, 1, 0);  // 10 s receive timeout
  EXPECT_EQ(got, 0) << "the client received " << (got > 0 ? "an altered byte" : "no end of stream");
  ::close(fd);
  EXPECT_TRUE(rig.proxy.attacked());
  EXPECT_TRUE(eventually([&] { return rig.relay_log.has({"closed", "record 0 failed authentication"}); }))
      << rig.relay_log.all();
}

}  // namespace
}  // namespace troupe::net
