// The `tcp` collective backend: the data plane between hosts (DESIGN.md,
// "Control plane and data plane are separate"). One TcpGroup per process,
// ranks connected in a ring: rank r connects to rank r+1 (mod W) and accepts
// from rank r-1. Every operation travels around that ring in frames (a
// length-prefixed Cap'n Proto header, net/schema/frame.capnp, then the raw
// payload; net/tcp/wire.hpp).
//
// Operations:
//   allreduce       ring reduce-scatter then ring all-gather, W-1 steps each,
//                   in chunks of TcpGroupConfig::chunk_bytes, pipelined (see
//                   Threading). Rank r reduces segment r: its sum is computed
//                   once, scaled for mean, and then only copied, so every
//                   rank ends bitwise identical.
//   reduce_scatter  the reduce-scatter half on a copy of the input.
//   allgather       the all-gather half.
//   broadcast       a chunked pipeline along the ring from the root.
//   barrier         an all-gather of one word per rank (after W-1 steps every
//                   rank has heard from every other).
//   send/recv       along the ring only: rank r sends to r+1 and receives
//                   from r-1 (any pair when W == 2), on the same connection
//                   as the collectives. A send and its recv must therefore
//                   sit at the same place in both ranks' sequences of
//                   operations; a send completes when the receiver has
//                   acknowledged its copy. Other pairs fail with
//                   CollectiveError(invalid): direct connections, opened
//                   lazily, are left for later.
// Every operation runs inside the call on the calling thread and returns an
// already completed Work (net::completed_work). Operations are issued one at
// a time (from one thread, or serialised by the caller: the invariant's
// order); abort() is safe from any thread.
//
// Devices: host tensors only (cpu devices). A cuda tensor fails with
// CollectiveError(invalid): GPU buffers are staged to the host by the caller,
// or go through the NCCL backend later.
//
// Threading: per group, one sender thread owns the connection to rank r+1
// and one receiver thread the connection from rank r-1; the calling thread
// orchestrates and sums. An operation queues send jobs (header fields and a
// pointer into the caller's buffer) and receive jobs (where the payload
// goes: straight into the buffer, or into one of a few staging chunks for a
// reduction) and waits for them chunk by chunk, so sending chunk c+1,
// receiving chunk c and summing chunk c-1 overlap on three threads.
//
// Deadlines: sockets are non-blocking and every read, write, connect and
// accept is a poll() bounded by the operation's deadline (start + the
// group's CollectiveOptions::timeout); every condition-variable wait has the
// same deadline. A failure (timeout, EOF or reset from a dead peer, a frame
// that breaks the protocol, abort()) breaks the group: both sockets are shut
// down, which wakes any poll() at once, pending and later operations fail
// with the first failure, and the failed operation returns only once the
// sender and receiver threads no longer touch its buffers. A peer that dies
// is noticed at once (EOF/RST), a peer that stops answering after the
// timeout. Kinds: timeout for a deadline, aborted for abort() and for a lost
// connection, invalid for bad arguments (the group stays usable) and for
// frames that show the peer issued a different operation (the group is
// broken: the stream can no longer be resynchronised).
//
// POSIX sockets with poll() rather than Asio: the data path is three
// dedicated threads doing blocking-style I/O on their own sockets, which is
// what poll() with a deadline expresses directly; shutdown() is the wake-up.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "net/collective/collective.hpp"
#include "net/crypto/aead.hpp"       // LinkKeys
#include "net/transport/socket.hpp"  // listen_tcp, for a listening socket to pass in

namespace troupe::net {

struct TcpGroupConfig {
  int rank = 0;
  // Every rank's data-plane address, "host:port" ("[::1]:7000" for IPv6);
  // rank r listens on addresses[r]. Port 0 is refused unless listen_fd is
  // given (tests bind their own listeners to free ports).
  std::vector<std::string> addresses;
  // Both ends of every connection must agree on it (handshake, frames).
  std::uint64_t job_id = 0;
  CollectiveOptions options;
  // How long make_tcp_group waits for the ring to connect (peers not yet
  // listening are retried until then).
  std::chrono::milliseconds connect_timeout{30000};
  // Payload bytes per frame; a multiple of 4 (whole floats).
  std::size_t chunk_bytes = std::size_t{1} << 20;
  // A socket already bound and listening on addresses[rank] (see
  // listen_tcp); the group adopts it and closes it. -1: bind addresses[rank].
  int listen_fd = -1;
  // Authentication and keys (net/cluster/gate.hpp's handshake_hook runs
  // the cluster handshake): called on every new connection, on both ends
  // (`accepting` says which), before the troupe handshake, with the
  // connected non-blocking socket and the deadline it must honour. Throw to
  // reject the connection (an accepting rank logs it, drops it and keeps
  // waiting; a connecting rank retries until its deadline). It returns the
  // connection's keys: when they protect (a cluster secret on both ends),
  // everything after it on that connection — Hellos, frames, acks — travels
  // in sealed records (net/transport/sealed.hpp), and the frames carry no CRC-32C
  // (the tag covers every byte). Default: none (plaintext with a CRC-32C
  // per payload; loopback rings of tests and benchmarks).
  std::function<LinkKeys(int fd, bool accepting, Deadline deadline)> authenticate;
  // Sealed links only: helper threads per direction that seal or open a
  // frame's records (wire::split_records, at most wire::kRingRecordBytes
  // each) beside the sender and receiver threads; the sender writes each
  // record as soon as it is sealed. -1: from the cores this machine has
  // (ring_seal_helpers); 0: none, the I/O threads do all the AES-GCM.
  int seal_helpers = -1;
  // Sealed links with helpers only: how long a helper, or the I/O thread
  // waiting for one, polls for work before it sleeps (wire::RecordWorkers).
  // 0, the default, sleeps at once; a poll saves a wake-up per hand-off
  // where idle cores are slow to wake (docs/BENCHMARKS.md, "Sealed links").
  std::chrono::microseconds seal_spin{0};
  // Asked while the ring connects (every 100 ms when waiting for the
  // previous rank or for the next one's first answer, and between connect
  // attempts of at most 1 s): a non-empty answer
  // (a peer known to be gone, say) gives up at once with that reason, as a
  // CollectiveError of kind aborted, instead of waiting for connect_timeout.
  // Null: wait.
  std::function<std::string()> abandon;
};

// The helpers a sealed ring uses per direction when seal_helpers is -1: a
// quarter of the cores less one, at most 3 (none below 8 cores, where the
// ranks' own threads already fill them; 3 from 16).
int ring_seal_helpers(unsigned cores);

// Connects this rank into the ring and returns it; blocks until both ring
// connections are up and their handshakes passed, or throws
// CollectiveError(timeout) naming the peer that did not come by
// connect_timeout. Bad configuration throws std::invalid_argument.
std::unique_ptr<Collective> make_tcp_group(TcpGroupConfig config);

}  // namespace troupe::net
