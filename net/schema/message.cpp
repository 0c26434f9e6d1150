// One Cap'n Proto message as bytes (message.hpp).
#include "net/schema/message.hpp"

namespace troupe::net::schema {

std::string message_bytes(capnp::MessageBuilder& message) {
  const auto words = capnp::messageToFlatArray(message);
  const auto bytes = words.asChars();
  return std::string(bytes.begin(), bytes.size());
}

void check_message_size(std::size_t bytes, std::size_t max_bytes) {
  if (max_bytes > kMaxMessageBytes) throw std::logic_error("read_message: a bound over kMaxMessageBytes");
  if (bytes == 0 || bytes % sizeof(capnp::word) != 0 || bytes > max_bytes)
    throw MalformedMessage("a message of " + std::to_string(bytes) + " bytes (a multiple of 8 up to " +
                           std::to_string(max_bytes) + " expected)");
}

}  // namespace troupe::net::schema
