// The tcp data plane's frame header and hello readers (net/tcp/wire.hpp):
// bytes as a peer sends them after the length prefix.
//
// Properties: decode_frame_header either returns or throws
// std::runtime_error (nothing else escapes, nothing crashes); what it
// returns is written back by encode_frame_header into a header that decodes
// to the same fields. decode_hello reads any 24 bytes, and encode_hello
// writes back the same 24 bytes but for the reserved u16.
#include <cstring>
#include <stdexcept>

#include "fuzz/fuzz_support.hpp"
#include "net/tcp/wire.hpp"

using namespace troupe::net::wire;

namespace {

bool same(const FrameFields& a, const FrameFields& b) {
  return a.job_id == b.job_id && a.kind == b.kind && a.op_seq == b.op_seq && a.total_bytes == b.total_bytes &&
         a.step == b.step && a.chunk == b.chunk && a.length == b.length && a.crc32c == b.crc32c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size >= kHelloBytes) {
    const Hello h = decode_hello(data);
    unsigned char again[kHelloBytes];
    encode_hello(h, again);
    TROUPE_FUZZ_CHECK(std::memcmp(again, data, 6) == 0 && std::memcmp(again + 8, data + 8, 16) == 0,
                      "encode_hello(decode_hello(x)) differs from x");
  }
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
