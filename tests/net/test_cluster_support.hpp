// Shared by the gate's tests (test_cluster_gate.cpp, test_cluster_mitm.cpp):
// an echo server playing CAF's local port, blocking clients with timeouts, a
// log that tests can search, and the configurations they start from.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/cluster/gate.hpp"
#include "net/tcp/tcp.hpp"
#include "tests/support/blocking_sockets.hpp"

namespace troupe::net::testing {

using namespace std::chrono_literals;

inline const std::string kSecretText = "correct horse battery staple";

// Plays CAF's port on 127.0.0.1: echoes every byte back on every
// connection, counting what it received.
class EchoServer {
 public:
  EchoServer() {
    listen_fd_ = listen_tcp("127.0.0.1:0", &port_);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~EchoServer() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    close_connections();
    for (auto& t : threads_) t.join();
    ::close(listen_fd_);
  }
  std::uint16_t port() const { return port_; }
  std::size_t bytes_received() const { return received_; }
  std::size_t connections() const { return connections_; }
  // Closes every connection from the server's side.
  void close_connections() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }

 private:
  void accept_loop() {
    while (!stopping_) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (stopping_) return;
        continue;
      }
      ++connections_;
      std::lock_guard<std::mutex> lock(mutex_);
      fds_.push_back(fd);
      threads_.emplace_back([this, fd] { echo(fd); });
    }
  }
  void echo(int fd) {
    std::vector<char> buffer(64 << 10);
    for (;;) {
      const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
      if (n <= 0) break;
      received_ += static_cast<std::size_t>(n);
      std::size_t done = 0;
      while (done < static_cast<std::size_t>(n)) {
        const ssize_t put = ::send(fd, buffer.data() + done, static_cast<std::size_t>(n) - done, MSG_NOSIGNAL);
        if (put <= 0) break;
        done += static_cast<std::size_t>(put);
      }
      if (done < static_cast<std::size_t>(n)) break;
    }
    ::shutdown(fd, SHUT_RDWR);
    // closed by the destructor (after the threads are joined)
  }

  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> received_{0}, connections_{0};
  std::mutex mutex_;
  std::vector<int> fds_;
  std::list<std::thread> threads_;
  std::thread acceptor_;
};

using troupe::testing::connect_blocking;
using troupe::testing::recv_all;
using troupe::testing::send_all;

// Whether the peer closes fd (EOF or reset) within `limit`, reading and
// discarding anything before that.
inline bool sees_eof(int fd, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  }
}

// Waits up to 5 s for `condition`.
template <typename F>
bool eventually(F condition) {
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

// Collects log lines from any thread.
struct Log {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(line);
    };
  }
  // Whether some line contains every one of `parts`.
  bool has(std::initializer_list<std::string> parts) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& line : lines) {
      bool all = true;
      for (const auto& part : parts) all = all && line.find(part) != std::string::npos;
      if (all) return true;
    }
    return false;
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

inline HandshakeConfig handshake(const std::string& identity, const std::string& secret = "",
                                 const std::string& version = "1.2.3") {
  HandshakeConfig c;
  if (!secret.empty()) c.secret = Secret::from_text(secret);
  c.version = version;
  c.identity = identity;
  return c;
}

// The same with --insecure: the secret proven, the link left unsealed.
inline HandshakeConfig clear_handshake(const std::string& identity, const std::string& secret) {
  HandshakeConfig c = handshake(identity, secret);
  c.clear_links = true;
  return c;
}

inline GateConfig gate_config(std::uint16_t forward_port, HandshakeConfig h, Log* log = nullptr) {
  GateConfig c;
  c.listen_address = "127.0.0.1:0";
  c.forward_port = forward_port;
  c.handshake = std::move(h);
  c.handshake_timeout = 2s;
  if (log) c.log = log->sink();
  return c;
}

inline JoinRelayConfig relay_config(std::uint16_t gate_port, HandshakeConfig h, Log* log = nullptr) {
  JoinRelayConfig c;
  c.gate_address = "127.0.0.1:" + std::to_string(gate_port);
  c.handshake = std::move(h);
  c.timeout = 3s;
  if (log) c.log = log->sink();
  return c;
}

}  // namespace troupe::net::testing
