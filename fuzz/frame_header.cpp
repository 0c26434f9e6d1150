// The tcp data plane's frame header and Hello readers (net/tcp/wire.hpp, net/transport/hello.hpp):
// bytes as a peer sends them after the length prefix (and, for
// decode_framed_hello, with it).
//
// Properties: decode_frame_header, decode_hello and decode_framed_hello
// either return or throw std::runtime_error (nothing else escapes, nothing
// crashes); what they return is written back by encode_frame_header or
// encode_hello into bytes that decode to the same fields (not necessarily
// the same bytes: Cap'n Proto has more than one encoding of a message).
#include <stdexcept>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "net/tcp/wire.hpp"

using namespace troupe::net::wire;

namespace {

bool same(const FrameFields& a, const FrameFields& b) {
  return a.job_id == b.job_id && a.kind == b.kind && a.op_seq == b.op_seq && a.total_bytes == b.total_bytes &&
         a.step == b.step && a.chunk == b.chunk && a.length == b.length && a.crc32c == b.crc32c;
}

bool same(const Hello& a, const Hello& b) {
  return a.purpose == b.purpose && a.version == b.version && a.job_id == b.job_id && a.rank == b.rank &&
         a.world == b.world;
}

// A Hello a decoder accepted goes through encode_hello and back unchanged.
void check_hello_round_trip(const Hello& h) {
  const std::vector<unsigned char> bytes = encode_hello(h);
  TROUPE_FUZZ_CHECK(bytes.size() > kLengthPrefixBytes && bytes.size() - kLengthPrefixBytes <= kMaxHelloBytes,
                    "encoded Hello size");
  Hello again;
  try {
    again = decode_framed_hello(bytes.data(), bytes.size());
  } catch (const std::runtime_error& e) {
    troupe::fuzz::fail(std::string("a Hello encode_hello wrote does not decode: ") + e.what());
  }
  TROUPE_FUZZ_CHECK(same(h, again), "decode(encode(hello)) != hello");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    check_hello_round_trip(decode_hello(data, size));
  } catch (const std::runtime_error&) {}
  try {
    check_hello_round_trip(decode_framed_hello(data, size));
  } catch (const std::runtime_error&) {}
  FrameFields f;
  try {
    f = decode_frame_header(data, size);
  } catch (const std::runtime_error&) {
    return 0;
  }
  const std::vector<unsigned char> header = encode_frame_header(f);
  TROUPE_FUZZ_CHECK(header.size() > 4 && header.size() - 4 <= kMaxHeaderBytes, "encoded header size");
  FrameFields g;
  try {
    g = decode_frame_header(header.data() + 4, header.size() - 4);
  } catch (const std::runtime_error& e) {
    troupe::fuzz::fail(std::string("a header encode_frame_header wrote does not decode: ") + e.what());
  }
  TROUPE_FUZZ_CHECK(same(f, g), "decode(encode(fields)) != fields");
  return 0;
}
