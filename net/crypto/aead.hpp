// Authenticated encryption for one direction of a connection, and the keys
// of a connection's two directions: AES-256-GCM through OpenSSL's EVP.
//
// Nonces are never sent: the nonce of a message is its number in its
// direction (96 bits: four zero bytes, then the number as 64-bit big
// endian), counted by both ends. So a message that was altered, replayed,
// reordered or dropped fails to open, and a key is never used twice with
// the same nonce as long as each direction has a key of its own (link_keys).
//
//   LinkKeys mine = link_keys(session_key, /*acceptor=*/true);
//   AeadDirection out(mine.send), in(mine.receive);
//   out.seal(aad, aad_bytes, plain, cipher, n, tag);       // message 0, 1, ...
//   if (!in.open(aad, aad_bytes, cipher, plain, n, tag))   // false: refused, and every later open too
//
// Why AES-256-GCM rather than ChaCha20-Poly1305: every x86-64 machine troupe
// runs on has AES-NI and carry-less multiply (here VAES as well), where
// OpenSSL's AES-GCM is the faster of the two (docs/BENCHMARKS.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace troupe::net {

constexpr std::size_t kAeadKeyBytes = 32;
constexpr std::size_t kAeadTagBytes = 16;

// The keys of one connection after a handshake with the cluster secret: one
// per direction, HKDF-SHA256(session_key) with distinct labels, so that the
// acceptor's `send` is the joiner's `receive` and the other way round.
struct LinkKeys {
  std::string send;     // kAeadKeyBytes, or empty: the link is not protected
  std::string receive;  // kAeadKeyBytes, or empty
  bool protects() const { return !send.empty(); }
};
// Empty keys for an empty session key (no secret on either side).
LinkKeys link_keys(std::string_view session_key, bool acceptor);

// One AES-256-GCM key and one OpenSSL context for it: seals or opens the
// message whose number the caller gives (its nonce). It keeps no count:
// that is AeadDirection's, below, which gives each number out once. An
// object either seals or opens (std::logic_error otherwise). Not
// thread-safe; threads that seal or open records of one direction in
// parallel (wire::RecordWorkers) each have one, made by
// AeadDirection::twin().
class AeadCipher {
 public:
  // Throws std::invalid_argument unless key has kAeadKeyBytes.
  explicit AeadCipher(std::string_view key);
  ~AeadCipher();
  AeadCipher(const AeadCipher&) = delete;
  AeadCipher& operator=(const AeadCipher&) = delete;

  // Encrypts `bytes` of `in` into `out` (the same pointer is fine) as
  // message `number` and writes the tag, which also covers `aad` (sent in
  // the clear).
  void seal(std::uint64_t number, const void* aad, std::size_t aad_bytes, const void* in, void* out, std::size_t bytes,
            unsigned char tag[kAeadTagBytes]);
  // Decrypts into `out` (the same pointer is fine) and checks the tag as
  // message `number`; false when it does not match (`out` then holds
  // garbage).
  bool open(std::uint64_t number, const void* aad, std::size_t aad_bytes, const void* in, void* out, std::size_t bytes,
            const unsigned char tag[kAeadTagBytes]);

 private:
  friend class AeadDirection;
  struct Context;
  std::unique_ptr<Context> ctx_;
  enum class Mode { unused, seal, open } mode_ = Mode::unused;
  bool begin(Mode mode);  // true the first time: set cipher and key
};

// One direction of a connection: seals (sender) or opens (receiver) its
// messages in order; an object does one or the other (std::logic_error
// otherwise). Not thread-safe; one object per direction and end.
class AeadDirection {
 public:
  // Throws std::invalid_argument unless key has kAeadKeyBytes.
  explicit AeadDirection(std::string_view key);
  ~AeadDirection();
  AeadDirection(const AeadDirection&) = delete;
  AeadDirection& operator=(const AeadDirection&) = delete;

  // Encrypts `bytes` of `in` into `out` (the same pointer is fine) and
  // writes the tag, which also covers `aad` (sent in the clear). Uses the
  // next message number.
  void seal(const void* aad, std::size_t aad_bytes, const void* in, void* out, std::size_t bytes,
            unsigned char tag[kAeadTagBytes]);
  // Decrypts into `out` (the same pointer is fine) and checks the tag
  // against the next message number. False when it does not match; `out`
  // then holds garbage, and this direction is spent (every later open
  // fails: a stream that lost a message cannot be trusted again).
  bool open(const void* aad, std::size_t aad_bytes, const void* in, void* out, std::size_t bytes,
            const unsigned char tag[kAeadTagBytes]);

  // For messages sealed or opened out of this object, by several threads at
  // once: takes the next `count` numbers (the first is returned) so that no
  // other message gets them, each to be used once with twin() ciphers or
  // cipher(). Throws std::runtime_error when the numbers would run out.
  std::uint64_t reserve(std::uint64_t count);
  // This direction's own cipher (for the thread that owns the direction).
  AeadCipher& cipher() { return cipher_; }
  // Another cipher with this direction's key, for a helper thread.
  std::unique_ptr<AeadCipher> twin() const;
  // After a reserved message failed to open: every later open fails.
  void spend() { spent_ = true; }
  bool spent() const { return spent_; }

  // The number the next message gets.
  std::uint64_t messages() const { return next_; }

 private:
  AeadCipher cipher_;
  std::uint64_t next_ = 0;
  bool spent_ = false;
};

}  // namespace troupe::net
