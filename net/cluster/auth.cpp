#include "net/cluster/auth.hpp"

#include <sys/stat.h>

#include <arpa/inet.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

#include "net/schema/handshake.capnp.h"
#include "net/schema/message.hpp"
#include "util/config_file.hpp"

namespace troupe::net {

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

std::string Secret::derive(std::string_view label) const {
  if (!configured()) throw std::logic_error("Secret::derive without a secret");
  return hkdf_sha256(key_, "", label, 32);
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
// Messages: each one AuthMessage (net/schema/handshake.capnp).

namespace {
constexpr std::string_view join_label = "troupe-join-v1", accept_label = "troupe-accept-v1",
                           session_label = "troupe-session-v1";
// Clear links sign with labels of their own (auth.hpp).
constexpr std::string_view clear_join_label = "troupe-join-clear-v1", clear_accept_label = "troupe-accept-clear-v1",
                           clear_session_label = "troupe-session-clear-v1";

using Kind = schema::AuthMessage::Which;

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::UNSET:
      return "message that says nothing";
    case Kind::CHALLENGE:
      return "handshake challenge";
    case Kind::RESPONSE:
      return "handshake response";
    case Kind::VERDICT:
      return "handshake verdict";
  }
  return "message of an unknown kind";
}

capnp::Data::Reader data(const std::string& bytes) {
  return {reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()};
}
capnp::Text::Reader text(const std::string& chars) { return {chars.c_str(), chars.size()}; }
std::string bytes_of(capnp::Data::Reader d) { return {reinterpret_cast<const char*>(d.begin()), d.size()}; }
std::string bytes_of(capnp::Text::Reader t) { return {t.begin(), t.size()}; }

// An AuthMessage of our protocol, with fill(builder) choosing its kind.
template <typename Fill>
std::string encode_message(Fill&& fill) {
  capnp::MallocMessageBuilder message(64);
  auto m = message.initRoot<schema::AuthMessage>();
  m.setProtocol(kAuthProtocol);
  fill(m);
  return schema::message_bytes(message);
}

// read(message) once the bytes are an AuthMessage of our protocol and of
// `kind`; throws std::invalid_argument "malformed handshake response: ...".
template <typename Read>
auto decode_message(std::string_view bytes, Kind kind, Read&& read) {
  const std::string what = std::string("malformed ") + kind_name(kind) + ": ";
  try {
    return schema::read_message<schema::AuthMessage>(
        bytes.data(), bytes.size(), kMaxAuthMessageBytes, [&](schema::AuthMessage::Reader m) {
          if (m.getProtocol() != kAuthProtocol)
            throw std::invalid_argument(what + "handshake protocol " + std::to_string(m.getProtocol()) +
                                        ", this node speaks " + std::to_string(kAuthProtocol) +
                                        " (every node must run the same build)");
          if (m.which() != kind) throw std::invalid_argument(what + "a " + kind_name(m.which()) + " instead");
          return read(m);
        });
  } catch (const schema::MalformedMessage& e) {
    throw std::invalid_argument(what + e.what());
  }
}

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

std::string session_key(std::string_view key, std::string_view acceptor_nonce, std::string_view joiner_nonce,
                        std::string_view identity, bool clear_links) {
  return proof(clear_links ? clear_session_label : session_label, key, acceptor_nonce, joiner_nonce, identity);
}

// Why two ends that disagree on sealing cannot talk; `peer` is "'worker/b'"
// or "the acceptor".
std::string links_disagree(const std::string& peer, bool peer_clear) {
  return peer_clear ? peer +
                          " runs with --insecure (its links unsealed after the handshake) and this node seals "
                          "its links: every node of a cluster must agree (give all or none --insecure)"
                    : peer +
                          " seals its links and this node runs with --insecure (links unsealed after the "
                          "handshake): every node of a cluster must agree (give all or none --insecure)";
}
}  // namespace

void check_clear_links(const Secret& secret, bool clear_links) {
  if (clear_links && !secret.configured())
    throw std::invalid_argument(
        "--insecure needs a cluster secret (--secret-file or TROUPE_SECRET): it leaves the links between members "
        "unsealed; it does not admit nodes without the secret (without a secret a cluster is loopback only, and "
        "its links are unsealed already)");
}

std::string Challenge::encode() const {
  return encode_message([&](schema::AuthMessage::Builder m) {
    auto c = m.initChallenge();
    c.setHasSecret(has_secret);
    c.setNonce(data(nonce));
    c.setClearLinks(clear_links);
  });
}

Challenge Challenge::decode(std::string_view bytes) {
  return decode_message(bytes, Kind::CHALLENGE, [](schema::AuthMessage::Reader m) {
    const auto in = m.getChallenge();
    Challenge c;
    c.has_secret = in.getHasSecret();
    c.nonce = bytes_of(in.getNonce());
    c.clear_links = in.getClearLinks();
    return c;
  });
}

std::string JoinResponse::encode() const {
  return encode_message([&](schema::AuthMessage::Builder m) {
    auto r = m.initResponse();
    r.setHasSecret(has_secret);
    r.setNonce(data(nonce));
    r.setIdentity(text(identity));
    r.setProof(data(proof));
    r.setError(text(error));
    r.setTroupeVersion(text(troupe_version));
    r.setClearLinks(clear_links);
  });
}

JoinResponse JoinResponse::decode(std::string_view bytes) {
  return decode_message(bytes, Kind::RESPONSE, [](schema::AuthMessage::Reader m) {
    const auto in = m.getResponse();
    JoinResponse r;
    r.has_secret = in.getHasSecret();
    r.nonce = bytes_of(in.getNonce());
    r.identity = bytes_of(in.getIdentity());
    r.proof = bytes_of(in.getProof());
    r.error = bytes_of(in.getError());
    r.troupe_version = bytes_of(in.getTroupeVersion());
    r.clear_links = in.getClearLinks();
    return r;
  });
}

std::string Verdict::encode() const {
  return encode_message([&](schema::AuthMessage::Builder m) {
    auto v = m.initVerdict();
    v.setAdmitted(admitted);
    v.setIdentity(text(identity));
    v.setProof(data(proof));
    v.setReason(text(reason));
  });
}

Verdict Verdict::decode(std::string_view bytes) {
  return decode_message(bytes, Kind::VERDICT, [](schema::AuthMessage::Reader m) {
    const auto in = m.getVerdict();
    Verdict v;
    v.admitted = in.getAdmitted();
    v.identity = bytes_of(in.getIdentity());
    v.proof = bytes_of(in.getProof());
    v.reason = bytes_of(in.getReason());
    return v;
  });
}

std::string join_proof(std::string_view key, std::string_view acceptor_nonce, std::string_view joiner_nonce,
                       std::string_view identity, bool clear_links) {
  return proof(clear_links ? clear_join_label : join_label, key, acceptor_nonce, joiner_nonce, identity);
}

std::string accept_proof(std::string_view key, std::string_view acceptor_nonce, std::string_view joiner_nonce,
                         std::string_view identity, bool clear_links) {
  return proof(clear_links ? clear_accept_label : accept_label, key, acceptor_nonce, joiner_nonce, identity);
}

// ---------------------------------------------------------------------------
// Acceptor and Joiner.

Acceptor::Acceptor(Secret secret, bool clear_links) : secret_(std::move(secret)), clear_links_(clear_links) {
  check_clear_links(secret_, clear_links_);
  challenge_.has_secret = secret_.configured();
  challenge_.clear_links = clear_links_;
  if (challenge_.has_secret) challenge_.nonce = random_bytes(nonce_bytes);
}

AuthResult Acceptor::verify(const JoinResponse& response) {
  if (used_) return refuse("handshake already completed on this connection (replayed response?)");
  used_ = true;
  const std::string who = response.identity.empty() ? std::string("a peer") : "'" + response.identity + "'";
  if (!response.error.empty()) return refuse(who + " refused the handshake: " + response.error);
  if (!secret_.configured()) {
    if (response.has_secret)
      return refuse(who +
                    " has a cluster secret but this node has none: configure the same secret on both "
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
  if (response.clear_links != clear_links_) return refuse(links_disagree(who, response.clear_links));
  const std::string expected =
      join_proof(secret_.key_, challenge_.nonce, response.nonce, response.identity, clear_links_);
  if (!constant_time_equal(expected, response.proof))
    return refuse(who +
                  " did not prove the cluster secret: its proof does not match (a different secret, or "
                  "a replayed or altered response); this node's secret is from " +
                  secret_.origin());
  AuthResult r;
  r.ok = true;
  r.identity = response.identity;
  r.proof = accept_proof(secret_.key_, challenge_.nonce, response.nonce, response.identity, clear_links_);
  r.session_key = session_key(secret_.key_, challenge_.nonce, response.nonce, response.identity, clear_links_);
  return r;
}

Joiner::Joiner(Secret secret, std::string identity, bool clear_links)
    : secret_(std::move(secret)), identity_(std::move(identity)), clear_links_(clear_links) {
  check_clear_links(secret_, clear_links_);
  nonce_ = random_bytes(nonce_bytes);
}

JoinResponse Joiner::respond(const Challenge& challenge) {
  JoinResponse r;
  r.identity = identity_;
  r.has_secret = secret_.configured();
  r.clear_links = clear_links_;
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
  if (challenge.clear_links != clear_links_) {
    r.error = links_disagree("the acceptor", challenge.clear_links);
    refusal_ = r.error;
    return r;
  }
  has_secret_on_both_ = true;
  acceptor_nonce_ = challenge.nonce;
  r.nonce = nonce_;
  r.proof = join_proof(secret_.key_, acceptor_nonce_, nonce_, identity_, clear_links_);
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
  const std::string expected = accept_proof(secret_.key_, acceptor_nonce_, nonce_, identity_, clear_links_);
  if (!constant_time_equal(expected, proof_a))
    return refuse(
        "the acceptor did not prove the cluster secret: its proof does not match (a different "
        "secret, or an altered message); this node's secret is from " +
        secret_.origin());
  AuthResult r;
  r.ok = true;
  r.session_key = session_key(secret_.key_, acceptor_nonce_, nonce_, identity_, clear_links_);
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
