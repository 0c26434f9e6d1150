#include "net/crypto/aead.hpp"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include <algorithm>
#include <climits>
#include <stdexcept>

#include "net/crypto/crypto.hpp"
#include "net/crypto/openssl_error.hpp"
#include "util/openssl_init.hpp"

namespace troupe::net {

namespace {
// EVP_*Update take an int length: feed larger buffers in pieces.
constexpr std::size_t kPiece = std::size_t{1} << 30;

constexpr std::string_view kAcceptorToJoiner = "troupe-link-v1 acceptor to joiner";
constexpr std::string_view kJoinerToAcceptor = "troupe-link-v1 joiner to acceptor";
}  // namespace

LinkKeys link_keys(std::string_view session_key, bool acceptor) {
  LinkKeys keys;
  if (session_key.empty()) return keys;
  const std::string a_to_j = hkdf_sha256(session_key, "", kAcceptorToJoiner, kAeadKeyBytes);
  const std::string j_to_a = hkdf_sha256(session_key, "", kJoinerToAcceptor, kAeadKeyBytes);
  keys.send = acceptor ? a_to_j : j_to_a;
  keys.receive = acceptor ? j_to_a : a_to_j;
  return keys;
}

struct AeadCipher::Context {
  EVP_CIPHER_CTX* cipher = nullptr;
  std::string key;
  ~Context() {
    EVP_CIPHER_CTX_free(cipher);  // clears its key schedule
    OPENSSL_cleanse(key.data(), key.size());
  }
};

namespace {
// The nonce of message `number`: four zero bytes, then the number as 64-bit
// big endian.
void make_nonce(std::uint64_t number, unsigned char iv[12]) {
  std::fill(iv, iv + 4, 0);
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<unsigned char>(number >> (56 - 8 * i));
}
}  // namespace

AeadCipher::AeadCipher(std::string_view key) : ctx_(std::make_unique<Context>()) {
  util::init_openssl();
  if (key.size() != kAeadKeyBytes)
    throw std::invalid_argument("an AES-256-GCM key has " + std::to_string(kAeadKeyBytes) + " bytes, not " +
                                std::to_string(key.size()));
  ctx_->key = std::string(key);
  ctx_->cipher = EVP_CIPHER_CTX_new();
  if (ctx_->cipher == nullptr) openssl_fail("EVP_CIPHER_CTX_new");
}

AeadCipher::~AeadCipher() = default;

bool AeadCipher::begin(Mode mode) {
  if (mode_ == mode) return false;
  if (mode_ != Mode::unused) throw std::logic_error("AeadCipher: one object either seals or opens");
  mode_ = mode;
  return true;
}

void AeadCipher::seal(std::uint64_t number, const void* aad, std::size_t aad_bytes, const void* in, void* out,
                      std::size_t bytes, unsigned char tag[kAeadTagBytes]) {
  unsigned char iv[12];
  make_nonce(number, iv);
  EVP_CIPHER_CTX* c = ctx_->cipher;
  const auto* key = reinterpret_cast<const unsigned char*>(ctx_->key.data());
  // The first message sets cipher and key (the key schedule); later ones
  // only the nonce.
  const bool first = begin(Mode::seal);
  if (EVP_EncryptInit_ex(c, first ? EVP_aes_256_gcm() : nullptr, nullptr, first ? key : nullptr, iv) != 1)
    openssl_fail("EVP_EncryptInit_ex(aes-256-gcm)");
  int n = 0;
  if (aad_bytes > 0 &&
      EVP_EncryptUpdate(c, nullptr, &n, static_cast<const unsigned char*>(aad), static_cast<int>(aad_bytes)) != 1)
    openssl_fail("EVP_EncryptUpdate(aad)");
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t piece = std::min(kPiece, bytes - done);
    if (EVP_EncryptUpdate(c, dst + done, &n, src + done, static_cast<int>(piece)) != 1)
      openssl_fail("EVP_EncryptUpdate");
    done += piece;
  }
  if (EVP_EncryptFinal_ex(c, dst + bytes, &n) != 1) openssl_fail("EVP_EncryptFinal_ex");
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kAeadTagBytes), tag) != 1)
    openssl_fail("EVP_CIPHER_CTX_ctrl(GET_TAG)");
}

bool AeadCipher::open(std::uint64_t number, const void* aad, std::size_t aad_bytes, const void* in, void* out,
                      std::size_t bytes, const unsigned char tag[kAeadTagBytes]) {
  unsigned char iv[12];
  make_nonce(number, iv);
  EVP_CIPHER_CTX* c = ctx_->cipher;
  const auto* key = reinterpret_cast<const unsigned char*>(ctx_->key.data());
  const bool first = begin(Mode::open);
  if (EVP_DecryptInit_ex(c, first ? EVP_aes_256_gcm() : nullptr, nullptr, first ? key : nullptr, iv) != 1)
    openssl_fail("EVP_DecryptInit_ex(aes-256-gcm)");
  int n = 0;
  if (aad_bytes > 0 &&
      EVP_DecryptUpdate(c, nullptr, &n, static_cast<const unsigned char*>(aad), static_cast<int>(aad_bytes)) != 1)
    openssl_fail("EVP_DecryptUpdate(aad)");
  const auto* src = static_cast<const unsigned char*>(in);
  auto* dst = static_cast<unsigned char*>(out);
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t piece = std::min(kPiece, bytes - done);
    if (EVP_DecryptUpdate(c, dst + done, &n, src + done, static_cast<int>(piece)) != 1)
      openssl_fail("EVP_DecryptUpdate");
    done += piece;
  }
  unsigned char expected[kAeadTagBytes];
  std::copy(tag, tag + kAeadTagBytes, expected);
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kAeadTagBytes), expected) != 1)
    openssl_fail("EVP_CIPHER_CTX_ctrl(SET_TAG)");
  // The tag is compared inside OpenSSL, in constant time.
  if (EVP_DecryptFinal_ex(c, dst + bytes, &n) != 1) {
    ERR_clear_error();
    return false;
  }
  return true;
}

AeadDirection::AeadDirection(std::string_view key) : cipher_(key) {}

AeadDirection::~AeadDirection() = default;

std::uint64_t AeadDirection::reserve(std::uint64_t count) {
  // The last number stays unused, so that next_ never wraps to a used one.
  if (count > UINT64_MAX - 1 - next_) throw std::runtime_error("AES-256-GCM: 2^64 messages on one key");
  const std::uint64_t first = next_;
  next_ += count;
  return first;
}

std::unique_ptr<AeadCipher> AeadDirection::twin() const { return std::make_unique<AeadCipher>(cipher_.ctx_->key); }

void AeadDirection::seal(const void* aad, std::size_t aad_bytes, const void* in, void* out, std::size_t bytes,
                         unsigned char tag[kAeadTagBytes]) {
  cipher_.seal(reserve(1), aad, aad_bytes, in, out, bytes, tag);
}

bool AeadDirection::open(const void* aad, std::size_t aad_bytes, const void* in, void* out, std::size_t bytes,
                         const unsigned char tag[kAeadTagBytes]) {
  if (spent_) return false;
  if (!cipher_.open(reserve(1), aad, aad_bytes, in, out, bytes, tag)) {
    spent_ = true;
    return false;
  }
  return true;
}

}  // namespace troupe::net
