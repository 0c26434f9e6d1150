# The tcp collective backend's data-plane frame header (net/tcp/).
#
# On the wire a frame is
#
#   u32 little-endian  headerBytes   (a multiple of 8, at most 1024)
#   headerBytes        one unpacked Cap'n Proto message, root FrameHeader
#                      (segment table + segments, as capnp::messageToFlatArray)
#   length bytes       the raw payload (floats or bytes of the tensor)
#
# The payload stays raw after the header (shared/DESIGN.md, "Wire and file
# formats"), so a 64 MB bucket is never copied into a message builder. The
# receiver always knows which frame it expects next: it reads the header with
# its own small traversal limit, checks every field against what it expects,
# and reads exactly the expected number of payload bytes; a `length` that
# differs is an error, never an allocation size.
#
# Compatibility: fields are only added, with the next free ordinal. A change
# an older peer would misread bumps the protocol version of the handshake
# (net/tcp/wire.hpp, kProtocolVersion).

@0xa6fa906407dec0b1;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::net::schema");

enum OpKind {
  allreduce @0;
  broadcast @1;
  reduceScatter @2;
  allgather @3;
  barrier @4;
  send @5;       # point-to-point send/recv
}

struct FrameHeader {
  jobId @0 :UInt64;       # the job both ends belong to (from the handshake)
  kind @1 :OpKind;
  opSeq @2 :UInt64;       # the collective's number in its group; the tag for send
  totalBytes @3 :UInt64;  # the operation's whole buffer, to catch mismatched ops
  step @4 :UInt32;        # ring step (reduce-scatter steps, then all-gather steps)
  chunk @5 :UInt32;       # chunk index inside the step's segment
  length @6 :UInt64;      # payload bytes after this header
  crc32c @7 :UInt32;      # CRC-32C (Castagnoli) of the payload
}
