// The nccl backend (see nccl.hpp).
//
// Pieces, top to bottom:
//   Library     libnccl's functions, loaded once with dlopen.
//   Member      one rank of this process: its communicator, GPU, stream,
//               the event that orders it after the compute stream, and a
//               one-float buffer for barriers. Its mutex guards every NCCL
//               call on the communicator, so abort() from another thread
//               never frees a communicator under a call in progress.
//   Shared      this process's members of one group and the group's first
//               failure; break_group() records it and aborts every member's
//               communicator.
//   NcclWork    one enqueued operation: polls its completion event and the
//               communicator's async error until done, failed or past its
//               deadline.
//   NcclCollective  one rank: validates arguments, orders the operation
//               after the compute stream, enqueues it, returns its NcclWork.
#include "net/collective/nccl.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "kernels/cuda/stream.hpp"

#ifndef TROUPE_NCCL_LIBRARY_PATH
#define TROUPE_NCCL_LIBRARY_PATH ""
#endif

namespace troupe::net {

namespace {

using kernels::Device;
using kernels::DType;

// ---------------------------------------------------------------- Library

struct Library {
  ncclResult_t (*GetVersion)(int*) = nullptr;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  const char* (*GetLastError)(ncclComm_t) = nullptr;
  ncclResult_t (*GroupStart)() = nullptr;
  ncclResult_t (*GroupEnd)() = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  std::string path;   // what was loaded
  std::string error;  // why nothing was, when it was not
};

template <class F>
bool resolve(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  return out != nullptr;
}

Library load_library() {
  Library lib;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TROUPE_NCCL_LIBRARY"); env && *env) candidates.emplace_back(env);
  if (*TROUPE_NCCL_LIBRARY_PATH) candidates.emplace_back(TROUPE_NCCL_LIBRARY_PATH);
  candidates.emplace_back("libnccl.so.2");
  candidates.emplace_back("libnccl.so");
  std::string tried;
  void* handle = nullptr;
  for (const auto& c : candidates) {
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      lib.path = c;
      break;
    }
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + c + " (" + (why ? why : "not found") + ")";
  }
  if (!handle) {
    lib.error = "NCCL could not be loaded: tried " + tried +
                ". Set TROUPE_NCCL_LIBRARY to libnccl.so.2's path (PyTorch's wheel has one: python3 -c "
                "\"import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))\")";
    return lib;
  }
  // Never dlclose'd: communicators may outlive any owner we could name.
  bool ok =
      resolve(handle, "ncclGetVersion", lib.GetVersion) && resolve(handle, "ncclGetUniqueId", lib.GetUniqueId) &&
      resolve(handle, "ncclCommInitRankConfig", lib.CommInitRankConfig) &&
      resolve(handle, "ncclCommGetAsyncError", lib.CommGetAsyncError) &&
      resolve(handle, "ncclCommAbort", lib.CommAbort) && resolve(handle, "ncclGetErrorString", lib.GetErrorString) &&
      resolve(handle, "ncclGetLastError", lib.GetLastError) && resolve(handle, "ncclGroupStart", lib.GroupStart) &&
      resolve(handle, "ncclGroupEnd", lib.GroupEnd) && resolve(handle, "ncclAllReduce", lib.AllReduce) &&
      resolve(handle, "ncclBroadcast", lib.Broadcast) && resolve(handle, "ncclReduceScatter", lib.ReduceScatter) &&
      resolve(handle, "ncclAllGather", lib.AllGather) && resolve(handle, "ncclSend", lib.Send) &&
      resolve(handle, "ncclRecv", lib.Recv);
  if (!ok) {
    lib.error = lib.path +
                " lacks NCCL functions troupe needs (ncclCommInitRankConfig and ncclCommGetAsyncError "
                "came with NCCL 2.14): " +
                std::string(dlerror() ? dlerror() : "");
    return lib;
  }
  int version = 0;
  if (lib.GetVersion(&version) != ncclSuccess || version < NCCL_VERSION(2, 14, 0))
    lib.error = lib.path + " is NCCL " + std::to_string(version) +
                "; troupe needs 2.14 or later (non-blocking "
                "communicators)";
  return lib;
}

const Library& library() {
  static const Library lib = load_library();
  return lib;
}

// The library, or std::runtime_error saying why there is none.
const Library& nccl() {
  const Library& lib = library();
  if (!lib.error.empty()) throw std::runtime_error(lib.error);
  return lib;
}

std::string cuda_text(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error(what + " failed: " + cuda_text(status));
  }
}

std::string nccl_text(const Library& lib, ncclResult_t r, ncclComm_t comm) {
  std::string text = lib.GetErrorString(r);
  const char* last = lib.GetLastError(comm);
  if (last && *last) text += " (" + std::string(last) + ")";
  return text;
}

std::string format_ms(std::chrono::milliseconds timeout) {
  const auto ms = timeout.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

// Sleeps a little longer each time: a few microseconds while an operation
// is likely about to finish, at most 200 us while a peer is late.
class Backoff {
 public:
  void pause() {
    if (round_++ < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::min<int>(200, 5 * (round_ - 64) + 5)));
  }

 private:
  int round_ = 0;
};

// Makes `device` current for a scope and puts the thread's previous one
// back: for what may run on any thread (abort, destructors), which must not
// move that thread's later cuda ops to another GPU.
class OnDevice {
 public:
  explicit OnDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    (void)cudaSetDevice(device);
  }
  ~OnDevice() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
    (void)cudaGetLastError();
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int previous_ = -1;
};

// ---------------------------------------------------------------- Shared

struct Member {
  std::mutex mu;              // every NCCL call on `comm`
  ncclComm_t comm = nullptr;  // null once aborted
  int device = 0;
  cudaStream_t stream = nullptr;  // this rank's collectives
  cudaEvent_t ready = nullptr;    // recorded on the compute stream before each operation
  float* one = nullptr;           // a device float for barriers
};

class Shared {
 public:
  Shared(int world, CollectiveOptions options) : world_(world), options_(options) {}
  ~Shared() {
    for (auto& m : members) {
      abort_member(*m);
      OnDevice on(m->device);
      if (m->one) (void)cudaFree(m->one);
      if (m->ready) (void)cudaEventDestroy(m->ready);
      if (m->stream) (void)cudaStreamDestroy(m->stream);
    }
    (void)cudaGetLastError();
  }

  int world() const { return world_; }
  const CollectiveOptions& options() const { return options_; }

  // The first failure wins; every communicator of this process's group is
  // aborted (ending its kernels), so no member waits for another.
  void break_group(CollectiveErrorKind kind, const std::string& detail) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_) return;
      broken_ = std::make_pair(kind, detail);
    }
    for (auto& m : members) abort_member(*m);
  }

  // The failure, as `label`'s error, or nullopt while the group is whole.
  std::optional<CollectiveError> failure(const std::string& label) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_) return std::nullopt;
    return CollectiveError(broken_->first, label + ": " + broken_->second);
  }

  std::vector<std::unique_ptr<Member>> members;

 private:
  static void abort_member(Member& m) {
    std::lock_guard<std::mutex> lock(m.mu);
    if (!m.comm) return;
    OnDevice on(m.device);
    // ncclCommAbort frees the communicator without waiting for peers and
    // stops its kernels; its status says nothing we could act on.
    (void)nccl().CommAbort(m.comm);
    m.comm = nullptr;
  }

  const int world_;
  const CollectiveOptions options_;
  mutable std::mutex mu_;
  std::optional<std::pair<CollectiveErrorKind, std::string>> broken_;
};

// ---------------------------------------------------------------- Work

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Shared> shared, Member* member, cudaEvent_t done, std::string label, Deadline bound)
      : shared_(std::move(shared)), member_(member), done_(done), label_(std::move(label)), bound_(bound) {}
  ~NcclWork() override {
    OnDevice on(member_->device);
    (void)cudaEventDestroy(done_);  // released once the event has fired
  }

  void wait(Deadline deadline) override {
    std::lock_guard<std::mutex> lock(wait_mu_);
    if (!finished_) finish(poll(std::min(deadline, bound_)));
    if (error_) std::rethrow_exception(error_);
  }

  bool completed() const override {
    std::lock_guard<std::mutex> lock(wait_mu_);
    if (finished_) return true;
    OnDevice on(member_->device);
    const cudaError_t q = cudaEventQuery(done_);
    if (q == cudaErrorNotReady) return false;
    (void)cudaGetLastError();
    return true;  // done, or failed: wait() says which
  }

 private:
  // Polls until the operation is done (null), failed or past `until`.
  std::exception_ptr poll(Deadline until) {
    const Library& lib = nccl();
    Backoff backoff;
    for (;;) {
      if (auto f = shared_->failure(label_)) return settle(std::make_exception_ptr(*f));
      check_cuda(cudaSetDevice(member_->device), "cudaSetDevice");
      const cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) {
        // An abort ends the NCCL kernels early, and the event fires then
        // too: a group broken by now may have cut this operation short.
        // (break_group marks the group before it aborts anything.)
        if (auto f = shared_->failure(label_)) return std::make_exception_ptr(*f);
        return nullptr;
      }
      if (q != cudaErrorNotReady) {
        (void)cudaGetLastError();
        const std::string why = "the GPU failed: " + cuda_text(q);
        shared_->break_group(CollectiveErrorKind::aborted, why);
        return std::make_exception_ptr(CollectiveError(CollectiveErrorKind::aborted, label_ + ": " + why));
      }
      std::string nccl_failure;
      {
        std::lock_guard<std::mutex> lock(member_->mu);
        if (member_->comm) {
          ncclResult_t state = ncclSuccess;
          const ncclResult_t r = lib.CommGetAsyncError(member_->comm, &state);
          if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress))
            nccl_failure = "NCCL failed: " + nccl_text(lib, r != ncclSuccess ? r : state, member_->comm) +
                           (state == ncclRemoteError ? " (a peer failed or went away)" : "");
        }
      }
      if (!nccl_failure.empty()) {
        // Outside the member's lock: break_group aborts this member too.
        // The next round reports it, once the kernels have ended.
        shared_->break_group(CollectiveErrorKind::aborted, nccl_failure);
        continue;
      }
      if (Clock::now() >= until) {
        shared_->break_group(CollectiveErrorKind::timeout,
                             "timed out after " + format_ms(shared_->options().timeout) +
                                 " (or the caller's deadline) waiting for the other ranks; NCCL does not say which "
                                 "are missing, and every communicator of this group here was aborted");
        continue;
      }
      backoff.pause();
    }
  }

  // After a failure: the communicators are aborted, which ends their
  // kernels; wait (bounded) until this operation's kernel is gone, so no
  // NCCL kernel touches the caller's buffer once wait() has returned.
  std::exception_ptr settle(std::exception_ptr error) {
    const Deadline limit = Clock::now() + shared_->options().timeout;
    Backoff backoff;
    (void)cudaSetDevice(member_->device);
    while (cudaEventQuery(done_) == cudaErrorNotReady) {
      if (Clock::now() >= limit) {
        try {
          std::rethrow_exception(error);
        } catch (const CollectiveError& e) {
          return std::make_exception_ptr(CollectiveError(
              e.kind(), std::string(e.what()) + "; the aborted NCCL kernel had not ended " +
                            format_ms(shared_->options().timeout) + " later (the buffer may still change)"));
        }
      }
      backoff.pause();
    }
    (void)cudaGetLastError();
    return error;
  }

  void finish(std::exception_ptr error) {
    error_ = std::move(error);
    finished_ = true;
  }

  std::shared_ptr<Shared> shared_;
  Member* member_;
  cudaEvent_t done_;
  std::string label_;
  Deadline bound_;  // start + the group's timeout
  mutable std::mutex wait_mu_;
  bool finished_ = false;
  std::exception_ptr error_;
};

// ---------------------------------------------------------------- one rank

ncclDataType_t nccl_type(DType dtype) { return dtype == DType::i32 ? ncclInt32 : ncclFloat32; }
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::mean ? ncclAvg : ncclSum; }

class NcclCollective final : public Collective {
 public:
  NcclCollective(std::shared_ptr<Shared> shared, Member* member, int rank)
      : shared_(std::move(shared)), member_(member), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return shared_->world(); }
  std::string name() const override { return "nccl"; }

  std::shared_ptr<Work> allreduce(const Tensor& buffer, ReduceOp op) override {
    const std::string label = label_of("allreduce");
    if (auto bad = check(label, buffer, "buffer", true)) return *bad;
    const std::size_t n = static_cast<std::size_t>(buffer.numel());
    return issue(label, [&](const Library& lib, ncclComm_t comm, cudaStream_t s) {
      return lib.AllReduce(buffer.raw(), buffer.raw(), n, ncclFloat32, nccl_op(op), comm, s);
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& buffer, int root) override {
    const std::string label = label_of("broadcast");
    if (auto bad = check(label, buffer, "buffer", false)) return *bad;
    if (root < 0 || root >= size())
      return invalid(label, "root " + std::to_string(root) + " is not a rank of a group of " + std::to_string(size()));
    const std::size_t n = static_cast<std::size_t>(buffer.numel());
    return issue(label, [&](const Library& lib, ncclComm_t comm, cudaStream_t s) {
      return lib.Broadcast(buffer.raw(), buffer.raw(), n, nccl_type(buffer.dtype()), root, comm, s);
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override {
    const std::string label = label_of("reduce_scatter");
    if (auto bad = check(label, input, "input", true)) return *bad;
    if (auto bad = check(label, output, "output", true)) return *bad;
    const int w = size();
    if (input.numel() % w != 0)
      return invalid(label, "the input " + input.describe() + " has " + std::to_string(input.numel()) +
                                " elements, not a multiple of the group size " + std::to_string(w));
    if (output.numel() != input.numel() / w)
      return invalid(label, "the output " + output.describe() + " should have " + std::to_string(input.numel() / w) +
                                " elements (input " + input.describe() + " / " + std::to_string(w) + " ranks)");
    const std::size_t chunk = static_cast<std::size_t>(output.numel());
    return issue(label, [&](const Library& lib, ncclComm_t comm, cudaStream_t s) {
      return lib.ReduceScatter(input.raw(), output.raw(), chunk, ncclFloat32, nccl_op(op), comm, s);
    });
  }

  std::shared_ptr<Work> allgather(const Tensor& input, const Tensor& output) override {
    const std::string label = label_of("allgather");
    if (auto bad = check(label, input, "input", false)) return *bad;
    if (auto bad = check(label, output, "output", false)) return *bad;
    if (output.numel() != input.numel() * size() || output.dtype() != input.dtype())
      return invalid(label, "the output " + output.describe() + " should be " + kernels::to_string(input.dtype()) +
                                " with " + std::to_string(input.numel() * size()) + " elements (input " +
                                input.describe() + " x " + std::to_string(size()) + " ranks)");
    const std::size_t chunk = static_cast<std::size_t>(input.numel());
    return issue(label, [&](const Library& lib, ncclComm_t comm, cudaStream_t s) {
      return lib.AllGather(input.raw(), output.raw(), chunk, nccl_type(input.dtype()), comm, s);
    });
  }

  std::shared_ptr<Work> send(const Tensor& buffer, int dst, int tag) override {
    const std::string label = "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")" + where();
    if (auto bad = check(label, buffer, "buffer", false)) return *bad;
    if (dst < 0 || dst >= size() || dst == rank_)
      return invalid(label,
                     "rank " + std::to_string(dst) + " is not another rank of a group of " + std::to_string(size()));
    const std::size_t n = static_cast<std::size_t>(buffer.numel());
    return issue(label, [&](const Library& lib, ncclComm_t comm, cudaStream_t s) {
      return lib.Send(buffer.raw(), n, nccl_type(buffer.dtype()), dst, comm, s);
    });
  }

  std::shared_ptr<Work> recv(const Tensor& buffer, int src, int tag) override {
    const std::string label = "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")" + where();
    if (auto bad = check(label, buffer, "buffer", false)) return *bad;
    if (src < 0 || src >= size() || src == rank_)
      return invalid(label,
                     "rank " + std::to_string(src) + " is not another rank of a group of " + std::to_string(size()));
    const std::size_t n = static_cast<std::size_t>(buffer.numel());
    return issue(label, [&](const Library& lib, ncclComm_t comm, cudaStream_t s) {
      return lib.Recv(buffer.raw(), n, nccl_type(buffer.dtype()), src, comm, s);
    });
  }

  // NCCL has no barrier: an all-reduce of one float completes only when
  // every rank has contributed (what c10d's NCCL barrier does too).
  std::shared_ptr<Work> barrier() override {
    const std::string label = label_of("barrier");
    return issue(label, [&](const Library& lib, ncclComm_t comm, cudaStream_t s) {
      return lib.AllReduce(member_->one, member_->one, 1, ncclFloat32, ncclSum, comm, s);
    });
  }

  void abort(const std::string& reason) override {
    shared_->break_group(CollectiveErrorKind::aborted, "aborted (on rank " + std::to_string(rank_) + "): " + reason);
  }

 private:
  std::string where() const {
    return " on rank " + std::to_string(rank_) + " of " + std::to_string(size()) +
           " (nccl, cuda:" + std::to_string(member_->device) + ")";
  }
  std::string label_of(const char* op) { return std::string(op) + " #" + std::to_string(next_seq_++) + where(); }

  // A bad argument here: this rank fails, and so does the group (see
  // nccl.hpp: its peers cannot skip the operation).
  std::shared_ptr<Work> invalid(const std::string& label, const std::string& why) {
    shared_->break_group(CollectiveErrorKind::aborted,
                         "rank " + std::to_string(rank_) + " gave an invalid argument to " + label + ": " + why);
    return completed_work(std::make_exception_ptr(CollectiveError(CollectiveErrorKind::invalid, label + ": " + why)));
  }

  std::optional<std::shared_ptr<Work>> check(const std::string& label, const Tensor& t, const char* what,
                                             bool reduces) {
    if (!t.defined() || (t.numel() > 0 && t.raw() == nullptr))
      return invalid(label, std::string(what) + " is an undefined tensor");
    if (!t.device().is_cuda() || t.device().index != member_->device)
      return invalid(label, std::string(what) + " " + t.describe() +
                                " is not on this rank's GPU cuda:" + std::to_string(member_->device));
    if (reduces && t.dtype() != DType::f32)
      return invalid(label, std::string(what) + " " + t.describe() + ": reductions need f32");
    return std::nullopt;
  }

  // Orders the operation after the compute stream, enqueues it with
  // `launch`, waits out a non-blocking communicator's "in progress" (NCCL
  // allows no other call on it before), and records the completion event.
  template <class Launch>
  std::shared_ptr<Work> issue(const std::string& label, Launch launch) {
    const Deadline bound = Clock::now() + shared_->options().timeout;
    if (auto f = shared_->failure(label)) return completed_work(std::make_exception_ptr(*f));
    try {
      const Library& lib = nccl();
      cudaEvent_t done = nullptr;
      {
        std::unique_lock<std::mutex> lock(member_->mu);
        if (!member_->comm) {
          lock.unlock();
          auto f = shared_->failure(label);
          return completed_work(std::make_exception_ptr(
              f ? *f : CollectiveError(CollectiveErrorKind::aborted, label + ": the communicator was aborted")));
        }
        check_cuda(cudaSetDevice(member_->device), "cudaSetDevice");
        check_cuda(cudaEventRecord(member_->ready, kernels::cuda::compute_stream(member_->device)),
                   "cudaEventRecord on the compute stream");
        check_cuda(cudaStreamWaitEvent(member_->stream, member_->ready, 0), "cudaStreamWaitEvent");
        ncclResult_t r = launch(lib, member_->comm, member_->stream);
        Backoff backoff;
        while (r == ncclInProgress) {
          ncclResult_t state = ncclInProgress;
          const ncclResult_t q = lib.CommGetAsyncError(member_->comm, &state);
          r = q != ncclSuccess ? q : state;
          if (r != ncclInProgress) break;
          if (Clock::now() >= bound) {
            lock.unlock();
            shared_->break_group(CollectiveErrorKind::timeout, "timed out after " +
                                                                   format_ms(shared_->options().timeout) +
                                                                   " while NCCL was still enqueueing the operation");
            return completed_work(std::make_exception_ptr(*shared_->failure(label)));
          }
          lock.unlock();
          backoff.pause();
          lock.lock();
          if (!member_->comm) break;  // aborted meanwhile: reported below
        }
        if (!member_->comm || r != ncclSuccess) {
          const std::string why = member_->comm ? "NCCL failed: " + nccl_text(lib, r, member_->comm) : "";
          lock.unlock();
          if (!why.empty()) shared_->break_group(CollectiveErrorKind::aborted, why);
          return completed_work(std::make_exception_ptr(*shared_->failure(label)));
        }
        check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
        const cudaError_t recorded = cudaEventRecord(done, member_->stream);
        if (recorded != cudaSuccess) {
          (void)cudaEventDestroy(done);
          check_cuda(recorded, "cudaEventRecord on the NCCL stream");
        }
      }
      return std::make_shared<NcclWork>(shared_, member_, done, label, bound);
    } catch (const std::exception& e) {
      const std::string why = std::string("failed: ") + e.what();
      shared_->break_group(CollectiveErrorKind::aborted, why);
      return completed_work(std::make_exception_ptr(CollectiveError(CollectiveErrorKind::aborted, label + ": " + why)));
    }
  }

  std::shared_ptr<Shared> shared_;
  Member* member_;
  const int rank_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace

// ---------------------------------------------------------------- public

bool nccl_built() { return true; }

std::string nccl_unavailable() { return library().error; }

int nccl_version() {
  int v = 0;
  const Library& lib = nccl();
  if (lib.GetVersion(&v) != ncclSuccess) throw std::runtime_error("ncclGetVersion failed");
  return v;
}

NcclId nccl_unique_id() {
  const Library& lib = nccl();
  ncclUniqueId raw;
  const ncclResult_t r = lib.GetUniqueId(&raw);
  if (r != ncclSuccess) throw std::runtime_error("ncclGetUniqueId failed: " + nccl_text(lib, r, nullptr));
  NcclId id;
  static_assert(sizeof(raw.internal) == sizeof(id.bytes), "ncclUniqueId is 128 bytes");
  std::copy(std::begin(raw.internal), std::end(raw.internal), id.bytes.begin());
  return id;
}

std::vector<std::unique_ptr<Collective>> make_nccl_group(const NcclId& id, int first_rank, int world,
                                                         const std::vector<Device>& devices,
                                                         CollectiveOptions options) {
  const int n = static_cast<int>(devices.size());
  auto bad = [](const std::string& why) { throw std::invalid_argument("make_nccl_group: " + why); };
  if (n < 1) bad("no devices");
  if (world < 1 || first_rank < 0 || first_rank + n > world)
    bad("ranks " + std::to_string(first_rank) + ".." + std::to_string(first_rank + n - 1) + " do not fit a world of " +
        std::to_string(world));
  if (options.timeout.count() <= 0) bad("the timeout must be positive");
  for (int i = 0; i < n; ++i) {
    if (!devices[static_cast<std::size_t>(i)].is_cuda())
      bad(devices[static_cast<std::size_t>(i)].str() + " is not a GPU; NCCL reduces cuda: buffers only");
    for (int j = 0; j < i; ++j)
      if (devices[static_cast<std::size_t>(j)] == devices[static_cast<std::size_t>(i)])
        bad(devices[static_cast<std::size_t>(i)].str() +
            " is named twice; NCCL refuses two ranks on one GPU (logical replicas on one GPU reduce through the "
            "local backend)");
  }
  const Library& lib = nccl();
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) {
    (void)cudaGetLastError();
    gpus = 0;
  }
  for (const auto& d : devices)
    if (d.index >= gpus)
      throw std::runtime_error("make_nccl_group: " + d.str() + " requested, but this machine has " +
                               std::to_string(gpus) + " usable CUDA device(s)");

  OnDevice restore_when_done(devices[0].index);  // the caller's current GPU comes back
  auto shared = std::make_shared<Shared>(world, options);
  for (const auto& d : devices) {
    auto m = std::make_unique<Member>();
    m->device = d.index;
    shared->members.push_back(std::move(m));
  }
  ncclUniqueId raw;
  std::copy(id.bytes.begin(), id.bytes.end(), std::begin(raw.internal));
  const Deadline deadline = Clock::now() + options.timeout;
  // Whatever fails below: the Shared's destructor aborts the communicators
  // made so far and frees the streams.
  for (auto& m : shared->members) {
    check_cuda(cudaSetDevice(m->device), "cudaSetDevice(" + std::to_string(m->device) + ")");
    // The compute stream exists before the first operation records on it.
    (void)kernels::cuda::compute_stream(m->device);
    check_cuda(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&m->one), sizeof(float)), "cudaMalloc");
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = lib.GroupStart();
  for (int i = 0; i < n && (r == ncclSuccess || r == ncclInProgress); ++i) {
    Member& m = *shared->members[static_cast<std::size_t>(i)];
    check_cuda(cudaSetDevice(m.device), "cudaSetDevice");
    r = lib.CommInitRankConfig(&m.comm, world, raw, first_rank + i, &config);
  }
  const ncclResult_t ended = lib.GroupEnd();
  if (r == ncclSuccess || r == ncclInProgress) r = ended;
  if (r != ncclSuccess && r != ncclInProgress)
    throw std::runtime_error("make_nccl_group: creating the communicators failed: " + nccl_text(lib, r, nullptr));
  // Non-blocking initialisation: each communicator says when it is ready.
  Backoff backoff;
  for (auto& m : shared->members) {
    for (;;) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t q = m->comm ? lib.CommGetAsyncError(m->comm, &state) : ncclInternalError;
      if (q != ncclSuccess) throw std::runtime_error("make_nccl_group: NCCL failed: " + nccl_text(lib, q, m->comm));
      if (state == ncclSuccess) break;
      if (state != ncclInProgress)
        throw std::runtime_error("make_nccl_group: creating the communicator of cuda:" + std::to_string(m->device) +
                                 " failed: " + nccl_text(lib, state, m->comm));
      if (Clock::now() >= deadline)
        throw CollectiveError(CollectiveErrorKind::timeout,
                              "make_nccl_group: ranks " + std::to_string(first_rank) + ".." +
                                  std::to_string(first_rank + n - 1) + " of " + std::to_string(world) +
                                  ": not every rank joined within " + format_ms(options.timeout));
      backoff.pause();
    }
  }
  std::vector<std::unique_ptr<Collective>> out;
  for (int i = 0; i < n; ++i)
    out.push_back(
        std::make_unique<NcclCollective>(shared, shared->members[static_cast<std::size_t>(i)].get(), first_rank + i));
  return out;
}

std::vector<std::unique_ptr<Collective>> make_nccl_group(const std::vector<Device>& devices,
                                                         CollectiveOptions options) {
  return make_nccl_group(nccl_unique_id(), 0, static_cast<int>(devices.size()), devices, options);
}

}  // namespace troupe::net
