// The Hello that opens every data-plane connection (the tcp ring's, and the
// parameter server's push link's), right after connect and the optional
// authentication hook: net/schema/handshake.capnp's struct Hello framed as
// every small message is,
//
//   u32 little-endian length (a multiple of 8, at most kMaxHelloBytes)
//   that many bytes: one unpacked Cap'n Proto message, root Hello
//     purpose (ring, push link), version, job id, sender rank, world
//
// (sealed, the length and message are one record). A length over
// kMaxHelloBytes is refused before anything more is read, so a peer that is
// not troupe (an HTTP client, a port scanner) costs nothing. What the fields
// must be is the receiver's to check (net/tcp/ring_setup.cpp: purpose ring,
// kProtocolVersion, the job, its predecessor's rank, the world;
// net/push/push_link.cpp: purpose push link, its own version, the job).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "net/transport/socket.hpp"

namespace troupe::net::wire {

class RecordSealer;  // sealed.hpp
class RecordOpener;

// The largest Hello a receiver reads (and its traversal limit): today's is
// 32 bytes; the rest is room for fields a later version adds.
constexpr std::size_t kMaxHelloBytes = 256;

// What a Hello opens (schema::Purpose's numbers; a peer may send any).
enum class Purpose : std::uint16_t { unset = 0, ring = 1, push_link = 2 };
// "ring", "push link", "unset", "unknown purpose 9".
std::string purpose_name(Purpose purpose);

// The fields of schema::Hello.
struct Hello {
  // No defaults that belong to one purpose: each sender says what it opens
  // and its own protocol's version (the ring's kProtocolVersion,
  // push_wire::kVersion), and a receiver refuses an unset purpose.
  Purpose purpose = Purpose::unset;
  std::uint16_t version = 0;
  std::uint64_t job_id = 0;
  std::uint32_t rank = 0;
  std::uint32_t world = 0;
};
// The length prefix and the message, ready to send.
std::vector<unsigned char> encode_hello(const Hello& hello);
// The message length a Hello's prefix announces; throws std::runtime_error
// when it is more than kMaxHelloBytes (read nothing more then).
std::size_t hello_length(const unsigned char prefix[kLengthPrefixBytes]);
// Parses a Hello message of `bytes` bytes (what follows its prefix); throws
// std::runtime_error saying what is wrong. Checks the form only: what the
// fields must be is the receiver's (ring_setup.cpp, push_link.cpp).
Hello decode_hello(const void* data, std::size_t bytes);
// As decode_hello for a whole Hello, prefix included (an opened record):
// the prefix must announce exactly the bytes after it.
Hello decode_framed_hello(const void* data, std::size_t bytes);
// A Hello over a connected non-blocking socket, in one record when sealed
// (a null sealer or opener: plaintext). read_hello throws IoError as
// read_all, std::runtime_error for a Hello decode_framed_hello refuses, and
// what RecordOpener::read throws.
void write_hello(int fd, RecordSealer* sealer, const Hello& hello, Deadline deadline);
Hello read_hello(int fd, RecordOpener* opener, Deadline deadline);

}  // namespace troupe::net::wire
