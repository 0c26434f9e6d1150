// One Cap'n Proto message as bytes, both ways, for every small message
// troupe reads from a peer: the data-plane frame header (frame.capnp) and
// the handshakes (handshake.capnp). The bytes are what follows a message's
// length prefix; the prefix itself belongs to the transport (net/transport/socket.hpp,
// net/cluster/gate.cpp), which checks it against the same bound first.
//
// Why a reader of its own: these messages come from peers that may not be
// troupe at all, so reading one must never allocate from a length the peer
// chose, loop, or read past the bytes. read_message checks the size before
// anything else, copies the words into a fixed buffer on the stack (the
// reader needs them aligned), and reads with a traversal limit of the
// message's bound; whatever Cap'n Proto finds wrong becomes a
// MalformedMessage naming it.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

namespace troupe::net::schema {

// The largest message read_message takes: the gate's frames (4 KiB).
constexpr std::size_t kMaxMessageBytes = 4096;

struct MalformedMessage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// capnp::messageToFlatArray's bytes.
std::string message_bytes(capnp::MessageBuilder& message);

// Throws MalformedMessage unless `bytes` is a whole, non-zero number of
// words and at most `max_bytes` (itself at most kMaxMessageBytes).
void check_message_size(std::size_t bytes, std::size_t max_bytes);

// Reads the message of `bytes` bytes at `data` and returns read(root), its
// Root::Reader. Throws MalformedMessage for a size check_message_size
// refuses, a segment table that does not match the bytes (bytes after the
// message included), and anything Cap'n Proto refuses while `read` runs
// (a pointer out of bounds, the traversal limit, a Text without its NUL).
template <typename Root, typename Read>
auto read_message(const void* data, std::size_t bytes, std::size_t max_bytes, Read&& read) {
  check_message_size(bytes, max_bytes);
  std::array<capnp::word, kMaxMessageBytes / sizeof(capnp::word)> words;
  std::memcpy(words.data(), data, bytes);
  const auto message = kj::arrayPtr(words.data(), bytes / sizeof(capnp::word));
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = max_bytes / sizeof(capnp::word);
    options.nestingLimit = 8;
    capnp::FlatArrayMessageReader reader(message, options);
    if (reader.getEnd() != message.end())
      throw MalformedMessage(std::to_string((message.end() - reader.getEnd()) * sizeof(capnp::word)) +
                             " bytes after the message");
    return read(reader.getRoot<Root>());
  } catch (const kj::Exception& e) {
    throw MalformedMessage(std::string("not a readable Cap'n Proto message: ") + e.getDescription().cStr());
  }
}

}  // namespace troupe::net::schema
