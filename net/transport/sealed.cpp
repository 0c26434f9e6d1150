// Records of a protected connection (sealed.hpp).
#include "net/transport/sealed.hpp"

#include <cstring>
#include <utility>

#include "net/transport/socket.hpp"

namespace troupe::net::wire {

namespace {
void put_length(char* p, std::size_t bytes) {
  const auto v = static_cast<std::uint32_t>(bytes);
  for (std::size_t i = 0; i < kRecordPrefixBytes; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
std::size_t get_length(const unsigned char* p) {
  std::uint32_t v = 0;
  for (std::size_t i = kRecordPrefixBytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}
}  // namespace

void RecordSealer::seal(const void* in, std::size_t bytes, char* out) {
  if (bytes > UINT32_MAX) throw std::invalid_argument("a record of more than 4 GiB");
  put_length(out, bytes);
  aead_.seal(out, kRecordPrefixBytes, in, out + kRecordPrefixBytes, bytes,
             reinterpret_cast<unsigned char*>(out + kRecordPrefixBytes + bytes));
}

void RecordSealer::append(const void* in, std::size_t bytes) {
  const std::size_t need = pending_bytes_ + bytes + kRecordOverhead;
  if (need > pending_capacity_) {
    std::unique_ptr<char[]> grown(new char[need]);
    // The first growth has no buffer to copy from (memcpy from null is
    // undefined even for no bytes: UBSan says so).
    if (pending_bytes_ > 0) std::memcpy(grown.get(), pending_.get(), pending_bytes_);
    pending_ = std::move(grown);
    pending_capacity_ = need;
  }
  seal(in, bytes, pending_.get() + pending_bytes_);
  pending_bytes_ = need;
}

void RecordSealer::flush(int fd, Deadline deadline) {
  // Emptied first: after a failed write the connection is given up anyway.
  const std::size_t bytes = std::exchange(pending_bytes_, 0);
  write_all(fd, pending_.get(), bytes, nullptr, 0, deadline);
}

void RecordSealer::write(int fd, const void* in, std::size_t bytes, Deadline deadline) {
  append(in, bytes);
  flush(fd, deadline);
}

void RecordOpener::refuse_length(std::size_t length, std::size_t max) const {
  throw std::runtime_error("record " + std::to_string(aead_.messages()) + " has a length field of " +
                           std::to_string(length) + " bytes, more than the " + std::to_string(max) +
                           " expected (altered on the way, or a peer that does not protect its link)");
}

void RecordOpener::authenticate(const unsigned char prefix[kRecordPrefixBytes], const void* in, void* out,
                                std::size_t bytes, const unsigned char* tag) {
  const std::uint64_t number = aead_.messages();
  if (!aead_.open(prefix, kRecordPrefixBytes, in, out, bytes, tag))
    throw AuthenticationError("record " + std::to_string(number) +
                              " failed authentication: its bytes were altered on the way, or it was replayed, "
                              "reordered or dropped, or the peer holds other keys");
}

std::size_t RecordOpener::read(int fd, void* dest, std::size_t max, Deadline deadline) {
  unsigned char prefix[kRecordPrefixBytes];
  read_all(fd, prefix, sizeof prefix, deadline);
  const std::size_t bytes = get_length(prefix);
  if (bytes > max) refuse_length(bytes, max);
  read_all(fd, dest, bytes, deadline);
  unsigned char tag[kAeadTagBytes];
  read_all(fd, tag, sizeof tag, deadline);
  authenticate(prefix, dest, dest, bytes, tag);  // in place
  return bytes;
}

void RecordOpener::read_exact(int fd, void* dest, std::size_t bytes, Deadline deadline) {
  unsigned char prefix[kRecordPrefixBytes];
  read_all(fd, prefix, sizeof prefix, deadline);
  const std::size_t length = get_length(prefix);
  if (length != bytes)
    throw std::runtime_error("record " + std::to_string(aead_.messages()) + " has a length field of " +
                             std::to_string(length) + " bytes, expected " + std::to_string(bytes) +
                             " (altered on the way, or a peer that does not protect its link)");
  read_all(fd, dest, bytes, deadline);
  unsigned char tag[kAeadTagBytes];
  read_all(fd, tag, sizeof tag, deadline);
  authenticate(prefix, dest, dest, bytes, tag);
}

RecordOpener::Opened RecordOpener::open(const char* in, std::size_t available, char* out, std::size_t max) {
  if (available < kRecordPrefixBytes) return {};
  const auto* prefix = reinterpret_cast<const unsigned char*>(in);
  const std::size_t bytes = get_length(prefix);
  if (bytes > max) refuse_length(bytes, max);
  if (available < bytes + kRecordOverhead) return {};
  authenticate(prefix, in + kRecordPrefixBytes, out, bytes,
               reinterpret_cast<const unsigned char*>(in + kRecordPrefixBytes + bytes));
  return {bytes + kRecordOverhead, bytes};
}

}  // namespace troupe::net::wire
