// One sealed link, one direction, a frame at a time: what the tcp ring's
// sender and receiver threads do per chunk (net/tcp/tcp.cpp), without the
// ring around them. A sender thread writes a frame (a 64-byte header record,
// then the payload: RecordSealer::write_split, records as
// wire::split_records gives them, each written as soon as it is sealed), a
// receiver thread reads and opens it (RecordOpener::read_exact_split), over
// a loopback TCP connection, with `--helpers` seal/open helper threads on
// each end; plaintext (a CRC-32C of the payload at each end, as the ring
// without a secret) for reference.
//
//   bench_sealed_frame [--size-kb 1024] [--record-kb 256] [--helpers 0,1,3] [--spin-us 0] [--reps 200] [--warmup 20]
//
// --spin-us: a list of how long the helpers (and an I/O thread waiting for
// one) poll for work before they sleep (wire::RecordWorkers); every helper
// count runs with each.
//
// Two figures per configuration, medians over `reps`:
//   latency_us     one frame in flight: from the sender's first byte of
//                  work to the receiver's last (the receiver answers one
//                  byte, the sender times to it): the serial tail of
//                  sealing before the first write and opening after the
//                  last read is in it;
//   throughput     frames back to back (batches of 16), GB/s of payload:
//                  the ring's steady state on one link.
// One RESULT line per configuration; the ratios to plaintext.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

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

struct Options {
  std::size_t size_bytes = std::size_t{1} << 20;
  std::size_t record_bytes = wire::kRingRecordBytes;
  std::vector<int> helpers{0, 1, 3};
  std::vector<int> spin_us{0};
  int reps = 200;
  int warmup = 20;
};

Options parse(int argc, char** argv) {
  Options o;
  const char* usage = "[--size-kb N] [--record-kb N] [--helpers 0,1,3] [--spin-us 0,50] [--reps N] [--warmup N]";
  bench::parse_flags(argc, argv, "bench_sealed_frame", usage, [&](const std::string& a, const std::string& v) {
    if (a == "--size-kb") {
      o.size_bytes = static_cast<std::size_t>(bench::integer_arg(a, v, 0)) << 10;
    } else if (a == "--record-kb") {
      o.record_bytes = static_cast<std::size_t>(bench::integer_arg(a, v, 1)) << 10;
    } else if (a == "--helpers") {
      o.helpers.clear();
      for (long long h : bench::integer_list_arg(a, v, 0)) o.helpers.push_back(static_cast<int>(h));
    } else if (a == "--spin-us") {
      o.spin_us.clear();
      for (long long us : bench::integer_list_arg(a, v, 0)) o.spin_us.push_back(static_cast<int>(us));
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

// A connected loopback pair: [0] the sender's end, [1] the receiver's.
struct Link {
  int fds[2] = {-1, -1};
  Link() {
    std::uint16_t port = 0;
    const int listener = net::listen_tcp("127.0.0.1:0", &port);
    fds[0] = wire::connect_tcp("127.0.0.1:" + std::to_string(port), Clock::now() + std::chrono::seconds(5));
    fds[1] = ::accept(listener, nullptr, nullptr);
    ::close(listener);
    if (fds[1] < 0) throw std::runtime_error("accept failed");
    wire::prepare_socket(fds[1]);
  }
  ~Link() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

struct Figures {
  double latency_us = 0, gbps = 0;
};

// helpers < 0: plaintext.
Figures run(const Options& o, int helpers, int spin_us) {
  Link link;
  const bool sealed = helpers >= 0;
  const std::string session(32, 's');
  const net::LinkKeys sender_keys = net::link_keys(session, false), receiver_keys = net::link_keys(session, true);
  wire::RecordSealer sealer(sender_keys.send);
  wire::RecordOpener opener(receiver_keys.receive);
  if (sealed) {
    sealer.set_helpers(helpers, std::chrono::microseconds(spin_us));
    opener.set_helpers(helpers, std::chrono::microseconds(spin_us));
  }
  std::vector<char> payload(o.size_bytes), received(o.size_bytes);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 131 + 7);
  char header[64] = {};
  const int batch = 16;
  const int latency_frames = o.warmup + o.reps, batches = std::max(1, (o.warmup + o.reps) / batch);
  const auto deadline = [] { return Clock::now() + std::chrono::seconds(30); };

  // The receiver: latency_frames frames each answered with one byte, then
  // batches of `batch` frames answered once each.
  std::thread receiver([&] {
    auto one = [&] {
      char h[64];
      if (sealed) {
        opener.read_exact(link.fds[1], h, sizeof h, deadline());
        opener.read_exact_split(link.fds[1], received.data(), received.size(), o.record_bytes, deadline());
      } else {
        wire::read_all(link.fds[1], h, sizeof h, deadline());
        wire::read_all(link.fds[1], received.data(), received.size(), deadline());
        std::uint32_t crc;
        std::memcpy(&crc, h, sizeof crc);
        if (wire::crc32c(received.data(), received.size()) != crc) throw std::runtime_error("crc mismatch");
      }
    };
    const char ack = 1;
    for (int i = 0; i < latency_frames; ++i) {
      one();
      wire::write_all(link.fds[1], &ack, 1, nullptr, 0, deadline());
    }
    for (int b = 0; b < batches; ++b) {
      for (int i = 0; i < batch; ++i) one();
      wire::write_all(link.fds[1], &ack, 1, nullptr, 0, deadline());
    }
  });
  auto send_one = [&] {
    if (sealed) {
      sealer.append(header, sizeof header);
      sealer.write_split(link.fds[0], payload.data(), payload.size(), o.record_bytes, deadline());
    } else {
      const std::uint32_t crc = wire::crc32c(payload.data(), payload.size());
      std::memcpy(header, &crc, sizeof crc);
      wire::write_all(link.fds[0], header, sizeof header, payload.data(), payload.size(), deadline());
    }
  };
  char ack = 0;
  std::vector<double> latencies;
  for (int i = 0; i < latency_frames; ++i) {
    const auto t0 = Clock::now();
    send_one();
    wire::read_all(link.fds[0], &ack, 1, deadline());
    if (i >= o.warmup) latencies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::vector<double> rates;
  for (int b = 0; b < batches; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) send_one();
    wire::read_all(link.fds[0], &ack, 1, deadline());
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(batch) * static_cast<double>(o.size_bytes) / s / 1e9);
  }
  receiver.join();
  if (received != payload) throw std::runtime_error("the payload arrived altered");
  return {bench::median(latencies), bench::median(rates)};
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    const Figures plain = run(o, -1, 0);
    std::printf("RESULT troupe sealed-frame mode=plaintext size_KB=%zu latency_us=%.1f throughput_GBps=%.3f\n",
                o.size_bytes >> 10, plain.latency_us, plain.gbps);
    for (int h : o.helpers)
      for (int spin : o.spin_us) {
        if (h == 0 && spin != o.spin_us.front()) continue;  // no helper, nothing spins
        const Figures f = run(o, h, spin);
        std::printf(
            "RESULT troupe sealed-frame mode=sealed helpers=%d spin_us=%d size_KB=%zu record_KB=%zu records=%zu "
            "latency_us=%.1f throughput_GBps=%.3f latency_ratio=%.2f throughput_ratio=%.2f\n",
            h, h > 0 ? spin : 0, o.size_bytes >> 10, o.record_bytes >> 10,
            h > 0 ? wire::split_records(o.size_bytes, o.record_bytes).size() : std::size_t{1}, f.latency_us, f.gbps,
            f.latency_us / plain.latency_us, f.gbps / plain.gbps);
      }
  } catch (const std::exception& e) {
    std::cerr << "bench_sealed_frame: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
