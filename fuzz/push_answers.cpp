// The parameter server's answers as a replica reads them (actors/ps/
// push_link.hpp): a real PushClient pushes one or two parts to a
// harness that plays the ps task over loopback: it passes the Hellos, then
// sends the input as the answer stream and closes its side. The client's
// receive() reads each answer straight into the replica's buffer, so this
// is where a ps task's bytes (altered on the way, or from a broken or
// hostile peer) meet the replica's parameters. The first byte picks:
//   bit 0      the form: 0 the raw stream after the Hello (anything), 1 a
//              sequence of answers the harness builds from the input
//   bit 1      the client polls 50 us for each answer before it sleeps
//              (PushClientConfig::answer_poll)
//   bit 2      two pushes (shard 0, 16 floats; then shard 3, 40 floats,
//              marked kReadsNext), else one (shard 0)
// A built answer takes a flags byte: bit 0 its CRC is off by one, bit 1
// its shard, bit 2 its sequence, bit 3 its floats and bit 6 its magic come
// from the input (else the expected ones), bits 4-5 the status (0 applied,
// 1 refused, 2 a raw u32 from the input); then a staleness byte (signed),
// a refusal's reason (its length from one byte) and the payload (the
// floats it claims, from the input as far as it goes, then zeros, at most
// 64 KiB).
//
// Properties: receive() returns or throws PushError, nothing else, within
// the client's 2 s timeout; an answer built in step (the expected shard,
// sequence and floats, a right CRC) is taken: its floats land in the
// buffer bit for bit with its staleness, and a refusal built in step
// throws with its reason (control bytes shown as '?': util/printable.hpp)
// and leaves the client usable for the next; an
// answer whose CRC is off is never taken; after a transport failure every
// later receive fails; nothing crashes, and no length makes the client
// write past the part's buffer (ASan: each buffer is exactly its floats).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "net/push/push_link.hpp"
#include "net/transport/hello.hpp"
#include "net/transport/socket.hpp"
#include "util/printable.hpp"

using namespace troupe;
using namespace troupe::net::push;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kJob = 0x5eed'f00d'0b5e'55edull;
struct Part {
  int shard;
  std::int64_t floats;
};
constexpr Part kParts[2] = {{0, 16}, {3, 40}};

int listener(std::uint16_t* port) {
  static std::uint16_t p = 0;
  static const int fd = net::listen_tcp("127.0.0.1:0", &p);
  *port = p;
  return fd;
}

std::uint64_t take(troupe::fuzz::Input& in, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = v << 8 | in.byte();
  return v;
}

// What a built answer should do to the client.
enum class Expect { anything, taken, refused };
struct Built {
  Expect expect = Expect::anything;
  std::vector<float> floats;  // a taken answer's payload
  std::int64_t staleness = -1;
  std::string reason;
  bool bad_crc = false;
};

// The answers of a built input for `pushes` pushes; `plan` says what each
// should do while the stream stays in step.
std::string built_answers(troupe::fuzz::Input& in, int pushes, std::vector<Built>& plan) {
  std::string out;
  bool in_step = true;
  for (int i = 0; i < 4 && !in.rest().empty(); ++i) {
    const std::uint8_t flags = in.byte();
    const Part expected = kParts[i < pushes ? i : 0];
    push_wire::AnswerHeader h;
    h.magic = flags & 64 ? static_cast<std::uint32_t>(take(in, 4)) : push_wire::kAnswerMagic;
    h.shard = flags & 2 ? static_cast<std::uint32_t>(take(in, 1)) : static_cast<std::uint32_t>(expected.shard);
    h.sequence = flags & 4 ? static_cast<std::uint32_t>(take(in, 1)) : static_cast<std::uint32_t>(i);
    const int status = (flags >> 4) & 3;
    h.status =
        status == 2 || status == 3 ? static_cast<std::uint32_t>(take(in, 4)) : static_cast<std::uint32_t>(status);
    h.staleness = static_cast<std::int8_t>(in.byte());
    std::string payload;
    Built b;
    b.bad_crc = flags & 1;
    if (h.status == static_cast<std::uint32_t>(push_wire::AnswerStatus::refused)) {
      h.floats = flags & 8 ? static_cast<std::int64_t>(take(in, 8)) : 0;
      const std::size_t n = std::min<std::size_t>(in.byte(), in.rest().size());
      payload.assign(in.rest().substr(0, n));
      for (std::size_t k = 0; k < n; ++k) (void)in.byte();
      h.reason_bytes = static_cast<std::uint32_t>(n);
      b.reason = payload;
    } else {
      h.floats = flags & 8 ? static_cast<std::int64_t>(take(in, 8)) : expected.floats;
      const std::size_t claimed =
          h.floats > 0 ? std::min<std::size_t>(static_cast<std::size_t>(h.floats) * sizeof(float), 64 * 1024) : 0;
      const std::size_t n = std::min(claimed, in.rest().size());
      payload.assign(in.rest().substr(0, n));
      for (std::size_t k = 0; k < n; ++k) (void)in.byte();
      payload.resize(claimed, '\0');
      b.floats.resize(payload.size() / sizeof(float));
      if (!b.floats.empty()) std::memcpy(b.floats.data(), payload.data(), b.floats.size() * sizeof(float));
      b.staleness = h.staleness < 0 ? -1 : h.staleness;
    }
    unsigned char header[push_wire::kAnswerHeaderBytes];
    push_wire::encode(h, header);
    h.crc32c = push_wire::answer_crc(header, payload.data(), payload.size()) + (b.bad_crc ? 1u : 0u);
    push_wire::encode(h, header);
    out.append(reinterpret_cast<const char*>(header), sizeof header);
    out += payload;
    // In step: the answer the client waits for, whole and right.
    const bool right = i < pushes && h.magic == push_wire::kAnswerMagic &&
                       h.shard == static_cast<std::uint32_t>(expected.shard) &&
                       h.sequence == static_cast<std::uint32_t>(i) && !b.bad_crc;
    if (in_step && right && h.status == 0 && h.floats == expected.floats)
      b.expect = Expect::taken;
    else if (in_step && right && h.status == 1 && h.floats == 0)
      b.expect = Expect::refused;
    if (b.expect == Expect::anything) in_step = false;
    plan.push_back(std::move(b));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::uint16_t port = 0;
  (void)listener(&port);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  troupe::fuzz::Input in(data, size);
  const std::uint8_t form = in.byte();
  const bool built = form & 1;
  const bool polls = form & 2;
  const int pushes = form & 4 ? 2 : 1;
  std::vector<Built> plan;
  const std::string stream = built ? built_answers(in, pushes, plan) : std::string(in.rest());

  std::uint16_t port = 0;
  const int listen_fd = listener(&port);
  // The ps task: the Hellos, then the stream, then it reads what the client
  // sends until the client closes (so that nothing unread resets the
  // connection before the client has read the answers).
  std::atomic<bool> served{false};
  std::thread ps_task([&] {
    if (!troupe::fuzz::wait_for_fd(listen_fd, POLLIN, 10000)) return;
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    net::wire::prepare_socket(fd);
    try {
      (void)net::wire::read_hello(fd, nullptr, net::Clock::now() + 5s);
      net::wire::Hello h;
      h.purpose = net::wire::Purpose::push_link;
      h.version = push_wire::kVersion;
      h.job_id = kJob;
      net::wire::write_hello(fd, nullptr, h, net::Clock::now() + 5s);
      net::wire::write_all(fd, stream.data(), stream.size(), nullptr, 0, net::Clock::now() + 5s);
    } catch (const std::exception&) {
      // The client may give up and close before reading it all.
    }
    ::shutdown(fd, SHUT_WR);
    char sink[4096];
    while (troupe::fuzz::wait_for_fd(fd, POLLIN, 10000) && ::recv(fd, sink, sizeof sink, 0) > 0) {}
    troupe::fuzz::close_with_reset(fd);
    served = true;
  });

  const auto start = net::Clock::now();
  {
    PushClientConfig c;
    c.address = "127.0.0.1:" + std::to_string(port);
    c.job_id = kJob;
    c.connect_timeout = 5s;
    c.timeout = 2s;
    c.answer_poll = polls ? 50us : 0us;
    std::unique_ptr<PushClient> client;
    try {
      client = std::make_unique<PushClient>(c);
    } catch (const PushError& e) {
      troupe::fuzz::fail(std::string("the client could not connect to the harness: ") + e.what());
    }
    std::vector<float> gradient(64, 0.5f);
    for (int i = 0; i < pushes; ++i)
      client->send(kParts[i].shard, 1, 0, 1, gradient.data(), kParts[i].floats, i == pushes - 1);
    bool broken = false;
    for (int i = 0; i < pushes; ++i) {
      // Exactly the part's floats, so that ASan sees a write past them.
      std::unique_ptr<float[]> out(new float[static_cast<std::size_t>(kParts[i].floats)]);
      const Built* b = built && i < static_cast<int>(plan.size()) ? &plan[static_cast<std::size_t>(i)] : nullptr;
      const Expect expect = built ? (b ? b->expect : Expect::anything) : Expect::anything;
      try {
        const std::int64_t staleness = client->receive(kParts[i].shard, out.get(), kParts[i].floats);
        TROUPE_FUZZ_CHECK(!broken, "a receive after a transport failure succeeded");
        TROUPE_FUZZ_CHECK(expect != Expect::refused, "a refusal in step was taken as an answer");
        TROUPE_FUZZ_CHECK(!b || !b->bad_crc, "an answer whose CRC-32C is off was taken");
        if (expect == Expect::taken) {
          TROUPE_FUZZ_CHECK(std::memcmp(out.get(), b->floats.data(), b->floats.size() * sizeof(float)) == 0,
                            "an answer in step landed as other floats");
          TROUPE_FUZZ_CHECK(staleness == b->staleness, "an answer in step gave staleness " + std::to_string(staleness));
        }
        TROUPE_FUZZ_CHECK(!built || expect == Expect::taken, "an answer out of step was taken");
      } catch (const PushError& e) {
        const std::string what = e.what();
        TROUPE_FUZZ_CHECK(expect != Expect::taken, "an answer in step was not taken: " + what);
        if (expect == Expect::refused) {
          TROUPE_FUZZ_CHECK(what.find("refused by the server: " +
                                      util::printable(b->reason, push_wire::kMaxReasonBytes)) != std::string::npos,
                            "a refusal in step did not carry its reason: " + what);
        } else {
          broken = true;
        }
      } catch (const std::exception& e) {
        troupe::fuzz::fail(std::string("receive threw something other than PushError: ") + e.what());
      }
    }
  }  // the client closes: the harness's ps task ends
  ps_task.join();
  TROUPE_FUZZ_CHECK(served.load(), "the harness's ps task was never reached or never saw the client close");
  const double took = std::chrono::duration<double>(net::Clock::now() - start).count();
  // Each receive is bounded by the client's 2 s timeout from its send.
  TROUPE_FUZZ_CHECK(took < 10.0, "the exchange took " + std::to_string(took) + " s");
  if (took > 3.0) std::fprintf(stderr, "push_answers: the exchange took %.1f s\n", took);
  return 0;
}
