#include "net/cluster/auth.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include "util/config_file.hpp"

namespace troupe::net {

// ---------------------------------------------------------------------------
// SHA-256, FIPS 180-4 section 6.2.

namespace {
constexpr std::uint32_t k_round[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::block(const unsigned char* p) {
  std::uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = (std::uint32_t{p[4 * t]} << 24) | (std::uint32_t{p[4 * t + 1]} << 16) |
           (std::uint32_t{p[4 * t + 2]} << 8) | std::uint32_t{p[4 * t + 3]};
  for (int t = 16; t < 64; ++t) {
    const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int t = 0; t < 64; ++t) {
    const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k_round[t] + w[t];
    const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a; h_[1] += b; h_[2] += c; h_[3] += d;
  h_[4] += e; h_[5] += f; h_[6] += g; h_[7] += h;
}

void Sha256::update(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t n = bytes.size();
  length_ += n;
  if (buffered_ > 0) {
    const std::size_t take = std::min(n, 64 - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ < 64) return;
    block(buffer_.data());
    buffered_ = 0;
  }
  for (; n >= 64; p += 64, n -= 64) block(p);
  if (n > 0) std::memcpy(buffer_.data(), p, n);
  buffered_ = n;
}

std::string Sha256::finish() {
  const std::uint64_t bits = length_ * 8;
  buffer_[buffered_++] = 0x80;
  if (buffered_ > 56) {
    std::memset(buffer_.data() + buffered_, 0, 64 - buffered_);
    block(buffer_.data());
    buffered_ = 0;
  }
  std::memset(buffer_.data() + buffered_, 0, 56 - buffered_);
  for (int i = 0; i < 8; ++i) buffer_[56 + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  block(buffer_.data());
  std::string out(32, '\0');
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<char>(h_[i] >> (24 - 8 * j));
  return out;
}

std::string sha256(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.finish();
}

// RFC 2104: H((K' ^ opad) || H((K' ^ ipad) || m)), K' the key hashed when
// longer than a block, zero-padded to 64 bytes.
std::string hmac_sha256(std::string_view key, std::string_view message) {
  std::string k = key.size() > 64 ? sha256(key) : std::string(key);
  k.resize(64, '\0');
  std::string ipad(64, '\0'), opad(64, '\0');
  for (int i = 0; i < 64; ++i) {
    ipad[i] = static_cast<char>(k[i] ^ 0x36);
    opad[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  Sha256 inner;
  inner.update(ipad);
  inner.update(message);
  Sha256 outer;
  outer.update(opad);
  outer.update(inner.finish());
  return outer.finish();
}

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
  if (a.size() != b.size()) return false;  // lengths are public (fixed 32 here)
  volatile unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff = static_cast<unsigned char>(diff | (static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i])));
  return diff == 0;
}

// Nonces must be unpredictable, not merely different: an attacker who can
// predict nonce_a can obtain a joiner's answer to it in advance and replay
// it. std::random_device is not required to be cryptographic (the standard
// allows a deterministic engine, and older MinGW shipped one), so the bytes
// come from the kernel CSPRNG: getrandom(2), which needs no file descriptor
// and blocks only until the pool is first seeded; /dev/urandom when the
// syscall is missing (old kernels, seccomp filters).
std::string random_bytes(std::size_t count) {
  std::string out(count, '\0');
  std::size_t got = 0;
  while (got < count) {
    const ssize_t n = ::getrandom(out.data() + got, count - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  if (got == count) return out;
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(std::string("no random source: getrandom and /dev/urandom failed: ") +
                                       std::strerror(errno));
  while (got < count) {
    const ssize_t n = ::read(fd, out.data() + got, count - got);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (!(n < 0 && errno == EINTR)) {
      ::close(fd);
      throw std::runtime_error("short read from /dev/urandom");
    }
  }
  ::close(fd);
  return out;
}

// ---------------------------------------------------------------------------
// Secret.

Secret Secret::from_text(std::string text) {
  if (text.empty()) throw std::invalid_argument("the cluster secret is empty");
  Secret s;
  s.key_ = std::move(text);
  s.origin_ = "text";
  return s;
}

Secret Secret::from_file(const std::string& path, std::ostream& warnings) {
  // A secret is a key, not a document: 64 KiB is far more than any key needs.
  std::string key = util::read_config_file(path, "secret file", 64 << 10);
  if (!key.empty() && key.back() == '\n') {
    key.pop_back();
    if (!key.empty() && key.back() == '\r') key.pop_back();
  }
  if (key.empty()) throw std::runtime_error("secret file '" + path + "' is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    warnings << "warning: secret file '" << path << "' has mode " << mode
             << ": group or others can access it (chmod 600 " << path << ")\n";
  }
  Secret s;
  s.key_ = std::move(key);
  s.origin_ = "file " + path;
  return s;
}

Secret Secret::from_file(const std::string& path) { return from_file(path, std::cerr); }

Secret Secret::load(const std::string& secret_file, std::ostream& warnings) {
  if (!secret_file.empty()) return from_file(secret_file, warnings);
  if (const char* env = std::getenv("TROUPE_SECRET")) {
    if (*env == '\0') throw std::runtime_error("TROUPE_SECRET is set but empty");
    Secret s;
    s.key_ = env;
    s.origin_ = "TROUPE_SECRET";
    return s;
  }
  return {};
}

Secret Secret::load(const std::string& secret_file) { return load(secret_file, std::cerr); }

// ---------------------------------------------------------------------------
// Messages: magic (4 bytes), then fields, each a 4-byte big-endian length and
// its bytes; a flag is one byte.

namespace {
constexpr std::string_view challenge_magic = "TRC1", response_magic = "TRR1";
constexpr std::string_view join_label = "troupe-join-v1", accept_label = "troupe-accept-v1",
                           session_label = "troupe-session-v1";
constexpr std::size_t max_field = 4096;

void put_field(std::string& out, std::string_view field) {
  const auto n = static_cast<std::uint32_t>(field.size());
  for (int i = 3; i >= 0; --i) out += static_cast<char>(n >> (8 * i));
  out += field;
}

class Reader {
 public:
  Reader(std::string_view bytes, std::string_view magic, const char* what) : bytes_(bytes), what_(what) {
    if (bytes_.substr(0, magic.size()) != magic) fail("wrong magic (not a " + std::string(what) + ")");
    pos_ = magic.size();
  }
  bool flag() {
    if (pos_ >= bytes_.size()) fail("truncated");
    const auto c = static_cast<unsigned char>(bytes_[pos_++]);
    if (c > 1) fail("bad flag byte");
    return c == 1;
  }
  std::string field() {
    if (bytes_.size() - pos_ < 4) fail("truncated");
    std::uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<unsigned char>(bytes_[pos_++]);
    if (n > max_field) fail("field of " + std::to_string(n) + " bytes (at most " + std::to_string(max_field) + ")");
    if (bytes_.size() - pos_ < n) fail("truncated");
    std::string out(bytes_.substr(pos_, n));
    pos_ += n;
    return out;
  }
  void end() {
    if (pos_ != bytes_.size()) fail(std::to_string(bytes_.size() - pos_) + " trailing bytes");
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    throw std::invalid_argument(std::string("malformed ") + what_ + ": " + why);
  }
  std::string_view bytes_;
  const char* what_;
  std::size_t pos_ = 0;
};

std::string proof(std::string_view label, std::string_view key, std::string_view acceptor_nonce,
                  std::string_view joiner_nonce, std::string_view identity) {
  std::string message;
  message.reserve(label.size() + acceptor_nonce.size() + joiner_nonce.size() + identity.size());
  message += label;
  message += acceptor_nonce;
  message += joiner_nonce;
  message += identity;
  return hmac_sha256(key, message);
}

AuthResult refuse(std::string reason) {
  AuthResult r;
  r.reason = std::move(reason);
  return r;
}
}  // namespace

std::string Challenge::encode() const {
  std::string out(challenge_magic);
  out += static_cast<char>(has_secret ? 1 : 0);
  put_field(out, nonce);
  return out;
}

Challenge Challenge::decode(std::string_view bytes) {
  Reader in(bytes, challenge_magic, "handshake challenge");
  Challenge c;
  c.has_secret = in.flag();
  c.nonce = in.field();
  in.end();
  return c;
}

std::string JoinResponse::encode() const {
  std::string out(response_magic);
  out += static_cast<char>(has_secret ? 1 : 0);
  put_field(out, nonce);
  put_field(out, identity);
  put_field(out, proof);
  put_field(out, error);
  return out;
}

JoinResponse JoinResponse::decode(std::string_view bytes) {
  Reader in(bytes, response_magic, "handshake response");
  JoinResponse r;
  r.has_secret = in.flag();
  r.nonce = in.field();
  r.identity = in.field();
  r.proof = in.field();
  r.error = in.field();
  in.end();
  return r;
}

std::string join_proof(std::string_view key, std::string_view acceptor_nonce, std::string_view joiner_nonce,
                       std::string_view identity) {
  return proof(join_label, key, acceptor_nonce, joiner_nonce, identity);
}

std::string accept_proof(std::string_view key, std::string_view acceptor_nonce, std::string_view joiner_nonce,
                         std::string_view identity) {
  return proof(accept_label, key, acceptor_nonce, joiner_nonce, identity);
}

// ---------------------------------------------------------------------------
// Acceptor and Joiner.

Acceptor::Acceptor(Secret secret) : secret_(std::move(secret)) {
  challenge_.has_secret = secret_.configured();
  if (challenge_.has_secret) challenge_.nonce = random_bytes(nonce_bytes);
}

AuthResult Acceptor::verify(const JoinResponse& response) {
  if (used_) return refuse("handshake already completed on this connection (replayed response?)");
  used_ = true;
  const std::string who = response.identity.empty() ? std::string("a peer") : "'" + response.identity + "'";
  if (!response.error.empty()) return refuse(who + " refused the handshake: " + response.error);
  if (!secret_.configured()) {
    if (response.has_secret)
      return refuse(who + " has a cluster secret but this node has none: configure the same secret on both "
                    "(--secret-file or TROUPE_SECRET)");
    AuthResult r;
    r.ok = true;
    r.identity = response.identity;
    return r;
  }
  if (!response.has_secret)
    return refuse(who + " has no cluster secret but this node requires one (" + secret_.origin() + ")");
  if (response.nonce.size() != nonce_bytes)
    return refuse(who + " sent a nonce of " + std::to_string(response.nonce.size()) + " bytes, expected " +
                  std::to_string(nonce_bytes));
  if (response.nonce == challenge_.nonce) return refuse(who + " echoed this node's nonce (reflection?)");
  const std::string expected = join_proof(secret_.key_, challenge_.nonce, response.nonce, response.identity);
  if (!constant_time_equal(expected, response.proof))
    return refuse(who + " did not prove the cluster secret: its proof does not match (a different secret, or "
                  "a replayed or altered response); this node's secret is from " + secret_.origin());
  AuthResult r;
  r.ok = true;
  r.identity = response.identity;
  r.proof = accept_proof(secret_.key_, challenge_.nonce, response.nonce, response.identity);
  r.session_key = proof(session_label, secret_.key_, challenge_.nonce, response.nonce, response.identity);
  return r;
}

Joiner::Joiner(Secret secret, std::string identity) : secret_(std::move(secret)), identity_(std::move(identity)) {
  nonce_ = random_bytes(nonce_bytes);
}

JoinResponse Joiner::respond(const Challenge& challenge) {
  JoinResponse r;
  r.identity = identity_;
  r.has_secret = secret_.configured();
  if (responded_) {
    r.error = "this joiner already answered a challenge";
    return r;
  }
  responded_ = true;
  if (challenge.has_secret != secret_.configured()) {
    r.error = challenge.has_secret
                  ? "the acceptor requires a cluster secret but the joiner has none (--secret-file or TROUPE_SECRET)"
                  : "the joiner has a cluster secret (" + secret_.origin() +
                        ") but the acceptor has none: configure the same secret on both";
    refusal_ = r.error;
    return r;
  }
  if (!secret_.configured()) return r;
  if (challenge.nonce.size() != nonce_bytes) {
    r.error = "the acceptor's nonce has " + std::to_string(challenge.nonce.size()) + " bytes, expected " +
              std::to_string(nonce_bytes);
    refusal_ = r.error;
    return r;
  }
  has_secret_on_both_ = true;
  acceptor_nonce_ = challenge.nonce;
  r.nonce = nonce_;
  r.proof = join_proof(secret_.key_, acceptor_nonce_, nonce_, identity_);
  return r;
}

AuthResult Joiner::verify(std::string_view proof_a) {
  if (!responded_) return refuse("no challenge answered yet");
  if (used_) return refuse("the acceptor's proof was already checked on this connection (replayed proof?)");
  used_ = true;
  if (!has_secret_on_both_) {
    if (!refusal_.empty()) return refuse(refusal_);
    if (!proof_a.empty()) return refuse("the acceptor sent a proof although neither side has a secret");
    AuthResult r;
    r.ok = true;
    return r;
  }
  const std::string expected = accept_proof(secret_.key_, acceptor_nonce_, nonce_, identity_);
  if (!constant_time_equal(expected, proof_a))
    return refuse("the acceptor did not prove the cluster secret: its proof does not match (a different "
                  "secret, or an altered message); this node's secret is from " + secret_.origin());
  AuthResult r;
  r.ok = true;
  r.session_key = proof(session_label, secret_.key_, acceptor_nonce_, nonce_, identity_);
  return r;
}

// ---------------------------------------------------------------------------
// Loopback.

bool is_loopback(std::string_view host) {
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (const auto pct = h.find('%'); pct != std::string::npos) h.resize(pct);  // zone id: fe80::1%lo
  std::string lower;
  for (char c : h) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "localhost" || lower == "localhost.") return true;
  unsigned char v4[4];
  if (::inet_pton(AF_INET, lower.c_str(), v4) == 1) return v4[0] == 127;
  unsigned char v6[16];
  if (::inet_pton(AF_INET6, lower.c_str(), v6) == 1) {
    static const unsigned char loop[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    if (std::memcmp(v6, loop, 16) == 0) return true;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(v6, mapped, 12) == 0 && v6[12] == 127;  // ::ffff:127.x.y.z (dual-stack sockets)
  }
  return false;
}

std::string peer_refusal(const Secret& secret, std::string_view host) {
  if (secret.configured() || is_loopback(host)) return {};
  return "refusing peer " + std::string(host) +
         ": no cluster secret is configured, so only loopback peers may connect (give every node the same "
         "--secret-file or TROUPE_SECRET)";
}

}  // namespace troupe::net
