// The tcp ring's frame headers (net/tcp/wire.hpp).
#include "net/tcp/wire.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "net/schema/frame.capnp.h"
#include "net/schema/message.hpp"

namespace troupe::net::wire {

std::vector<unsigned char> encode_frame_header(const FrameFields& f) {
  capnp::MallocMessageBuilder message(32);
  auto h = message.initRoot<schema::FrameHeader>();
  h.setJobId(f.job_id);
  h.setKind(static_cast<schema::OpKind>(f.kind));
  h.setOpSeq(f.op_seq);
  h.setTotalBytes(f.total_bytes);
  h.setStep(f.step);
  h.setChunk(f.chunk);
  h.setLength(f.length);
  h.setCrc32c(f.crc32c);
  const auto words = capnp::messageToFlatArray(message);
  const auto bytes = words.asBytes();
  std::vector<unsigned char> out(kLengthPrefixBytes + bytes.size());
  put_u32(out.data(), static_cast<std::uint32_t>(bytes.size()));
  std::memcpy(out.data() + kLengthPrefixBytes, bytes.begin(), bytes.size());
  return out;
}

FrameFields decode_frame_header(const void* data, std::size_t bytes) {
  try {
    return schema::read_message<schema::FrameHeader>(data, bytes, kMaxHeaderBytes, [](schema::FrameHeader::Reader h) {
      FrameFields f;
      f.job_id = h.getJobId();
      f.kind = static_cast<std::uint16_t>(h.getKind());
      f.op_seq = h.getOpSeq();
      f.total_bytes = h.getTotalBytes();
      f.step = h.getStep();
      f.chunk = h.getChunk();
      f.length = h.getLength();
      f.crc32c = h.getCrc32c();
      return f;
    });
  } catch (const schema::MalformedMessage& e) {
    throw std::runtime_error(std::string("unreadable Cap'n Proto header: ") + e.what());
  }
}

}  // namespace troupe::net::wire
