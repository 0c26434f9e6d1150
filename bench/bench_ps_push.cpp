// Push round trips on the data plane (net/push/push_link.hpp) against the
// time to move the same bytes once over a plain loopback socket: the data
// plane's goal is a push round trip (gradient part up, fresh parameters
// down) of at most 2x one move of the gradient.
//
//   bench_ps_push [--sizes-mb 0.4,4] [--reps 50] [--warmup 5] [--sealed] [--apply echo|shard] [--poll-us 0]
//
// A forked child process hosts one shard per size behind a PushServer,
// whose apply answers with a tensor it keeps (`--apply echo`, the default:
// no optimizer, no copy: the transport alone), or applies each push with a
// real shard (`--apply shard`: Adam on the part, as a ps task does, through
// ps::shard_apply: what a push costs on top of the link), and a baseline loopback server that reads N bytes and
// answers one byte. The parent times, per size, `reps` pushes (send, then
// receive) and `reps` moves (write N bytes, read the 1-byte ack), after
// `warmup` of each. --sealed runs the cluster handshake with a secret on
// both connections, so pushes and moves alike travel in AES-256-GCM records
// of at most 1 MiB (the ratio compares like with like); without it pushes
// are plaintext with a CRC-32C per frame, as on loopback without a secret,
// and moves plain bytes. Prints one RESULT line per size: median and p99 of
// each, in ms, and the ratio of the medians. --poll-us N: the client polls
// for each answer for up to N us before it sleeps (PushClientConfig::
// answer_poll).
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "actors/ps/shard.hpp"
#include "job/replica.hpp"  // configure_actor_system
#include "net/cluster/gate.hpp"
#include "net/push/push_link.hpp"
#include "net/tcp/tcp.hpp"
#include "net/tcp/wire.hpp"
#include "net/transport/sealed.hpp"

using namespace troupe;
using kernels::Tensor;
using net::push::PushClient;
using net::push::PushClientConfig;
using net::push::PushServer;
using net::push::PushServerConfig;

namespace {

struct Options {
  std::vector<double> sizes_mb{0.4, 4};
  int reps = 50;
  int warmup = 5;
  bool sealed = false;
  bool shard = false;  // --apply shard
  int poll_us = 0;     // --poll-us: PushClientConfig::answer_poll
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--reps")
      o.reps = std::stoi(value());
    else if (a == "--warmup")
      o.warmup = std::stoi(value());
    else if (a == "--sealed")
      o.sealed = true;
    else if (a == "--poll-us")
      o.poll_us = std::stoi(value());
    else if (a == "--apply") {
      const std::string v = value();
      if (v != "echo" && v != "shard") throw std::invalid_argument("--apply: echo or shard, not '" + v + "'");
      o.shard = v == "shard";
    } else if (a == "--sizes-mb") {
      o.sizes_mb.clear();
      std::stringstream s(value());
      std::string item;
      while (std::getline(s, item, ',')) o.sizes_mb.push_back(std::stod(item));
    } else {
      throw std::invalid_argument("unknown argument " + a +
                                  " (known: --sizes-mb, --reps, --warmup, --sealed, --apply, "
                                  "--poll-us)");
    }
  }
  if (o.reps < 1 || o.warmup < 0) throw std::invalid_argument("--reps must be >= 1 and --warmup >= 0");
  if (o.poll_us < 0) throw std::invalid_argument("--poll-us must be >= 0");
  return o;
}

std::function<net::LinkKeys(int, bool, net::Deadline)> hook(bool sealed, const std::string& identity) {
  if (!sealed) return {};
  net::HandshakeConfig c;
  c.secret = net::Secret::from_text("bench secret for the push link");
  c.version = "bench";
  c.identity = identity;
  return net::handshake_hook(c);
}

constexpr std::size_t kChunk = std::size_t{1} << 20;

// The baseline's socket: plain bytes, or (sealed) the same records of at
// most kChunk as the push link's, so that both pay for the same crypto.
struct Mover {
  int fd;
  std::unique_ptr<net::wire::RecordSealer> sealer;
  std::unique_ptr<net::wire::RecordOpener> opener;
  Mover(int fd_, const net::LinkKeys& keys) : fd(fd_) {
    if (keys.protects()) {
      sealer = std::make_unique<net::wire::RecordSealer>(keys.send);
      opener = std::make_unique<net::wire::RecordOpener>(keys.receive);
    }
  }
  // `a` then `b` (each record at most kChunk bytes when sealed).
  void write(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes, net::Deadline deadline) {
    if (!sealer) return net::wire::write_all(fd, a, a_bytes, b, b_bytes, deadline);
    sealer->append(a, a_bytes);
    const char* p = static_cast<const char*>(b);
    std::size_t done = 0;
    do {
      const std::size_t n = std::min(b_bytes - done, kChunk);
      if (n) sealer->append(p + done, n);
      sealer->flush(fd, deadline);
      done += n;
    } while (done < b_bytes);
  }
  void read(void* out, std::size_t bytes, net::Deadline deadline) {
    if (opener)
      opener->read_exact(fd, out, bytes, deadline);
    else
      net::wire::read_all(fd, out, bytes, deadline);
  }
};

// The child: the PushServer and the raw server until the parent hangs up.
[[noreturn]] void serve(const Options& o, const std::vector<std::int64_t>& floats, int push_fd, int raw_fd) {
  std::vector<Tensor> fresh;
  PushServerConfig c;
  c.listen_fd = push_fd;
  c.job_id = 1;
  c.authenticate = hook(o.sealed, "ps/0");
  for (std::size_t s = 0; s < floats.size(); ++s) {
    c.shards[static_cast<int>(s)] = floats[s];
    fresh.push_back(Tensor::full({floats[s]}, 0.5f));
  }
  c.apply = [&fresh](int shard, actors::GradientPush) { return fresh.at(static_cast<std::size_t>(shard)); };
  // --apply shard: real shards (Adam, as a job's default), in an actor
  // system of this process, as on a ps task.
  caf::actor_system_config cfg;
  actors::configure_actor_system(cfg);
  std::unique_ptr<caf::actor_system> system;
  std::vector<actors::ps::ps_actor_t> shards;
  std::map<int, std::shared_ptr<actors::ps::ShardCore>> cores;
  if (o.shard) {
    system = std::make_unique<caf::actor_system>(cfg);
    for (std::size_t s = 0; s < floats.size(); ++s) {
      actors::ps::ShardConfig sc;
      sc.index = static_cast<int>(s);
      sc.size = floats[s];
      sc.optimizer.name = "adam";
      sc.schedule = std::make_shared<models::LrSchedule>("constant", 1e-3f);
      sc.replicas = 1;
      actors::ps::LocalShard shard = actors::ps::spawn_shard(*system, sc);
      shards.push_back(shard.actor);
      cores[sc.index] = shard.core;
    }
    c.apply = actors::ps::shard_apply(cores);
  }
  PushServer server(c);
  const int fd = ::accept4(raw_fd, nullptr, nullptr, SOCK_CLOEXEC);
  net::wire::prepare_socket(fd);
  const auto raw_hook = hook(o.sealed, "raw/0");
  const net::LinkKeys keys =
      raw_hook ? raw_hook(fd, true, net::Clock::now() + std::chrono::seconds(10)) : net::LinkKeys{};
  Mover mover(fd, keys);
  std::vector<char> buffer(kChunk);
  // Each move: an 8-byte length, then the bytes (in records of kChunk when
  // sealed); answered with one byte. Ends when the parent hangs up.
  try {
    for (;;) {
      std::uint64_t left = 0;
      const auto deadline = net::Clock::now() + std::chrono::seconds(60);
      mover.read(&left, sizeof left, deadline);
      while (left > 0) {
        const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(left, kChunk));
        mover.read(buffer.data(), take, deadline);
        left -= take;
      }
      const char ack = 1;
      mover.write(&ack, 1, nullptr, 0, deadline);
    }
  } catch (const std::exception&) {}
  server.stop();
  for (auto& shard : shards) caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  ::_exit(0);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::min<double>(double(v.size()) - 1, p * double(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_ps_push: " << e.what() << "\n";
    return 2;
  }
  std::vector<std::int64_t> floats;
  for (double mb : o.sizes_mb) floats.push_back(static_cast<std::int64_t>(mb * 1e6 / 4) / 16 * 16);
  std::uint16_t push_port = 0, raw_port = 0;
  const int push_fd = net::listen_tcp("127.0.0.1:0", &push_port);
  const int raw_fd = net::listen_tcp("127.0.0.1:0", &raw_port);
  const pid_t child = ::fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) serve(o, floats, push_fd, raw_fd);
  ::close(push_fd);
  ::close(raw_fd);
  int status = 0;
  try {
    PushClientConfig c;
    c.address = "127.0.0.1:" + std::to_string(push_port);
    c.job_id = 1;
    c.timeout = std::chrono::seconds(30);
    c.authenticate = hook(o.sealed, "worker/0");
    c.answer_poll = std::chrono::microseconds(o.poll_us);
    PushClient client(c);
    // The baseline's connection, authenticated (and sealed) as the push link.
    const int raw =
        net::wire::connect_tcp("127.0.0.1:" + std::to_string(raw_port), net::Clock::now() + std::chrono::seconds(10));
    const auto raw_hook = hook(o.sealed, "worker/raw");
    Mover mover(raw, raw_hook ? raw_hook(raw, false, net::Clock::now() + std::chrono::seconds(10)) : net::LinkKeys{});
    using Clock = std::chrono::steady_clock;
    std::printf("# push link %s, loopback, %d reps after %d warm-up, apply %s\n",
                client.sealed() ? "sealed" : "plaintext", o.reps, o.warmup, o.shard ? "shard (Adam)" : "echo");
    for (std::size_t s = 0; s < floats.size(); ++s) {
      const std::int64_t n = floats[s];
      std::vector<float> gradient(static_cast<std::size_t>(n), 0.25f), fresh(static_cast<std::size_t>(n));
      std::vector<double> push_ms, raw_ms;
      for (int r = 0; r < o.warmup + o.reps; ++r) {
        const auto t0 = Clock::now();
        client.send(static_cast<int>(s), 0, 0, r + 1, gradient.data(), n, true);
        client.receive(static_cast<int>(s), fresh.data(), n);
        const auto t1 = Clock::now();
        const std::uint64_t bytes = static_cast<std::uint64_t>(n) * sizeof(float);
        const auto deadline = net::Clock::now() + std::chrono::seconds(30);
        mover.write(&bytes, sizeof bytes, gradient.data(), bytes, deadline);
        char ack = 0;
        mover.read(&ack, 1, deadline);
        const auto t2 = Clock::now();
        if (r < o.warmup) continue;
        push_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        raw_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      }
      const double push_median = percentile(push_ms, 0.5), raw_median = percentile(raw_ms, 0.5);
      std::printf(
          "RESULT mb=%.2f floats=%lld push_median_ms=%.3f push_p99_ms=%.3f move_median_ms=%.3f "
          "move_p99_ms=%.3f ratio=%.2f\n",
          double(n) * 4 / 1e6, static_cast<long long>(n), push_median, percentile(push_ms, 0.99), raw_median,
          percentile(raw_ms, 0.99), push_median / raw_median);
      std::fflush(stdout);
    }
    ::close(raw);
  } catch (const std::exception& e) {
    std::cerr << "bench_ps_push: " << e.what() << "\n";
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    return 1;
  }
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
