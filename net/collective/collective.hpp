// The collective interface: the data plane of DESIGN.md ("Control plane and
// data plane are separate"), in the style of PyTorch c10d's ProcessGroup but
// with a handful of operations instead of twenty.
//
// One Collective object per rank of a group. Each operation returns a Work
// whose wait(deadline) blocks until the operation is done and rethrows its
// error as a CollectiveError (DESIGN.md, "Every wait has a deadline": no
// call here blocks without one; every operation is bounded by the group's
// CollectiveOptions::timeout).
//
// THE INVARIANT (as c10d's reducer writes it): every rank of a group issues
// the same collectives (allreduce, broadcast, reduce_scatter, allgather,
// barrier), with matching arguments, in the same order. Collectives are
// numbered per group from 0 ("allreduce #12"); a rank that issues a
// different operation, or a buffer of a different size or dtype, fails that
// operation on every rank with CollectiveError(invalid). send/recv are
// point-to-point and outside that numbering: they pair by (src, dst, tag).
//
// Buffers are Tensors (handles): the caller keeps their memory alive and
// does not touch it until the operation's Work has completed. Buffers of one
// collective must have the same numel and dtype on every rank; their shapes
// may differ (every operation treats a buffer as a flat vector).
//
// Failures:
//   timeout  a peer did not arrive before the deadline. The message names
//            the ranks that were missing. A timeout breaks the group: every
//            pending and future operation on every rank fails with it, since
//            the ranks can no longer agree on which operation is which.
//   aborted  someone called abort(reason) (e.g. on a CAF `down` message for
//            a peer): every pending and future operation fails, naming the
//            reason.
//   invalid  the arguments do not match across ranks or are out of range.
//            No buffer was touched, and the group stays usable: every rank
//            failed the same operation.
// After a timeout or an abort the failed operation's buffers may hold
// partial results; but once its Work has completed (with or without an
// error), no other rank reads or writes this rank's buffers any more.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include "kernels/tensor.hpp"
#include "net/deadline.hpp"

namespace troupe::net {

using kernels::Tensor;

enum class CollectiveErrorKind { timeout, aborted, invalid };
const char* to_string(CollectiveErrorKind kind);

// what() reads like "allreduce #12 on rank 1 of 3: timed out after 5 s
// waiting for ranks 2".
class CollectiveError : public std::runtime_error {
 public:
  CollectiveError(CollectiveErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  CollectiveErrorKind kind() const { return kind_; }

 private:
  CollectiveErrorKind kind_;
};

// The handle of one operation.
class Work {
 public:
  virtual ~Work();
  // Blocks until the operation completes or `deadline` passes (then throws
  // CollectiveError(timeout)); rethrows the operation's error.
  virtual void wait(Deadline deadline) = 0;
  // Whether the operation has finished, with or without an error.
  virtual bool completed() const = 0;
};

// A Work that is already done: for backends that run an operation inside
// the call. With an error, wait() rethrows it.
std::shared_ptr<Work> completed_work(std::exception_ptr error = nullptr);

enum class ReduceOp { sum, mean };
const char* to_string(ReduceOp op);

struct CollectiveOptions {
  // The longest any one operation may wait for its peers.
  std::chrono::milliseconds timeout{30000};
};

class Collective {
 public:
  virtual ~Collective();

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // the backend: "local", ...

  // In place: every rank's buffer becomes the sum (or mean) over all ranks'
  // buffers. f32 only. The result is bitwise identical on every rank.
  virtual std::shared_ptr<Work> allreduce(const Tensor& buffer, ReduceOp op) = 0;
  // Every rank's buffer becomes a copy of rank `root`'s.
  virtual std::shared_ptr<Work> broadcast(const Tensor& buffer, int root) = 0;
  // Chunking: the input is split into size() equal chunks in rank order, so
  // input.numel() must be a multiple of size() and output.numel() must be
  // input.numel() / size(); rank r's output becomes chunk r of the reduced
  // input. f32 only. The output may be this rank's own chunk r of its input
  // (in place); it must not overlap anything else another rank reads.
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) = 0;
  // output.numel() == input.numel() * size(); output is the concatenation of
  // every rank's input in rank order. The input may be this rank's own chunk
  // of its output (in place).
  virtual std::shared_ptr<Work> allgather(const Tensor& input, const Tensor& output) = 0;
  // Point-to-point: a send to `dst` with `tag` pairs with a recv from this
  // rank with the same tag. Same numel and dtype on both sides. A send
  // completes when the receiver has its copy.
  virtual std::shared_ptr<Work> send(const Tensor& buffer, int dst, int tag) = 0;
  virtual std::shared_ptr<Work> recv(const Tensor& buffer, int src, int tag) = 0;
  // Completes when every rank has called it.
  virtual std::shared_ptr<Work> barrier() = 0;
  // Fails every pending and future operation on every rank of the group with
  // CollectiveError(aborted) naming `reason`. Safe from any thread. The
  // first failure of a group wins: after a timeout broke it, operations keep
  // failing with the timeout.
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace troupe::net
