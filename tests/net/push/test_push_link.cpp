// Parameter-server pushes on the data plane (net/push/push_link.hpp), on
// real loopback sockets: pushes over the link to real shard actors end bit
// for bit where the same pushes sent in-process do (plaintext and sealed,
// two shards, pipelined); refusals name their reason and leave the link
// usable; a server killed, stopped or aborted under a waiting client fails
// it within seconds, not at its timeout; a bit flipped on a sealed link
// fails the push and applies nothing; a bad CRC or an oversized claim from
// a raw peer is refused before anything is applied or allocated.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/ps/shard.hpp"
#include "net/cluster/gate.hpp"
#include "net/push/push_link.hpp"
#include "net/tcp/tcp.hpp"
#include "net/tcp/wire.hpp"
#include "tests/support/mitm_proxy.hpp"

namespace troupe::net::push {
namespace {

using actors::ReplicaState;
using actors::ps::shard_apply;
using actors::ps::ShardConfig;
using actors::ps::ShardCore;

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

constexpr std::uint64_t kJob = 0x17;
const std::string kSecret = "correct horse battery staple";

Ms since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - t);
}

std::vector<float> wave(std::int64_t n, double phase) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.37 * double(i) + phase));
  return v;
}

bool bitwise_equal(const float* a, const float* b, std::int64_t n) {
  return std::memcmp(a, b, static_cast<std::size_t>(n) * sizeof(float)) == 0;
}

// The cluster handshake with the secret (sealed links), or none (plaintext).
std::function<net::LinkKeys(int, bool, net::Deadline)> hook(const std::string& identity, const std::string& secret) {
  net::HandshakeConfig c;
  if (!secret.empty()) c.secret = net::Secret::from_text(secret);
  c.version = "test";
  c.identity = identity;
  return net::handshake_hook(c);
}

// Real shards (their cores, shard.hpp: what a PushServer applies pushes to;
// no actor system, so that this suite runs under ThreadSanitizer).
struct Shards {
  std::vector<std::shared_ptr<ShardCore>> cores;

  explicit Shards(const std::vector<std::int64_t>& sizes) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      ShardConfig c;
      c.index = static_cast<int>(i);
      c.size = sizes[i];
      c.optimizer.name = "adam";
      c.optimizer.weight_decay = 1e-4f;
      c.schedule = std::make_shared<models::LrSchedule>("constant", 1e-3f);
      c.replicas = 2;
      cores.push_back(std::make_shared<ShardCore>(c));
    }
  }
  // A push in process, as the shard's actor applies one from a replica of
  // its own process.
  Tensor push(int shard, GradientPush p) { return cores.at(static_cast<std::size_t>(shard))->apply(p).fresh; }
  // What a process hosting these shards serves them with.
  std::function<AppliedPush(int, GradientPush)> apply() {
    std::map<int, std::shared_ptr<ShardCore>> by_index;
    for (std::size_t i = 0; i < cores.size(); ++i) by_index[static_cast<int>(i)] = cores[i];
    return shard_apply(by_index);
  }
  ReplicaState state(int shard) { return cores.at(static_cast<std::size_t>(shard))->state(); }
  std::int64_t applied(int shard) { return cores.at(static_cast<std::size_t>(shard))->counters().applied; }
};

// A log the tests can search.
struct Log {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(l);
    };
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

PushServerConfig server_config(std::map<int, std::int64_t> shards, std::function<AppliedPush(int, GradientPush)> apply,
                               const std::string& secret = "", Log* log = nullptr) {
  PushServerConfig c;
  std::uint16_t port = 0;
  c.listen_fd = net::listen_tcp("127.0.0.1:0", &port);
  c.job_id = kJob;
  if (!secret.empty()) c.authenticate = hook("ps/0", secret);
  c.shards = std::move(shards);
  c.apply = std::move(apply);
  c.io_timeout = 10s;
  c.handshake_timeout = 5s;
  if (log) c.log = log->sink();
  return c;
}

PushClientConfig client_config(std::uint16_t port, const std::string& secret = "") {
  PushClientConfig c;
  c.address = "127.0.0.1:" + std::to_string(port);
  c.job_id = kJob;
  c.connect_timeout = 5s;
  c.timeout = 10s;
  if (!secret.empty()) c.authenticate = hook("worker/0", secret);
  return c;
}

// Shard 0 is small; shard 1 spans several sealed records (1 MiB each).
const std::vector<std::int64_t> kSizes = {1000, 300000};

// ---------------------------------------------------------------------------
// 1. Round trips: the link adds nothing and loses nothing.

void round_trip(const std::string& secret) {
  Shards remote(kSizes), local(kSizes);
  Log log;
  PushServer server(server_config({{0, kSizes[0]}, {1, kSizes[1]}}, remote.apply(), secret, &log));
  PushClient client(client_config(server.port(), secret));
  EXPECT_EQ(client.sealed(), !secret.empty());
  constexpr int kRounds = 6;
  for (int round = 0; round < kRounds; ++round) {
    const int rank = round % 2;
    const std::int64_t clock = round / 2 + 1;
    std::vector<std::vector<float>> gradients, answers;
    for (int s = 0; s < 2; ++s) {
      gradients.push_back(wave(kSizes[static_cast<std::size_t>(s)], round * 1.7 + s));
      answers.emplace_back(static_cast<std::size_t>(kSizes[static_cast<std::size_t>(s)]), -1.0f);
    }
    // Pipelined: both pushes leave before either answer is read. In odd
    // rounds the second says it is the last before reading (the server
    // answers it on its reading thread); in even rounds nothing says so
    // (every answer through the writer thread).
    const bool mark_last = round % 2 == 1;
    for (int s = 0; s < 2; ++s)
      client.send(s, 0, rank, clock, gradients[static_cast<std::size_t>(s)].data(), kSizes[static_cast<std::size_t>(s)],
                  mark_last && s == 1);
    EXPECT_EQ(client.outstanding(), 2u);
    for (int s = 0; s < 2; ++s)
      // The push's staleness, as each shard measured it: ranks 0 and 1
      // push by turns, so every push after the first missed one update.
      EXPECT_EQ(client.receive(s, answers[static_cast<std::size_t>(s)].data(), kSizes[static_cast<std::size_t>(s)]),
                round == 0 ? 0 : 1)
          << "round " << round << ", shard " << s;
    EXPECT_EQ(client.outstanding(), 0u);
    // The same pushes, in-process, to identical shards.
    for (int s = 0; s < 2; ++s) {
      GradientPush p;
      p.rank = rank;
      p.clock = clock;
      p.gradient = Tensor::from_vector({kSizes[static_cast<std::size_t>(s)]}, gradients[static_cast<std::size_t>(s)]);
      const Tensor fresh = local.push(s, std::move(p));
      ASSERT_EQ(fresh.numel(), kSizes[static_cast<std::size_t>(s)]);
      EXPECT_TRUE(bitwise_equal(fresh.f32(), answers[static_cast<std::size_t>(s)].data(), fresh.numel()))
          << "round " << round << ", shard " << s << ": the answer over the link differs";
    }
  }
  EXPECT_EQ(server.pushes(), 2 * kRounds);
  for (int s = 0; s < 2; ++s) {
    const ReplicaState a = remote.state(s), b = local.state(s);
    EXPECT_TRUE(bitwise_equal(a.parameters.f32(), b.parameters.f32(), kSizes[static_cast<std::size_t>(s)]))
        << "shard " << s << "'s parameters differ";
    ASSERT_EQ(a.buffers.size(), b.buffers.size());
    for (std::size_t i = 0; i < a.buffers.size(); ++i)
      EXPECT_TRUE(bitwise_equal(a.buffers[i].second.f32(), b.buffers[i].second.f32(), a.buffers[i].second.numel()))
          << "shard " << s << "'s optimizer buffer " << a.buffers[i].first << " differs";
    EXPECT_EQ(remote.applied(s), kRounds);
  }
  EXPECT_EQ(log.all(), "") << "the server dropped a connection";
}

TEST(PsPushLink, PlaintextPushesEndBitwiseWhereInProcessPushesDo) { round_trip(""); }
TEST(PsPushLink, SealedPushesEndBitwiseWhereInProcessPushesDo) { round_trip(kSecret); }

// NaN, -0 and infinities cross as they are (raw bytes, not CAF's float
// serialisation), and a shard part of 0 floats round-trips.
TEST(PsPushLink, SpecialFloatsAndEmptyPartsCrossUnchanged) {
  const std::vector<float> special = {std::nanf(""), -0.0f, INFINITY, -INFINITY, 1e-45f, 3.5f};
  // Shard 1 also answers a staleness beyond 32 bits; shard 0 none.
  PushServer server(server_config({{0, 6}, {1, 0}}, [&](int shard, GradientPush p) -> AppliedPush {
    if (shard == 1) return AppliedPush(Tensor::empty({0}), std::int64_t{1} << 40);
    return p.gradient.clone();  // echo
  }));
  PushClient client(client_config(server.port()));
  std::vector<float> back(6, 0.0f);
  client.send(0, 0, 0, 1, special.data(), 6);
  client.send(1, 0, 0, 1, nullptr, 0);
  EXPECT_EQ(client.receive(0, back.data(), 6), -1);
  EXPECT_EQ(client.receive(1, nullptr, 0), std::int64_t{1} << 40);
  EXPECT_TRUE(bitwise_equal(special.data(), back.data(), 6));
}

// ---------------------------------------------------------------------------
// 2. Refusals name their reason; the link and the other shards go on.

TEST(PsPushLink, RefusalsNameTheReasonAndTheLinkGoesOn) {
  Shards shards(kSizes);
  Log log;
  PushServer server(server_config({{0, kSizes[0]}, {1, kSizes[1]}}, shards.apply(), "", &log));
  PushClient client(client_config(server.port()));
  const std::string at = "at 127.0.0.1:" + std::to_string(server.port());
  const auto g0 = wave(kSizes[0], 0.5);
  const auto g1 = wave(kSizes[1], 0.25);
  std::vector<float> out0(g0.size()), out1(g1.size());
  auto refusal = [&](int shard, float* out, std::int64_t floats) -> std::string {
    try {
      client.receive(shard, out, floats);
    } catch (const PushError& e) {
      return e.what();
    }
    return "no refusal";
  };
  // Pipelined: an unknown shard, a wrong size and a push from another view
  // (refused by the shard actor itself) between good pushes.
  client.send(7, 0, 0, 1, g0.data(), 10);
  client.send(0, 0, 0, 1, g0.data(), kSizes[0]);
  client.send(1, 0, 0, 1, g1.data(), kSizes[1] - 16);
  client.send(1, 3, 0, 1, g1.data(), kSizes[1]);
  client.send(1, 0, 0, 1, g1.data(), kSizes[1]);
  std::string e = refusal(7, out0.data(), 10);
  EXPECT_NE(e.find("push to shard 7 " + at + ": refused by the server: shard 7 is not hosted here (hosted: 0 1)"),
            std::string::npos)
      << e;
  client.receive(0, out0.data(), kSizes[0]);
  e = refusal(1, out1.data(), kSizes[1] - 16);
  EXPECT_NE(e.find("push to shard 1 " + at), std::string::npos) << e;
  EXPECT_NE(e.find("a push of 299984 floats for shard 1, whose part has 300000"), std::string::npos) << e;
  e = refusal(1, out1.data(), kSizes[1]);
  EXPECT_NE(e.find("refused by the server: push from replica 0 of view 3 dropped: the job is in view 0"),
            std::string::npos)
      << e;
  client.receive(1, out1.data(), kSizes[1]);
  EXPECT_EQ(server.pushes(), 2) << "only the two good pushes count as applied";
  EXPECT_EQ(shards.applied(0), 1);
  EXPECT_EQ(shards.applied(1), 1);
  EXPECT_EQ(log.all(), "") << "a refusal dropped the connection";
  // Receiving in another order than the sends is the caller's error, said so.
  client.send(0, 0, 1, 1, g0.data(), kSizes[0]);
  e = refusal(1, out1.data(), kSizes[1]);
  EXPECT_NE(e.find("the oldest unanswered push is to shard 0"), std::string::npos) << e;
  client.receive(0, out0.data(), kSizes[0]);
}

TEST(PsPushLink, AClientOfAnotherJobFailsAtOnceNamingBothJobs) {
  Log log;
  PushServer server(server_config(
      {{0, 4}}, [](int, GradientPush p) { return p.gradient; }, "", &log));
  PushClientConfig c = client_config(server.port());
  c.job_id = 0x99;
  const auto start = std::chrono::steady_clock::now();
  try {
    PushClient client(c);
    FAIL() << "connected to a server of another job";
  } catch (const PushError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("push link to 127.0.0.1:" + std::to_string(server.port())), std::string::npos) << what;
    EXPECT_NE(what.find("the server is in job 0x17, this end in job 0x99"), std::string::npos) << what;
  }
  EXPECT_LT(since(start), 2s);
  for (int i = 0; i < 100 && log.all().empty(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_NE(log.all().find("the client is in job 0x99, this end in job 0x17"), std::string::npos) << log.all();
}

TEST(PsPushLink, AWrongSecretIsRefusedAndNamed) {
  Log log;
  PushServer server(server_config(
      {{0, 4}}, [](int, GradientPush p) { return p.gradient; }, kSecret, &log));
  try {
    PushClient client(client_config(server.port(), "another secret"));
    FAIL() << "authenticated with the wrong secret";
  } catch (const PushError& e) {
    EXPECT_NE(std::string(e.what()).find("authentication failed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server.pushes(), 0);
}

TEST(PsPushLink, NothingListeningFailsAtTheConnectTimeout) {
  std::uint16_t port = 0;
  ::close(net::listen_tcp("127.0.0.1:0", &port));  // a port nobody listens on
  PushClientConfig c = client_config(port);
  c.connect_timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(PushClient client(c), PushError);
  EXPECT_GE(since(start), 250ms) << "refused connects were not retried";
  EXPECT_LT(since(start), 2s);
}

// ---------------------------------------------------------------------------
// A raw plaintext peer: what a broken or hostile client could send.

struct RawPeer {
  int fd = -1;
  explicit RawPeer(std::uint16_t port) {
    fd = net::wire::connect_tcp("127.0.0.1:" + std::to_string(port), net::Clock::now() + 5s);
    net::wire::Hello h;
    h.purpose = net::wire::Purpose::push_link;
    h.version = push_wire::kVersion;
    h.job_id = kJob;
    net::wire::write_hello(fd, nullptr, h, net::Clock::now() + 5s);
    net::wire::read_hello(fd, nullptr, net::Clock::now() + 5s);
  }
  ~RawPeer() { ::close(fd); }
  void send(const push_wire::PushHeader& h, const std::vector<float>& payload, bool corrupt) {
    unsigned char header[push_wire::kPushHeaderBytes];
    push_wire::PushHeader with = h;
    push_wire::encode(with, header);
    with.crc32c = push_wire::push_crc(header, payload.data(), payload.size() * sizeof(float)) ^ (corrupt ? 1u : 0u);
    push_wire::encode(with, header);
    net::wire::write_all(fd, header, sizeof header, payload.data(), payload.size() * sizeof(float),
                         net::Clock::now() + 5s);
  }
  // The refusal's reason, or "" for an applied answer.
  std::string answer() {
    unsigned char header[push_wire::kAnswerHeaderBytes];
    net::wire::read_all(fd, header, sizeof header, net::Clock::now() + 5s);
    const auto h = push_wire::decode_answer(header);
    std::string reason(h.reason_bytes, '\0');
    if (!reason.empty()) net::wire::read_all(fd, reason.data(), reason.size(), net::Clock::now() + 5s);
    return reason;
  }
  // Whether the server closed the connection (within 5 s).
  bool closed() {
    char c;
    try {
      net::wire::read_all(fd, &c, 1, net::Clock::now() + 5s);
    } catch (const net::wire::IoError& e) {
      return !e.timed_out;
    }
    return false;
  }
};

// A raw plaintext ps task: what a broken or hostile server could answer. It
// passes the Hellos, writes `answers`, then reads what the client sends
// until the client closes (nothing unread may reset the connection before
// the client has read the answers).
struct RawPsTask {
  int listen_fd = -1;
  std::uint16_t port = 0;
  std::thread thread;
  explicit RawPsTask(std::string answers) {
    listen_fd = net::listen_tcp("127.0.0.1:0", &port);
    thread = std::thread([this, answers = std::move(answers)] {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      const timeval ten_seconds{10, 0};  // the drain below has a deadline too
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &ten_seconds, sizeof ten_seconds);
      try {
        (void)net::wire::read_hello(fd, nullptr, net::Clock::now() + 5s);
        net::wire::Hello h;
        h.purpose = net::wire::Purpose::push_link;
        h.version = push_wire::kVersion;
        h.job_id = kJob;
        net::wire::write_hello(fd, nullptr, h, net::Clock::now() + 5s);
        net::wire::write_all(fd, answers.data(), answers.size(), nullptr, 0, net::Clock::now() + 5s);
        ::shutdown(fd, SHUT_WR);
        char sink[4096];
        while (::recv(fd, sink, sizeof sink, 0) > 0) {}
      } catch (const std::exception&) {}
      ::close(fd);
    });
  }
  ~RawPsTask() {
    ::shutdown(listen_fd, SHUT_RDWR);  // wakes an accept that never came
    thread.join();
    ::close(listen_fd);
  }
  static std::string answer(push_wire::AnswerHeader h, const std::string& payload) {
    unsigned char header[push_wire::kAnswerHeaderBytes];
    push_wire::encode(h, header);
    h.crc32c = push_wire::answer_crc(header, payload.data(), payload.size());
    push_wire::encode(h, header);
    return std::string(reinterpret_cast<const char*>(header), sizeof header) + payload;
  }
};

// Sends one push of 4 floats marked last, receives its answer into `out`
// and returns the error ("" when it took an answer).
std::string push_four(PushClient& client, std::int64_t clock, std::vector<float>& out) {
  const auto g = wave(4, 1);
  try {
    client.send(0, 0, 0, clock, g.data(), 4, true);
    client.receive(0, out.data(), 4);
  } catch (const PushError& e) {
    return e.what();
  }
  return "";
}

// A refusal's reason is the server's text but bytes from the network: a
// NUL would cut the replica's error short, CR/LF forge log lines, ESC drive
// a terminal. They reach the error as '?', the rest of the reason whole,
// and the client takes the next answer (fuzz/push_answers.cpp found the
// NUL).
TEST(PsPushLink, ARefusalsControlBytesNeverReachTheError) {
  const std::string reason("no\0such\x1b[2Jshard\r\nFAKE LOG LINE", 31);
  push_wire::AnswerHeader refusal;
  refusal.shard = 0;
  refusal.sequence = 0;
  refusal.status = static_cast<std::uint32_t>(push_wire::AnswerStatus::refused);
  refusal.reason_bytes = static_cast<std::uint32_t>(reason.size());
  const std::vector<float> fresh = wave(4, 3);
  push_wire::AnswerHeader applied;
  applied.shard = 0;
  applied.sequence = 1;
  applied.floats = 4;
  applied.staleness = 2;
  RawPsTask task(RawPsTask::answer(refusal, reason) +
                 RawPsTask::answer(applied, std::string(reinterpret_cast<const char*>(fresh.data()), 16)));
  PushClient client(client_config(task.port));
  std::vector<float> out(4);
  const std::string what = push_four(client, 1, out);
  EXPECT_NE(what.find("refused by the server: no?such?[2Jshard??FAKE LOG LINE"), std::string::npos) << what;
  EXPECT_EQ(push_four(client, 2, out), "");
  EXPECT_TRUE(bitwise_equal(out.data(), fresh.data(), 4));
}

// A refusal carries no floats; one that claims some is a protocol error
// named as such, and the client is then unusable.
TEST(PsPushLink, ARefusalThatClaimsFloatsIsAProtocolError) {
  push_wire::AnswerHeader refusal;
  refusal.status = static_cast<std::uint32_t>(push_wire::AnswerStatus::refused);
  refusal.floats = 5;
  refusal.reason_bytes = 2;
  RawPsTask task(RawPsTask::answer(refusal, "no"));
  PushClient client(client_config(task.port));
  std::vector<float> out(4);
  const std::string what = push_four(client, 1, out);
  EXPECT_NE(what.find("a refusal that claims 5 floats (it carries none)"), std::string::npos) << what;
  EXPECT_NE(push_four(client, 2, out), "") << "a client after a protocol error pushed again";
}

// A Hello for the ring, or one of an older push-link version, is answered
// (so the peer learns what this end is) and then dropped, naming what differs.
TEST(PsPushLink, AHelloOfAnotherPurposeOrVersionIsDropped) {
  Log log;
  PushServer server(server_config(
      {{0, 4}}, [](int, GradientPush p) { return p.gradient; }, "", &log));
  for (const bool ring : {true, false}) {
    const int fd = net::wire::connect_tcp("127.0.0.1:" + std::to_string(server.port()), net::Clock::now() + 5s);
    net::wire::Hello h;
    h.purpose = ring ? net::wire::Purpose::ring : net::wire::Purpose::push_link;
    h.version = ring ? push_wire::kVersion : 1;
    h.job_id = kJob;
    net::wire::write_hello(fd, nullptr, h, net::Clock::now() + 5s);
    const net::wire::Hello answer = net::wire::read_hello(fd, nullptr, net::Clock::now() + 5s);
    EXPECT_EQ(answer.purpose, net::wire::Purpose::push_link);
    ::close(fd);
  }
  // The two connections are served on their own threads, so their lines
  // may come in either order: wait for both.
  const auto both_logged = [&] {
    const std::string all = log.all();
    return all.find("version 1") != std::string::npos && all.find("wrong purpose") != std::string::npos;
  };
  for (int i = 0; i < 500 && !both_logged(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_NE(log.all().find("wrong purpose 'ring' (expected 'push link'): not a troupe push-link client"),
            std::string::npos)
      << log.all();
  EXPECT_NE(log.all().find("the client speaks push-link version 1, this end " + std::to_string(push_wire::kVersion)),
            std::string::npos)
      << log.all();
}

// A plaintext server whose apply counts the pushes and echoes them, for
// the raw peers below.
struct CountingServer {
  std::atomic<int> applied{0};
  Log log;
  PushServer server;
  explicit CountingServer(std::initializer_list<std::pair<const int, std::int64_t>> shards)
      : server(server_config(
            shards,
            [this](int, GradientPush p) {
              ++applied;
              return p.gradient;
            },
            "", &log)) {}
};

TEST(PsPushLink, APlaintextPushWithABadCrcIsRefusedAndNotApplied) {
  CountingServer s({{0, 64}});
  RawPeer peer(s.server.port());
  push_wire::PushHeader h;
  h.floats = 64;
  peer.send(h, wave(64, 0), true);
  EXPECT_NE(peer.answer().find("CRC-32C does not match"), std::string::npos);
  EXPECT_TRUE(peer.closed());
  EXPECT_EQ(s.applied, 0);
  EXPECT_EQ(s.server.pushes(), 0);
}

// Flags the server does not know are a protocol error: the connection is
// dropped, naming them, and nothing is applied.
TEST(PsPushLink, APushWithUnknownFlagsIsDroppedAndNotApplied) {
  CountingServer s({{0, 64}});
  RawPeer peer(s.server.port());
  push_wire::PushHeader h;
  h.floats = 64;
  h.flags = push_wire::kReadsNext | 4;
  peer.send(h, wave(64, 0), false);
  EXPECT_TRUE(peer.closed());
  EXPECT_EQ(s.applied, 0);
  EXPECT_NE(s.log.all().find("push 0 has unknown flags 0x5"), std::string::npos) << s.log.all();
}

// After a push marked as the last before reading, the client refuses to
// send again until every answer is in (the server may be blocked writing
// that answer on its reading thread); once they are, it sends as before.
TEST(PsPushLink, ASendBeforeTheAnswersToAPushMarkedLastIsRefusedByTheClient) {
  Shards shards(kSizes);
  PushServer server(server_config({{0, kSizes[0]}, {1, kSizes[1]}}, shards.apply()));
  PushClient client(client_config(server.port()));
  const auto g0 = wave(kSizes[0], 0.1), g1 = wave(kSizes[1], 0.2);
  std::vector<float> out0(g0.size()), out1(g1.size());
  client.send(0, 0, 0, 1, g0.data(), kSizes[0]);
  client.send(1, 0, 0, 1, g1.data(), kSizes[1], true);
  try {
    client.send(0, 0, 0, 2, g0.data(), kSizes[0]);
    ADD_FAILURE() << "a send after a push marked last was not refused";
  } catch (const PushError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "a push sent before the answers to a push marked as the last before reading (2 unanswered)"),
              std::string::npos)
        << e.what();
  }
  client.receive(0, out0.data(), kSizes[0]);
  try {
    client.send(0, 0, 0, 2, g0.data(), kSizes[0]);
    ADD_FAILURE() << "a send with one answer outstanding was not refused";
  } catch (const PushError&) {}
  client.receive(1, out1.data(), kSizes[1]);
  client.send(0, 0, 0, 2, g0.data(), kSizes[0], true);  // usable again
  client.receive(0, out0.data(), kSizes[0]);
  EXPECT_EQ(shards.applied(0), 2);
  EXPECT_EQ(shards.applied(1), 1);
}

// Who writes an answer: on a fresh connection (its writer thread has never
// taken one) the answer to a push marked last comes from the reading
// thread; an unmarked push's always from the writer thread. Both are the
// same bytes (the round-trip tests above alternate them).
TEST(PsPushLink, OnlyAPushMarkedLastIsAnsweredByTheReadingThread) {
  Shards shards(kSizes);
  PushServer server(server_config({{0, kSizes[0]}, {1, kSizes[1]}}, shards.apply(), kSecret));
  const auto g = wave(kSizes[1], 0.4);
  std::vector<float> out(g.size());
  {
    PushClient client(client_config(server.port(), kSecret));
    client.send(1, 0, 0, 1, g.data(), kSizes[1], true);
    client.receive(1, out.data(), kSizes[1]);
    EXPECT_EQ(server.answered_by_reader(), 1);
  }
  {
    PushClient client(client_config(server.port(), kSecret));
    for (int k = 0; k < 3; ++k) {
      client.send(1, 0, 1, k + 1, g.data(), kSizes[1]);
      client.receive(1, out.data(), kSizes[1]);
    }
  }
  EXPECT_EQ(server.pushes(), 4);
  EXPECT_EQ(server.answered_by_reader(), 1);
}

// Where a push's time went on the server: every applied push answered is
// one sample, whichever thread wrote its answer; a refused one is none.
// An apply that sleeps 40 ms shows in `apply` and in the total, not in
// `read` or `answer` (each far shorter, even under a sanitizer: TSan took
// 9 ms to read one).
TEST(PsPushLink, TheServerSaysWhereAPushsTimeWent) {
  Shards shards(kSizes);
  auto slow = [apply = shards.apply()](int shard, GradientPush p) {
    std::this_thread::sleep_for(40ms);
    return apply(shard, std::move(p));
  };
  PushServer server(server_config({{0, kSizes[0]}, {1, kSizes[1]}}, slow));
  EXPECT_EQ(server.service_times().pushes, 0);
  EXPECT_EQ(PushServer::describe(server.service_times()), "");
  const auto g = wave(kSizes[1], 0.2);
  std::vector<float> out(g.size());
  {
    PushClient client(client_config(server.port()));
    for (int k = 0; k < 6; ++k) {
      client.send(1, 0, 0, k + 1, g.data(), kSizes[1], k % 2 == 0);  // answered by either thread
      client.receive(1, out.data(), kSizes[1]);
    }
    client.send(7, 0, 0, 7, g.data(), kSizes[1], true);  // not hosted: refused
    EXPECT_THROW(client.receive(7, out.data(), kSizes[1]), PushError);
  }
  server.stop();  // every answer's thread has recorded its sample
  const PushServer::ServiceTimes t = server.service_times();
  EXPECT_EQ(t.pushes, 6);
  EXPECT_GE(t.apply_ms, 40.0);
  EXPECT_LT(t.read_ms + t.answer_ms, t.apply_ms);
  EXPECT_GE(t.total_ms, t.apply_ms);
  EXPECT_GE(t.total_p99_ms, t.total_ms);
  const std::string text = PushServer::describe(t);
  EXPECT_NE(text.find("apply "), std::string::npos) << text;
  EXPECT_NE(text.find("(medians of 6 pushes)"), std::string::npos) << text;
}

// A client that polls for its answers before it sleeps gets the same
// answers, whether the answer comes within the poll or after it (an apply
// of 5 ms against a poll of 1 ms), plaintext and sealed.
TEST(PsPushLink, AClientThatPollsForItsAnswersGetsTheSameAnswers) {
  const auto g = wave(kSizes[1], 0.9);
  auto answers = [&](std::chrono::microseconds poll, std::chrono::milliseconds apply_takes, const std::string& secret) {
    Shards shards(kSizes);
    auto apply = [apply_takes, inner = shards.apply()](int shard, GradientPush p) {
      std::this_thread::sleep_for(apply_takes);
      return inner(shard, std::move(p));
    };
    PushServer server(server_config({{0, kSizes[0]}, {1, kSizes[1]}}, apply, secret));
    PushClientConfig c = client_config(server.port(), secret);
    c.answer_poll = poll;
    PushClient client(c);
    std::vector<std::vector<float>> out;
    for (int k = 0; k < 4; ++k) {
      out.emplace_back(g.size());
      client.send(1, 0, 0, k + 1, g.data(), kSizes[1], true);
      client.receive(1, out.back().data(), kSizes[1]);
    }
    return out;
  };
  for (const std::string& secret : std::vector<std::string>{"", kSecret}) {
    SCOPED_TRACE(secret.empty() ? "plaintext" : "sealed");
    const auto reference = answers(0us, 0ms, secret);
    EXPECT_TRUE(answers(1000us, 0ms, secret) == reference);
    EXPECT_TRUE(answers(1000us, 5ms, secret) == reference);
  }
}

TEST(PsPushLink, ThePollComesFromTroupePushPollUs) {
  auto with = [](const char* value) {
    if (value)
      ::setenv("TROUPE_PUSH_POLL_US", value, 1);
    else
      ::unsetenv("TROUPE_PUSH_POLL_US");
    return push_poll_from_env().count();
  };
  EXPECT_EQ(with(nullptr), 0);
  EXPECT_EQ(with(""), 0);
  EXPECT_EQ(with("250"), 250);
  EXPECT_EQ(with("1000000"), 1000000);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(with("abc"), 0);
  EXPECT_EQ(with("-5"), 0);
  EXPECT_EQ(with("1000001"), 0);
  EXPECT_EQ(with("12us"), 0);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("TROUPE_PUSH_POLL_US='abc' is not a number of microseconds"), std::string::npos) << warned;
  ::unsetenv("TROUPE_PUSH_POLL_US");
}

// Parts far bigger than the sockets' buffers, all sent before any answer
// is read: the writer thread answers the first while the reader still
// reads the later ones, and the reading thread answers the last one (marked)
// itself; nothing stalls, plaintext or sealed.
TEST(PsPushLink, BigPipelinedPushesNeverStallEitherEnd) {
  for (const std::string& secret : {std::string(), kSecret}) {
    const std::vector<std::int64_t> sizes = {3'000'000, 2'000'000, 3'000'000};  // 12, 8 and 12 MB
    Shards remote(sizes), local(sizes);
    Log log;
    PushServer server(server_config({{0, sizes[0]}, {1, sizes[1]}, {2, sizes[2]}}, remote.apply(), secret, &log));
    PushClient client(client_config(server.port(), secret));
    std::vector<std::vector<float>> g, out;
    for (std::size_t s = 0; s < sizes.size(); ++s) {
      g.push_back(wave(sizes[s], 0.3 * double(s)));
      out.emplace_back(g.back().size());
    }
    const auto start = std::chrono::steady_clock::now();
    for (int round = 1; round <= 2; ++round) {
      for (int s = 0; s < 3; ++s)
        client.send(s, 0, 0, round, g[static_cast<std::size_t>(s)].data(), sizes[static_cast<std::size_t>(s)], s == 2);
      for (int s = 0; s < 3; ++s)
        client.receive(s, out[static_cast<std::size_t>(s)].data(), sizes[static_cast<std::size_t>(s)]);
      for (int s = 0; s < 3; ++s) {
        GradientPush p;
        p.clock = round;
        p.gradient = Tensor::from_vector({sizes[static_cast<std::size_t>(s)]}, g[static_cast<std::size_t>(s)]);
        const Tensor fresh = local.push(s, std::move(p));
        EXPECT_TRUE(
            bitwise_equal(out[static_cast<std::size_t>(s)].data(), fresh.f32(), sizes[static_cast<std::size_t>(s)]))
            << "shard " << s << ", round " << round << (secret.empty() ? ", plaintext" : ", sealed");
      }
    }
    EXPECT_LT(since(start), 8s) << "a stall (the client's timeout is 10 s)";
    EXPECT_EQ(server.pushes(), 6);
    EXPECT_EQ(log.all(), "");
  }
}

TEST(PsPushLink, AClaimBeyondTheLargestPartIsRefusedBeforeAnyAllocation) {
  CountingServer s({{0, 64}, {1, 128}});
  RawPeer peer(s.server.port());
  push_wire::PushHeader h;
  h.shard = 1;
  h.floats = std::int64_t{1} << 40;  // 4 TiB: never allocated, never read
  peer.send(h, {}, false);
  const std::string reason = peer.answer();
  EXPECT_NE(reason.find("more than the largest part this server hosts (128 floats)"), std::string::npos) << reason;
  EXPECT_TRUE(peer.closed());
  EXPECT_EQ(s.applied, 0);
}

// ---------------------------------------------------------------------------
// 3. A server that dies or stops, and abort(): failures in seconds.

// A server in a child process whose apply never answers; killed with
// SIGKILL while the client waits for the answer.
TEST(PsPushLink, AKilledServerProcessFailsTheWaitingClientWithinSeconds) {
  std::uint16_t port = 0;
  const int listen_fd = net::listen_tcp("127.0.0.1:0", &port);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PushServerConfig c;
    c.listen_fd = listen_fd;
    c.job_id = kJob;
    c.shards = {{0, 1000}};
    c.apply = [](int, GradientPush p) {
      std::this_thread::sleep_for(60s);
      return p.gradient;
    };
    PushServer server(c);
    std::this_thread::sleep_for(60s);
    ::_exit(0);
  }
  ::close(listen_fd);
  PushClient client(client_config(port));  // timeout 10 s
  const auto g = wave(1000, 1);
  std::vector<float> out(1000);
  client.send(0, 0, 0, 1, g.data(), 1000);
  std::thread killer([&] {
    std::this_thread::sleep_for(300ms);
    ::kill(child, SIGKILL);
  });
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    client.receive(0, out.data(), 1000);
  } catch (const PushError& e) {
    what = e.what();
  }
  const Ms took = since(start);
  killer.join();
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_NE(what.find("push to shard 0 at 127.0.0.1:" + std::to_string(port) + ": connection lost"), std::string::npos)
      << what;
  EXPECT_LT(took, 2s) << "the client waited towards its timeout for a dead server";
  // Unusable from now on, and saying why.
  try {
    client.send(0, 0, 0, 2, g.data(), 1000);
    ADD_FAILURE() << "a send after the connection was lost";
  } catch (const PushError& e) {
    EXPECT_NE(std::string(e.what()).find("unusable after an earlier failure"), std::string::npos) << e.what();
  }
}

// An apply that waits until the test releases it.
struct ApplyGate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  int entered = 0;
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    ++entered;
    cv.notify_all();
    cv.wait_for(lock, 20s, [&] { return open; });
  }
  void wait_entered(int n) {
    std::unique_lock<std::mutex> lock(m);
    cv.wait_for(lock, 10s, [&] { return entered >= n; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(m);
    open = true;
    cv.notify_all();
  }
};

TEST(PsPushLink, AbortWakesABlockedReceiveAtOnce) {
  ApplyGate gate;
  PushServer server(server_config({{0, 100}}, [&](int, GradientPush p) {
    gate.wait();
    return p.gradient;
  }));
  PushClient client(client_config(server.port()));
  const auto g = wave(100, 2);
  std::vector<float> out(100);
  client.send(0, 0, 0, 1, g.data(), 100);
  gate.wait_entered(1);
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);
    client.abort("view 4 ended");
  });
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    client.receive(0, out.data(), 100);
  } catch (const PushError& e) {
    what = e.what();
  }
  const Ms took = since(start);
  aborter.join();
  EXPECT_EQ(what, "push to shard 0 at 127.0.0.1:" + std::to_string(server.port()) + ": aborted: view 4 ended");
  EXPECT_LT(took, 1s);
  EXPECT_GE(took, 150ms) << "the receive did not wait for the answer";
  // Later calls fail at once with the same reason.
  try {
    client.send(0, 0, 0, 2, g.data(), 100);
    ADD_FAILURE() << "a send after abort()";
  } catch (const PushError& e) {
    EXPECT_NE(std::string(e.what()).find("aborted: view 4 ended"), std::string::npos) << e.what();
  }
  gate.release();
}

// Deadlines: a server that does not answer fails the push at the client's
// timeout, and a client silent in the middle of a frame is dropped at the
// server's io_timeout.
TEST(PsPushLink, ASilentServerFailsThePushAtTheClientsTimeout) {
  ApplyGate gate;
  PushServer server(server_config({{0, 100}}, [&](int, GradientPush p) {
    gate.wait();
    return p.gradient;
  }));
  PushClientConfig c = client_config(server.port());
  c.timeout = 300ms;
  PushClient client(c);
  const auto g = wave(100, 7);
  std::vector<float> out(100);
  const auto start = std::chrono::steady_clock::now();
  client.send(0, 0, 0, 1, g.data(), 100);
  std::string what;
  try {
    client.receive(0, out.data(), 100);
  } catch (const PushError& e) {
    what = e.what();
  }
  const Ms took = since(start);
  gate.release();
  EXPECT_NE(what.find("push to shard 0 at 127.0.0.1:" + std::to_string(server.port()) +
                      ": timed out after 300 ms waiting for the answer"),
            std::string::npos)
      << what;
  EXPECT_GE(took, 280ms);
  EXPECT_LT(took, 1500ms);
}

TEST(PsPushLink, AClientSilentMidFrameIsDroppedAtTheIoTimeout) {
  Log log;
  PushServerConfig c = server_config(
      {{0, 100}}, [](int, GradientPush p) { return p.gradient; }, "", &log);
  c.io_timeout = 300ms;
  PushServer server(std::move(c));
  RawPeer stalled(server.port());
  const unsigned char half[push_wire::kPushHeaderBytes / 2] = {};
  const auto start = std::chrono::steady_clock::now();
  net::wire::write_all(stalled.fd, half, sizeof half, nullptr, 0, net::Clock::now() + 5s);
  EXPECT_TRUE(stalled.closed());
  EXPECT_GE(since(start), 250ms);
  EXPECT_LT(since(start), 2s);
  EXPECT_NE(log.all().find("timed out after 300 ms reading a push"), std::string::npos) << log.all();
}

// Several replicas' connections at once, each pipelining both shards: every
// push is applied exactly once.
TEST(PsPushLink, ConcurrentClientsEachPushAppliedOnce) {
  Shards shards(kSizes);
  Log log;
  PushServer server(server_config({{0, kSizes[0]}, {1, kSizes[1]}}, shards.apply(), kSecret, &log));
  constexpr int kClients = 3, kPushes = 8;
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      try {
        PushClient client(client_config(server.port(), kSecret));
        std::vector<std::vector<float>> g, out;
        for (int s = 0; s < 2; ++s) {
          g.push_back(wave(kSizes[static_cast<std::size_t>(s)], i + s));
          out.emplace_back(g.back().size());
        }
        for (int k = 0; k < kPushes; ++k) {
          for (int s = 0; s < 2; ++s)
            client.send(s, 0, i % 2, k + 1, g[static_cast<std::size_t>(s)].data(), kSizes[static_cast<std::size_t>(s)],
                        s == 1);
          for (int s = 0; s < 2; ++s)
            client.receive(s, out[static_cast<std::size_t>(s)].data(), kSizes[static_cast<std::size_t>(s)]);
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(i)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(server.pushes(), 2 * kClients * kPushes);
  EXPECT_EQ(shards.applied(0), kClients * kPushes);
  EXPECT_EQ(shards.applied(1), kClients * kPushes);
  EXPECT_EQ(log.all(), "");
}

// ---------------------------------------------------------------------------
// 4. A bit flipped on a sealed link: the push fails, nothing is applied.

TEST(PsPushLink, AFlippedBitOnASealedLinkFailsThePushAndAppliesNothing) {
  Shards shards(kSizes);
  Log log;
  PushServer server(server_config({{0, kSizes[0]}, {1, kSizes[1]}}, shards.apply(), kSecret, &log));
  // Client -> server records: 0 the Hello, 1 push 0's header, 2 the first
  // record of its payload.
  troupe::testing::AttackPlan plan;
  plan.attack = troupe::testing::Attack::flip_bit;
  plan.record = 2;
  troupe::testing::MitmProxy proxy(server.port(), plan);
  PushClient client(client_config(proxy.port(), kSecret));
  ASSERT_TRUE(client.sealed());
  const auto g = wave(kSizes[1], 3);
  std::vector<float> out(g.size());
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    client.send(1, 0, 0, 1, g.data(), kSizes[1]);
    client.receive(1, out.data(), kSizes[1]);
  } catch (const PushError& e) {
    what = e.what();
  }
  EXPECT_TRUE(proxy.attacked());
  EXPECT_NE(what.find("push to shard 1 at " + proxy.address()), std::string::npos) << what;
  EXPECT_LT(since(start), 3s);
  EXPECT_EQ(server.pushes(), 0);
  EXPECT_EQ(shards.applied(1), 0) << "the shard applied an altered push";
  for (int i = 0; i < 100 && log.all().empty(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_NE(log.all().find("record 2 failed authentication"), std::string::npos) << log.all();
}

// The same proxy without an attack is transparent: the failure above is the
// attack's, not the proxy's.
TEST(PsPushLink, TheProxyWithoutAnAttackIsTransparent) {
  PushServer server(server_config(
      {{0, kSizes[1]}}, [](int, GradientPush p) { return p.gradient; }, kSecret));
  troupe::testing::MitmProxy proxy(server.port(), {});
  PushClient client(client_config(proxy.port(), kSecret));
  const auto g = wave(kSizes[1], 4);
  std::vector<float> out(g.size());
  client.send(0, 0, 0, 1, g.data(), kSizes[1]);
  client.receive(0, out.data(), kSizes[1]);
  EXPECT_TRUE(bitwise_equal(g.data(), out.data(), kSizes[1]));
  EXPECT_FALSE(proxy.attacked());
}

// ---------------------------------------------------------------------------
// 5. stop() with connections open returns promptly, and what it waits for.

TEST(PsPushLink, StopWithOpenConnectionsReturnsPromptlyAndFailsTheClients) {
  Log log;
  auto server = std::make_unique<PushServer>(server_config(
      {{0, 100}}, [](int, GradientPush p) { return p.gradient; }, "", &log));
  std::vector<std::unique_ptr<PushClient>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(std::make_unique<PushClient>(client_config(server->port())));
  // One more connection stalled mid-frame: half a header.
  RawPeer stalled(server->port());
  const unsigned char half[push_wire::kPushHeaderBytes / 2] = {};
  net::wire::write_all(stalled.fd, half, sizeof half, nullptr, 0, net::Clock::now() + 5s);
  for (int i = 0; i < 100 && server->connections() < 4; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server->connections(), 4u);
  const auto start = std::chrono::steady_clock::now();
  server->stop();
  EXPECT_LT(since(start), 1s);
  EXPECT_EQ(server->connections(), 0u);
  const auto g = wave(100, 5);
  std::vector<float> out(100);
  for (auto& c : clients) {
    const auto t = std::chrono::steady_clock::now();
    EXPECT_THROW(
        {
          c->send(0, 0, 0, 1, g.data(), 100);
          c->receive(0, out.data(), 100);
        },
        PushError);
    EXPECT_LT(since(t), 1s);
  }
  EXPECT_TRUE(stalled.closed());
  EXPECT_EQ(log.all(), "") << "stop() logged the connections it dropped on purpose";
  server.reset();  // a second stop() (the destructor's) does nothing
}

// stop() waits for the applies in progress (they use the shards' state),
// and no longer: their answers are not sent.
TEST(PsPushLink, StopWaitsForAnApplyInProgressOnly) {
  ApplyGate gate;
  PushServer server(server_config({{0, 100}}, [&](int, GradientPush p) {
    gate.wait();
    return p.gradient;
  }));
  PushClient client(client_config(server.port()));
  const auto g = wave(100, 6);
  std::vector<float> out(100);
  client.send(0, 0, 0, 1, g.data(), 100);
  gate.wait_entered(1);
  std::thread releaser([&] {
    std::this_thread::sleep_for(300ms);
    gate.release();
  });
  const auto start = std::chrono::steady_clock::now();
  server.stop();
  const Ms took = since(start);
  releaser.join();
  EXPECT_GE(took, 250ms) << "stop() returned while apply was still running";
  EXPECT_LT(took, 1s);
  EXPECT_THROW(client.receive(0, out.data(), 100), PushError);
}

}  // namespace
}  // namespace troupe::net::push
