// A design choice, measured: the tcp ring's link protection as troupe
// builds it (AES-256-GCM records, net/transport/sealed.hpp) against TLS 1.3
// with an external pre-shared key through OpenSSL's libssl (the other
// design considered) and against plaintext (a CRC-32C per chunk, as
// the ring without a secret), all three under one ring all-reduce, so that
// only the link layer differs.
//
//   bench_link_layers [--world 2,3] [--size-mb 64] [--reps 9] [--warmup 2] [--chunk-kb 1024]
//
// W ranks are threads of this process on loopback, each with a sender
// thread (as the tcp ring: net/tcp/tcp.cpp), connected in a ring; an
// all-reduce is a reduce-scatter then an all-gather of W-1 steps each, every
// step's segment in chunks that go on as soon as they are summed. Each
// chunk on the wire:
//   plain   u32 CRC-32C, payload (one writev); the receiver checks the CRC;
//   sealed  one record (RecordSealer::write / RecordOpener::read_exact):
//           length, ciphertext, tag; sealed from the caller's buffer,
//           opened in place;
//   tls     SSL_write / SSL_read of the payload on a TLS 1.3 connection
//           (TLS_AES_256_GCM_SHA384, external PSK: SSL_CTX_set_psk_*
//           session callbacks, no certificate), which OpenSSL cuts into
//           records of at most 16 KiB.
// Prints one RESULT line per (world, layer): busbw (median of reps, GB/s)
// and the process's CPU time per all-reduce and rank (user + system,
// median), then the ratios to plain. docs/BENCHMARKS.md, "Sealed links".
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.hpp"
#include "net/crypto/aead.hpp"
#include "net/tcp/wire.hpp"
#include "net/transport/sealed.hpp"
#include "net/transport/socket.hpp"

using namespace troupe;
using net::Clock;
using net::Deadline;
namespace wire = net::wire;

namespace {

enum class Layer { plain, sealed, tls };
const char* name_of(Layer l) { return l == Layer::plain ? "plain" : l == Layer::sealed ? "sealed" : "tls"; }

constexpr auto kTimeout = std::chrono::seconds(60);  // any one wait: a hang is an error, not a stall
const std::string kPsk(32, '\x5a');                  // 32 bytes, as a handshake's session key
const unsigned char kPskIdentity[] = "troupe-ring";

[[noreturn]] void ssl_fail(const std::string& what) {
  char text[256] = "no OpenSSL error queued";
  if (const unsigned long e = ERR_get_error()) ERR_error_string_n(e, text, sizeof text);
  throw std::runtime_error(what + ": " + text);
}

void wait_io(int fd, short events, Deadline deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw std::runtime_error("timed out waiting for the socket");
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(left, 1)));
    if (n > 0) return;
    if (n < 0 && errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
  }
}

// The TLS 1.3 PSK session both ends agree on: TLS_AES_256_GCM_SHA384 with
// kPsk as its key (OpenSSL's external-PSK interface for TLS 1.3).
SSL_SESSION* psk_session(SSL* ssl) {
  static const unsigned char kSuite[2] = {0x13, 0x02};  // TLS_AES_256_GCM_SHA384
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kSuite);
  SSL_SESSION* s = SSL_SESSION_new();
  const auto* key = reinterpret_cast<const unsigned char*>(kPsk.data());
  if (!cipher || !s || !SSL_SESSION_set1_master_key(s, key, kPsk.size()) || !SSL_SESSION_set_cipher(s, cipher) ||
      !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

int use_psk(SSL* ssl, const EVP_MD*, const unsigned char** id, size_t* idlen, SSL_SESSION** sess) {
  *sess = psk_session(ssl);
  *id = kPskIdentity;
  *idlen = sizeof kPskIdentity - 1;
  return *sess ? 1 : 0;
}

int find_psk(SSL* ssl, const unsigned char* id, size_t idlen, SSL_SESSION** sess) {
  if (idlen != sizeof kPskIdentity - 1 || std::memcmp(id, kPskIdentity, idlen) != 0) {
    *sess = nullptr;  // unknown identity: no PSK, the handshake fails (no certificate either)
    return 1;
  }
  *sess = psk_session(ssl);
  return *sess ? 1 : 0;
}

struct SslCtx {
  SSL_CTX* ctx = nullptr;
  explicit SslCtx(bool server) {
    ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx || !SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) ||
        !SSL_CTX_set_ciphersuites(ctx, "TLS_AES_256_GCM_SHA384"))
      ssl_fail("setting up a TLS 1.3 context");
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_num_tickets(ctx, 0);  // nothing for a send-only end to read back
    if (server)
      SSL_CTX_set_psk_find_session_callback(ctx, find_psk);
    else
      SSL_CTX_set_psk_use_session_callback(ctx, use_psk);
  }
  ~SslCtx() { SSL_CTX_free(ctx); }
};

// One direction of a ring link, as the rank's sender or receiver sees it.
class Link {
 public:
  Link(Layer layer, int fd, bool accepting, SSL_CTX* ctx) : layer_(layer), fd_(fd) {
    const net::LinkKeys keys = net::link_keys(kPsk, accepting);
    if (layer == Layer::sealed) {
      sealer_ = std::make_unique<wire::RecordSealer>(keys.send);
      opener_ = std::make_unique<wire::RecordOpener>(keys.receive);
    } else if (layer == Layer::tls) {
      ssl_ = SSL_new(ctx);
      if (!ssl_ || !SSL_set_fd(ssl_, fd)) ssl_fail("a TLS connection");
      const Deadline deadline = Clock::now() + kTimeout;
      for (;;) {
        const int r = accepting ? SSL_accept(ssl_) : SSL_connect(ssl_);
        if (r == 1) break;
        wait_for(r, "the TLS handshake", deadline);
      }
      if (!SSL_session_reused(ssl_)) throw std::runtime_error("the TLS handshake did not use the pre-shared key");
    }
  }
  ~Link() {
    if (ssl_) SSL_free(ssl_);
    ::close(fd_);
  }
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  void send(const char* data, std::size_t bytes) {
    const Deadline deadline = Clock::now() + kTimeout;
    switch (layer_) {
      case Layer::plain: {
        const std::uint32_t crc = wire::crc32c(data, bytes);
        wire::write_all(fd_, &crc, sizeof crc, data, bytes, deadline);
        break;
      }
      case Layer::sealed:
        sealer_->write(fd_, data, bytes, deadline);
        break;
      case Layer::tls:
        for (std::size_t done = 0; done < bytes;) {
          const int n = SSL_write(ssl_, data + done, static_cast<int>(std::min<std::size_t>(bytes - done, 1 << 30)));
          if (n > 0)
            done += static_cast<std::size_t>(n);
          else
            wait_for(n, "SSL_write", deadline);
        }
        break;
    }
  }

  void receive(char* out, std::size_t bytes) {
    const Deadline deadline = Clock::now() + kTimeout;
    switch (layer_) {
      case Layer::plain: {
        std::uint32_t crc = 0;
        wire::read_all(fd_, &crc, sizeof crc, out, bytes, deadline);
        if (wire::crc32c(out, bytes) != crc) throw std::runtime_error("CRC-32C mismatch");
        break;
      }
      case Layer::sealed:
        opener_->read_exact(fd_, out, bytes, deadline);
        break;
      case Layer::tls:
        for (std::size_t done = 0; done < bytes;) {
          const int n = SSL_read(ssl_, out + done, static_cast<int>(std::min<std::size_t>(bytes - done, 1 << 30)));
          if (n > 0)
            done += static_cast<std::size_t>(n);
          else
            wait_for(n, "SSL_read", deadline);
        }
        break;
    }
  }

 private:
  void wait_for(int r, const char* doing, Deadline deadline) {
    const int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ)
      wait_io(fd_, POLLIN, deadline);
    else if (e == SSL_ERROR_WANT_WRITE)
      wait_io(fd_, POLLOUT, deadline);
    else
      ssl_fail(doing);
  }
  Layer layer_;
  int fd_;
  std::unique_ptr<wire::RecordSealer> sealer_;
  std::unique_ptr<wire::RecordOpener> opener_;
  SSL* ssl_ = nullptr;
};

// W threads meet here between all-reduces.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const int gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lock, kTimeout, [&] { return generation_ != gen; }))
      throw std::runtime_error("a rank did not reach the barrier");
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, arrived_ = 0, generation_ = 0;
};

// A rank's sender thread: sends the chunks it is handed, in order.
class Sender {
 public:
  explicit Sender(Link& link) : link_(link), thread_([this] { loop(); }) {}
  ~Sender() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(const char* data, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({data, bytes});
    ++posted_;
    cv_.notify_all();
  }
  void drain() {  // every chunk posted so far is on the wire (or the error)
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, kTimeout, [&] { return sent_ == posted_ || !error_.empty(); }))
      throw std::runtime_error("the sender did not finish");
    if (!error_.empty()) throw std::runtime_error(error_);
  }

 private:
  struct Chunk {
    const char* data;
    std::size_t bytes;
  };
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      const Chunk c = queue_.front();
      queue_.pop_front();
      lock.unlock();
      std::string error;
      try {
        if (error_.empty()) link_.send(c.data, c.bytes);
      } catch (const std::exception& e) {
        error = e.what();
      }
      lock.lock();
      if (!error.empty() && error_.empty()) error_ = error;
      ++sent_;
      cv_.notify_all();
    }
  }
  Link& link_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  std::uint64_t posted_ = 0, sent_ = 0;
  std::string error_;
  bool stopping_ = false;
  std::thread thread_;
};

// One ring all-reduce (sum) of `data` on rank r of w.
void ring_allreduce(std::vector<float>& data, int r, int w, std::size_t chunk_floats, Link& from_prev, Sender& to_next,
                    std::vector<float>& scratch) {
  const std::size_t n = data.size();
  const auto parts = static_cast<std::size_t>(w);
  auto index = [&](int k) { return static_cast<std::size_t>(((k % w) + w) % w); };  // segment k mod w
  auto seg_begin = [&](int k) { return n * index(k) / parts; };
  auto seg_end = [&](int k) { return n * (index(k) + 1) / parts; };
  const int steps = 2 * (w - 1);
  auto post_segment = [&](int k) {
    for (std::size_t at = seg_begin(k); at < seg_end(k); at += chunk_floats)
      to_next.post(reinterpret_cast<const char*>(data.data() + at),
                   std::min(chunk_floats, seg_end(k) - at) * sizeof(float));
  };
  post_segment(r);  // reduce-scatter step 0 sends this rank's own segment
  for (int s = 0; s < steps; ++s) {
    const bool reducing = s < w - 1;
    const int k = reducing ? r - s - 1 : r - (s - (w - 1));  // the segment received in step s
    for (std::size_t at = seg_begin(k); at < seg_end(k); at += chunk_floats) {
      const std::size_t m = std::min(chunk_floats, seg_end(k) - at);
      if (reducing) {
        from_prev.receive(reinterpret_cast<char*>(scratch.data()), m * sizeof(float));
        for (std::size_t i = 0; i < m; ++i) data[at + i] += scratch[i];
      } else {
        from_prev.receive(reinterpret_cast<char*>(data.data() + at), m * sizeof(float));
      }
      // What was received in step s is what goes on in step s + 1.
      if (s + 1 < steps) to_next.post(reinterpret_cast<const char*>(data.data() + at), m * sizeof(float));
    }
  }
  to_next.drain();
}

struct Options {
  std::vector<int> worlds{2, 3};
  std::size_t size_bytes = std::size_t{64} << 20;
  std::size_t chunk_bytes = std::size_t{1} << 20;
  int reps = 9;
  int warmup = 2;
};

Options parse(int argc, char** argv) {
  Options o;
  const char* usage = "[--world 2,3] [--size-mb N] [--reps N] [--warmup N] [--chunk-kb N]";
  bench::parse_flags(argc, argv, "bench_link_layers", usage, [&](const std::string& a, const std::string& v) {
    if (a == "--world") {
      o.worlds.clear();
      for (long long w : bench::integer_list_arg(a, v, 2)) o.worlds.push_back(static_cast<int>(w));
    } else if (a == "--size-mb") {
      o.size_bytes = static_cast<std::size_t>(bench::integer_arg(a, v, 1)) << 20;
    } else if (a == "--chunk-kb") {
      o.chunk_bytes = static_cast<std::size_t>(bench::integer_arg(a, v, 1)) << 10;
    } else if (a == "--reps") {
      o.reps = static_cast<int>(bench::integer_arg(a, v, 1));
    } else if (a == "--warmup") {
      o.warmup = static_cast<int>(bench::integer_arg(a, v, 0));
    } else {
      return false;
    }
    return true;
  });
  return o;
}

double process_cpu_ms() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3; };
  return ms(u.ru_utime) + ms(u.ru_stime);
}

struct Figures {
  double busbw = 0, cpu_ms = 0;
};

Figures run(const Options& o, int w, Layer layer) {
  // Rank r listens; rank r connects to r + 1 (its send link) and accepts
  // from r - 1 (its receive link).
  std::vector<int> listeners(static_cast<std::size_t>(w));
  std::vector<std::uint16_t> ports(static_cast<std::size_t>(w));
  for (int r = 0; r < w; ++r)
    listeners[static_cast<std::size_t>(r)] = net::listen_tcp("127.0.0.1:0", &ports[static_cast<std::size_t>(r)]);
  SslCtx client(false), server(true);
  const std::size_t floats = o.size_bytes / sizeof(float), chunk_floats = o.chunk_bytes / sizeof(float);
  Barrier barrier(w);
  std::vector<double> times, cpus;
  std::mutex mu;
  std::vector<std::string> errors(static_cast<std::size_t>(w));
  std::vector<std::thread> ranks;
  for (int r = 0; r < w; ++r)
    ranks.emplace_back([&, r] {
      try {
        const Deadline deadline = Clock::now() + kTimeout;
        const std::uint16_t next_port = ports[static_cast<std::size_t>((r + 1) % w)];
        const int out_fd = wire::connect_tcp("127.0.0.1:" + std::to_string(next_port), deadline);
        wait_io(listeners[static_cast<std::size_t>(r)], POLLIN, deadline);
        const int in_fd = ::accept(listeners[static_cast<std::size_t>(r)], nullptr, nullptr);
        if (in_fd < 0) throw std::runtime_error("accept failed");
        wire::prepare_socket(in_fd);
        // The TLS handshakes: connect and accept at once on two threads
        // (each end's handshake waits for the other's).
        std::unique_ptr<Link> to_next, from_prev;
        std::thread connector([&] { to_next = std::make_unique<Link>(layer, out_fd, false, client.ctx); });
        from_prev = std::make_unique<Link>(layer, in_fd, true, server.ctx);
        connector.join();
        if (!to_next) throw std::runtime_error("the send link did not come up");
        Sender sender(*to_next);
        std::vector<float> data(floats), scratch(chunk_floats);
        for (int rep = 0; rep < o.warmup + o.reps; ++rep) {
          for (std::size_t i = 0; i < floats; ++i) data[i] = static_cast<float>((i + static_cast<std::size_t>(r)) % 7);
          barrier.wait();
          const double cpu0 = process_cpu_ms();
          const auto t0 = Clock::now();
          ring_allreduce(data, r, w, chunk_floats, *from_prev, sender, scratch);
          const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
          barrier.wait();
          const double cpu = process_cpu_ms() - cpu0;
          // Every element summed over the ranks: (i + 0) % 7 + ... + (i + w - 1) % 7.
          for (std::size_t i = 0; i < floats; i += 4099) {
            float want = 0;
            for (int q = 0; q < w; ++q) want += static_cast<float>((i + static_cast<std::size_t>(q)) % 7);
            if (data[i] != want) throw std::runtime_error("a wrong sum at element " + std::to_string(i));
          }
          if (r == 0 && rep >= o.warmup) {
            std::lock_guard<std::mutex> lock(mu);
            times.push_back(seconds);
            cpus.push_back(cpu / w);
          }
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        std::fprintf(stderr, "bench_link_layers: rank %d (%s): %s\n", r, name_of(layer), e.what());
        std::_Exit(1);  // the other ranks would wait for this one until their deadlines
      }
    });
  for (auto& t : ranks) t.join();
  for (int fd : listeners) ::close(fd);
  const double t = bench::median(times);
  return {2.0 * (w - 1) / w * static_cast<double>(o.size_bytes) / t / 1e9, bench::median(cpus)};
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    for (int w : o.worlds) {
      Figures plain;
      for (Layer layer : {Layer::plain, Layer::sealed, Layer::tls}) {
        const Figures f = run(o, w, layer);
        if (layer == Layer::plain) plain = f;
        std::printf(
            "RESULT troupe link-layers layer=%s world=%d size_MB=%zu chunk_KB=%zu reps=%d busbw_GBps=%.3f "
            "cpu_ms_per_rank=%.1f busbw_ratio=%.2f cpu_ratio=%.2f\n",
            name_of(layer), w, o.size_bytes >> 20, o.chunk_bytes >> 10, o.reps, f.busbw, f.cpu_ms,
            f.busbw / plain.busbw, f.cpu_ms / plain.cpu_ms);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "bench_link_layers: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
