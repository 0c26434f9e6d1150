// The Hello that opens every data-plane connection (net/transport/hello.hpp).
#include "net/transport/hello.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "net/schema/handshake.capnp.h"
#include "net/schema/message.hpp"
#include "net/transport/sealed.hpp"

namespace troupe::net::wire {

std::string purpose_name(Purpose purpose) {
  switch (purpose) {
    case Purpose::unset:
      return "unset";
    case Purpose::ring:
      return "ring";
    case Purpose::push_link:
      return "push link";
  }
  return "unknown purpose " + std::to_string(static_cast<unsigned>(purpose));
}

std::vector<unsigned char> encode_hello(const Hello& hello) {
  capnp::MallocMessageBuilder message(16);
  auto h = message.initRoot<schema::Hello>();
  h.setPurpose(static_cast<schema::Purpose>(hello.purpose));
  h.setVersion(hello.version);
  h.setJobId(hello.job_id);
  h.setRank(hello.rank);
  h.setWorld(hello.world);
  const std::string bytes = schema::message_bytes(message);
  std::vector<unsigned char> out(kLengthPrefixBytes + bytes.size());
  put_u32(out.data(), static_cast<std::uint32_t>(bytes.size()));
  std::memcpy(out.data() + kLengthPrefixBytes, bytes.data(), bytes.size());
  return out;
}

std::size_t hello_length(const unsigned char prefix[kLengthPrefixBytes]) {
  const std::uint64_t bytes = get_le(prefix, kLengthPrefixBytes);
  if (bytes > kMaxHelloBytes)
    throw std::runtime_error("a Hello of " + std::to_string(bytes) + " bytes (at most " +
                             std::to_string(kMaxHelloBytes) + ")");
  return static_cast<std::size_t>(bytes);
}

Hello decode_hello(const void* data, std::size_t bytes) {
  try {
    return schema::read_message<schema::Hello>(data, bytes, kMaxHelloBytes, [](schema::Hello::Reader h) {
      Hello hello;
      hello.purpose = static_cast<Purpose>(h.getPurpose());
      hello.version = h.getVersion();
      hello.job_id = h.getJobId();
      hello.rank = h.getRank();
      hello.world = h.getWorld();
      return hello;
    });
  } catch (const schema::MalformedMessage& e) {
    throw std::runtime_error(std::string("malformed Hello: ") + e.what());
  }
}

Hello decode_framed_hello(const void* data, std::size_t bytes) {
  if (bytes < kLengthPrefixBytes)
    throw std::runtime_error("a Hello of " + std::to_string(bytes) + " bytes, shorter than its length prefix");
  const auto* p = static_cast<const unsigned char*>(data);
  const std::size_t length = hello_length(p);
  if (length != bytes - kLengthPrefixBytes)
    throw std::runtime_error("a Hello whose length prefix says " + std::to_string(length) + " bytes but " +
                             std::to_string(bytes - kLengthPrefixBytes) + " follow");
  return decode_hello(p + kLengthPrefixBytes, length);
}

void write_hello(int fd, RecordSealer* sealer, const Hello& hello, Deadline deadline) {
  const auto bytes = encode_hello(hello);
  if (sealer)
    sealer->write(fd, bytes.data(), bytes.size(), deadline);
  else
    write_all(fd, bytes.data(), bytes.size(), nullptr, 0, deadline);
}

Hello read_hello(int fd, RecordOpener* opener, Deadline deadline) {
  unsigned char bytes[kLengthPrefixBytes + kMaxHelloBytes];
  if (opener) return decode_framed_hello(bytes, opener->read(fd, bytes, sizeof bytes, deadline));
  read_all(fd, bytes, kLengthPrefixBytes, deadline);
  const std::size_t length = hello_length(bytes);
  read_all(fd, bytes + kLengthPrefixBytes, length, deadline);
  return decode_hello(bytes + kLengthPrefixBytes, length);
}

}  // namespace troupe::net::wire
