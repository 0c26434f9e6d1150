// net/cluster/auth and net/crypto: SHA-256, HMAC-SHA256 and HKDF-SHA256
// (OpenSSL) against the published vectors, random bytes, the secret, the mutual handshake, loopback detection.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "net/cluster/auth.hpp"

namespace troupe::net {
namespace {

std::string hex_of(const std::string& bytes) { return to_hex(bytes); }

// ---------------------------------------------------------------------------
// FIPS 180-4 examples (and the NIST "one million a" vector).

TEST(ClusterSha256, FipsVectors) {
  EXPECT_EQ(hex_of(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_of(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex_of(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex_of(sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlm"
                          "nopqrsmnopqrstnopqrstu")),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(hex_of(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// A thread that hashes while the process exits (a detached device actor
// fingerprinting its replica as the job ends) still hashes, and under ASan
// leaves no leak of OpenSSL's per-thread state: the process is the helper
// tests/net/openssl_exit/thread_ends_at_exit.cpp.
TEST(ClusterSha256, AThreadThatEndsWhileTheProcessExitsHashesAndLeaksNothing) {
  FILE* p = popen("timeout 60 " OPENSSL_THREAD_ENDS_AT_EXIT " 2>&1", "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_EQ(out, "");
}

TEST(ClusterSha256, IncrementalUpdatesMatchOneShot) {
  std::string message;
  for (int i = 0; i < 300; ++i) message += static_cast<char>(i * 7);
  for (std::size_t split : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 128u, 299u}) {
    Sha256 h;
    h.update(std::string_view(message).substr(0, split));
    h.update(std::string_view(message).substr(split));
    EXPECT_EQ(h.finish(), sha256(message)) << "split at " << split;
  }
  // Lengths around the padding boundary (55/56/64 bytes).
  EXPECT_EQ(hex_of(sha256(std::string(55, 'a'))), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(hex_of(sha256(std::string(56, 'a'))), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(hex_of(sha256(std::string(64, 'a'))), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

// RFC 4231 section 4, test cases 1-7.
TEST(ClusterHmac, Rfc4231) {
  EXPECT_EQ(hex_of(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex_of(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex_of(hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  EXPECT_EQ(hex_of(hmac_sha256(key4, std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Case 5 is published truncated to 128 bits.
  EXPECT_EQ(hex_of(hmac_sha256(std::string(20, '\x0c'), "Test With Truncation")).substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
  EXPECT_EQ(hex_of(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hex_of(hmac_sha256(std::string(131, '\xaa'),
                               "This is a test using a larger than block-size key and a larger than block-size data. "
                               "The key needs to be hashed before being used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

// RFC 5869 appendix A, test cases 1 and 3 (HKDF-SHA256 with and without
// salt and info).
TEST(ClusterHkdf, Rfc5869) {
  std::string salt, info;
  for (int i = 0x00; i <= 0x0c; ++i) salt += static_cast<char>(i);
  for (int i = 0xf0; i <= 0xf9; ++i) info += static_cast<char>(i);
  EXPECT_EQ(hex_of(hkdf_sha256(std::string(22, '\x0b'), salt, info, 42)),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
  EXPECT_EQ(hex_of(hkdf_sha256(std::string(22, '\x0b'), "", "", 42)),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8");
  EXPECT_THROW(hkdf_sha256("k", "", "label", 0), std::invalid_argument);
  EXPECT_THROW(hkdf_sha256("k", "", "label", 255 * 32 + 1), std::invalid_argument);
}

TEST(ClusterRandom, BytesAreFreshAndOfTheAskedLength) {
  EXPECT_EQ(random_bytes(0), "");
  const std::string a = random_bytes(32), b = random_bytes(32);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(random_bytes(100000).size(), 100000u);
}

TEST(ClusterHmac, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "ab"));
  EXPECT_FALSE(constant_time_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
}

// ---------------------------------------------------------------------------
// Handshake.

constexpr const char* secret_text = "correct horse battery staple";

struct Outcome {
  AuthResult at_acceptor, at_joiner;
};

// The whole exchange, through encode()/decode() as on the wire.
Outcome handshake(const Secret& acceptor_secret, const Secret& joiner_secret,
                  const std::string& identity = "worker/b") {
  Acceptor acceptor(acceptor_secret);
  Joiner joiner(joiner_secret, identity);
  const Challenge c = Challenge::decode(acceptor.challenge().encode());
  const JoinResponse r = JoinResponse::decode(joiner.respond(c).encode());
  Outcome o;
  o.at_acceptor = acceptor.verify(r);
  Verdict v;
  v.admitted = o.at_acceptor.ok;
  v.proof = o.at_acceptor.proof;
  o.at_joiner = joiner.verify(Verdict::decode(v.encode()).proof);
  return o;
}

TEST(ClusterHandshake, SameSecretSucceedsBothWays) {
  const Outcome o = handshake(Secret::from_text(secret_text), Secret::from_text(secret_text));
  EXPECT_TRUE(o.at_acceptor.ok) << o.at_acceptor.reason;
  EXPECT_TRUE(o.at_joiner.ok) << o.at_joiner.reason;
  EXPECT_EQ(o.at_acceptor.identity, "worker/b");
  EXPECT_EQ(o.at_acceptor.proof.size(), proof_bytes);
  EXPECT_EQ(o.at_acceptor.session_key.size(), 32u);
  EXPECT_EQ(o.at_acceptor.session_key, o.at_joiner.session_key);
  EXPECT_NE(o.at_acceptor.session_key, o.at_acceptor.proof);
  const Outcome again = handshake(Secret::from_text(secret_text), Secret::from_text(secret_text));
  EXPECT_NE(again.at_acceptor.session_key, o.at_acceptor.session_key);  // per connection
}

TEST(ClusterHandshake, WrongSecretFailsOnBothSidesWithoutRevealingIt) {
  const std::string other = "incorrect horse";
  const Outcome o = handshake(Secret::from_text(secret_text), Secret::from_text(other));
  EXPECT_FALSE(o.at_acceptor.ok);
  EXPECT_FALSE(o.at_joiner.ok);
  EXPECT_NE(o.at_acceptor.reason.find("'worker/b' did not prove the cluster secret"), std::string::npos)
      << o.at_acceptor.reason;
  EXPECT_TRUE(o.at_acceptor.proof.empty());  // nothing to send back
  for (const auto& reason : {o.at_acceptor.reason, o.at_joiner.reason}) {
    EXPECT_FALSE(reason.empty());
    EXPECT_EQ(reason.find(secret_text), std::string::npos) << reason;
    EXPECT_EQ(reason.find(other), std::string::npos) << reason;
  }

  // The joiner also catches an acceptor with a different secret: a fake
  // acceptor that accepts anything but can only sign with its own key.
  Acceptor fake(Secret::from_text(other));
  Joiner joiner(Secret::from_text(secret_text), "worker/c");
  const JoinResponse r = joiner.respond(fake.challenge());
  const std::string forged = accept_proof(other, fake.challenge().nonce, r.nonce, r.identity);
  const AuthResult at_joiner = joiner.verify(forged);
  EXPECT_FALSE(at_joiner.ok);
  EXPECT_NE(at_joiner.reason.find("the acceptor did not prove the cluster secret"), std::string::npos)
      << at_joiner.reason;
  EXPECT_EQ(at_joiner.reason.find(secret_text), std::string::npos);
}

TEST(ClusterHandshake, ReplayedResponseIsRefused) {
  const Secret s = Secret::from_text(secret_text);
  Acceptor first(s);
  Joiner joiner(s, "worker/b");
  const JoinResponse recorded = joiner.respond(first.challenge());
  ASSERT_TRUE(first.verify(recorded).ok);
  // On the same connection: only one verify.
  EXPECT_FALSE(first.verify(recorded).ok);
  // On a new connection the acceptor's nonce differs, so the recording fails.
  Acceptor second(s);
  const AuthResult replay = second.verify(recorded);
  EXPECT_FALSE(replay.ok);
  EXPECT_NE(replay.reason.find("replayed or altered"), std::string::npos) << replay.reason;
}

TEST(ClusterHandshake, TamperedMessagesAreRefused) {
  const Secret s = Secret::from_text(secret_text);
  // Every field of the response, one bit at a time.
  for (int field = 0; field < 3; ++field) {
    Acceptor acceptor(s);
    Joiner joiner(s, "worker/b");
    JoinResponse r = joiner.respond(acceptor.challenge());
    std::string& target = field == 0 ? r.proof : field == 1 ? r.nonce : r.identity;
    target[0] = static_cast<char>(target[0] ^ 1);
    EXPECT_FALSE(acceptor.verify(r).ok) << "field " << field;
  }
  // The acceptor's proof, one bit flipped.
  Acceptor acceptor(s);
  Joiner joiner(s, "worker/b");
  AuthResult a = acceptor.verify(joiner.respond(acceptor.challenge()));
  ASSERT_TRUE(a.ok);
  a.proof[31] = static_cast<char>(a.proof[31] ^ 0x80);
  EXPECT_FALSE(joiner.verify(a.proof).ok);
  // The joiner's own proof reflected back is not the acceptor's proof.
  Acceptor acceptor2(s);
  Joiner joiner2(s, "worker/b");
  const JoinResponse r2 = joiner2.respond(acceptor2.challenge());
  EXPECT_FALSE(joiner2.verify(r2.proof).ok);
}

TEST(ClusterHandshake, FreshNoncesEachTime) {
  const Secret s = Secret::from_text(secret_text);
  std::set<std::string> nonces;
  for (int i = 0; i < 50; ++i) {
    Acceptor acceptor(s);
    Joiner joiner(s, "worker/b");
    const auto& c = acceptor.challenge();
    EXPECT_EQ(c.nonce.size(), nonce_bytes);
    const JoinResponse r = joiner.respond(c);
    EXPECT_EQ(r.nonce.size(), nonce_bytes);
    nonces.insert(c.nonce);
    nonces.insert(r.nonce);
  }
  EXPECT_EQ(nonces.size(), 100u);
}

TEST(ClusterHandshake, SecretOnOneSideOnly) {
  const Outcome joiner_lacks = handshake(Secret::from_text(secret_text), Secret());
  EXPECT_FALSE(joiner_lacks.at_acceptor.ok);
  EXPECT_FALSE(joiner_lacks.at_joiner.ok);
  EXPECT_NE(joiner_lacks.at_acceptor.reason.find("the joiner has none"), std::string::npos)
      << joiner_lacks.at_acceptor.reason;

  const Outcome acceptor_lacks = handshake(Secret(), Secret::from_text(secret_text));
  EXPECT_FALSE(acceptor_lacks.at_acceptor.ok);
  EXPECT_FALSE(acceptor_lacks.at_joiner.ok);
  EXPECT_NE(acceptor_lacks.at_acceptor.reason.find("the acceptor has none"), std::string::npos)
      << acceptor_lacks.at_acceptor.reason;

  // Neither: the handshake agrees there is no secret (loopback only, below).
  const Outcome neither = handshake(Secret(), Secret());
  EXPECT_TRUE(neither.at_acceptor.ok) << neither.at_acceptor.reason;
  EXPECT_TRUE(neither.at_joiner.ok) << neither.at_joiner.reason;
}

// ---------------------------------------------------------------------------
// Clear links (--insecure): the secret still proven, the choice signed.

// The whole exchange with each side's choice of clear links.
Outcome clear_handshake(bool acceptor_clear, bool joiner_clear) {
  const Secret s = Secret::from_text(secret_text);
  Acceptor acceptor(s, acceptor_clear);
  Joiner joiner(s, "worker/b", joiner_clear);
  const JoinResponse r =
      JoinResponse::decode(joiner.respond(Challenge::decode(acceptor.challenge().encode())).encode());
  Outcome o;
  o.at_acceptor = acceptor.verify(r);
  o.at_joiner = joiner.verify(o.at_acceptor.proof);
  return o;
}

TEST(ClusterHandshake, ClearLinksOnBothSidesProveTheSecretWithLabelsOfTheirOwn) {
  const Secret s = Secret::from_text(secret_text);
  Acceptor acceptor(s, true);
  Joiner joiner(s, "worker/b", true);
  EXPECT_TRUE(acceptor.challenge().clear_links);
  const JoinResponse r = joiner.respond(acceptor.challenge());
  EXPECT_TRUE(r.clear_links);
  EXPECT_EQ(r.proof, join_proof(secret_text, acceptor.challenge().nonce, r.nonce, "worker/b", true));
  EXPECT_NE(r.proof, join_proof(secret_text, acceptor.challenge().nonce, r.nonce, "worker/b", false));
  const AuthResult a = acceptor.verify(r);
  ASSERT_TRUE(a.ok) << a.reason;
  EXPECT_EQ(a.proof, accept_proof(secret_text, acceptor.challenge().nonce, r.nonce, "worker/b", true));
  const AuthResult j = joiner.verify(a.proof);
  ASSERT_TRUE(j.ok) << j.reason;
  EXPECT_EQ(a.session_key, j.session_key);
}

TEST(ClusterHandshake, ClearLinksOnOneSideOnlyAreRefusedNamingBoth) {
  const Outcome acceptor_clear = clear_handshake(true, false);
  EXPECT_FALSE(acceptor_clear.at_acceptor.ok);
  EXPECT_FALSE(acceptor_clear.at_joiner.ok);
  EXPECT_NE(acceptor_clear.at_joiner.reason.find("the acceptor runs with --insecure (its links unsealed after the "
                                                 "handshake) and this node seals its links"),
            std::string::npos)
      << acceptor_clear.at_joiner.reason;
  EXPECT_NE(
      acceptor_clear.at_acceptor.reason.find("'worker/b' refused the handshake: the acceptor runs with --insecure"),
      std::string::npos)
      << acceptor_clear.at_acceptor.reason;

  const Outcome joiner_clear = clear_handshake(false, true);
  EXPECT_FALSE(joiner_clear.at_acceptor.ok);
  EXPECT_FALSE(joiner_clear.at_joiner.ok);
  EXPECT_NE(joiner_clear.at_joiner.reason.find("the acceptor seals its links and this node runs with --insecure"),
            std::string::npos)
      << joiner_clear.at_joiner.reason;
  for (const auto& o : {acceptor_clear, joiner_clear})
    for (const auto& reason : {o.at_acceptor.reason, o.at_joiner.reason})
      EXPECT_NE(reason.find("every node of a cluster must agree"), std::string::npos) << reason;
}

// A man in the middle who flips the stated choice, so that each end sees
// its own, cannot make a sealed end accept clear links: the proofs are
// made with the labels of each end's own choice, and they do not match.
TEST(ClusterHandshake, AFlippedClearLinksFlagFailsTheProofs) {
  const Secret s = Secret::from_text(secret_text);
  for (const bool acceptor_clear : {false, true}) {
    Acceptor acceptor(s, acceptor_clear);
    Joiner joiner(s, "worker/b", !acceptor_clear);
    Challenge c = acceptor.challenge();
    c.clear_links = !c.clear_links;  // the joiner sees its own choice
    JoinResponse r = joiner.respond(c);
    ASSERT_TRUE(r.error.empty()) << r.error;
    r.clear_links = !r.clear_links;  // the acceptor sees its own choice
    const AuthResult a = acceptor.verify(r);
    EXPECT_FALSE(a.ok) << "acceptor clear: " << acceptor_clear;
    EXPECT_NE(a.reason.find("did not prove the cluster secret"), std::string::npos) << a.reason;
    EXPECT_FALSE(joiner.verify(a.proof).ok);
  }
}

TEST(ClusterHandshake, ClearLinksNeedASecret) {
  for (const bool acceptor : {true, false}) {
    try {
      if (acceptor)
        Acceptor a(Secret(), true);
      else
        Joiner j(Secret(), "worker/b", true);
      ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--insecure needs a cluster secret"), std::string::npos) << e.what();
    }
  }
}

// What decode() throws as std::invalid_argument, or "" when it returns.
template <typename F>
std::string refusal_of(F&& decode) {
  try {
    decode();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

TEST(ClusterHandshake, EveryMessageRoundTrips) {
  Challenge c;
  c.has_secret = true;
  c.nonce = std::string(nonce_bytes, '\0');  // raw bytes, NULs included
  c.nonce[5] = '\xff';
  c.clear_links = true;
  const Challenge c2 = Challenge::decode(c.encode());
  EXPECT_EQ(c2.has_secret, c.has_secret);
  EXPECT_EQ(c2.nonce, c.nonce);
  EXPECT_TRUE(c2.clear_links);
  EXPECT_FALSE(Challenge::decode(Challenge().encode()).clear_links);

  JoinResponse r;
  r.has_secret = true;
  r.nonce = std::string(nonce_bytes, '\x7f');
  r.identity = "worker/host-b:5555";
  r.proof = std::string(proof_bytes, '\0');
  r.error = "";
  r.troupe_version = "0.1.0";
  r.clear_links = true;
  const JoinResponse r2 = JoinResponse::decode(r.encode());
  EXPECT_TRUE(r2.clear_links);
  EXPECT_EQ(r2.has_secret, r.has_secret);
  EXPECT_EQ(r2.nonce, r.nonce);
  EXPECT_EQ(r2.identity, r.identity);
  EXPECT_EQ(r2.proof, r.proof);
  EXPECT_EQ(r2.error, r.error);
  EXPECT_EQ(r2.troupe_version, r.troupe_version);

  for (const bool admitted : {true, false}) {
    Verdict v;
    v.admitted = admitted;
    v.identity = "coordinator";
    (admitted ? v.proof : v.reason) = admitted ? std::string(proof_bytes, '\x01') : "the job has started";
    const Verdict v2 = Verdict::decode(v.encode());
    EXPECT_EQ(v2.admitted, v.admitted);
    EXPECT_EQ(v2.identity, v.identity);
    EXPECT_EQ(v2.proof, v.proof);
    EXPECT_EQ(v2.reason, v.reason);
  }
}

TEST(ClusterHandshake, DecodeNamesWhatIsWrong) {
  Acceptor acceptor(Secret::from_text(secret_text));
  const std::string challenge = acceptor.challenge().encode();
  // Every truncation.
  for (std::size_t n = 0; n < challenge.size(); ++n)
    EXPECT_NE(refusal_of([&] { Challenge::decode(challenge.substr(0, n)); }), "") << n;
  // Another kind of message.
  EXPECT_NE(refusal_of([&] {
              Verdict::decode(challenge);
            }).find("malformed handshake verdict: a handshake challenge instead"),
            std::string::npos);
  // Over the bound: refused on its size alone.
  const std::string big(kMaxAuthMessageBytes + 8, '\0');
  EXPECT_NE(refusal_of([&] { JoinResponse::decode(big); }).find("a message of 4104 bytes"), std::string::npos);
  // Another protocol: the message's first data word starts with the
  // protocol (after an 8-byte segment table and the 8-byte root pointer).
  std::string other = challenge;
  ASSERT_EQ(static_cast<unsigned char>(other[16]), kAuthProtocol);
  other[16] = 1;
  EXPECT_NE(refusal_of([&] {
              Challenge::decode(other);
            }).find("malformed handshake challenge: handshake protocol 1, this node speaks 2"),
            std::string::npos)
      << refusal_of([&] { Challenge::decode(other); });
  // An all-zero message (a null root) says nothing.
  const std::string empty("\0\0\0\0\x01\0\0\0\0\0\0\0\0\0\0\0", 16);
  EXPECT_NE(refusal_of([&] { Challenge::decode(empty); }).find("handshake protocol 0"), std::string::npos);
  // Garbage of a well-formed size.
  EXPECT_NE(refusal_of([&] { JoinResponse::decode(std::string(64, '\xff')); }), "");
}

TEST(ClusterHandshake, MalformedMessagesAreRejected) {
  Acceptor acceptor(Secret::from_text(secret_text));
  const std::string wire = acceptor.challenge().encode();
  EXPECT_THROW(Challenge::decode(wire.substr(0, wire.size() - 1)), std::invalid_argument);
  EXPECT_THROW(Challenge::decode(wire + "x"), std::invalid_argument);
  EXPECT_THROW(Challenge::decode("XXXX"), std::invalid_argument);
  EXPECT_THROW(JoinResponse::decode(wire), std::invalid_argument);  // a challenge is not a response
  try {
    Challenge::decode(wire.substr(0, 10));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("malformed handshake challenge: a message of 10 bytes"), std::string::npos)
        << e.what();
  }
  // A short nonce from the joiner.
  JoinResponse r;
  r.has_secret = true;
  r.nonce = "short";
  r.identity = "worker/b";
  r.proof = std::string(32, 'x');
  const AuthResult a = acceptor.verify(r);
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.reason.find("nonce of 5 bytes"), std::string::npos) << a.reason;
}

// ---------------------------------------------------------------------------
// Secret files.

class ClusterSecretFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/troupe-secret-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const auto& p : files_) ::unlink(p.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string write(const std::string& name, const std::string& content, mode_t mode = 0600) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    ::chmod(path.c_str(), mode);
    files_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(ClusterSecretFile, MissingFileNamesThePath) {
  std::ostringstream warnings;
  try {
    Secret::from_file(dir_ + "/nope", warnings);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(dir_ + "/nope': cannot open"), std::string::npos) << e.what();
  }
}

TEST_F(ClusterSecretFile, OnlyASmallRegularFile) {
  std::ostringstream warnings;
  for (const std::string& path : {std::string("/dev/zero"), dir_}) {
    try {
      Secret::from_file(path, warnings);
      ADD_FAILURE() << path << " was read as a secret";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("secret file '" + path + "' is a "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("expected a regular file of at most 64 KiB"), std::string::npos) << e.what();
    }
  }
  try {
    Secret::from_file(write("huge", std::string((64 << 10) + 1, 'k')), warnings);
    ADD_FAILURE() << "a 64 KiB + 1 byte secret was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("holds 65537 bytes, more than the limit of 64 KiB"), std::string::npos)
        << e.what();
  }
}

TEST_F(ClusterSecretFile, EmptyFileIsRefused) {
  std::ostringstream warnings;
  EXPECT_THROW(Secret::from_file(write("empty", ""), warnings), std::runtime_error);
  EXPECT_THROW(Secret::from_file(write("newline", "\n"), warnings), std::runtime_error);
  EXPECT_THROW(Secret::from_text(""), std::invalid_argument);
}

TEST_F(ClusterSecretFile, OneTrailingNewlineIsStripped) {
  std::ostringstream warnings;
  const Secret plain = Secret::from_text("s3cret");
  // "s3cret\n" (echo) and "s3cret\r\n" are the same secret as "s3cret" ...
  for (const char* content : {"s3cret", "s3cret\n", "s3cret\r\n"}) {
    const Secret from_file = Secret::from_file(write("a", content), warnings);
    ASSERT_TRUE(from_file.configured());
    EXPECT_TRUE(handshake(from_file, plain).at_acceptor.ok) << content;
  }
  // ... but only one newline is stripped.
  const Secret two = Secret::from_file(write("b", "s3cret\n\n"), warnings);
  EXPECT_FALSE(handshake(two, plain).at_acceptor.ok);
  EXPECT_EQ(warnings.str(), "");
  EXPECT_EQ(two.origin(), "file " + dir_ + "/b");
}

TEST_F(ClusterSecretFile, WarnsWhenGroupOrOthersCanRead) {
  std::ostringstream quiet, loud, group;
  Secret::from_file(write("private", "x", 0600), quiet);
  EXPECT_EQ(quiet.str(), "");
  const std::string path = write("public", "x", 0644);
  Secret::from_file(path, loud);
  EXPECT_NE(loud.str().find("warning: secret file '" + path + "' has mode 0644"), std::string::npos) << loud.str();
  EXPECT_NE(loud.str().find("chmod 600"), std::string::npos);
  Secret::from_file(write("group", "x", 0640), group);
  EXPECT_NE(group.str().find("0640"), std::string::npos) << group.str();
}

TEST_F(ClusterSecretFile, LoadPrefersTheFileThenTheEnvironment) {
  std::ostringstream warnings;
  ::unsetenv("TROUPE_SECRET");
  EXPECT_FALSE(Secret::load("", warnings).configured());
  EXPECT_EQ(Secret::load("", warnings).origin(), "none");
  ::setenv("TROUPE_SECRET", "from-env", 1);
  const Secret env = Secret::load("", warnings);
  EXPECT_TRUE(env.configured());
  EXPECT_EQ(env.origin(), "TROUPE_SECRET");
  EXPECT_TRUE(handshake(env, Secret::from_text("from-env")).at_acceptor.ok);
  const Secret file = Secret::load(write("f", "from-file\n"), warnings);
  EXPECT_EQ(file.origin(), "file " + dir_ + "/f");
  EXPECT_TRUE(handshake(file, Secret::from_text("from-file")).at_acceptor.ok);
  ::setenv("TROUPE_SECRET", "", 1);
  EXPECT_THROW(Secret::load("", warnings), std::runtime_error);
  ::unsetenv("TROUPE_SECRET");
}

// ---------------------------------------------------------------------------
// Loopback.

TEST(ClusterLoopback, Addresses) {
  for (const char* yes : {"127.0.0.1", "127.255.3.4", "::1", "[::1]", "0:0:0:0:0:0:0:1", "localhost", "LocalHost",
                          "localhost.", "::ffff:127.0.0.1"})
    EXPECT_TRUE(is_loopback(yes)) << yes;
  for (const char* no : {"128.0.0.1", "10.0.0.1", "0.0.0.0", "::", "::2", "[::2]", "::ffff:10.0.0.1",
                         "localhost.example.com", "mylocalhost", "127.0.0.1.nip.io", "", "host-a"})
    EXPECT_FALSE(is_loopback(no)) << no;
}

TEST(ClusterLoopback, PeerRefusalWithoutSecret) {
  EXPECT_EQ(peer_refusal(Secret(), "127.0.0.1"), "");
  const std::string reason = peer_refusal(Secret(), "10.1.2.3");
  EXPECT_NE(reason.find("refusing peer 10.1.2.3"), std::string::npos) << reason;
  EXPECT_EQ(peer_refusal(Secret::from_text("x"), "10.1.2.3"), "");
}

}  // namespace
}  // namespace troupe::net
