#include "net/crypto/crypto.hpp"

#include "net/crypto/openssl_error.hpp"
#include "util/openssl_init.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <algorithm>
#include <climits>
#include <stdexcept>

namespace troupe::net {

// The oldest OpenSSL error on this thread's queue, or "no detail", and the
// queue cleared so the next failure reports its own.
void openssl_fail(const char* call) {
  const unsigned long code = ERR_get_error();
  std::string detail = "no detail";
  if (code != 0) {
    char text[256];
    ERR_error_string_n(code, text, sizeof text);
    detail = text;
  }
  ERR_clear_error();
  throw std::runtime_error(std::string("OpenSSL ") + call + " failed: " + detail);
}

namespace {

const unsigned char* bytes_of(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }
}  // namespace

// ---------------------------------------------------------------------------
// SHA-256.

struct Sha256::Context {
  EVP_MD_CTX* md = nullptr;
  ~Context() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {
  util::init_openssl();
  ctx_->md = EVP_MD_CTX_new();
  if (ctx_->md == nullptr) openssl_fail("EVP_MD_CTX_new");
  if (EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) openssl_fail("EVP_DigestInit_ex(sha256)");
}

Sha256::~Sha256() = default;

void Sha256::update(std::string_view bytes) {
  if (EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) != 1) openssl_fail("EVP_DigestUpdate");
}

std::string Sha256::finish() {
  std::string out(EVP_MAX_MD_SIZE, '\0');
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx_->md, reinterpret_cast<unsigned char*>(out.data()), &n) != 1)
    openssl_fail("EVP_DigestFinal_ex");
  out.resize(n);
  return out;
}

std::string sha256(std::string_view bytes) {
  util::init_openssl();
  std::string out(32, '\0');
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), reinterpret_cast<unsigned char*>(out.data()), &n, EVP_sha256(), nullptr) !=
      1)
    openssl_fail("EVP_Digest(sha256)");
  out.resize(n);
  return out;
}

// ---------------------------------------------------------------------------
// HMAC and HKDF.

std::string hmac_sha256(std::string_view key, std::string_view message) {
  util::init_openssl();
  if (key.size() > static_cast<std::size_t>(INT_MAX)) throw std::invalid_argument("HMAC key larger than 2 GiB");
  std::string out(EVP_MAX_MD_SIZE, '\0');
  unsigned int n = 0;
  // HMAC() wants a non-null key pointer even for an empty key.
  static const unsigned char empty = 0;
  if (HMAC(EVP_sha256(), key.empty() ? &empty : bytes_of(key), static_cast<int>(key.size()), bytes_of(message),
           message.size(), reinterpret_cast<unsigned char*>(out.data()), &n) == nullptr)
    openssl_fail("HMAC(sha256)");
  out.resize(n);
  return out;
}

std::string hkdf_sha256(std::string_view key, std::string_view salt, std::string_view info, std::size_t length) {
  util::init_openssl();
  if (length == 0 || length > 255 * 32)
    throw std::invalid_argument("HKDF-SHA256 output of " + std::to_string(length) + " bytes (1 to 8160)");
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, OSSL_KDF_NAME_HKDF, nullptr);
  if (kdf == nullptr) openssl_fail("EVP_KDF_fetch(HKDF)");
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (ctx == nullptr) openssl_fail("EVP_KDF_CTX_new(HKDF)");
  // OSSL_PARAM takes non-const pointers but only reads these.
  std::string k(key), s(salt), i(info);
  char digest[] = "SHA256";
  OSSL_PARAM params[5];
  std::size_t p = 0;
  params[p++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
  params[p++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, k.data(), k.size());
  if (!s.empty()) params[p++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, s.data(), s.size());
  params[p++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, i.data(), i.size());
  params[p] = OSSL_PARAM_construct_end();
  std::string out(length, '\0');
  const int ok = EVP_KDF_derive(ctx, reinterpret_cast<unsigned char*>(out.data()), out.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) openssl_fail("EVP_KDF_derive(HKDF-SHA256)");
  return out;
}

// ---------------------------------------------------------------------------
// The rest.

std::string to_hex(std::string_view bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  util::init_openssl();
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// Nonces must be unpredictable, not merely different: an attacker who can
// predict a nonce can obtain an answer to it in advance and replay it.
// RAND_bytes is OpenSSL's DRBG, seeded from the kernel's getrandom(2).
std::string random_bytes(std::size_t count) {
  util::init_openssl();
  std::string out(count, '\0');
  std::size_t done = 0;
  while (done < count) {
    const std::size_t chunk = std::min<std::size_t>(count - done, INT_MAX);
    if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data() + done), static_cast<int>(chunk)) != 1)
      openssl_fail("RAND_bytes");
    done += chunk;
  }
  return out;
}

}  // namespace troupe::net
