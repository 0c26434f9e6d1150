// Process plumbing shared by the cluster examples (multiworker,
// ps_linear_regression, elastic): free localhost ports, a "port in use" check, and
// launching this same executable again as one task of a cluster (the spec in
// TROUPE_CLUSTER, as TF_CONFIG), with its output in a log file and a
// deadline. POSIX only; nothing here is troupe's API.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "util/loopback_port.hpp"

namespace examples {

// A port free on 127.0.0.1 right now, below the kernel's ephemeral range,
// where no connection's own port can take it before the child binds it
// (util/loopback_port.hpp); 0 when none could be found.
inline int free_port() { return troupe::util::free_loopback_port(); }

// True when something listens on (or holds) 127.0.0.1:port.
inline bool port_in_use(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // TIME_WAIT is not "in use"
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool used = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return used;
}

// The port of "HOST:PORT", or -1.
inline int port_of(const std::string& address) {
  const std::size_t colon = address.rfind(':');
  if (colon == std::string::npos) return -1;
  try {
    std::size_t used = 0;
    const int p = std::stoi(address.substr(colon + 1), &used);
    return used == address.size() - colon - 1 ? p : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

// {"cluster":{"worker":[a,b,...]},"task":{"type":"worker","index":i}}
inline std::string cluster_json(const std::vector<std::string>& workers, int index) {
  std::string s = "{\"cluster\":{\"worker\":[";
  for (std::size_t i = 0; i < workers.size(); ++i) s += (i ? ",\"" : "\"") + workers[i] + "\"";
  return s + "]},\"task\":{\"type\":\"worker\",\"index\":" + std::to_string(index) + "}}";
}

// One child process: `program` (this executable by default; a name without
// a slash is looked up in PATH) with `args` (argv[0] first),
// TROUPE_CLUSTER=`cluster` unless empty, stdout and stderr into `log`.
struct Child {
  pid_t pid = -1;
  std::string log;
  int status = -1;  // exit status once reaped; 128 + signal when killed

  Child(const std::vector<std::string>& args, const std::string& cluster, std::string log_path,
        const std::string& program = "/proc/self/exe")
      : log(std::move(log_path)) {
    std::fflush(stdout);
    std::fflush(stderr);
    pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        ::close(fd);
      }
      if (!cluster.empty()) ::setenv("TROUPE_CLUSTER", cluster.c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(program.c_str(), argv.data());
      std::perror(("exec " + program).c_str());
      ::_exit(127);
    }
  }
  bool done() {
    if (status >= 0 || pid <= 0) return true;
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return true;
    }
    return false;
  }
  void kill_now() {
    if (!done()) {
      ::kill(pid, SIGKILL);
      int st = 0;
      ::waitpid(pid, &st, 0);
      status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
  }
  std::string output() const {
    std::ifstream in(log);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

// What wait_all does when one child fails (ends with a non-zero status)
// while others still run.
enum class OnFailure {
  keep_waiting,  // the others may still end by themselves (e.g. a worker after its chief was killed)
  stop_the_rest  // like torchrun and mpirun: the others get SIGTERM, then SIGKILL 10 s later
};

// Waits until every child ended or `limit` passed; then kills the rest.
// True when all ended by themselves (or, with OnFailure::stop_the_rest,
// after one failed and the rest were stopped: the failure is in its status).
// Without stop_the_rest a chief whose worker died before joining waits for
// it until its own cluster timeout, minutes, for nothing.
inline bool wait_all(std::vector<Child*> children, std::chrono::seconds limit,
                     OnFailure on_failure = OnFailure::keep_waiting) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    bool all = true, failed = false;
    for (Child* c : children) {
      all = c->done() && all;
      failed = failed || (c->done() && c->status != 0);
    }
    if (all) return true;
    if (failed && on_failure == OnFailure::stop_the_rest) {
      for (Child* c : children)
        if (!c->done()) ::kill(c->pid, SIGTERM);
      const auto grace = std::min(end, std::chrono::steady_clock::now() + std::chrono::seconds(10));
      while (std::chrono::steady_clock::now() < grace) {
        bool rest = true;
        for (Child* c : children) rest = c->done() && rest;
        if (rest) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      for (Child* c : children) c->kill_now();
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (Child* c : children) c->kill_now();
  return false;
}

// True when a child could not listen on its port because something else
// took it: the ports a launcher picks with free_port() are free when picked,
// and another process (a parallel test, say) can bind one before the child
// does. A launcher that picked the ports itself then tries fresh ones.
// troupe says "cannot listen on HOST:PORT: port PORT is already in use by
// another process ..." (net/transport/socket.cpp); strerror's "Address
// already in use" is taken too.
inline bool lost_a_port(const std::vector<Child*>& children) {
  for (const Child* c : children) {
    const std::string out = c->output();
    if (c->status != 0 && out.find("cannot listen on") != std::string::npos &&
        (out.find("is already in use") != std::string::npos || out.find("Address already in use") != std::string::npos))
      return true;
  }
  return false;
}

// Each line of `text` prefixed with `prefix`, to stdout.
inline void print_prefixed(const std::string& prefix, const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) std::printf("%s%s\n", prefix.c_str(), line.c_str());
  std::fflush(stdout);
}

}  // namespace examples
