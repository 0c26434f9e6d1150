// The parameter server's push frames on the data plane (actors/ps/
// push_link.hpp): a real PushServer on loopback hosting two
// shards (16 and 40 floats) whose apply is counted; the harness passes the
// Hello and then sends the input as the client's byte stream before closing
// its side. The first byte picks the form:
//   even  the raw stream after the Hello (headers, payloads, anything)
//   odd   a sequence of frames the harness builds from the input (shard,
//         view, rank, clock, floats, sequence taken from it; payload from
//         it), each with a correct CRC-32C unless the frame's flag byte
//         says to corrupt it
//
// Properties: the server answers or closes (never hangs once the client has
// sent everything and closed: an exchange over 3 s is logged, over 60 s
// fails); every answer header is well-formed, with a reason of at most
// kMaxReasonBytes and no more floats than the largest part; `apply` is
// called only for a hosted shard with exactly that shard's floats, and
// never more times than frames were sent; nothing
// crashes, and no length makes the server allocate past its largest part
// (libFuzzer's -rss_limit_mb catches that).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "net/push/push_link.hpp"
#include "net/tcp/tcp.hpp"
#include "net/tcp/wire.hpp"

using namespace troupe;
using namespace troupe::net::push;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kJob = 0x5eed'f00d'0b5e'55edull;
const std::map<int, std::int64_t> kShards = {{0, 16}, {3, 40}};

std::atomic<int> applied{0};
std::atomic<bool> wrong_apply{false};

PushServer& server() {
  static PushServer* s = [] {
    std::uint16_t port = 0;
    const int fd = net::listen_tcp("127.0.0.1:0", &port);
    PushServerConfig c;
    c.listen_fd = fd;
    c.job_id = kJob;
    c.shards = kShards;
    c.io_timeout = 2s;  // a client silent mid-frame is dropped after 2 s
    c.handshake_timeout = 2s;
    c.log = [](const std::string&) {};  // refusals are expected here
    c.apply = [](int shard, GradientPush push) -> Tensor {
      const auto it = kShards.find(shard);
      if (it == kShards.end() || push.gradient.numel() != it->second) wrong_apply = true;
      ++applied;
      return push.gradient;  // the fresh part: as many floats as the shard's
    };
    return new PushServer(c);  // lives as long as the process: its threads serve every input
  }();
  return *s;
}

std::uint64_t take(troupe::fuzz::Input& in, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = v << 8 | in.byte();
  return v;
}

// The frames of an odd input; `frames` counts them.
std::string built_frames(troupe::fuzz::Input& in, int& frames) {
  std::string out;
  while (!in.rest().empty() && frames < 8) {
    push_wire::PushHeader h;
    const std::uint8_t flags = in.byte();
    h.shard = static_cast<std::uint32_t>(flags & 4 ? take(in, 4) : (flags & 1 ? 3 : 0));
    h.view = static_cast<std::uint32_t>(take(in, 1));
    h.rank = static_cast<std::int32_t>(take(in, 1));
    h.clock = static_cast<std::int64_t>(take(in, 2));
    const auto it = kShards.find(static_cast<int>(h.shard));
    h.floats = flags & 8 ? static_cast<std::int64_t>(take(in, 8)) : (it == kShards.end() ? 16 : it->second);
    h.sequence = static_cast<std::uint32_t>(flags & 16 ? take(in, 4) : static_cast<std::uint64_t>(frames));
    h.flags = (flags & 32 ? push_wire::kReadsNext : 0u) | (flags & 64 ? 2u : 0u);
    // The payload: what the header claims, as far as the input and 64 KiB go.
    const std::size_t claimed = h.floats > 0 ? static_cast<std::size_t>(h.floats) * sizeof(float) : 0;
    const std::size_t bytes = std::min<std::size_t>({claimed, in.rest().size(), 64 * 1024});
    std::string payload(in.rest().substr(0, bytes));
    for (std::size_t i = 0; i < bytes; ++i) (void)in.byte();
    payload.resize(std::min<std::size_t>(claimed, 64 * 1024), '\0');
    unsigned char header[push_wire::kPushHeaderBytes];
    push_wire::encode(h, header);
    h.crc32c = push_wire::push_crc(header, payload.data(), payload.size()) ^ (flags & 2 ? 1u : 0u);
    push_wire::encode(h, header);
    out.append(reinterpret_cast<const char*>(header), sizeof header);
    out += payload;
    ++frames;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The tensor backends first, then the server, then the server's stop at
  // exit: atexit handlers and static destructors run in reverse order, so
  // the server's threads end before the backends they free tensors with go.
  (void)Tensor::empty({1});
  (void)server();
  std::atexit([] { server().stop(); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  PushServer& s = server();
  troupe::fuzz::Input in(data, size);
  const bool built = in.byte() & 1;
  int frames = 0;
  const std::string stream = built ? built_frames(in, frames) : std::string(in.rest());
  const int before = applied.load();

  const int fd = net::wire::connect_tcp("127.0.0.1:" + std::to_string(s.port()), net::Clock::now() + 5s);
  net::wire::Hello h;
  h.purpose = net::wire::Purpose::push_link;
  h.version = push_wire::kVersion;
  h.job_id = kJob;
  try {
    net::wire::write_hello(fd, nullptr, h, net::Clock::now() + 5s);
    net::wire::read_hello(fd, nullptr, net::Clock::now() + 5s);
    net::wire::write_all(fd, stream.data(), stream.size(), nullptr, 0, net::Clock::now() + 5s);
  } catch (const net::wire::IoError&) {
    // The server may refuse and close before reading it all.
  }
  ::shutdown(fd, SHUT_WR);
  // Every answer, until the server closes.
  std::string got;
  char buffer[4096];
  const auto start = net::Clock::now();
  for (;;) {
    const int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(start + 60s - net::Clock::now()).count());
    if (!troupe::fuzz::wait_for_fd(fd, POLLIN, ms)) troupe::fuzz::fail("no answer and no close within 60 s");
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    got.append(buffer, static_cast<std::size_t>(n));
  }
  troupe::fuzz::close_with_reset(fd);
  // The server's side of this connection ends (everything it held freed)
  // before the input does: libFuzzer's leak check after each input must not
  // see a connection thread still tearing down.
  while (s.connections() > 0 && net::Clock::now() - start < 60s) std::this_thread::sleep_for(1ms);
  TROUPE_FUZZ_CHECK(s.connections() == 0, "a connection still served 60 s after its client closed");
  if (net::Clock::now() - start > 3s)
    std::fprintf(stderr, "push_frames: the exchange took %.1f s\n",
                 std::chrono::duration<double>(net::Clock::now() - start).count());

  // The answers: well-formed, for hosted shards, reasons bounded.
  std::size_t at = 0;
  while (got.size() - at >= push_wire::kAnswerHeaderBytes) {
    const auto a = push_wire::decode_answer(reinterpret_cast<const unsigned char*>(got.data() + at));
    TROUPE_FUZZ_CHECK(a.magic == push_wire::kAnswerMagic, "an answer without its magic");
    TROUPE_FUZZ_CHECK(a.reason_bytes <= push_wire::kMaxReasonBytes, "a reason of " + std::to_string(a.reason_bytes));
    TROUPE_FUZZ_CHECK(a.floats >= 0 && a.floats <= 40, "an answer of " + std::to_string(a.floats) + " floats");
    at += push_wire::kAnswerHeaderBytes + a.reason_bytes + static_cast<std::size_t>(a.floats) * sizeof(float);
  }
  TROUPE_FUZZ_CHECK(!wrong_apply.load(), "apply was called for a shard it does not host, or with another size");
  const int calls = applied.load() - before;
  if (built) {
    TROUPE_FUZZ_CHECK(calls <= frames, std::to_string(calls) + " applies for " + std::to_string(frames) + " frames");
  }
  TROUPE_FUZZ_CHECK(static_cast<std::size_t>(calls) <= stream.size() / push_wire::kPushHeaderBytes,
                    std::to_string(calls) + " applies from a stream of " + std::to_string(stream.size()) + " bytes");
  return 0;
}
