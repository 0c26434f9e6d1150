// Shared by the tcp backend's tests: rings of real loopback sockets, ranks as
// threads or as forked processes, random data and references.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "net/tcp/tcp.hpp"
#include "net/tcp/wire.hpp"

namespace troupe::net::testing {

using kernels::DType;
using kernels::Shape;
using namespace std::chrono_literals;

constexpr std::uint64_t kJob = 0x7e57'0b5e'55ed'1234ull;

// W listeners on free loopback ports, and the addresses they make.
struct Listeners {
  std::vector<int> fds;
  std::vector<std::string> addresses;
  explicit Listeners(int world) {
    for (int r = 0; r < world; ++r) {
      std::uint16_t port = 0;
      fds.push_back(listen_tcp("127.0.0.1:0", &port));
      addresses.push_back("127.0.0.1:" + std::to_string(port));
    }
  }
  ~Listeners() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  // Hands rank r's listener to its group (which closes it).
  int take(int r) { return std::exchange(fds[static_cast<std::size_t>(r)], -1); }
};

inline TcpGroupConfig config_for(Listeners& l, int rank, std::chrono::milliseconds timeout = 10s,
                                 std::size_t chunk_bytes = std::size_t{1} << 20) {
  TcpGroupConfig c;
  c.rank = rank;
  c.addresses = l.addresses;
  c.job_id = kJob;
  c.options.timeout = timeout;
  c.connect_timeout = 10s;
  c.chunk_bytes = chunk_bytes;
  c.listen_fd = l.take(rank);
  return c;
}

// A ring of `world` groups in this process (each constructed on its own
// thread, since construction waits for the neighbours).
// `authenticate`: TcpGroupConfig::authenticate for every rank (keys that
// protect make a sealed ring).
inline std::vector<std::unique_ptr<Collective>> thread_ring(
    int world, std::chrono::milliseconds timeout = 10s, std::size_t chunk_bytes = std::size_t{1} << 20,
    const std::function<LinkKeys(int, bool, Deadline)>& authenticate = {}, int seal_helpers = -1,
    std::chrono::microseconds seal_spin = {}) {
  Listeners l(world);
  std::vector<TcpGroupConfig> configs;
  for (int r = 0; r < world; ++r) {
    configs.push_back(config_for(l, r, timeout, chunk_bytes));
    configs.back().authenticate = authenticate;
    configs.back().seal_helpers = seal_helpers;
    configs.back().seal_spin = seal_spin;
  }
  std::vector<std::unique_ptr<Collective>> groups(static_cast<std::size_t>(world));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        groups[static_cast<std::size_t>(r)] = make_tcp_group(configs[static_cast<std::size_t>(r)]);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return groups;
}

// Runs body(rank, group) on one thread per rank; rethrows the first error.
inline void run_ranks(std::vector<std::unique_ptr<Collective>>& groups,
                      const std::function<void(int, Collective&)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(groups.size());
  for (std::size_t r = 0; r < groups.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        body(static_cast<int>(r), *groups[r]);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

inline std::vector<float> random_values(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

inline Tensor tensor_of(const std::vector<float>& values) {
  Tensor t = Tensor::empty(Shape{static_cast<std::int64_t>(values.size())}, DType::f32);
  if (!values.empty()) std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
  return t;
}

// The error a work holds; a failure when it has none.
inline CollectiveError error_of(const std::shared_ptr<Work>& work) {
  try {
    work->wait(Clock::now() + 30s);
  } catch (const CollectiveError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a CollectiveError";
  return CollectiveError(CollectiveErrorKind::invalid, "none");
}

// The largest |a - b| over two vectors of one size.
inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

// One forked rank's end: its exit status and what it wrote to its pipe.
struct ChildResult {
  int status = -1;
  std::string output;
  bool exited_ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

// Forks `world` processes; child r runs body(rank, listeners, out_fd) and
// exits with its return value. The reference data the body uses is computed
// in the parent before the fork. `after_start(pids)` runs in the parent
// (e.g. to kill one). Children still alive after `limit` are killed.
// `before_fork(listeners)` runs in the parent once the listeners are bound
// (e.g. to point a proxy at one of them).
inline std::vector<ChildResult> run_processes(int world, const std::function<int(int, Listeners&, int)>& body,
                                              const std::function<void(std::vector<pid_t>&)>& after_start = {},
                                              std::chrono::seconds limit = 60s,
                                              const std::function<void(Listeners&)>& before_fork = {}) {
  Listeners l(world);
  if (before_fork) before_fork(l);
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < world; ++r) {
    int p[2];
    if (::pipe(p) != 0) throw std::runtime_error("pipe");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      for (int other = 0; other < world; ++other)
        if (other != r) ::close(l.take(other));
      int code = 99;
      try {
        code = body(r, l, p[1]);
      } catch (const std::exception& e) {
        const std::string m = std::string("uncaught: ") + e.what() + "\n";
        (void)!::write(p[1], m.data(), m.size());
      }
      ::_exit(code);
    }
    ::close(p[1]);
    pids.push_back(pid);
    pipes.push_back(p[0]);
  }
  if (after_start) after_start(pids);
  std::vector<ChildResult> results(static_cast<std::size_t>(world));
  const auto until = Clock::now() + limit;
  for (int r = 0; r < world; ++r) {
    auto& res = results[static_cast<std::size_t>(r)];
    for (;;) {
      const pid_t done = ::waitpid(pids[static_cast<std::size_t>(r)], &res.status, WNOHANG);
      if (done != 0) break;
      if (Clock::now() > until) {
        ::kill(pids[static_cast<std::size_t>(r)], SIGKILL);
        ::waitpid(pids[static_cast<std::size_t>(r)], &res.status, 0);
        res.output += "(killed by the test: still running after the limit)\n";
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    char buf[4096];
    ssize_t n;
    while ((n = ::read(pipes[static_cast<std::size_t>(r)], buf, sizeof buf)) > 0)
      res.output.append(buf, static_cast<std::size_t>(n));
    ::close(pipes[static_cast<std::size_t>(r)]);
  }
  return results;
}

inline void say(int fd, const std::string& text) { (void)!::write(fd, text.data(), text.size()); }

}  // namespace troupe::net::testing
