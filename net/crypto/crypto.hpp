// Cryptographic primitives, all from OpenSSL's libcrypto.
//
// Byte strings are std::string (raw bytes, not text). Every function throws
// std::runtime_error naming the OpenSSL call and its error when libcrypto
// fails (it does not for valid input; a failure means a broken installation
// or an exhausted random source).
//
//   std::string d = sha256("abc");                         // 32 raw bytes
//   std::string m = hmac_sha256(key, message);             // 32 raw bytes
//   std::string k = hkdf_sha256(secret, salt, "troupe-control-v1", 32);
//   std::string n = random_bytes(32);                      // RAND_bytes
//   bool same = constant_time_equal(m, received);          // CRYPTO_memcmp
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace troupe::net {

// Incremental SHA-256 (FIPS 180-4) over EVP.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::string_view bytes);
  // The 32-byte digest. The object is spent afterwards.
  std::string finish();

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

std::string sha256(std::string_view bytes);                               // 32 raw bytes
std::string hmac_sha256(std::string_view key, std::string_view message);  // 32 raw bytes (RFC 2104)
// HKDF-SHA256 (RFC 5869), extract then expand: `length` bytes (at most
// 255 * 32) of key material from `key`, bound to `info` (a label naming what
// the key is for, so keys for different purposes differ).
std::string hkdf_sha256(std::string_view key, std::string_view salt, std::string_view info, std::size_t length);
std::string to_hex(std::string_view bytes);  // lower case
// Compares in time that depends on the lengths only, not on where they
// differ (CRYPTO_memcmp). Different lengths compare unequal at once: the
// lengths of MACs and proofs are public.
bool constant_time_equal(std::string_view a, std::string_view b);
// `count` bytes from OpenSSL's CSPRNG (RAND_bytes, seeded from the kernel).
std::string random_bytes(std::size_t count);

}  // namespace troupe::net
