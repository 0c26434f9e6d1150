// NcclId's text form (nccl.hpp), in every build: control messages carry
// it whether or not this host can use it.
#include <stdexcept>

#include "net/collective/nccl.hpp"

namespace troupe::net {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string NcclId::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::uint8_t b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

NcclId NcclId::from_hex(const std::string& text) {
  NcclId id;
  if (text.size() != id.bytes.size() * 2)
    throw std::invalid_argument("an NCCL id is " + std::to_string(id.bytes.size() * 2) + " hex digits, got " +
                                std::to_string(text.size()) + " characters");
  for (std::size_t i = 0; i < id.bytes.size(); ++i) {
    const int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0)
      throw std::invalid_argument("an NCCL id is hex digits; character " + std::to_string(hi < 0 ? 2 * i : 2 * i + 1) +
                                  " is not one");
    id.bytes[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return id;
}

}  // namespace troupe::net
