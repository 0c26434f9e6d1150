// The cluster secret and the challenge-response handshake nodes use to prove
// they hold it, without ever sending it.
//
// Every byte string here is a std::string (raw bytes, not text), so that a
// message travels as it is in a CAF message or, encode()d, as one frame of
// the gate (net/cluster/gate.hpp).
//
// On the wire each message is one Cap'n Proto AuthMessage
// (net/schema/handshake.capnp): the handshake protocol (kAuthProtocol) and
// a union of Challenge, JoinResponse and Verdict, at most
// kMaxAuthMessageBytes. decode() takes any bytes: it refuses a size that is
// not a whole number of words up to that bound before reading, reads with a
// traversal limit of the bound (net/schema/message.hpp), and throws
// std::invalid_argument naming the message and what is wrong (another
// protocol, another kind of message, a pointer out of bounds) instead of
// crashing or allocating from a peer's length.
//
// The handshake (mutual; the secret s is the HMAC key):
//
// HMAC is HMAC-SHA256 and the nonces come from random_bytes, both OpenSSL
// (net/crypto/crypto.hpp).
//
//   acceptor (listening node)                 joiner (connecting node)
//   ── Challenge{has_secret, nonce_a} ──────►
//                                             nonce_j = 32 random bytes
//                                             proof_j = HMAC(s, "troupe-join-v1" || nonce_a || nonce_j || identity)
//   ◄── JoinResponse{nonce_j, identity, proof_j}
//   recompute proof_j, compare in constant time
//   proof_a = HMAC(s, "troupe-accept-v1" || nonce_a || nonce_j || identity)
//   ── Verdict{admitted, proof_a} ────────────►
//                                             recompute proof_a, compare in constant time
//
// What is signed: the HMACs cover the label, nonce_a, nonce_j and the
// identity as raw bytes, concatenated, never the encoded messages, so
// changing the encoding (it was hand-packed fields until kAuthProtocol 2)
// changes no proof. The flags (has_secret), the joiner's error and troupe
// version, and the verdict's identity and reason are not signed: each side
// checks the flags against its own secret, and the version check and the
// refusal only ever refuse; nothing is admitted on their word.
//
// Nonces are exactly 32 bytes, so the concatenation is unambiguous (the
// identity, "ROLE/NAME", comes last). The two labels differ, so the acceptor
// cannot answer by reflecting the joiner's own proof back. A fresh nonce_a
// per connection means a response recorded on one connection proves nothing
// on another; each Acceptor and Joiner verifies once, so a replay within one
// connection is refused too.
//
// Example (both sides in one process, as the tests do):
//
//   Secret s = Secret::load(secret_file);           // or Secret::from_text("...")
//   Acceptor acceptor(s);
//   Joiner joiner(s, "worker/host-b");
//   Challenge c = acceptor.challenge();             // send c.encode()
//   JoinResponse r = joiner.respond(c);             // error() set when it refuses
//   AuthResult a = acceptor.verify(r);              // a.ok, else a.reason
//   AuthResult j = joiner.verify(a.proof);          // the joiner checks the acceptor
//
// After a successful handshake with a secret both sides hold the same
// session_key, HMAC(s, "troupe-session-v1" || nonce_a || nonce_j || identity),
// fresh per connection. The handshake alone authenticates the peers when the
// connection is made; what follows is protected because both transports
// that use it (the gate's splice and the tcp ring, net/cluster/gate.hpp)
// seal every later byte with keys derived from the session key
// (net/crypto/aead.hpp's link_keys: one AES-256-GCM key per direction;
// net/transport/sealed.hpp's records).
//
// Without a secret on either side the handshake only agrees that neither has
// one; the caller must then accept loopback peers only (peer_refusal()).
//
// Clear links (`troupe node --insecure`, for trusted networks): both sides
// still prove the secret, so only members join, but the links carry their
// bytes unsealed after the handshake. Each side states its choice
// (clear_links in the Challenge and the JoinResponse) and refuses a peer
// whose choice differs, naming both; the choice is also signed, because the
// proofs and the session key then use other labels ("troupe-join-clear-v1",
// "troupe-accept-clear-v1", "troupe-session-clear-v1"), so a man in the
// middle who flips the stated flag makes the proofs fail: he cannot turn a
// sealed cluster's links clear.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

// sha256, hmac_sha256, random_bytes, constant_time_equal (OpenSSL).
#include "net/crypto/crypto.hpp"

namespace troupe::net {

// ---------------------------------------------------------------------------
// The cluster secret.

class Secret {
 public:
  Secret() = default;  // no secret

  // The whole file, less one trailing newline ("\n" or "\r\n"). Throws
  // util::ConfigFileError (a std::invalid_argument) naming the path when it
  // cannot be read, is not a regular file or holds more than 64 KiB, and
  // std::runtime_error when it is empty.
  // Writes a warning to `warnings` when group or others have any access to
  // the file (as ssh does for private keys).
  static Secret from_file(const std::string& path, std::ostream& warnings);
  static Secret from_file(const std::string& path);  // warnings to stderr
  // Throws std::invalid_argument for empty text.
  static Secret from_text(std::string text);
  // `secret_file` when not empty, else $TROUPE_SECRET when set (an empty one
  // is an error), else no secret.
  static Secret load(const std::string& secret_file, std::ostream& warnings);
  static Secret load(const std::string& secret_file);

  bool configured() const { return !key_.empty(); }
  // Where it came from, for messages: "file F", "TROUPE_SECRET", "none".
  // Never the secret itself.
  const std::string& origin() const { return origin_; }
  // A 32-byte key for one purpose, HKDF-SHA256(secret, info = label), so the
  // secret itself keys nothing but the handshake (e.g. kControlKeyLabel for
  // the control endpoint). Throws std::logic_error without a secret.
  std::string derive(std::string_view label) const;

 private:
  friend class Acceptor;
  friend class Joiner;
  std::string key_;
  std::string origin_ = "none";
};

// ---------------------------------------------------------------------------
// Handshake messages. encode() gives one self-describing byte string (an
// AuthMessage); decode() throws std::invalid_argument saying what is
// malformed.

constexpr std::size_t nonce_bytes = 32;
constexpr std::size_t proof_bytes = 32;
// AuthMessage.protocol. 1 was the hand-packed "TRC1"/"TRR1" messages behind
// the gate's "TROUPE-GATE/1"; 2 is Cap'n Proto.
constexpr std::uint16_t kAuthProtocol = 2;
// The largest encoded message decode() reads (the gate's frame bound).
constexpr std::size_t kMaxAuthMessageBytes = 4096;

struct Challenge {
  bool has_secret = false;   // whether the acceptor requires the secret
  std::string nonce;         // nonce_bytes when has_secret, else empty
  bool clear_links = false;  // the acceptor's links stay unsealed (--insecure)
  std::string encode() const;
  static Challenge decode(std::string_view bytes);
};

struct JoinResponse {
  bool has_secret = false;   // whether the joiner has a secret
  std::string nonce;         // nonce_j
  std::string identity;      // "ROLE/NAME", e.g. "worker/host-b"
  std::string proof;         // proof_j
  std::string error;         // set (and nothing sent) when the joiner refuses
  bool clear_links = false;  // the joiner's links stay unsealed (--insecure)
  // The joiner's troupe build, for the gate's version check (not signed;
  // Acceptor::verify ignores it).
  std::string troupe_version;
  std::string encode() const;
  static JoinResponse decode(std::string_view bytes);
};

// The acceptor's answer to a JoinResponse: admitted with its own proof
// (AuthResult::proof, which the joiner checks with Joiner::verify), or
// refused with the reason.
struct Verdict {
  bool admitted = false;
  std::string identity;  // the acceptor's ("coordinator")
  std::string proof;     // admitted: proof_a
  std::string reason;    // refused: why, shown to the joiner's user verbatim
  std::string encode() const;
  static Verdict decode(std::string_view bytes);
};

struct AuthResult {
  bool ok = false;
  std::string reason;       // why not; never contains the secret or a proof
  std::string proof;        // Acceptor::verify: proof_a to send when ok
  std::string identity;     // Acceptor::verify: the joiner's identity
  std::string session_key;  // when ok with a secret: the same 32 bytes on both sides
};

// The listening side. One per connection.
class Acceptor {
 public:
  // `clear_links` (--insecure) needs a secret: std::invalid_argument without.
  explicit Acceptor(Secret secret, bool clear_links = false);
  const Challenge& challenge() const { return challenge_; }
  // Checks the joiner's response; when ok, result.proof is proof_a, for the
  // Verdict to send back. Only the first call can succeed.
  AuthResult verify(const JoinResponse& response);

 private:
  Secret secret_;
  bool clear_links_;
  Challenge challenge_;
  bool used_ = false;
};

// The connecting side. One per connection.
class Joiner {
 public:
  // `clear_links` (--insecure) needs a secret: std::invalid_argument without.
  Joiner(Secret secret, std::string identity, bool clear_links = false);
  // The response to a challenge; response.error is set when this node
  // refuses (secret on one side only, malformed challenge).
  JoinResponse respond(const Challenge& challenge);
  // Checks the acceptor's proof (AuthResult::proof of Acceptor::verify).
  // Only one call, after respond(), can succeed.
  AuthResult verify(std::string_view accept_proof);

 private:
  Secret secret_;
  std::string identity_;
  bool clear_links_;
  std::string acceptor_nonce_, nonce_, refusal_;
  bool responded_ = false, used_ = false, has_secret_on_both_ = false;
};

// Throws std::invalid_argument for clear links (--insecure) without a
// secret; Acceptor and Joiner call it, and `troupe node` before anything.
void check_clear_links(const Secret& secret, bool clear_links);

// The two proofs, exposed for tests and for other transports; with
// `clear_links` the labels of clear links.
std::string join_proof(std::string_view key, std::string_view acceptor_nonce, std::string_view joiner_nonce,
                       std::string_view identity, bool clear_links = false);
std::string accept_proof(std::string_view key, std::string_view acceptor_nonce, std::string_view joiner_nonce,
                         std::string_view identity, bool clear_links = false);

// ---------------------------------------------------------------------------
// Without a secret nodes accept loopback peers only.

// Whether `host` (an address without port; IPv6 with or without brackets) is
// a loopback address: 127.0.0.0/8, ::1, ::ffff:127.x.y.z, or the name
// "localhost" (any case, optional trailing dot). Names are not resolved.
bool is_loopback(std::string_view host);

// Empty when a peer at `host` may connect to a node with `secret`;
// otherwise the reason to log and refuse.
std::string peer_refusal(const Secret& secret, std::string_view host);

}  // namespace troupe::net
