// The tcp backend's allreduce bandwidth on loopback, with real processes:
// forks W ranks (one TcpGroup each) and reports, per size, NCCL's figures:
// algbw = bytes / time and busbw = algbw * 2 (W - 1) / W (the bandwidth each
// ring link carries, comparable across world sizes and with Gloo's busbw
// from ../shared/anchors/torch_anchor.py, which uses the same MB = 2^20
// bytes).
//
//   bench_tcp_allreduce [--world 2] [--sizes 4,64] [--reps 15] [--warmup 3] [--chunk-kb 1024]
//                       [--sealed [--seal-helpers N] [--seal-spin-us US]]
//   bench_tcp_allreduce --rank R --addresses HOST:PORT,HOST:PORT[,...] [same options]
//
// The second form runs one rank only, in this process, listening on its own
// address (addresses[R]) and connecting to the next one's; the world is the
// number of addresses. Start every rank so (in any order, within the
// 30 s connect timeout), e.g. each in its own network namespace
// (bench/sealed_ring_netns.sh); rank 0 prints the RESULT lines.
//
// --sealed runs the cluster handshake with a secret on every ring
// connection (net/cluster/gate.hpp's handshake_hook, as `troupe node` does
// with --secret-file), so every frame travels in AES-256-GCM records
// (net/transport/sealed.hpp); without it the ring is plaintext with a CRC-32C per
// payload, as on loopback without a secret. --seal-helpers N sets the
// helper threads per direction that seal and open a frame's records beside
// the ring's I/O threads (default: net::ring_seal_helpers of the machine's
// cores; 0 on this 2-core machine); the RESULT line says how many ran.
// --seal-spin-us US: how long those helpers, and an I/O thread waiting for
// one, poll for work before they sleep (TcpGroupConfig::seal_spin; 0, the
// default, sleeps at once).
//
// Each repetition: barrier, then one allreduce (sum) timed on rank 0, which
// finishes with the last all-gather step like every other rank. The figure
// is the median over the repetitions, after the warm-up ones. Prints one
// RESULT line per size, with cpu_ms: the CPU time (user + system, all of
// rank 0's threads) per timed repetition, a figure that a loaded machine
// disturbs far less than the wall-clock time, and its two parts.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "net/cluster/gate.hpp"
#include "net/tcp/tcp.hpp"

using troupe::kernels::Shape;
using troupe::kernels::Tensor;
using namespace troupe::net;

namespace {

struct Options {
  int world = 2;
  std::vector<double> sizes_mb{4, 64};
  int reps = 15;
  int warmup = 3;
  std::size_t chunk_kb = 1024;
  bool sealed = false;
  int seal_helpers = -1;  // --seal-helpers; -1: the machine's default (ring_seal_helpers)
  int seal_spin_us = 0;   // --seal-spin-us: the helpers' poll before they sleep (TcpGroupConfig::seal_spin)
  int rank = -1;          // >= 0: run this rank only (--rank)
  std::vector<std::string> addresses;  // with --rank
};

Options parse(int argc, char** argv) {
  Options o;
  bool world_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--world") {
      o.world = std::stoi(value());
      world_given = true;
    } else if (a == "--rank") {
      o.rank = std::stoi(value());
    } else if (a == "--addresses") {
      o.addresses.clear();
      std::stringstream s(value());
      std::string item;
      while (std::getline(s, item, ',')) o.addresses.push_back(item);
    } else if (a == "--reps")
      o.reps = std::stoi(value());
    else if (a == "--warmup")
      o.warmup = std::stoi(value());
    else if (a == "--chunk-kb")
      o.chunk_kb = std::stoul(value());
    else if (a == "--sealed")
      o.sealed = true;
    else if (a == "--seal-helpers")
      o.seal_helpers = std::stoi(value());
    else if (a == "--seal-spin-us")
      o.seal_spin_us = std::stoi(value());
    else if (a == "--sizes") {
      o.sizes_mb.clear();
      std::stringstream s(value());
      std::string item;
      while (std::getline(s, item, ',')) o.sizes_mb.push_back(std::stod(item));
    } else {
      throw std::invalid_argument(
          "unknown argument " + a +
          " (known: --world, --sizes, --reps, --warmup, --chunk-kb, --sealed, --seal-helpers, --seal-spin-us, "
          "--rank, "
          "--addresses)");
    }
  }
  if ((o.rank >= 0) != !o.addresses.empty()) throw std::invalid_argument("--rank and --addresses go together");
  if (o.rank >= 0) {
    const int n = static_cast<int>(o.addresses.size());
    if (world_given && o.world != n)
      throw std::invalid_argument("--world " + std::to_string(o.world) + " but " + std::to_string(n) + " addresses");
    o.world = n;
    if (o.rank >= o.world) throw std::invalid_argument("--rank must be below the number of addresses");
  }
  if (o.world < 2 || o.reps < 1) throw std::invalid_argument("--world must be >= 2 and --reps >= 1");
  return o;
}

// User and system time of this process, all threads, in seconds.
struct Cpu {
  double user = 0, system = 0;
  static Cpu now() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
    return {s(u.ru_utime), s(u.ru_stime)};
  }
};

int run_rank(const Options& o, int rank, const std::vector<std::string>& addresses, int listen_fd) {
  TcpGroupConfig config;
  config.rank = rank;
  config.addresses = addresses;
  config.job_id = 0xbe4c;
  config.options.timeout = std::chrono::seconds(60);
  config.chunk_bytes = o.chunk_kb * 1024;
  config.listen_fd = listen_fd;
  config.seal_helpers = o.seal_helpers;
  config.seal_spin = std::chrono::microseconds(o.seal_spin_us);
  if (o.sealed)
    config.authenticate = handshake_hook(
        HandshakeConfig{Secret::from_text("bench_tcp_allreduce"), "bench", "rank/" + std::to_string(rank)});
  auto group = make_tcp_group(config);
  const auto wait = [](const std::shared_ptr<Work>& w) { w->wait(Clock::now() + std::chrono::seconds(60)); };
  for (double mb : o.sizes_mb) {
    const auto n = static_cast<std::int64_t>(mb * 1024 * 1024 / 4);
    Tensor t = Tensor::full(Shape{n}, 1.0f);
    std::vector<double> seconds;
    Cpu cpu_start;
    for (int k = 0; k < o.warmup + o.reps; ++k) {
      if (k == o.warmup) cpu_start = Cpu::now();
      wait(group->barrier());
      const auto start = Clock::now();
      wait(group->allreduce(t, ReduceOp::mean));  // mean: the values stay 1
      const std::chrono::duration<double> took = Clock::now() - start;
      if (k >= o.warmup) seconds.push_back(took.count());
    }
    const Cpu cpu_end = Cpu::now();
    const double user_ms = (cpu_end.user - cpu_start.user) / o.reps * 1e3;
    const double sys_ms = (cpu_end.system - cpu_start.system) / o.reps * 1e3;
    if (t.f32()[n - 1] != 1.0f) {
      std::cerr << "rank " << rank << ": wrong result " << t.f32()[n - 1] << "\n";
      return 1;
    }
    if (rank == 0) {
      std::sort(seconds.begin(), seconds.end());
      const double median = seconds[seconds.size() / 2];
      const double algbw = static_cast<double>(n) * 4 / median / 1e9;
      const double busbw = algbw * 2.0 * (o.world - 1) / o.world;
      const int helpers = o.seal_helpers >= 0 ? o.seal_helpers : ring_seal_helpers(std::thread::hardware_concurrency());
      std::printf(
          "RESULT troupe tcp-allreduce%s world=%d size_MB=%g time_ms=%.2f algbw_GBps=%.3f busbw_GBps=%.3f "
          "reps=%d chunk_KB=%zu min_ms=%.2f max_ms=%.2f cpu_ms=%.2f user_ms=%.2f sys_ms=%.2f%s\n",
          o.sealed ? "-sealed" : "", o.world, mb, median * 1e3, algbw, busbw, o.reps, o.chunk_kb, seconds.front() * 1e3,
          seconds.back() * 1e3, user_ms + sys_ms, user_ms, sys_ms,
          o.sealed
              ? (" seal_helpers=" + std::to_string(helpers) + " seal_spin_us=" + std::to_string(o.seal_spin_us)).c_str()
              : "");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.rank >= 0) return run_rank(o, o.rank, o.addresses, -1);  // binds addresses[rank] itself
    std::vector<int> fds;
    std::vector<std::string> addresses;
    for (int r = 0; r < o.world; ++r) {
      std::uint16_t port = 0;
      fds.push_back(listen_tcp("127.0.0.1:0", &port));
      addresses.push_back("127.0.0.1:" + std::to_string(port));
    }
    std::vector<pid_t> pids;
    for (int r = 0; r < o.world; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        for (int q = 0; q < o.world; ++q)
          if (q != r) ::close(fds[static_cast<std::size_t>(q)]);
        int code = 1;
        try {
          code = run_rank(o, r, addresses, fds[static_cast<std::size_t>(r)]);
        } catch (const std::exception& e) {
          std::cerr << "rank " << r << ": " << e.what() << "\n";
        }
        std::fflush(stdout);
        ::_exit(code);
      }
      pids.push_back(pid);
    }
    for (int fd : fds) ::close(fd);
    int failures = 0;
    for (pid_t pid : pids) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    }
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_tcp_allreduce: " << e.what() << "\n";
    return 2;
  }
}
