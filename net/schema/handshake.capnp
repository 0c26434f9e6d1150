# The handshake messages of troupe's connections between nodes: the Hello
# that opens a data-plane link (the tcp ring, net/tcp/ring_setup.cpp, and the
# parameter server's push link, net/push/push_link.cpp) and the cluster
# handshake's messages on the gate (net/cluster/auth.hpp, gate.hpp).
#
# On the wire each message is framed as a data-plane frame header is
# (frame.capnp):
#
#   u32 little-endian  messageBytes  (a multiple of 8; at most 256 for a
#                                     Hello, 4096 for an AuthMessage)
#   messageBytes       one unpacked Cap'n Proto message (segment table and
#                      segments, as capnp::messageToFlatArray)
#
# The receiver refuses a length over the bound before it reads or allocates
# anything, reads the message with a traversal limit of that bound, and
# checks every field against what it expects (net/schema/message.hpp), so
# bytes from something that is not a troupe peer fail with a message naming
# what differs, never a large allocation.
#
# Compatibility: fields are only added, with the next free ordinal, so an
# older reader ignores them. What an older peer would misread bumps the
# version of its protocol (Hello.version; AuthMessage.protocol).

@0xa7169cde06258258;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::net::schema");

# What a Hello opens. Takes the place of the old 4-byte magics ('TRPD',
# 'TPSH'): a peer of the other kind, or one whose message says nothing
# (all zero: `unset`), is refused by name.
enum Purpose {
  unset @0;
  ring @1;       # a tcp collective ring (net/tcp/wire.hpp, kProtocolVersion)
  pushLink @2;   # a parameter-server push link (net/push/push_link.hpp, push_wire::kVersion)
}

# Both ends send one, right after the connection is authenticated (sealed in
# one record when the authentication gave keys); each checks the other's.
struct Hello {
  purpose @0 :Purpose;
  version @1 :UInt16;   # the purpose's protocol version; must be equal
  jobId @2 :UInt64;     # the job (for a ring: of its view) both ends belong to
  rank @3 :UInt32;      # the sender's rank in the ring (0 on a push link)
  world @4 :UInt32;     # the ring's size (0 on a push link)
}

# The cluster handshake (net/cluster/auth.hpp): every frame on the gate
# until its verdict is one AuthMessage.
struct AuthMessage {
  protocol @0 :UInt16;  # auth.hpp's kAuthProtocol; must be equal
  union {
    unset @1 :Void;                # all zero: not a handshake message
    challenge @2 :Challenge;       # acceptor -> joiner
    response @3 :JoinResponse;     # joiner -> acceptor
    verdict @4 :Verdict;           # acceptor -> joiner
  }
}

struct Challenge {
  hasSecret @0 :Bool;   # whether the acceptor requires the cluster secret
  nonce @1 :Data;       # nonce_a: 32 bytes with a secret, else empty
  clearLinks @2 :Bool;  # the acceptor leaves its links unsealed after the handshake (--insecure)
}

struct JoinResponse {
  hasSecret @0 :Bool;   # whether the joiner has a secret
  nonce @1 :Data;       # nonce_j
  identity @2 :Text;    # "ROLE/NAME"
  proof @3 :Data;       # proof_j (auth.hpp says what it signs)
  error @4 :Text;       # set when the joiner refuses the challenge
  troupeVersion @5 :Text;  # the joiner's troupe build; the gate admits only its own
  clearLinks @6 :Bool;  # the joiner leaves its links unsealed after the handshake (--insecure)
}

struct Verdict {
  admitted @0 :Bool;
  identity @1 :Text;    # the acceptor's identity ("coordinator")
  proof @2 :Data;       # admitted: proof_a, the acceptor's proof of the secret
  reason @3 :Text;      # refused: why, for the joiner's error message
}
