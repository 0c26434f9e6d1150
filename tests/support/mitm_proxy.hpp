// A man in the middle for tests, on real loopback sockets: listens on
// 127.0.0.1:0 and connects every client to 127.0.0.1:target, forwarding both
// ways, and attacks the sealed records (net/transport/sealed.hpp) of the first
// connection after the cluster handshake passed through untouched: flips one
// bit, replays a recorded frame, drops one, or swaps two. It knows no key:
// it does what an attacker on the network path can do. Used by
// tests/net/test_cluster_mitm.cpp (the ring, the gate) and the node tests
// (a worker joining through it).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "net/transport/sealed.hpp"  // the record format
#include "tests/support/blocking_sockets.hpp"

namespace troupe::testing {

enum class Attack { none, flip_bit, replay_frame, drop_frame, swap_frames };

inline const char* attack_name(Attack a) {
  switch (a) {
    case Attack::none:
      return "none";
    case Attack::flip_bit:
      return "flip_bit";
    case Attack::replay_frame:
      return "replay_frame";
    case Attack::drop_frame:
      return "drop_frame";
    case Attack::swap_frames:
      return "swap_frames";
  }
  return "?";
}

struct AttackPlan {
  Attack attack = Attack::none;
  bool client_to_server = true;       // which direction is attacked
  std::size_t record = 0;             // the first record of the attacked frame (0: the first after the handshake)
  std::size_t records_per_frame = 1;  // the ring writes a frame as two records (header, payload) without seal helpers
  // Whether `record` counts from the first record after arm() rather than
  // from the first after the handshake (to attack a running job at a
  // moment the test chooses).
  bool wait_for_arm = false;
};

// Listens on 127.0.0.1:0 and connects every client to 127.0.0.1:target.
// Each direction is parsed: first the gate handshake's frames (a 4-byte
// little-endian length, then a Cap'n Proto message: one from the joiner,
// two from the acceptor), then sealed records (a 4-byte little-endian length, the
// ciphertext, the tag), which is where the attack happens. The proxy knows
// no key: it does what an attacker on the network path can do.
class MitmProxy {
 public:
  MitmProxy(std::uint16_t target, AttackPlan plan) : target_(target), plan_(plan), armed_(!plan.wait_for_arm) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 16) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error(std::string("MitmProxy: cannot listen: ") + std::strerror(errno));
    port_ = ntohs(a.sin_port);
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
  // With AttackPlan::wait_for_arm: attack from the next record on.
  void arm() { armed_ = true; }
  // Where later clients are connected to (for a target bound after the
  // proxy was made).
  void set_target(std::uint16_t target) { target_ = target; }

 private:
  void accept_loop() {
    while (!stopping_) {
      const int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) {
        if (stopping_) return;
        continue;
      }
      const int server = connect_blocking(target_);
      if (server >= 0) {  // no receive timeout: a quiet link is not the proxy's business
        timeval none{0, 0};
        ::setsockopt(server, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
        ::setsockopt(server, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
      }
      std::lock_guard<std::mutex> lock(mutex_);
      fds_.push_back(client);
      if (server < 0) {
        ::shutdown(client, SHUT_RDWR);
        continue;
      }
      fds_.push_back(server);
      // Only the first connection is attacked (the ring and the relay make one).
      const bool first = connections_++ == 0;
      threads_.emplace_back(
          [this, client, server, first] { pump(client, server, 1, first && plan_.client_to_server); });
      threads_.emplace_back(
          [this, client, server, first] { pump(server, client, 2, first && !plan_.client_to_server); });
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
      const std::size_t n =
          std::size_t{p[0]} | (std::size_t{p[1]} << 8) | (std::size_t{p[2]} << 16) | (std::size_t{p[3]} << 24);
      if (!read(n, body) || !forward(prefix + body)) return finish(from, to);
    }
    std::size_t first = plan_.record;
    const std::size_t n = plan_.records_per_frame;
    bool counting = !plan_.wait_for_arm;
    std::vector<std::string> held;  // replay and swap: the first frame
    // Sends `record`, then the held frame (the receiver may hang up at its
    // first record, so the attack counts as done once that is on its way).
    auto forward_then_held = [&](const std::string& record) {
      if (!forward(record)) return false;
      attacked_ = true;
      for (const auto& r : held)
        if (!forward(r)) return false;
      return true;
    };
    for (std::size_t index = 0;; ++index) {
      if (!counting && armed_) {
        counting = true;
        first += index;
      }
      if (!read(net::wire::kRecordPrefixBytes, prefix)) return finish(from, to);
      const auto* p = reinterpret_cast<const unsigned char*>(prefix.data());
      const std::size_t length =
          std::size_t{p[0]} | (std::size_t{p[1]} << 8) | (std::size_t{p[2]} << 16) | (std::size_t{p[3]} << 24);
      if (!read(length + net::kAeadTagBytes, body)) return finish(from, to);
      std::string record = prefix + body;
      if (attack && counting && plan_.attack != Attack::none && index >= first && index < first + 2 * n) {
        const bool in_first_frame = index < first + n;
        switch (plan_.attack) {
          case Attack::flip_bit:
            if (index == first) {
              record[net::wire::kRecordPrefixBytes + body.size() / 2] ^= 0x10;  // ciphertext, or tag when empty
              attacked_ = true;
            }
            break;
          case Attack::replay_frame:
            if (in_first_frame) {
              held.push_back(record);
              if (held.size() == n) {  // the frame went through once: send it again
                if (!forward_then_held(record)) return finish(from, to);
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
            // The second frame goes first: the receiver may give up at its
            // first record, before the rest of it comes by.
            if (index == first + n) attacked_ = true;
            if (index + 1 == first + 2 * n) {  // the second frame is through: now the first
              if (!forward_then_held(record)) return finish(from, to);
              continue;
            }
            break;
          case Attack::none:
            break;
        }
      }
      if (!forward(record)) return finish(from, to);
    }
  }
  void finish(int from, int to) {
    ::shutdown(from, SHUT_RDWR);
    ::shutdown(to, SHUT_RDWR);
  }

  std::atomic<std::uint16_t> target_;
  AttackPlan plan_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false}, attacked_{false}, armed_;
  std::size_t connections_ = 0;  // under mutex_
  std::mutex mutex_;
  std::vector<int> fds_;
  std::list<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace troupe::testing
