// The tcp backend's wire format and its deadline-bounded socket I/O.
// Exposed for the tests, which play a peer with raw sockets.
//
// Handshake (both directions, right after connect and the optional
// authentication hook): a Hello, net/schema/handshake.capnp's struct Hello
// framed as every small message is,
//
//   u32 little-endian length (a multiple of 8, at most kMaxHelloBytes)
//   that many bytes: one unpacked Cap'n Proto message, root Hello
//     purpose (ring), version (kProtocolVersion), job id, sender rank, world
//
// (sealed, the length and message are one record). The connecting rank (r)
// sends its Hello; the accepting rank (r+1) checks purpose, version, job id,
// rank == its predecessor and world, and answers with its own Hello, which
// the connecting rank checks the same way. A length over kMaxHelloBytes is
// refused before anything more is read, so a peer that is not troupe (an
// HTTP client, a port scanner) costs nothing. The parameter server's push
// link (actors/ps/push_link.hpp) greets with the same Hello, purpose
// pushLink.
//
// Frames: see net/schema/frame.capnp. After a send frame the receiver answers
// on the same connection with an 8-byte Ack (u32 magic 'TACK', i32 tag).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "net/collective/collective.hpp"
#include "util/crc32c.hpp"

namespace troupe::net::wire {

class RecordSealer;  // sealed.hpp
class RecordOpener;

// Little-endian integers in frame headers (wire frames here, push frames in
// actors/ps/push_link.cpp).
inline void put_u16(unsigned char* p, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void put_u32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void put_u64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::uint64_t get_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// 2: the Hello became a Cap'n Proto message (it was 24 fixed bytes).
constexpr std::uint16_t kProtocolVersion = 2;
constexpr std::uint32_t kAckMagic = 0x4b434154;  // "TACK"
constexpr std::size_t kAckBytes = 8;
// The u32 little-endian length before a Hello or a frame header.
constexpr std::size_t kLengthPrefixBytes = 4;
// The largest frame header a receiver reads (and its traversal limit).
constexpr std::size_t kMaxHeaderBytes = 1024;
// The largest Hello a receiver reads (and its traversal limit): today's is
// 32 bytes; the rest is room for fields a later version adds.
constexpr std::size_t kMaxHelloBytes = 256;

// What a Hello opens (schema::Purpose's numbers; a peer may send any).
enum class Purpose : std::uint16_t { unset = 0, ring = 1, push_link = 2 };
// "ring", "push link", "unset", "unknown purpose 9".
std::string purpose_name(Purpose purpose);

// The fields of schema::Hello.
struct Hello {
  Purpose purpose = Purpose::ring;
  std::uint16_t version = kProtocolVersion;
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

// The fields of schema::FrameHeader (kind as its enum's number).
struct FrameFields {
  std::uint64_t job_id = 0;
  std::uint16_t kind = 0;
  std::uint64_t op_seq = 0;
  std::uint64_t total_bytes = 0;
  std::uint32_t step = 0;
  std::uint32_t chunk = 0;
  std::uint64_t length = 0;
  std::uint32_t crc32c = 0;
};
// The length prefix and the Cap'n Proto header, ready to write before the
// payload.
std::vector<unsigned char> encode_frame_header(const FrameFields& fields);
// Parses a header of `bytes` bytes (already length-checked); throws
// std::runtime_error saying what is wrong.
FrameFields decode_frame_header(const void* data, std::size_t bytes);

// CRC-32C (Castagnoli), with SSE4.2 where the CPU has it (util/crc32c.hpp).
using util::crc32c;

// A failed socket operation. `timed_out` when the deadline passed first.
struct IoError : std::runtime_error {
  IoError(const std::string& what, bool timed_out_)
      : std::runtime_error(what), timed_out(timed_out_) {}
  bool timed_out;
};

// On a non-blocking socket, bounded by `deadline`; throw IoError ("end of
// stream", "connection reset by peer", "timed out").
void write_all(int fd, const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes,
               Deadline deadline);
void read_all(int fd, void* data, std::size_t bytes, Deadline deadline);

// "host:port" -> a connected non-blocking socket, retrying while nothing
// listens, until `deadline` (IoError). Sets TCP_NODELAY.
int connect_tcp(const std::string& address, Deadline deadline);
// Makes fd non-blocking with TCP_NODELAY.
void prepare_socket(int fd);
// "127.0.0.1:45678" for the peer of a connected socket.
std::string peer_address(int fd);
// strerror, with the words a reader of a socket error wants for ECONNRESET
// and EPIPE.
std::string errno_text(int err);

}  // namespace troupe::net::wire
