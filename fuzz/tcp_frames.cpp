// The tcp data plane's frame reader, end to end (net/tcp/tcp.hpp,
// wire.hpp): a real TcpGroup is rank 0 of a 2-rank ring on loopback; the
// harness plays rank 1 with raw sockets, passes the hello handshake, and
// then sends the input as rank 1's byte stream (frames: length prefix,
// Cap'n Proto header, payload; acks) before closing its side. Rank 0 runs
// one to three operations chosen by the first bytes.
//
// Properties: every operation returns, or fails with CollectiveError;
// nothing else escapes, nothing crashes or reads out of bounds, and no
// length in the stream makes rank 0 allocate or wait past its deadline
// (libFuzzer's -rss_limit_mb and -timeout catch those).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "net/tcp/tcp.hpp"
#include "net/tcp/wire.hpp"

using namespace troupe::net;
using namespace std::chrono_literals;
using troupe::kernels::DType;
using troupe::kernels::Shape;

namespace {

constexpr std::uint64_t kJob = 0x7e57'0b5e'55ed'1234ull;

wire::Hello hello_of(std::uint32_t rank) {
  wire::Hello h;
  h.purpose = wire::Purpose::ring;
  h.version = wire::kProtocolVersion;
  h.job_id = kJob;
  h.rank = rank;
  h.world = 2;
  return h;
}

Tensor floats(std::int64_t n) {
  Tensor t = Tensor::empty(Shape{n}, DType::f32);
  for (std::int64_t i = 0; i < n; ++i) t.f32()[i] = static_cast<float>(i) * 0.5f;
  return t;
}

// One operation of rank 0; a CollectiveError is an expected outcome.
void run(Collective& group, std::uint8_t op, std::int64_t n) {
  Tensor a = floats(n);
  std::shared_ptr<Work> work;
  try {
    switch (op % 7) {
      case 0:
        work = group.allreduce(a, ReduceOp::sum);
        break;
      case 1:
        work = group.broadcast(a, 1);
        break;
      case 2: {
        Tensor out = floats(2 * n);
        work = group.allgather(a, out);
        break;
      }
      case 3: {
        Tensor in = floats(2 * n);
        work = group.reduce_scatter(in, a, ReduceOp::sum);
        break;
      }
      case 4:
        work = group.barrier();
        break;
      case 5:
        work = group.recv(a, 1, op / 7);
        break;
      case 6:
        work = group.send(a, 1, op / 7);
        break;
    }
    work->wait(Clock::now() + 10s);
  } catch (const CollectiveError&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  troupe::fuzz::Input in(data, size);
  const std::uint8_t ops = 1 + in.byte() % 3;
  std::uint8_t op[3];
  for (int i = 0; i < ops; ++i) op[i] = in.byte();
  const std::int64_t n = 1 + in.byte() % 64;                              // floats per buffer
  const std::size_t chunk_bytes = 4 * (1 + std::size_t{in.byte()} % 16);  // small chunks: several frames
  const std::string_view stream = in.rest();

  int listen[2];
  std::string addresses[2];
  for (int r = 0; r < 2; ++r) {
    std::uint16_t port = 0;
    listen[r] = listen_tcp("127.0.0.1:0", &port);
    addresses[r] = "127.0.0.1:" + std::to_string(port);
  }
  TcpGroupConfig config;
  config.rank = 0;
  config.addresses = {addresses[0], addresses[1]};
  config.job_id = kJob;
  config.options.timeout = 2s;
  config.connect_timeout = 5s;
  config.chunk_bytes = chunk_bytes;
  config.listen_fd = listen[0];
  auto made = std::async(std::launch::async, [config] { return make_tcp_group(config); });

  // Rank 0 connects to rank 1 (us): accept it and answer its hello.
  troupe::fuzz::wait_for_fd(listen[1], POLLIN, 5000);
  const int from_real = ::accept(listen[1], nullptr, nullptr);
  ::close(listen[1]);
  if (from_real < 0) troupe::fuzz::fail("rank 0 did not connect");
  wire::prepare_socket(from_real);
  wire::read_hello(from_real, nullptr, Clock::now() + 5s);
  wire::write_hello(from_real, nullptr, hello_of(1), Clock::now() + 5s);
  // Then connect to rank 0 as its predecessor, and handshake.
  const int to_real = wire::connect_tcp(addresses[0], Clock::now() + 5s);
  wire::write_hello(to_real, nullptr, hello_of(1), Clock::now() + 5s);
  wire::read_hello(to_real, nullptr, Clock::now() + 5s);
  std::unique_ptr<Collective> group = made.get();

  // The input is all rank 1 ever says, on both connections (frames on the
  // one rank 0 receives from, acks on the one it sends to); then it hangs up.
  // Small buffers, so that everything rank 0 sends fits in the socket
  // buffers without being read.
  wire::write_all(to_real, stream.data(), stream.size(), nullptr, 0, Clock::now() + 5s);
  wire::write_all(from_real, stream.data(), stream.size(), nullptr, 0, Clock::now() + 5s);
  ::shutdown(to_real, SHUT_WR);
  ::shutdown(from_real, SHUT_WR);
  for (int i = 0; i < ops; ++i) run(*group, op[i], n);
  group.reset();
  troupe::fuzz::close_with_reset(to_real);
  troupe::fuzz::close_with_reset(from_real);
  return 0;
}
