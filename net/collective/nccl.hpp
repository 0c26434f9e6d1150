// The `nccl` collective backend: replicas on distinct GPUs (cuda:0, cuda:1,
// ...) reduce their device buffers with NVIDIA's NCCL, over NVLink or PCIe
// inside a node and over NCCL's socket or InfiniBand transports between
// nodes. No host staging.
//
// Communicators: one per GPU. A process that holds ranks first_rank ..
// first_rank + n - 1 of a world creates its n communicators together (a
// group of ncclCommInitRankConfig calls); every process of the world passes
// the same NcclId, which one of them made with nccl_unique_id() and sent to
// the others over whatever control path they share (in one process: none).
// NCCL refuses two ranks on one GPU: several replicas on one GPU (logical
// GPUs, `--devices cuda:0,cuda:0`) reduce through the `local` backend
// instead (job/collective_choice.hpp picks).
//
// Streams: each rank owns a stream of its own for its collectives. An
// operation records an event on the kernels' compute stream of its GPU
// (kernels/cuda/stream.hpp), makes its stream wait for that event, and
// enqueues the NCCL call there: it starts after the backward that wrote the
// gradient, without a device-wide synchronize, and compute queued later is
// not held up by it. Its Work records a second event after the call; wait()
// returns when that event has fired, so work the caller queues afterwards
// sees the result.
//
// Deadlines: communicators are non-blocking (ncclConfig_t.blocking = 0), so
// no NCCL call blocks the caller. Work::wait polls the completion event and
// ncclCommGetAsyncError; when the deadline passes (or the operation's own
// bound, start + CollectiveOptions::timeout) it calls ncclCommAbort on every
// communicator of this process's group, which ends the NCCL kernels, and
// throws CollectiveError(timeout). A dead peer therefore never hangs a GPU
// rank: the survivors' waits end at their deadline, or earlier when NCCL
// reports the lost connection (ncclRemoteError -> aborted). NCCL does not
// say which peer is missing, so a timeout names none.
//
// Failures, beside collective.hpp's:
//   - an invalid argument on one rank (wrong device, dtype, size) fails that
//     rank's operation with CollectiveError(invalid) *and breaks the group*:
//     NCCL cannot skip an operation on one rank, so its peers could only
//     time out. The other ranks fail promptly in one process; in other
//     processes when NCCL notices the aborted communicator, or at their
//     deadline. Mismatches between ranks (sizes, op order) cannot be
//     detected at all: NCCL reduces what it is given or hangs until the
//     deadline.
//   - abort(reason) aborts this process's communicators of the group; other
//     processes' ranks fail when NCCL notices, or at their deadline.
//   - send/recv pair by peer and order (NCCL has no tags): `tag` is checked
//     by nothing and must follow the same order on both sides.
//
// Threading: each rank's operations come from one thread at a time (a
// device actor); abort() is safe from any thread. The calling thread's
// current CUDA device is set to the rank's GPU by every call.
//
// libnccl is loaded at run time (dlopen of $TROUPE_NCCL_LIBRARY, the
// library CMake found, then libnccl.so.2 on the search path), so a troupe
// binary starts on a machine without NCCL and fails only when a job needs
// it, naming what it tried. Built only with the CUDA backend; without it
// every function below throws std::runtime_error saying so.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device.hpp"
#include "net/collective/collective.hpp"

namespace troupe::net {

// NCCL's ncclUniqueId: 128 opaque bytes naming one communicator's
// bootstrap (an address and a magic number). Hex for control messages.
struct NcclId {
  std::array<std::uint8_t, 128> bytes{};
  std::string hex() const;
  // Throws std::invalid_argument unless `text` is 256 hex digits.
  static NcclId from_hex(const std::string& text);
  friend bool operator==(const NcclId& a, const NcclId& b) { return a.bytes == b.bytes; }
};

// Whether this build has the NCCL backend (the CUDA backend and NCCL's
// header were found at configure time).
bool nccl_built();
// Loads libnccl if it is not loaded yet; "" when it is usable, else why not
// (not built, not found: the paths tried).
std::string nccl_unavailable();
// NCCL's version as NCCL_VERSION_CODE encodes it (22803 for 2.28.3);
// throws std::runtime_error when NCCL is unavailable.
int nccl_version();

// ncclGetUniqueId: a fresh id, made by one rank (the coordinator) and given
// to every process of the world. It opens NCCL's bootstrap listener on this
// host; no GPU is needed.
NcclId nccl_unique_id();

// This process's ranks first_rank .. first_rank + devices.size() - 1 of a
// group of `world` ranks; element i is rank first_rank + i, on devices[i].
// The devices must be distinct cuda devices. Blocks until every rank of the
// world has joined or options.timeout has passed (then every communicator
// made here is aborted and it throws CollectiveError(timeout)). Throws
// std::invalid_argument for bad arguments and std::runtime_error when NCCL
// or a GPU is unavailable.
std::vector<std::unique_ptr<Collective>> make_nccl_group(const NcclId& id, int first_rank, int world,
                                                         const std::vector<kernels::Device>& devices,
                                                         CollectiveOptions options = {});
// One process holding every rank: a fresh id, ranks 0 .. devices.size() - 1.
std::vector<std::unique_ptr<Collective>> make_nccl_group(const std::vector<kernels::Device>& devices,
                                                         CollectiveOptions options = {});

}  // namespace troupe::net
