// Records of a protected connection. After a handshake with the cluster
// secret (net/cluster/gate.hpp), every byte either way on a connection that
// may cross hosts — the gate's spliced CAF traffic and the tcp ring — travels
// in records:
//
//   u32 little-endian length L | L bytes of AES-256-GCM ciphertext | 16-byte tag
//
// The length is sent in the clear and covered by the tag (the AEAD's
// associated data); the nonce is the record's number in its direction, which
// both ends count, and each direction has a key of its own
// (net/crypto/aead.hpp). So a record that was altered (any bit, the length
// included), replayed, reordered, dropped or sent the wrong way fails to open,
// and the connection is dropped; nothing of that record or any later one is
// used.
//
// Both ends of a connection own one RecordSealer (what they send) and one
// RecordOpener (what they receive); a direction is used by one thread at a
// time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "net/deadline.hpp"
#include "net/crypto/aead.hpp"

namespace troupe::net::wire {

constexpr std::size_t kRecordPrefixBytes = 4;
constexpr std::size_t kRecordOverhead = kRecordPrefixBytes + kAeadTagBytes;

// A record that did not open: its bytes were changed on the way, or it was
// replayed, reordered or dropped (its number differs), or the peer holds
// other keys.
struct AuthenticationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class RecordSealer {
 public:
  explicit RecordSealer(std::string_view key) : aead_(key) {}
  // Seals `bytes` of `in` as one record of bytes + kRecordOverhead at `out`.
  // `in` may be out + kRecordPrefixBytes (sealed in place).
  void seal(const void* in, std::size_t bytes, char* out);
  // Seals a record into the pending buffer; flush() writes everything
  // pending in one go (IoError as wire::write_all).
  void append(const void* in, std::size_t bytes);
  void flush(int fd, Deadline deadline);
  // append then flush.
  void write(int fd, const void* in, std::size_t bytes, Deadline deadline);
  std::uint64_t records() const { return aead_.messages(); }

 private:
  AeadDirection aead_;
  // Records sealed and not yet written: [0, pending_bytes_) of pending_
  // (grown as needed, never zero-filled: a frame is sealed straight into it).
  std::unique_ptr<char[]> pending_;
  std::size_t pending_bytes_ = 0, pending_capacity_ = 0;
};

class RecordOpener {
 public:
  explicit RecordOpener(std::string_view key) : aead_(key) {}
  // Reads one record of at most `max` bytes from `fd` and opens it into
  // `dest`; returns its length. Throws IoError (as wire::read_all),
  // std::runtime_error for a length over `max` (nothing more is read), and
  // AuthenticationError.
  std::size_t read(int fd, void* dest, std::size_t max, Deadline deadline);
  // As read(), for a record that must hold exactly `bytes`.
  void read_exact(int fd, void* dest, std::size_t bytes, Deadline deadline);

  // From a buffer: when `in` (`available` bytes) starts with a whole record
  // of at most `max` bytes, opens it into `out` and returns the bytes it
  // took from `in` and its length; {0, 0} while the record is incomplete.
  // Throws as read().
  struct Opened {
    std::size_t consumed = 0;
    std::size_t bytes = 0;
  };
  Opened open(const char* in, std::size_t available, char* out, std::size_t max);
  std::uint64_t records() const { return aead_.messages(); }

 private:
  [[noreturn]] void refuse_length(std::size_t length, std::size_t max) const;
  void authenticate(const unsigned char prefix[kRecordPrefixBytes], const void* in, void* out, std::size_t bytes,
                    const unsigned char* tag);
  AeadDirection aead_;
};

}  // namespace troupe::net::wire
