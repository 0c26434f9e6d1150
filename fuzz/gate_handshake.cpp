// The gate handshake (net/cluster/gate.hpp, auth.hpp), both ends, on a real
// loopback TCP connection: the harness plays the peer, sends the input and
// closes its side; accept_handshake or join_handshake (with or without a
// cluster secret, by the first byte) reads it under a short deadline.
// The handshake messages' own decoders (Challenge::decode,
// JoinResponse::decode, Verdict::decode: Cap'n Proto AuthMessages) are also
// fed the input directly.
//
// Properties: the handshakes never throw and never crash; a verdict is
// reached only after whole frames, and neither end reads a byte past the
// handshake (what follows the frames it read is still in the socket, as
// gate.hpp promises so that the socket can be spliced); an acceptor with a
// secret never admits (the input cannot hold a valid proof); no keys come
// without a secret or with clear links (--insecure, mode bit 8); a decoded
// message encodes back to bytes that decode to the same message.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_support.hpp"
#include "net/cluster/auth.hpp"
#include "net/cluster/gate.hpp"
#include "net/tcp/tcp.hpp"
#include "net/tcp/wire.hpp"

using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

std::uint32_t le32(std::string_view s, std::size_t at) {
  if (s.size() < at + 4) return 0xffffffffu;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + at);
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
}

// Bytes taken by the first `frames` frames of `s` (each a 4-byte
// little-endian length and that many bytes), or npos when they are not all
// there.
std::size_t frames_end(std::string_view s, int frames) {
  std::size_t at = 0;
  for (int i = 0; i < frames; ++i) {
    const std::uint32_t n = le32(s, at);
    if (n > kGateMaxFrameBytes || s.size() < at + 4 + n) return std::string_view::npos;
    at += 4 + n;
  }
  return at;
}

void decoders(std::string_view bytes) {
  try {
    const Challenge c = Challenge::decode(bytes);
    const Challenge d = Challenge::decode(c.encode());
    TROUPE_FUZZ_CHECK(c.has_secret == d.has_secret && c.nonce == d.nonce && c.clear_links == d.clear_links,
                      "Challenge round trip");
  } catch (const std::invalid_argument&) {}
  try {
    const JoinResponse r = JoinResponse::decode(bytes);
    const JoinResponse s = JoinResponse::decode(r.encode());
    TROUPE_FUZZ_CHECK(r.has_secret == s.has_secret && r.nonce == s.nonce && r.identity == s.identity &&
                          r.proof == s.proof && r.error == s.error && r.troupe_version == s.troupe_version &&
                          r.clear_links == s.clear_links,
                      "JoinResponse round trip");
  } catch (const std::invalid_argument&) {}
  try {
    const Verdict v = Verdict::decode(bytes);
    const Verdict w = Verdict::decode(v.encode());
    TROUPE_FUZZ_CHECK(
        v.admitted == w.admitted && v.identity == w.identity && v.proof == w.proof && v.reason == w.reason,
        "Verdict round trip");
  } catch (const std::invalid_argument&) {}
}

struct Loopback {
  int listen_fd = -1;
  std::string address;
  Loopback() {
    std::uint16_t port = 0;
    listen_fd = listen_tcp("127.0.0.1:0", &port);
    address = "127.0.0.1:" + std::to_string(port);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static Loopback loopback;
  troupe::fuzz::Input in(data, size);
  const std::uint8_t mode = in.byte();
  const std::string_view peer_bytes = in.rest();
  decoders(peer_bytes);

  const bool accepting = (mode & 1) == 0;
  const bool with_secret = (mode & 2) == 0;
  HandshakeConfig config;
  if (with_secret) config.secret = Secret::from_text("fuzz secret");
  config.clear_links = with_secret && (mode & 8);  // --insecure
  config.version = "0.1.0";
  config.identity = accepting ? "coordinator" : "worker/fuzz";

  // A connected pair on loopback: `peer` is the harness's end.
  const int peer = wire::connect_tcp(loopback.address, Clock::now() + 5s);
  troupe::fuzz::wait_for_fd(loopback.listen_fd, POLLIN, 5000);
  const int fd = ::accept(loopback.listen_fd, nullptr, nullptr);
  if (fd < 0) troupe::fuzz::fail("accept failed");
  wire::prepare_socket(fd);
  wire::write_all(peer, peer_bytes.data(), peer_bytes.size(), nullptr, 0, Clock::now() + 5s);
  ::shutdown(peer, SHUT_WR);

  const AdmitHook admit = [&](const std::string& identity) -> std::string {
    return (mode & 4) && identity.size() % 2 ? "the job has started" : "";
  };
  const HandshakeResult r = accepting ? accept_handshake(fd, config, Clock::now() + 200ms, admit)
                                      : join_handshake(fd, config, Clock::now() + 200ms);
  if (accepting && with_secret) TROUPE_FUZZ_CHECK(!r.ok, "the acceptor admitted a peer without the secret");
  TROUPE_FUZZ_CHECK(!r.keys.protects() || (with_secret && !config.clear_links),
                    "link keys from a handshake without a secret or with clear links");
  if (r.verdict) {
    // The acceptor read one frame, the joiner two; the rest is unread.
    const std::size_t used = frames_end(peer_bytes, accepting ? 1 : 2);
    TROUPE_FUZZ_CHECK(used != std::string_view::npos, "a verdict without whole frames: " + r.reason);
    std::string left(peer_bytes.size() - used + 1, '\0');
    std::size_t got = 0;
    for (;;) {
      const ssize_t k = ::recv(fd, left.data() + got, left.size() - got, MSG_DONTWAIT);
      if (k > 0) {
        got += static_cast<std::size_t>(k);
        continue;
      }
      if (k == 0) break;  // the peer's end of stream: everything was read
      if (!troupe::fuzz::wait_for_fd(fd, POLLIN, 1000)) break;
    }
    left.resize(got);
    TROUPE_FUZZ_CHECK(left == peer_bytes.substr(used), "the handshake read past its frames");
  }
  troupe::fuzz::close_with_reset(fd);
  troupe::fuzz::close_with_reset(peer);
  return 0;
}
