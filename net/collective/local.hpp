// The `local` collective backend: the replicas of one process, one thread
// per rank (MirroredStrategy's case). Ranks share their buffers' memory, so
// every operation runs inside the call on the calling thread, the ranks
// cooperating on one another's buffers, and returns an already completed
// Work (holding the error, if any, for wait() to rethrow).
//
// allreduce is a reduce-scatter followed by an all-gather over the ranks' own
// buffers, with no staging copy: rank r sums chunk r of all W buffers into
// chunk r of its own buffer, then copies chunk j from rank j's buffer for
// every j != r. Barriers separate the phases and end the operation, so no
// rank reads a chunk that another is still writing, and no rank returns (and
// lets its caller reuse the buffer) while another still reads it. Every
// chunk is computed once, so replicas stay bitwise identical. Internal
// chunks are cut on 64-byte boundaries so two ranks never write one cache
// line.
//
// Threading: each rank's methods are called from that rank's own thread (one
// operation at a time per rank); abort(), and send/recv with distinct
// tags, from any thread. Every wait is a
// condition variable wait with the operation's deadline (start + timeout).
//
// Devices: a group's buffers must share one memory space: any CPU devices
// (cpu:0, cpu:1, ... are all host memory), or one CUDA device (several
// logical replicas on cuda:0, `--devices cuda:0,cuda:0`). On a GPU the ranks
// sum one another's device buffers with the cuda kernels (sum_n, scale) and
// copy them on the device: no host staging. Everything is queued on that
// GPU's one compute stream in call order, so a rank's gradient, queued
// before it arrived, is summed after it is written, and the caller's next
// op after the result; each operation makes the buffers' GPU the calling
// thread's current one. A group that mixes memory spaces fails with
// CollectiveError(invalid); distinct GPUs reduce through the nccl backend
// (nccl.hpp). send/recv copy across any devices.
#pragma once

#include <memory>
#include <vector>

#include "net/collective/collective.hpp"

namespace troupe::net {

// The `world` ranks of one group; element r is rank r. Hand each to the
// thread that runs that rank. The ranks share state that lives as long as
// any of them.
std::vector<std::unique_ptr<Collective>> make_local_group(int world, CollectiveOptions options = {});

}  // namespace troupe::net
