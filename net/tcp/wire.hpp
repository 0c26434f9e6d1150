// The tcp ring's frames (net/tcp/tcp.hpp), exposed for the tests, which play
// a peer with raw sockets. A ring connection opens with a Hello (purpose
// ring, version kProtocolVersion; net/transport/hello.hpp) each way: the
// connecting rank (r) sends its own; the accepting rank (r+1) checks
// purpose, version, job id, rank == its predecessor and world, and answers
// with its own, which the connecting rank checks the same way.
//
// Frames: see net/schema/frame.capnp. After a send frame the receiver answers
// on the same connection with an 8-byte Ack (u32 magic 'TACK', i32 tag).
// The sockets under them: net/transport/socket.hpp; sealed records:
// net/transport/sealed.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "net/transport/hello.hpp"
#include "net/transport/socket.hpp"
#include "util/crc32c.hpp"

namespace troupe::net::wire {

// 2: the Hello became a Cap'n Proto message (it was 24 fixed bytes).
// 3: on a sealed link a frame's payload may travel in records of
//    kRingRecordBytes (a sender with seal helpers), so that several
//    threads can seal and open one frame; it was always one record.
// 4: those records ramp up from kRingRecordBytes / 8 and down again at the
//    payload's end (wire::split_records), and each is sent as soon as it
//    is sealed.
constexpr std::uint16_t kProtocolVersion = 4;
// The largest record of a sealed frame payload: a 1 MiB chunk is 9
// (32, 64, 128, 256, 64, 256, 128, 64, 32 KiB).
constexpr std::size_t kRingRecordBytes = std::size_t{256} << 10;
constexpr std::uint32_t kAckMagic = 0x4b434154;  // "TACK"
constexpr std::size_t kAckBytes = 8;
// The largest frame header a receiver reads (and its traversal limit).
constexpr std::size_t kMaxHeaderBytes = 1024;

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

}  // namespace troupe::net::wire
