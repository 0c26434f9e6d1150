// Bad input on the tcp backend's data port, from a test that plays rank 1 of
// a 2-rank ring with raw sockets: handshakes that must be dropped (garbage,
// wrong job id, silence) while the group keeps waiting for the right peer,
// and frames that must fail the operation naming the problem (garbage, a
// truncated frame, oversized header or length fields, a wrong op number, a
// bad CRC) without a crash, a hang or a large allocation.
#include <gtest/gtest.h>

#include <future>

#include "tests/net/test_tcp_support.hpp"

namespace troupe::net::testing {
namespace {

constexpr std::int64_t kFloats = 1000;  // the allreduce the real rank runs

std::vector<unsigned char> hello_bytes(std::uint64_t job, std::uint32_t rank,
                                       wire::Purpose purpose = wire::Purpose::ring,
                                       std::uint16_t version = wire::kProtocolVersion) {
  wire::Hello h;
  h.purpose = purpose;
  h.version = version;
  h.job_id = job;
  h.rank = rank;
  h.world = 2;
  return wire::encode_hello(h);
}

void send_bytes(int fd, const void* data, std::size_t n) {
  wire::write_all(fd, data, n, nullptr, 0, Clock::now() + 5s);
}

// Rank 0 is a real TcpGroup; the test is rank 1. `to_real` carries frames
// from the fake rank 1 to rank 0; `from_real` the frames rank 0 sends.
struct FakePeer {
  Listeners listeners{2};
  std::unique_ptr<Collective> real;
  int to_real = -1;
  int from_real = -1;
  std::string address0;

  // `before` runs on connections to rank 0 before the good one (bad peers).
  explicit FakePeer(std::chrono::milliseconds timeout = 2s,
                    const std::function<void(const std::string&)>& before = {}) {
    address0 = listeners.addresses[0];
    auto config = config_for(listeners, 0, timeout);
    auto made = std::async(std::launch::async, [config] { return make_tcp_group(config); });
    // Rank 0 connects to us (rank 1): accept and answer its hello.
    const int listen1 = listeners.take(1);
    pollfd p{listen1, POLLIN, 0};
    ::poll(&p, 1, 5000);
    from_real = ::accept(listen1, nullptr, nullptr);
    ::close(listen1);
    wire::prepare_socket(from_real);
    wire::read_hello(from_real, nullptr, Clock::now() + 5s);
    const auto reply = hello_bytes(kJob, 1);
    send_bytes(from_real, reply.data(), reply.size());
    if (before) before(address0);
    // Then connect to rank 0 as its predecessor.
    to_real = wire::connect_tcp(address0, Clock::now() + 5s);
    const auto mine = hello_bytes(kJob, 1);
    send_bytes(to_real, mine.data(), mine.size());
    wire::read_hello(to_real, nullptr, Clock::now() + 5s);
    real = made.get();
  }
  ~FakePeer() {
    real.reset();
    if (to_real >= 0) ::close(to_real);
    if (from_real >= 0) ::close(from_real);
  }

  // Starts rank 0's allreduce and returns its error, after `attack` wrote to
  // to_real. Also checks that the error came promptly.
  CollectiveError allreduce_against(const std::function<void()>& attack) {
    Tensor t = tensor_of(random_values(kFloats, 1));
    auto work = std::async(std::launch::async, [&] { return real->allreduce(t, ReduceOp::sum); });
    const auto start = Clock::now();
    attack();
    auto e = error_of(work.get());
    EXPECT_LT(Clock::now() - start, 1500ms) << "not at once: " << e.what();
    return e;
  }
};

// The frame rank 0 expects first from rank 1: allreduce #0, step 0, chunk 0
// of segment 0 (rank 0 owns segment 0 of a 2-rank ring).
wire::FrameFields first_frame() {
  wire::FrameFields f;
  f.job_id = kJob;
  f.kind = 0;  // allreduce
  f.op_seq = 0;
  f.total_bytes = kFloats * 4;
  f.step = 0;
  f.chunk = 0;
  f.length = 512 * 4;  // segment 0: 4000 bytes cut at 64-byte boundaries -> 2048 bytes
  return f;
}

std::string what(const CollectiveError& e) { return e.what(); }

TEST(TcpWire, BadHandshakesAreDroppedAndTheGroupWaitsForTheRightPeer) {
  ::testing::internal::CaptureStderr();
  std::vector<int> silent;
  {
    FakePeer peer(2s, [&](const std::string& address) {
      const auto deadline = Clock::now() + 5s;
      // Garbage.
      int fd = wire::connect_tcp(address, deadline);
      const std::string garbage = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
      send_bytes(fd, garbage.data(), garbage.size());
      ::close(fd);
      // The right purpose and version, the wrong job.
      fd = wire::connect_tcp(address, deadline);
      auto h = hello_bytes(kJob + 1, 1);
      send_bytes(fd, h.data(), h.size());
      ::close(fd);
      // A push link's Hello, and a ring Hello of protocol version 1.
      fd = wire::connect_tcp(address, deadline);
      h = hello_bytes(kJob, 1, wire::Purpose::push_link);
      send_bytes(fd, h.data(), h.size());
      ::close(fd);
      fd = wire::connect_tcp(address, deadline);
      h = hello_bytes(kJob, 1, wire::Purpose::ring, 1);
      send_bytes(fd, h.data(), h.size());
      ::close(fd);
      // The wrong rank (0 is not rank 0's predecessor... it is rank 0 itself).
      fd = wire::connect_tcp(address, deadline);
      h = hello_bytes(kJob, 0);
      send_bytes(fd, h.data(), h.size());
      ::close(fd);
      // A connection that sends nothing, and one that sends half a hello: both
      // stay open while the right peer connects.
      silent.push_back(wire::connect_tcp(address, deadline));
      silent.push_back(wire::connect_tcp(address, deadline));
      h = hello_bytes(kJob, 1);
      send_bytes(silent.back(), h.data(), 10);
      std::this_thread::sleep_for(100ms);
    });
    // The ring works.
    Tensor t = tensor_of({1.0f, 2.0f});
    auto work = std::async(std::launch::async, [&] { return peer.real->allreduce(t, ReduceOp::sum); });
    // Play rank 1's part: segment 0 is both floats (64-byte cut), segment 1 empty.
    auto f = first_frame();
    f.total_bytes = 8;
    f.length = 8;
    const float mine[2] = {10.0f, 20.0f};
    f.crc32c = wire::crc32c(mine, 8);
    const auto header = wire::encode_frame_header(f);
    wire::write_all(peer.to_real, header.data(), header.size(), mine, 8, Clock::now() + 5s);
    // Rank 0 then sends the reduced segment 0 back (all-gather step 1).
    unsigned char prefix[4];
    wire::read_all(peer.from_real, prefix, 4, Clock::now() + 5s);
    std::vector<unsigned char> h(prefix[0] | (prefix[1] << 8));
    wire::read_all(peer.from_real, h.data(), h.size(), Clock::now() + 5s);
    const auto got = wire::decode_frame_header(h.data(), h.size());
    EXPECT_EQ(got.step, 1u);
    float reduced[2];
    wire::read_all(peer.from_real, reduced, sizeof reduced, Clock::now() + 5s);
    EXPECT_EQ(reduced[0], 11.0f);
    EXPECT_EQ(reduced[1], 22.0f);
    work.get()->wait(Clock::now() + 5s);
    EXPECT_EQ(t.to_vector(), (std::vector<float>{11.0f, 22.0f}));
  }
  for (int fd : silent) ::close(fd);
  const std::string log = ::testing::internal::GetCapturedStderr();
  // The garbage's first 4 bytes, "GET ", as a length.
  EXPECT_NE(log.find("a Hello of 542393671 bytes (at most 256): not a troupe data-plane peer"), std::string::npos)
      << log;
  EXPECT_NE(log.find("wrong purpose 'push link' (expected 'ring')"), std::string::npos) << log;
  EXPECT_NE(log.find("protocol version 1, this rank speaks " + std::to_string(wire::kProtocolVersion)),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("wrong job id"), std::string::npos) << log;
  EXPECT_NE(log.find("sender rank 0 (expected rank 1)"), std::string::npos) << log;
  EXPECT_NE(log.find("127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("rank 1 has connected"), std::string::npos) << log;
}

TEST(TcpWire, SilentConnectionsAreDroppedAfterTheTimeout) {
  ::testing::internal::CaptureStderr();
  int silent = -1;
  {
    FakePeer peer(300ms, [&](const std::string& address) {
      silent = wire::connect_tcp(address, Clock::now() + 5s);
      std::this_thread::sleep_for(600ms);  // longer than the group's timeout
    });
  }
  ::close(silent);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("sent nothing within 300 ms"), std::string::npos) << log;
}

TEST(TcpWire, GarbageBytesFailTheOperation) {
  FakePeer peer;
  auto e = peer.allreduce_against([&] {
    std::vector<unsigned char> junk(4096, 0xAB);
    send_bytes(peer.to_real, junk.data(), junk.size());
  });
  EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted);
  EXPECT_NE(what(e).find("header length field"), std::string::npos) << what(e);
  EXPECT_NE(what(e).find("rank 1 (127.0.0.1:"), std::string::npos) << what(e);
}

TEST(TcpWire, GarbageInsideAWellSizedHeaderFails) {
  FakePeer peer;
  auto e = peer.allreduce_against([&] {
    std::vector<unsigned char> frame(4 + 64, 0xFF);
    frame[0] = 64;
    frame[1] = frame[2] = frame[3] = 0;
    send_bytes(peer.to_real, frame.data(), frame.size());
  });
  EXPECT_NE(what(e).find("unreadable Cap'n Proto header"), std::string::npos) << what(e);
}

TEST(TcpWire, AnOversizedHeaderLengthFailsAtOnce) {
  FakePeer peer;
  auto e = peer.allreduce_against([&] {
    const unsigned char prefix[4] = {0x00, 0x00, 0x00, 0x80};  // 2^31 bytes
    send_bytes(peer.to_real, prefix, 4);
  });
  EXPECT_NE(what(e).find("header length field 2147483648 bytes"), std::string::npos) << what(e);
}

TEST(TcpWire, APayloadLengthOfTwoToTheFortyFailsAtOnceWithoutAllocating) {
  FakePeer peer;
  auto e = peer.allreduce_against([&] {
    auto f = first_frame();
    f.length = std::uint64_t{1} << 40;
    const auto header = wire::encode_frame_header(f);
    send_bytes(peer.to_real, header.data(), header.size());
  });
  EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted);
  EXPECT_NE(what(e).find("payload length field 1099511627776 bytes, expected 2048"), std::string::npos) << what(e);
}

TEST(TcpWire, AWrongOpNumberIsADifferentOperation) {
  FakePeer peer;
  auto e = peer.allreduce_against([&] {
    auto f = first_frame();
    f.op_seq = 5;
    const auto header = wire::encode_frame_header(f);
    std::vector<float> payload(512, 1.0f);
    wire::write_all(peer.to_real, header.data(), header.size(), payload.data(), 2048, Clock::now() + 5s);
  });
  EXPECT_EQ(e.kind(), CollectiveErrorKind::invalid);
  EXPECT_NE(what(e).find("the peer issued allreduce #5"), std::string::npos) << what(e);
}

TEST(TcpWire, AWrongJobIdMidStreamFails) {
  FakePeer peer;
  auto e = peer.allreduce_against([&] {
    auto f = first_frame();
    f.job_id = 42;
    const auto header = wire::encode_frame_header(f);
    send_bytes(peer.to_real, header.data(), header.size());
  });
  EXPECT_NE(what(e).find("job id 0x2a"), std::string::npos) << what(e);
}

TEST(TcpWire, ABadCrcFails) {
  FakePeer peer;
  auto e = peer.allreduce_against([&] {
    auto f = first_frame();
    std::vector<float> payload(512, 1.0f);
    f.crc32c = wire::crc32c(payload.data(), 2048) ^ 1u;
    const auto header = wire::encode_frame_header(f);
    wire::write_all(peer.to_real, header.data(), header.size(), payload.data(), 2048, Clock::now() + 5s);
  });
  EXPECT_NE(what(e).find("crc32c"), std::string::npos) << what(e);
  EXPECT_NE(what(e).find("of the payload"), std::string::npos) << what(e);
}

TEST(TcpWire, ATruncatedFrameThenCloseFails) {
  FakePeer peer;
  auto e = peer.allreduce_against([&] {
    auto f = first_frame();
    std::vector<float> payload(512, 1.0f);
    f.crc32c = wire::crc32c(payload.data(), 2048);
    const auto header = wire::encode_frame_header(f);
    wire::write_all(peer.to_real, header.data(), header.size(), payload.data(), 1000, Clock::now() + 5s);
    ::shutdown(peer.to_real, SHUT_WR);
  });
  EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted);
  EXPECT_NE(what(e).find("lost: end of stream"), std::string::npos) << what(e);
}

TEST(TcpWire, ATruncatedFrameThatStallsTimesOut) {
  FakePeer peer(500ms);
  Tensor t = tensor_of(random_values(kFloats, 1));
  auto f = first_frame();
  std::vector<float> payload(512, 1.0f);
  const auto header = wire::encode_frame_header(f);
  wire::write_all(peer.to_real, header.data(), header.size(), payload.data(), 1000, Clock::now() + 5s);
  const auto start = Clock::now();
  auto e = error_of(peer.real->allreduce(t, ReduceOp::sum));
  EXPECT_EQ(e.kind(), CollectiveErrorKind::timeout) << what(e);
  EXPECT_LT(Clock::now() - start, 1500ms);
}

// fuzz/tcp_frames found it: reduce_scatter sent from a copy of its input
// that was a local of the operation (and barrier from a local array); when
// a bad frame failed the operation, the copy was freed as the operation
// unwound, while the sender thread could still be computing a chunk's CRC
// over it or writing it. Here the sender streams a 16 MiB segment in 1 MiB
// chunks (the fake peer reads them) when garbage fails the receive at a
// different moment each try; AddressSanitizer (the CI's ASan build runs
// this test) reports the use after free when the operation unwinds while a
// chunk is still being read.
TEST(TcpWire, AFailedReduceScatterFreesNothingItsSenderStillReads) {
  // (stderr is not captured: it carries the sanitizer's report.)
  constexpr std::int64_t kSegment = std::int64_t{4} << 20;  // floats: 16 MiB, 16 chunks
  for (int i = 0; i < 12; ++i) {
    FakePeer peer(5s);
    Tensor in = Tensor::empty(Shape{2 * kSegment}, DType::f32);
    Tensor out = Tensor::empty(Shape{kSegment}, DType::f32);
    std::memset(in.f32(), 0, static_cast<std::size_t>(in.bytes()));
    std::thread drain([&] {  // rank 1 takes what rank 0 sends, until it hangs up
      std::vector<char> sink(1 << 16);
      for (;;) {
        pollfd p{peer.from_real, POLLIN, 0};
        if (::poll(&p, 1, 5000) <= 0 || ::recv(peer.from_real, sink.data(), sink.size(), 0) <= 0) return;
      }
    });
    std::thread garbage([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2 + 3 * i));
      const std::string bytes(64, '\x5a');
      send_bytes(peer.to_real, bytes.data(), bytes.size());
    });
    const auto e = error_of(peer.real->reduce_scatter(in, out, ReduceOp::sum));
    garbage.join();
    drain.join();
    EXPECT_EQ(e.kind(), CollectiveErrorKind::aborted) << what(e);
  }
}

TEST(TcpWire, CrcMatchesTheStandardCheckValue) {
  const std::string check = "123456789";
  EXPECT_EQ(wire::crc32c(check.data(), check.size()), 0xE3069283u);  // CRC-32C check value
  // The three-stream hardware path against a bit-by-bit CRC-32C, on lengths
  // around its 3 x 8 KiB blocks.
  std::mt19937 gen(5);
  std::vector<unsigned char> data(100000);
  for (auto& b : data) b = static_cast<unsigned char>(gen());
  for (std::size_t len : {0ul, 1ul, 7ul, 8ul, 24575ul, 24576ul, 24577ul, 49152ul + 13, 100000ul}) {
    std::uint32_t crc = ~0u;
    for (std::size_t i = 0; i < len; ++i) {
      crc ^= data[i];
      for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    EXPECT_EQ(wire::crc32c(data.data(), len), ~crc) << "length " << len;
  }
}

// ---------------------------------------------------------------------------
// The Hello codec alone (net/transport/hello.hpp).

// What `f` throws as std::runtime_error, or "" when it returns.
template <typename F>
std::string runtime_error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return {};
}

TEST(TcpWireHello, RoundTripsEveryField) {
  wire::Hello h;
  h.purpose = wire::Purpose::push_link;
  h.version = 0xbeef;
  h.job_id = 0x0123'4567'89ab'cdefull;
  h.rank = 7;
  h.world = 0xffff'fffe;
  const auto bytes = wire::encode_hello(h);
  ASSERT_GT(bytes.size(), wire::kLengthPrefixBytes);
  EXPECT_EQ(wire::hello_length(bytes.data()), bytes.size() - wire::kLengthPrefixBytes);
  for (const wire::Hello& got : {wire::decode_framed_hello(bytes.data(), bytes.size()),
                                 wire::decode_hello(bytes.data() + 4, bytes.size() - 4)}) {
    EXPECT_EQ(got.purpose, h.purpose);
    EXPECT_EQ(got.version, h.version);
    EXPECT_EQ(got.job_id, h.job_id);
    EXPECT_EQ(got.rank, h.rank);
    EXPECT_EQ(got.world, h.world);
  }
  // Defaults: nothing a receiver would take for a ring's or a push link's.
  const auto unset = wire::encode_hello(wire::Hello{});
  const wire::Hello got = wire::decode_framed_hello(unset.data(), unset.size());
  EXPECT_EQ(got.purpose, wire::Purpose::unset);
  EXPECT_EQ(got.version, 0);
}

TEST(TcpWireHello, APrefixOverTheBoundIsRefusedBeforeAnythingElse) {
  const unsigned char at_bound[4] = {0x00, 0x01, 0x00, 0x00};  // 256
  EXPECT_EQ(wire::hello_length(at_bound), wire::kMaxHelloBytes);
  const unsigned char over[4] = {0x08, 0x01, 0x00, 0x00};  // 264
  EXPECT_NE(runtime_error_of([&] { wire::hello_length(over); }).find("a Hello of 264 bytes (at most 256)"),
            std::string::npos);
  const unsigned char huge[4] = {0xff, 0xff, 0xff, 0xff};
  EXPECT_NE(runtime_error_of([&] { wire::hello_length(huge); }).find("4294967295 bytes"), std::string::npos);
  // The same through decode_framed_hello, with nothing after the prefix.
  EXPECT_NE(runtime_error_of([&] { wire::decode_framed_hello(huge, sizeof huge); }).find("4294967295 bytes"),
            std::string::npos);
}

TEST(TcpWireHello, TruncatedOrPaddedHellosAreRefused) {
  const auto bytes = wire::encode_hello(wire::Hello{});
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE(n);
    EXPECT_NE(runtime_error_of([&] { wire::decode_framed_hello(bytes.data(), n); }), "");
  }
  // A whole number of words, but fewer than the segment table says.
  const std::string short_one = runtime_error_of([&] { wire::decode_hello(bytes.data() + 4, 16); });
  EXPECT_NE(short_one.find("malformed Hello"), std::string::npos) << short_one;
  // Words after the message.
  std::vector<unsigned char> padded(bytes.begin() + 4, bytes.end());
  padded.resize(padded.size() + 8);
  const std::string after = runtime_error_of([&] { wire::decode_hello(padded.data(), padded.size()); });
  EXPECT_NE(after.find("8 bytes after the message"), std::string::npos) << after;
  // A prefix that does not match what follows.
  std::vector<unsigned char> lying = bytes;
  lying[0] = static_cast<unsigned char>(lying[0] + 8);
  const std::string mismatch = runtime_error_of([&] { wire::decode_framed_hello(lying.data(), lying.size()); });
  EXPECT_NE(mismatch.find("length prefix says"), std::string::npos) << mismatch;
}

TEST(TcpWireHello, GarbageOfAWellFormedSizeIsRefusedNotACrash) {
  std::vector<unsigned char> garbage(wire::kMaxHelloBytes, 0xff);
  const std::string what = runtime_error_of([&] { wire::decode_hello(garbage.data(), garbage.size()); });
  EXPECT_NE(what.find("malformed Hello"), std::string::npos) << what;
}

TEST(TcpWireHello, PurposesHaveNames) {
  EXPECT_EQ(wire::purpose_name(wire::Purpose::ring), "ring");
  EXPECT_EQ(wire::purpose_name(wire::Purpose::push_link), "push link");
  EXPECT_EQ(wire::purpose_name(wire::Purpose::unset), "unset");
  EXPECT_EQ(wire::purpose_name(static_cast<wire::Purpose>(9)), "unknown purpose 9");
  // An all-zero message (a root pointer to an empty struct) says nothing:
  // purpose unset, so no receiver takes it for one of its own.
  const unsigned char empty[16] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(wire::decode_hello(empty, sizeof empty).purpose, wire::Purpose::unset);
}

}  // namespace
}  // namespace troupe::net::testing
