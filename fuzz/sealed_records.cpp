// Sealed records (net/transport/sealed.hpp) as a receiver reads them: a
// record "hi", then a frame payload that RecordSealer::write_split sent
// (one record, or with seal helpers the ramped records of
// wire::split_records), altered on the way, read by
// RecordOpener::read_exact (the "hi") and read_exact_split (the payload).
//
// Input: byte 0: bits 0-1 the sender's helpers, bits 2-3 the receiver's,
// bit 4 the sender's helpers (and its I/O thread waiting for them) poll for
// 50 us before they sleep, bit 5 the receiver's (set_helpers' spin);
// bytes 1-2: the payload's length (little-endian, at most 6000); byte 3:
// record_bytes (1 + byte * 8); byte 4: how many alterations follow, each
// of 4 bytes: kind (flip, truncate, insert, delete, swap two bytes),
// position (u16) and a value; the rest: the payload's bytes (repeated
// as needed).
//
// Properties: the sealer's bytes with no alteration read back to the
// payload exactly; whatever the alterations, the reader either returns the
// payload exactly (an alteration past the frame's end) or throws one of
// the documented errors (AuthenticationError, IoError, std::runtime_error)
// and every later read fails; nothing crashes, and no length makes it read
// or allocate past the frame (ASan).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "net/crypto/aead.hpp"
#include "net/transport/sealed.hpp"
#include "net/transport/socket.hpp"

using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

const std::string kSession(32, 'k');

struct Pair {
  int fds[2] = {-1, -1};
  Pair() {
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
    wire::prepare_socket(fds[0]);
    wire::prepare_socket(fds[1]);
  }
  ~Pair() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

Deadline soon() { return Clock::now() + 5s; }

// What the sealer writes for "hi" and the payload.
std::string on_the_wire(const std::string& payload, std::size_t record_bytes, int helpers,
                        std::chrono::microseconds spin) {
  Pair p;
  wire::RecordSealer sealer(link_keys(kSession, false).send);
  sealer.set_helpers(helpers, spin);
  std::string bytes;
  std::thread reader([&] {
    char piece[1 << 14];
    for (;;) {
      if (!::troupe::fuzz::wait_for_fd(p.fds[1], POLLIN, 5000))
        ::troupe::fuzz::fail("the sealer wrote nothing for 5 s");
      const ssize_t n = ::read(p.fds[1], piece, sizeof piece);
      if (n > 0)
        bytes.append(piece, static_cast<std::size_t>(n));
      else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        return;
    }
  });
  sealer.write(p.fds[0], "hi", 2, soon());
  sealer.write_split(p.fds[0], payload.data(), payload.size(), record_bytes, soon());
  ::shutdown(p.fds[0], SHUT_WR);
  reader.join();
  return bytes;
}

// Reads `wire` as the receiver; "" and the payload, or the error.
struct Read {
  bool ok = false;
  std::string payload;
  bool later_read_fails = false;
};
Read read_back(const std::string& bytes, std::size_t payload_bytes, std::size_t record_bytes, int helpers,
               std::chrono::microseconds spin) {
  Pair p;
  std::thread writer([&] {
    try {
      wire::write_all(p.fds[0], bytes.data(), bytes.size(), nullptr, 0, soon());
    } catch (const wire::IoError&) {
      // the reader stopped early
    }
    ::shutdown(p.fds[0], SHUT_WR);
  });
  wire::RecordOpener opener(link_keys(kSession, true).receive);
  opener.set_helpers(helpers, spin);
  Read out;
  out.payload.assign(payload_bytes, '\0');
  try {
    char hi[2];
    opener.read_exact(p.fds[1], hi, 2, soon());
    TROUPE_FUZZ_CHECK(std::memcmp(hi, "hi", 2) == 0, "a record that opened holds other bytes");
    opener.read_exact_split(p.fds[1], out.payload.data(), payload_bytes, record_bytes, soon());
    out.ok = true;
  } catch (const wire::AuthenticationError&) {
  } catch (const wire::IoError&) {
  } catch (const std::runtime_error&) {}
  if (!out.ok) {
    char again[2];
    try {
      opener.read_exact(p.fds[1], again, 2, Clock::now() + 50ms);
    } catch (const std::exception&) {
      out.later_read_fails = true;
    }
  }
  ::shutdown(p.fds[1], SHUT_RDWR);
  writer.join();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  const int send_helpers = data[0] & 3, receive_helpers = (data[0] >> 2) & 3;
  const std::chrono::microseconds send_spin = (data[0] & 16) ? 50us : 0us, receive_spin = (data[0] & 32) ? 50us : 0us;
  const std::size_t payload_bytes = std::min<std::size_t>(static_cast<std::size_t>(data[1] | (data[2] << 8)), 6000);
  const std::size_t record_bytes = 1 + static_cast<std::size_t>(data[3]) * 8;
  const std::size_t alterations = std::min<std::size_t>(data[4], 8);
  std::size_t at = 5;
  struct Alteration {
    std::uint8_t kind;
    std::uint16_t position;
    std::uint8_t value;
  };
  std::vector<Alteration> changes;
  for (std::size_t i = 0; i < alterations && at + 4 <= size; ++i, at += 4)
    changes.push_back({data[at], static_cast<std::uint16_t>(data[at + 1] | (data[at + 2] << 8)), data[at + 3]});
  std::string payload(payload_bytes, '\0');
  for (std::size_t i = 0; i < payload_bytes; ++i)
    payload[i] = at < size ? static_cast<char>(data[at + i % (size - at)]) : static_cast<char>(i * 7);

  const std::string sent = on_the_wire(payload, record_bytes, send_helpers, send_spin);
  const Read clean = read_back(sent, payload_bytes, record_bytes, receive_helpers, receive_spin);
  TROUPE_FUZZ_CHECK(clean.ok && clean.payload == payload, "an unaltered frame did not read back (" +
                                                              std::to_string(payload_bytes) + " bytes, records of " +
                                                              std::to_string(record_bytes) + ")");
  if (changes.empty()) return 0;

  std::string altered = sent;
  for (const Alteration& c : changes) {
    if (altered.empty()) break;
    const std::size_t pos = c.position % altered.size();
    switch (c.kind % 5) {
      case 0:
        altered[pos] = static_cast<char>(altered[pos] ^ (c.value ? c.value : 1));
        break;
      case 1:
        altered.resize(pos);
        break;
      case 2:
        altered.insert(pos, 1, static_cast<char>(c.value));
        break;
      case 3:
        altered.erase(pos, 1);
        break;
      case 4:
        std::swap(altered[pos], altered[(pos + c.value + 1) % altered.size()]);
        break;
    }
  }
  const Read r = read_back(altered, payload_bytes, record_bytes, receive_helpers, receive_spin);
  if (r.ok) {
    // Only an alteration past the frame leaves it whole: what was read is
    // the frame, byte for byte.
    TROUPE_FUZZ_CHECK(r.payload == payload, "an altered frame opened to other bytes");
    TROUPE_FUZZ_CHECK(altered.compare(0, sent.size(), sent) == 0, "an altered frame opened");
  } else {
    TROUPE_FUZZ_CHECK(r.later_read_fails, "a read after a failed frame succeeded");
  }
  return 0;
}
