// Sealed links (net/crypto/aead.hpp, net/transport/sealed.hpp): the keys of a
// connection's two directions, records over a real socket pair, every way a
// record can be wrong on arrival (a bit flipped in the length, the
// ciphertext or the tag; replayed; reordered; reflected back with the
// sender's own key; too long), and a sealed ring whose every operation gives
// the same bits as the plaintext ring.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/crypto/aead.hpp"
#include "net/crypto/crypto.hpp"
#include "net/tcp/wire.hpp"
#include "net/transport/sealed.hpp"
#include "tests/net/test_tcp_support.hpp"

namespace troupe::net {
namespace {

using namespace std::chrono_literals;
using namespace troupe::net::testing;
using wire::AuthenticationError;
using wire::IoError;
using wire::RecordOpener;
using wire::RecordSealer;

const std::string kSession(32, 's');

// ---------------------------------------------------------------------------
// Keys.

TEST(TcpSealed, EachDirectionHasItsOwnKeyAndBothEndsAgree) {
  const LinkKeys acceptor = link_keys(kSession, true), joiner = link_keys(kSession, false);
  EXPECT_TRUE(acceptor.protects());
  EXPECT_EQ(acceptor.send.size(), kAeadKeyBytes);
  EXPECT_EQ(acceptor.send, joiner.receive);
  EXPECT_EQ(acceptor.receive, joiner.send);
  EXPECT_NE(acceptor.send, acceptor.receive);
  EXPECT_NE(link_keys(std::string(32, 't'), true).send, acceptor.send);
  EXPECT_FALSE(link_keys("", true).protects());
}

TEST(TcpSealed, AeadDirectionRefusesMisuse) {
  EXPECT_THROW(AeadDirection("short"), std::invalid_argument);
  AeadDirection d(std::string(kAeadKeyBytes, 'k'));
  unsigned char tag[kAeadTagBytes];
  char text[4] = {1, 2, 3, 4};
  d.seal(nullptr, 0, text, text, sizeof text, tag);
  EXPECT_THROW(d.open(nullptr, 0, text, text, sizeof text, tag), std::logic_error);
}

// ---------------------------------------------------------------------------
// Records over a socket pair.

struct Pair {
  int fds[2] = {-1, -1};
  Pair() {
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw std::runtime_error("socketpair");
    wire::prepare_socket(fds[0]);  // non-blocking, as the transports use them (TCP_NODELAY fails harmlessly)
    wire::prepare_socket(fds[1]);
  }
  ~Pair() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  // The reader is done: a writer still writing fails at once (EPIPE)
  // instead of waiting for room until its deadline.
  void close_reader() { ::close(std::exchange(fds[1], -1)); }
  // Raw bytes as the wire carries them, then the end of the stream, from a
  // thread of its own: more than the socket buffer holds (a split payload)
  // goes out as the reader takes it.
  std::thread put(const std::string& bytes) {
    return std::thread([this, &bytes] {
      try {
        wire::write_all(fds[0], bytes.data(), bytes.size(), nullptr, 0, soon());
      } catch (const std::exception&) {
        // The reader stopped early (it refused a record): what it read is
        // the test's to check.
      }
      ::shutdown(fds[0], SHUT_WR);
    });
  }
  static Deadline soon() { return Clock::now() + 2s; }
};

// Records as a sender with `key` seals them, as bytes.
std::vector<std::string> sealed(const std::string& key, const std::vector<std::string>& messages) {
  RecordSealer sealer(key);
  std::vector<std::string> out;
  for (const auto& m : messages) {
    std::string record(m.size() + wire::kRecordOverhead, '\0');
    sealer.seal(m.data(), m.size(), record.data());
    out.push_back(record);
  }
  return out;
}

// What an opener with `key` makes of `bytes`: the messages it opened, then
// the error that stopped it ("" when none).
std::pair<std::vector<std::string>, std::string> open_all(const std::string& key, const std::string& bytes,
                                                          std::size_t max = 1 << 20) {
  Pair p;
  std::thread writer = p.put(bytes);
  RecordOpener opener(key);
  std::vector<std::string> got;
  std::string error;
  try {
    for (;;) {
      std::string m(max, '\0');
      m.resize(opener.read(p.fds[1], m.data(), max, Pair::soon()));
      got.push_back(m);
    }
  } catch (const wire::IoError&) {
    // end of stream
  } catch (const std::exception& e) {
    error = e.what();
  }
  p.close_reader();
  writer.join();
  return {got, error};
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += p;
  return out;
}

const LinkKeys kJoiner = link_keys(kSession, false), kAcceptor = link_keys(kSession, true);
const std::vector<std::string> kMessages = {"first", std::string(100000, 'x'), "", "last"};

TEST(TcpSealed, RecordsRoundTripAndHideThePlaintext) {
  const auto records = sealed(kJoiner.send, kMessages);
  EXPECT_EQ(records[1].find(std::string(64, 'x')), std::string::npos) << "the plaintext is visible on the wire";
  const auto [got, error] = open_all(kAcceptor.receive, join(records));
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, kMessages);
  // A sealer and an opener on one socket, through the fd helpers.
  Pair p;
  RecordSealer out(kJoiner.send);
  RecordOpener in(kAcceptor.receive);
  out.append("ab", 2);
  out.append("cde", 3);
  out.flush(p.fds[0], Pair::soon());
  char buffer[8];
  EXPECT_EQ(in.read(p.fds[1], buffer, sizeof buffer, Pair::soon()), 2u);
  in.read_exact(p.fds[1], buffer, 3, Pair::soon());
  EXPECT_EQ(std::string(buffer, 3), "cde");
  EXPECT_EQ(in.records(), 2u);
}

TEST(TcpSealed, AnyFlippedBitFailsAuthentication) {
  const auto records = sealed(kJoiner.send, {"first", "second message"});
  const std::string good = records[0];
  // In the second record: a ciphertext byte, a tag byte, and the length made
  // shorter (14 -> 12: the tag is then read from the wrong bytes).
  for (std::size_t at : {std::size_t{6}, records[1].size() - 1, std::size_t{0}}) {
    std::string bad = records[1];
    bad[at] ^= at == 0 ? 0x02 : 0x40;
    const auto [got, error] = open_all(kAcceptor.receive, good + bad);
    ASSERT_EQ(got.size(), 1u) << "byte " << at;
    EXPECT_EQ(got[0], "first");
    EXPECT_NE(error.find("record 1 failed authentication"), std::string::npos) << "byte " << at << ": " << error;
  }
  // The length made longer (14 -> 15): the record never completes, and
  // nothing of it is delivered (the stream ends first here; a live
  // connection waits until its deadline).
  std::string longer = records[1];
  longer[0] ^= 0x01;
  const auto [got, error] = open_all(kAcceptor.receive, good + longer);
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(error, "");
}

TEST(TcpSealed, ReplayedReorderedDroppedAndReflectedRecordsFail) {
  const auto r = sealed(kJoiner.send, {"zero", "one1", "two2"});
  auto failure = [&](const std::string& bytes, const std::string& key) { return open_all(key, bytes).second; };
  EXPECT_NE(failure(r[0] + r[0], kAcceptor.receive).find("record 1 failed authentication"), std::string::npos);
  EXPECT_NE(failure(r[0] + r[2] + r[1], kAcceptor.receive).find("record 1 failed"), std::string::npos);
  EXPECT_NE(failure(r[1] + r[2], kAcceptor.receive).find("record 0 failed"), std::string::npos);
  // Sent back to the joiner, which opens with its receive key.
  EXPECT_NE(failure(r[0], kJoiner.receive).find("record 0 failed"), std::string::npos);
  // Another connection's keys.
  EXPECT_NE(failure(r[0], link_keys(std::string(32, 'o'), true).receive).find("failed"), std::string::npos);
}

TEST(TcpSealed, AfterAFailureTheOpenerStaysShut) {
  const auto r = sealed(kJoiner.send, {"zero", "one1"});
  RecordOpener opener(kAcceptor.receive);
  std::string bad = r[0];
  bad[5] ^= 1;
  char out[8];
  EXPECT_THROW(opener.open(bad.data(), bad.size(), out, sizeof out), AuthenticationError);
  // Even the genuine records do not open any more: the stream lost its place.
  EXPECT_THROW(opener.open(r[1].data(), r[1].size(), out, sizeof out), AuthenticationError);
}

TEST(TcpSealed, ATooLongRecordIsRefusedBeforeItIsRead) {
  const auto r = sealed(kJoiner.send, {std::string(1000, 'y')});
  const auto [got, error] = open_all(kAcceptor.receive, r[0], 999);
  EXPECT_TRUE(got.empty());
  EXPECT_NE(error.find("length field of 1000 bytes, more than the 999 expected"), std::string::npos) << error;
  // From a buffer: incomplete is not an error, too long is.
  RecordOpener opener(kAcceptor.receive);
  char out[1000];
  EXPECT_EQ(opener.open(r[0].data(), 10, out, sizeof out).consumed, 0u);
  EXPECT_THROW(opener.open(r[0].data(), r[0].size(), out, 999), std::runtime_error);
}

// ---------------------------------------------------------------------------
// A frame's payload in several records (write_split, read_exact_split),
// sealed and opened by helper threads.

TEST(TcpSealed, SplitRecordsCoverThePayloadInOrder) {
  using V = std::vector<std::size_t>;
  // Up to record_bytes / 8: one record.
  EXPECT_EQ(wire::split_records(0, 256), V{0});
  EXPECT_EQ(wire::split_records(1, 256), V{1});
  EXPECT_EQ(wire::split_records(32, 256), V{32});
  // Beyond: ramped at both ends, the remainder in the middle.
  EXPECT_EQ(wire::split_records(33, 256), (V{32, 1}));
  EXPECT_EQ(wire::split_records(256, 256), (V{32, 64, 64, 64, 32}));
  EXPECT_EQ(wire::split_records(1000, 256), (V{32, 64, 128, 256, 40, 256, 128, 64, 32}));
  // The ring's 1 MiB chunk in records of at most 256 KiB: 9, as wire.hpp says.
  EXPECT_EQ(wire::split_records(std::size_t{1} << 20, wire::kRingRecordBytes),
            (V{32 << 10, 64 << 10, 128 << 10, 256 << 10, 64 << 10, 256 << 10, 128 << 10, 64 << 10, 32 << 10}));
  EXPECT_EQ(wire::split_records(10, 1), (V{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_THROW(wire::split_records(10, 0), std::invalid_argument);
  // Any size: every byte in exactly one record, in order; no record empty
  // or over record_bytes; both ends at most record_bytes / 8; a bounded
  // number of records (the ramps add at most 3 at each end).
  std::uint64_t x = 12345;
  for (int k = 0; k < 2000; ++k) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const std::size_t record = 1 + x % 5000, bytes = (x >> 20) % 60000;
    const V sizes = wire::split_records(bytes, record);
    std::size_t sum = 0;
    for (std::size_t n : sizes) {
      EXPECT_LE(n, record);
      EXPECT_TRUE(n > 0 || bytes == 0);
      sum += n;
    }
    EXPECT_EQ(sum, bytes) << bytes << " in records of " << record;
    const std::size_t smallest = std::max<std::size_t>(record / 8, 1);
    if (sizes.size() > 1) {
      EXPECT_EQ(sizes.front(), smallest);
      EXPECT_LE(sizes.back(), smallest);
    }
    EXPECT_LE(sizes.size(), bytes / record + 8) << bytes << " in records of " << record;
  }
  EXPECT_EQ(ring_seal_helpers(1), 0);
  EXPECT_EQ(ring_seal_helpers(2), 0);
  EXPECT_EQ(ring_seal_helpers(4), 0);
  EXPECT_EQ(ring_seal_helpers(8), 1);
  EXPECT_EQ(ring_seal_helpers(16), 3);
  EXPECT_EQ(ring_seal_helpers(128), 3);
}

// The bytes a sealer with `helpers` helper threads puts on the wire for
// `payload` split into records of `record` bytes, after a first record
// "hi" (so the numbers do not start at 0).
std::string split_on_the_wire(const std::string& payload, std::size_t record, int helpers,
                              std::chrono::microseconds spin = 0us) {
  Pair p;
  RecordSealer sealer(kJoiner.send);
  sealer.set_helpers(helpers, spin);
  std::thread writer([&] {
    sealer.append("hi", 2);
    sealer.write_split(p.fds[0], payload.data(), payload.size(), record, Pair::soon());
    ::shutdown(p.fds[0], SHUT_WR);
  });
  std::string bytes, piece(1 << 16, '\0');
  const Deadline deadline = Pair::soon();
  for (;;) {
    const ssize_t n = ::read(p.fds[1], piece.data(), piece.size());
    if (n > 0) {
      bytes.append(piece.data(), static_cast<std::size_t>(n));
    } else if (n == 0 || Clock::now() > deadline) {
      break;
    } else if (errno != EAGAIN && errno != EINTR) {
      break;
    }
  }
  writer.join();
  return bytes;
}

std::string random_text(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (auto& c : s) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  return s;
}

// Where record i of a split payload (its length prefix) starts on the wire
// after the "hi" record.
std::size_t record_at(const std::vector<std::size_t>& sizes, std::size_t i) {
  std::size_t at = 2 + wire::kRecordOverhead;
  for (std::size_t j = 0; j < i; ++j) at += sizes[j] + wire::kRecordOverhead;
  return at;
}

TEST(TcpSealed, ASplitPayloadIsTheSameBytesWhateverThreadsSealIt) {
  const std::string payload = random_text(1000003, 5);  // 9 records: 31250 ... 250000 ... 31250
  const std::vector<std::size_t> sizes = wire::split_records(payload.size(), 250000);
  ASSERT_EQ(sizes.size(), 9u);
  const std::string split = split_on_the_wire(payload, 250000, 1);
  // Record by record, as a sealer without split would send them (each
  // written as it is sealed: the same bytes).
  std::vector<std::string> parts{"hi"};
  for (std::size_t at = 0, i = 0; i < sizes.size(); at += sizes[i++]) parts.push_back(payload.substr(at, sizes[i]));
  EXPECT_TRUE(split == join(sealed(kJoiner.send, parts)));
  for (int helpers : {3, 7}) EXPECT_TRUE(split_on_the_wire(payload, 250000, helpers) == split) << helpers;
  // Helpers that poll before they sleep (RecordWorkers' spin): the same.
  for (int helpers : {1, 3}) EXPECT_TRUE(split_on_the_wire(payload, 250000, helpers, 200us) == split) << helpers;
  // A plain opener reads them as those records.
  const auto [got, error] = open_all(kAcceptor.receive, split);
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, parts);
  // Without helpers, one record: the cheapest for a sender that seals alone.
  EXPECT_TRUE(split_on_the_wire(payload, 250000, 0) == join(sealed(kJoiner.send, {"hi", payload})));
}

// Every piece of every batch runs exactly once, whether the threads sleep
// at once or poll first, and wait_for() and finish() return only when the
// pieces they wait for are done. Many small batches: the hand-offs are
// what is tested (a wake-up lost between a poll and a sleep would hang
// here, and TSan sees the counters).
TEST(TcpSealed, RecordWorkersRunEveryPieceOnceWhetherTheyPollOrSleep) {
  AeadDirection aead(kJoiner.send);
  for (const auto& [helpers, spin] : {std::pair{1, 0us}, std::pair{3, 0us}, std::pair{1, 30us}, std::pair{3, 30us}}) {
    SCOPED_TRACE("helpers " + std::to_string(helpers) + ", spin " + std::to_string(spin.count()) + " us");
    wire::RecordWorkers workers(aead, helpers, spin);
    for (int batch = 0; batch < 400; ++batch) {
      const std::size_t n = 1 + static_cast<std::size_t>(batch) % 9;
      std::vector<std::atomic<int>> runs(n);
      workers.begin([&](std::size_t i, AeadCipher&) { runs[i].fetch_add(1); }, n);
      for (std::size_t i = 0; i < n; ++i) workers.post(i);
      if (batch % 2 == 1) {
        for (std::size_t i = 0; i < n;) {
          const std::size_t end = workers.wait_for(i, aead.cipher());
          ASSERT_GT(end, i);
          for (std::size_t j = i; j < end; ++j) ASSERT_EQ(runs[j].load(), 1) << "piece " << j;
          i = end;
        }
      }
      workers.finish(aead.cipher());
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(runs[i].load(), 1) << "batch " << batch << ", piece " << i;
    }
  }
}

// A reader that goes away mid-frame: the streaming sender fails with the
// I/O error (not a hang, not a crash), its helpers stop touching the
// payload before write_split returns (the buffer is freed at once), and so
// does a sender whose deadline passes while the reader takes nothing.
TEST(TcpSealed, ASplitWriteToAReaderThatGoesAwayFailsCleanly) {
  for (const auto& [helpers, spin] : {std::pair{1, 0us}, std::pair{3, 0us}, std::pair{1, 100us}, std::pair{3, 100us}}) {
    SCOPED_TRACE("helpers " + std::to_string(helpers) + ", spin " + std::to_string(spin.count()) + " us");
    {
      Pair p;
      RecordSealer sealer(kJoiner.send);
      sealer.set_helpers(helpers, spin);
      auto payload = std::make_unique<std::string>(random_text(std::size_t{16} << 20, 9));
      std::thread reader([&] {
        std::string piece(100000, '\0');
        wire::read_all(p.fds[1], piece.data(), piece.size(), Pair::soon());
        p.close_reader();
      });
      EXPECT_THROW(sealer.write_split(p.fds[0], payload->data(), payload->size(), 250000, Pair::soon()), IoError);
      payload.reset();
      reader.join();
    }
    {
      Pair p;
      RecordSealer sealer(kJoiner.send);
      sealer.set_helpers(helpers, spin);
      const std::string payload = random_text(std::size_t{16} << 20, 10);
      try {
        sealer.write_split(p.fds[0], payload.data(), payload.size(), 250000, Clock::now() + 300ms);
        ADD_FAILURE() << "16 MiB went into a socket nobody reads";
      } catch (const IoError& e) {
        EXPECT_TRUE(e.timed_out) << e.what();
      }
    }
  }
}

// What read_exact_split with `helpers` makes of `wire` (a "hi" record, then
// a split payload of `bytes` in records of `record`): the payload, or the
// error; then whether a later read still fails.
struct SplitRead {
  std::string payload, error;
  bool later_read_fails = false;
};
SplitRead read_split(const std::string& wire, std::size_t bytes, std::size_t record, int helpers,
                     std::chrono::microseconds spin = 0us) {
  Pair p;
  std::thread writer = p.put(wire);
  RecordOpener opener(kAcceptor.receive);
  opener.set_helpers(helpers, spin);
  SplitRead out;
  char hi[2];
  opener.read_exact(p.fds[1], hi, 2, Pair::soon());
  out.payload.assign(bytes, '\0');
  try {
    opener.read_exact_split(p.fds[1], out.payload.data(), bytes, record, Pair::soon());
  } catch (const std::exception& e) {
    out.error = e.what();
    try {
      opener.read_exact(p.fds[1], hi, 2, Pair::soon());
    } catch (const std::exception&) {
      out.later_read_fails = true;
    }
  }
  p.close_reader();
  writer.join();
  return out;
}

TEST(TcpSealed, ASplitPayloadOpensWhateverThreadsOpenItAndAnyFlippedBitFailsIt) {
  const std::string payload = random_text(1000003, 6);
  const std::string split = split_on_the_wire(payload, 250000, 2), whole = split_on_the_wire(payload, 250000, 0);
  const std::vector<std::size_t> sizes = wire::split_records(payload.size(), 250000);
  const std::size_t hi = 2 + wire::kRecordOverhead;
  for (int helpers : {0, 1, 3}) {
    SCOPED_TRACE("helpers " + std::to_string(helpers));
    // Either layout opens, whoever opens it.
    for (const std::string* wire : {&split, &whole})
      for (auto spin : {0us, 200us}) {
        const SplitRead good = read_split(*wire, payload.size(), 250000, helpers, spin);
        EXPECT_EQ(good.error, "");
        EXPECT_TRUE(good.payload == payload);
      }
    // Split: a bit flipped in the third record's ciphertext (record number 3:
    // "hi" is 0), in the last record's tag, in the second record's length;
    // whole: in the ciphertext and in the length. The first length must be
    // the whole payload's or the agreed layout's first.
    struct Bad {
      const std::string* wire;
      std::size_t at;
      std::string what;
    };
    for (const Bad& b : {Bad{&split, record_at(sizes, 2) + 4 + 1234, "record 3 failed authentication"},
                         Bad{&split, split.size() - 1, "record 9 failed authentication"},
                         Bad{&split, record_at(sizes, 1) + 1, "record 2 has a length field of"},
                         Bad{&whole, hi + 4 + 777777, "record 1 failed authentication"},
                         Bad{&whole, hi + 1, "record 1 has a length field of"}}) {
      std::string bad = *b.wire;
      bad[b.at] = static_cast<char>(bad[b.at] ^ 0x10);
      const SplitRead r = read_split(bad, payload.size(), 250000, helpers);
      EXPECT_NE(r.error.find(b.what), std::string::npos) << r.error;
      EXPECT_TRUE(r.later_read_fails);
    }
    const SplitRead other_size = read_split(split, payload.size(), 200000, helpers);
    EXPECT_NE(other_size.error.find("length field of 31250 bytes, expected 1000003 (one record) or 25000 "
                                    "(the first of "),
              std::string::npos)
        << other_size.error;
    // Cut short: an I/O error, and nothing more is opened.
    const SplitRead cut = read_split(split.substr(0, split.size() - 100), payload.size(), 250000, helpers);
    EXPECT_NE(cut.error, "");
    EXPECT_TRUE(cut.later_read_fails);
  }
}

// ---------------------------------------------------------------------------
// The sealed ring gives the plaintext ring's bits.

std::function<LinkKeys(int, bool, Deadline)> fixed_keys() {
  return [](int, bool accepting, Deadline) { return link_keys(kSession, accepting); };
}

// Every operation once on a ring of 3, small chunks so that each is many
// frames; everything the ranks end with, in order.
std::vector<std::vector<float>> run_everything(bool seal, std::size_t chunk_bytes = 4096, int seal_helpers = -1,
                                               std::chrono::microseconds seal_spin = 0us) {
  auto groups = thread_ring(3, 10s, chunk_bytes, seal ? fixed_keys() : nullptr, seal_helpers, seal_spin);
  std::vector<std::vector<float>> results(3);
  std::mutex mutex;
  run_ranks(groups, [&](int r, Collective& c) {
    const auto d = Clock::now() + 10s;
    std::vector<std::vector<float>> mine;
    // 1000003 floats: frames of several records with 1 MiB chunks.
    for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{100003}, std::int64_t{1000003}}) {
      Tensor t = tensor_of(random_values(n, 7 + static_cast<unsigned>(r)));
      c.allreduce(t, ReduceOp::sum)->wait(d);
      mine.push_back(t.to_vector());
    }
    Tensor b = tensor_of(random_values(5000, 11 + static_cast<unsigned>(r)));
    c.broadcast(b, 2)->wait(d);
    mine.push_back(b.to_vector());
    Tensor gathered = Tensor::zeros(Shape{3 * 777});
    c.allgather(tensor_of(random_values(777, 13 + static_cast<unsigned>(r))), gathered)->wait(d);
    mine.push_back(gathered.to_vector());
    Tensor in = Tensor::zeros(Shape{3001});
    if (r == 0) {
      c.send(tensor_of(random_values(3001, 17)), 1, 4)->wait(d);
      c.recv(in, 2, 4)->wait(d);
    } else {
      c.recv(in, r - 1, 4)->wait(d);
      c.send(in, (r + 1) % 3, 4)->wait(d);
    }
    mine.push_back(in.to_vector());
    c.barrier()->wait(d);
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& v : mine)
      results[static_cast<std::size_t>(r)].insert(results[static_cast<std::size_t>(r)].end(), v.begin(), v.end());
  });
  return results;
}

TEST(TcpSealed, EveryOperationOnASealedRingGivesThePlaintextRingsBits) {
  const auto plain = run_everything(false);
  const auto sealed_ring = run_everything(true);
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(plain[static_cast<std::size_t>(r)].empty());
    EXPECT_TRUE(plain[static_cast<std::size_t>(r)] == sealed_ring[static_cast<std::size_t>(r)]) << "rank " << r;
  }
}

// 1 MiB chunks, the default: a frame's payload is 9 records, sealed and
// opened by 2 helper threads per direction beside the I/O threads (as on a
// machine of 12 cores), or by the I/O threads alone.
TEST(TcpSealed, ASealedRingWithHelperThreadsGivesThePlaintextRingsBits) {
  const auto plain = run_everything(false, std::size_t{1} << 20);
  // 2 helpers that poll for 100 us before they sleep: the same bits.
  for (const auto& [helpers, spin] : {std::pair{0, 0us}, std::pair{2, 0us}, std::pair{2, 100us}}) {
    const auto sealed_ring = run_everything(true, std::size_t{1} << 20, helpers, spin);
    for (int r = 0; r < 3; ++r) {
      ASSERT_FALSE(plain[static_cast<std::size_t>(r)].empty());
      EXPECT_TRUE(plain[static_cast<std::size_t>(r)] == sealed_ring[static_cast<std::size_t>(r)])
          << "rank " << r << ", " << helpers << " helpers, spin " << spin.count() << " us";
    }
  }
}

TEST(TcpSealed, ARingWhoseEndsHoldDifferentKeysNeverConnects) {
  // Rank 1 derives its keys from another session key: every Hello fails to
  // open, so no group forms (the accepting ranks drop the connections and
  // log why) and make_tcp_group times out naming the peer.
  Listeners l(2);
  std::vector<std::string> errors(2);
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      TcpGroupConfig c = config_for(l, r, 2s);
      c.connect_timeout = 1500ms;
      const std::string session = r == 0 ? kSession : std::string(32, 'z');
      c.authenticate = [session](int, bool accepting, Deadline) { return link_keys(session, accepting); };
      try {
        make_tcp_group(c);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(errors[0], "");
  EXPECT_NE(errors[1], "");
  EXPECT_NE(logged.find("failed authentication"), std::string::npos) << logged.substr(0, 2000);
}

}  // namespace
}  // namespace troupe::net
