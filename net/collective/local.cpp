// The local backend (see local.hpp).
//
// Protocol of one collective, numbered #k in the group:
//
//   arrive   each rank posts its Posting (op, #k, buffers, reduce op, root)
//            and waits at the group barrier; the last to arrive checks every
//            rank's posting against the others and leaves one verdict that
//            every rank reads (so all ranks fail an invalid op together and
//            no rank touches another's buffer unless all are valid).
//   phases   the operation's work on the posted buffers, with a barrier
//            between phases that read what another phase writes.
//   leave    a final barrier: no rank returns, and lets its caller reuse its
//            buffer or post the next operation, while another still reads.
//
// A rank that fails after the arrival barrier (the group broke: a timeout,
// an abort, a kernel error) still may not return while another rank reads
// its buffers: it waits, bounded by one more timeout, until every rank that
// entered the operation has left it. Every rank inside an operation is
// either computing on buffers (bounded work) or at a barrier, which a broken
// group wakes, so they all leave promptly.
//
// Every barrier wait has the operation's deadline. A rank that times out
// breaks the group (broken_), naming the ranks that had not arrived; abort()
// breaks it with a reason. A broken group wakes every waiter and fails every
// later operation.
#include "net/collective/local.hpp"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "kernels/ops.hpp"
#include "kernels/registry.hpp"

namespace troupe::net {

namespace {

using kernels::Device;
using kernels::DType;
using kernels::Shape;

enum class OpKind { allreduce, broadcast, reduce_scatter, allgather, barrier };

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::allreduce:
      return "allreduce";
    case OpKind::broadcast:
      return "broadcast";
    case OpKind::reduce_scatter:
      return "reduce_scatter";
    case OpKind::allgather:
      return "allgather";
    case OpKind::barrier:
      return "barrier";
  }
  return "?";
}

// What one rank brings to a collective.
struct Posting {
  OpKind kind = OpKind::barrier;
  std::uint64_t seq = 0;
  Tensor a;  // buffer or input
  Tensor b;  // output (reduce_scatter, allgather)
  ReduceOp reduce = ReduceOp::sum;
  int root = 0;
};

std::string describe(const Tensor& t) { return t.defined() ? t.describe() : std::string("an undefined tensor"); }

std::string format_timeout(std::chrono::milliseconds timeout) {
  const auto ms = timeout.count();
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

// A flat view of `len` elements of `t` from element `offset`, on `device`
// (cpu:0 and cpu:1 share memory, but ops want one device per call).
Tensor flat_view(const Tensor& t, std::int64_t offset, std::int64_t len, Device device) {
  auto* base = static_cast<char*>(t.raw()) + static_cast<std::size_t>(offset) * kernels::element_size(t.dtype());
  return Tensor::view(base, Shape{len}, t.dtype(), device);
}

// allreduce's internal chunk of rank r: [begin, end). Chunks are cut on
// 16-float (64-byte) boundaries so no two ranks write one cache line; the
// last ranks' chunks may be short or empty.
std::pair<std::int64_t, std::int64_t> chunk_range(std::int64_t n, int world, int r) {
  constexpr std::int64_t kAlign = 16;
  const std::int64_t per = (n + world - 1) / world;
  const std::int64_t step = (per + kAlign - 1) / kAlign * kAlign;
  const std::int64_t begin = std::min(n, step * r);
  return {begin, std::min(n, begin + step)};
}

class LocalGroup {
 public:
  LocalGroup(int world, CollectiveOptions options)
      : world_(world),
        options_(options),
        arrived_(static_cast<std::size_t>(world), 0),
        postings_(static_cast<std::size_t>(world)),
        inside_(static_cast<std::size_t>(world), 0) {}

  int world() const { return world_; }
  const CollectiveOptions& options() const { return options_; }

  // The first barrier of a collective: posts, waits for every rank, and
  // throws the verdict if the postings do not agree.
  void arrive(int rank, Posting posting, const std::string& label, Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    if (broken_) throw broken_error(label);
    postings_[static_cast<std::size_t>(rank)] = std::move(posting);
    barrier_locked(lock, rank, label, deadline, [this] {
      verdict_ = check_postings();
      if (verdict_.empty()) {  // every rank enters the operation's phases
        std::fill(inside_.begin(), inside_.end(), 1);
        inside_count_ = world_;
      } else {  // nobody enters: nobody reads the postings
        end_operation_locked();
      }
    });
    // verdict_ is rewritten only when the next arrival barrier completes,
    // which needs this rank: it is still this operation's.
    if (!verdict_.empty()) throw CollectiveError(CollectiveErrorKind::invalid, label + ": " + verdict_);
  }

  // A barrier inside or at the end of a collective. The one at the end
  // (`last`) also drops the posted handles, which nobody reads any more.
  void sync(int rank, const std::string& label, Deadline deadline, bool last) {
    std::unique_lock<std::mutex> lock(mu_);
    barrier_locked(lock, rank, label, deadline, [this, last] {
      if (last) end_operation_locked();
    });
  }

  // After an operation failed on this rank: leaves it, then waits until no
  // rank is inside it any more (see the top of this file).
  void leave_after_error(int rank) {
    std::unique_lock<std::mutex> lock(mu_);
    if (inside_[static_cast<std::size_t>(rank)]) {
      inside_[static_cast<std::size_t>(rank)] = 0;
      if (--inside_count_ == 0) {
        end_operation_locked();
        cv_.notify_all();
      }
    }
    cv_.wait_until(lock, Clock::now() + options_.timeout, [&] { return inside_count_ == 0; });
  }

  // Read between arrive() and the last sync(): no rank rewrites its posting
  // before every rank has passed the last barrier.
  const Posting& posting(int r) const { return postings_[static_cast<std::size_t>(r)]; }

  void abort(int rank, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    break_locked(CollectiveErrorKind::aborted, "aborted (on rank " + std::to_string(rank) + "): " + reason);
  }

  // A rank failed inside an operation (a kernel threw): the others must not
  // wait for it until their deadline.
  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    break_locked(CollectiveErrorKind::aborted, what);
  }

  void send(int rank, const Tensor& buffer, int dst, int tag, const std::string& label, Deadline deadline);
  void recv(int rank, const Tensor& buffer, int src, int tag, const std::string& label, Deadline deadline);

 private:
  // One posted send, waiting for its recv.
  struct Mail {
    enum class State { posted, taken, done };
    Tensor buffer;
    State state = State::posted;
    std::string error;  // set by the receiver when the buffers do not match
  };

  void barrier_locked(std::unique_lock<std::mutex>& lock, int rank, const std::string& label, Deadline deadline,
                      const std::function<void()>& on_complete);
  std::string check_postings() const;
  // Nobody reads the posted buffers any more: drop the handles.
  void end_operation_locked() {
    for (auto& p : postings_) p = Posting{};
    std::fill(inside_.begin(), inside_.end(), 0);
    inside_count_ = 0;
  }
  void break_locked(CollectiveErrorKind kind, std::string detail) {
    if (broken_) return;  // the first failure is the one to report
    broken_ = true;
    broken_kind_ = kind;
    broken_detail_ = std::move(detail);
    cv_.notify_all();
  }
  CollectiveError broken_error(const std::string& label) const {
    return CollectiveError(broken_kind_, label + ": " + broken_detail_);
  }
  std::string timeout_detail(const std::string& waiting_for) const {
    return "timed out after " + format_timeout(options_.timeout) + " waiting for " + waiting_for;
  }

  const int world_;
  const CollectiveOptions options_;

  std::mutex mu_;
  std::condition_variable cv_;
  // The reusable barrier: generation_ advances each time all ranks arrive.
  std::uint64_t generation_ = 0;
  int arrived_count_ = 0;
  std::vector<char> arrived_;  // per rank, for this generation
  std::vector<Posting> postings_;
  std::string verdict_;  // of the last arrival barrier; empty when valid
  // Per rank: inside the current operation's phases, where other ranks may
  // read its buffers. Set for all when a valid arrival barrier completes.
  std::vector<char> inside_;
  int inside_count_ = 0;
  bool broken_ = false;
  CollectiveErrorKind broken_kind_ = CollectiveErrorKind::aborted;
  std::string broken_detail_;
  std::map<std::tuple<int, int, int>, std::shared_ptr<Mail>> mailbox_;  // (src, dst, tag)
};

void LocalGroup::barrier_locked(std::unique_lock<std::mutex>& lock, int rank, const std::string& label,
                                Deadline deadline, const std::function<void()>& on_complete) {
  if (broken_) throw broken_error(label);
  arrived_[static_cast<std::size_t>(rank)] = 1;
  if (++arrived_count_ == world_) {
    if (on_complete) on_complete();
    arrived_count_ = 0;
    std::fill(arrived_.begin(), arrived_.end(), 0);
    ++generation_;
    cv_.notify_all();
    return;
  }
  const std::uint64_t generation = generation_;
  cv_.wait_until(lock, deadline, [&] { return generation_ != generation || broken_; });
  if (generation_ != generation) return;  // everyone arrived (a later break is the next op's)
  if (broken_) throw broken_error(label);
  std::string missing;
  for (int r = 0; r < world_; ++r) {
    if (arrived_[static_cast<std::size_t>(r)]) continue;
    missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  break_locked(CollectiveErrorKind::timeout, timeout_detail("ranks " + missing));
  throw broken_error(label);
}

std::string LocalGroup::check_postings() const {
  const Posting& first = postings_[0];
  const int w = world_;
  auto who = [](int r, const Tensor& t) { return "rank " + std::to_string(r) + " has " + describe(t); };
  for (int r = 0; r < w; ++r) {
    const Posting& p = postings_[static_cast<std::size_t>(r)];
    if (p.kind != first.kind || p.seq != first.seq)
      return std::string("ranks issued different operations: rank 0 ") + to_string(first.kind) + " #" +
             std::to_string(first.seq) + ", rank " + std::to_string(r) + " " + to_string(p.kind) + " #" +
             std::to_string(p.seq);
  }
  if (first.kind == OpKind::barrier) return {};
  const bool reduces = first.kind == OpKind::allreduce || first.kind == OpKind::reduce_scatter;
  for (int r = 0; r < w; ++r) {
    const Posting& p = postings_[static_cast<std::size_t>(r)];
    const std::string rank = "rank " + std::to_string(r);
    for (const Tensor* t : {&p.a, &p.b}) {
      if (t == &p.b && (first.kind == OpKind::allreduce || first.kind == OpKind::broadcast)) continue;
      if (!t->defined() || (t->numel() > 0 && t->raw() == nullptr)) return rank + " passed " + describe(*t);
      if (reduces && t->dtype() != DType::f32) return rank + " has " + t->describe() + ": reductions need f32";
      if (!t->device().same_memory(first.a.device()))
        return "buffers must share one memory space, but rank 0 has " + first.a.describe() + " and " + rank + " has " +
               t->describe();
    }
    if (p.a.numel() != first.a.numel() || p.a.dtype() != first.a.dtype())
      return "buffers differ across ranks: " + who(0, first.a) + ", " + who(r, p.a);
    if (p.reduce != first.reduce)
      return std::string("reduce ops differ across ranks: rank 0 ") + to_string(first.reduce) + ", " + rank + " " +
             to_string(p.reduce);
    if (p.root != first.root)
      return "roots differ across ranks: rank 0 says " + std::to_string(first.root) + ", " + rank + " says " +
             std::to_string(p.root);
    if (first.kind == OpKind::broadcast && (p.root < 0 || p.root >= w))
      return "root " + std::to_string(p.root) + " is not a rank of a group of " + std::to_string(w);
    if (first.kind == OpKind::reduce_scatter) {
      if (p.a.numel() % w != 0)
        return "the input " + p.a.describe() + " has " + std::to_string(p.a.numel()) +
               " elements, not a multiple of the group size " + std::to_string(w);
      if (p.b.numel() != p.a.numel() / w)
        return rank + "'s output " + p.b.describe() + " should have " + std::to_string(p.a.numel() / w) +
               " elements (input " + p.a.describe() + " / " + std::to_string(w) + " ranks)";
    }
    if (first.kind == OpKind::allgather && (p.b.numel() != p.a.numel() * w || p.b.dtype() != p.a.dtype()))
      return rank + "'s output " + p.b.describe() + " should be " + kernels::to_string(p.a.dtype()) + " with " +
             std::to_string(p.a.numel() * w) + " elements (input " + p.a.describe() + " x " + std::to_string(w) +
             " ranks)";
  }
  return {};
}

void LocalGroup::send(int rank, const Tensor& buffer, int dst, int tag, const std::string& label, Deadline deadline) {
  using State = Mail::State;
  if (dst < 0 || dst >= world_ || dst == rank)
    throw CollectiveError(
        CollectiveErrorKind::invalid,
        label + ": rank " + std::to_string(dst) + " is not another rank of a group of " + std::to_string(world_));
  std::unique_lock<std::mutex> lock(mu_);
  if (broken_) throw broken_error(label);
  const auto key = std::make_tuple(rank, dst, tag);
  if (mailbox_.count(key))
    throw CollectiveError(CollectiveErrorKind::invalid, label + ": a send with this tag is already pending");
  auto mail = std::make_shared<Mail>();
  mail->buffer = buffer;
  mailbox_[key] = mail;
  cv_.notify_all();
  cv_.wait_until(lock, deadline,
                 [&] { return mail->state == State::done || (broken_ && mail->state == State::posted); });
  if (mail->state == State::posted) {  // never received: withdraw it
    mailbox_.erase(key);
    if (broken_) throw broken_error(label);
    throw CollectiveError(CollectiveErrorKind::timeout,
                          label + ": " + timeout_detail("rank " + std::to_string(dst) + " to receive"));
  }
  if (mail->state == State::taken) {
    // The receiver is copying out of our buffer right now; we may not return
    // before it is done. A copy is short, but still bounded.
    if (!cv_.wait_until(lock, Clock::now() + options_.timeout, [&] { return mail->state == State::done; }))
      throw CollectiveError(CollectiveErrorKind::timeout,
                            label + ": " + timeout_detail("rank " + std::to_string(dst) + "'s copy"));
  }
  if (!mail->error.empty()) throw CollectiveError(CollectiveErrorKind::invalid, label + ": " + mail->error);
}

void LocalGroup::recv(int rank, const Tensor& buffer, int src, int tag, const std::string& label, Deadline deadline) {
  if (src < 0 || src >= world_ || src == rank)
    throw CollectiveError(
        CollectiveErrorKind::invalid,
        label + ": rank " + std::to_string(src) + " is not another rank of a group of " + std::to_string(world_));
  std::unique_lock<std::mutex> lock(mu_);
  if (broken_) throw broken_error(label);
  const auto key = std::make_tuple(src, rank, tag);
  auto it = mailbox_.end();
  cv_.wait_until(lock, deadline, [&] { return broken_ || (it = mailbox_.find(key)) != mailbox_.end(); });
  it = mailbox_.find(key);
  if (it == mailbox_.end()) {
    if (broken_) throw broken_error(label);
    throw CollectiveError(CollectiveErrorKind::timeout,
                          label + ": " + timeout_detail("rank " + std::to_string(src) + " to send"));
  }
  std::shared_ptr<Mail> mail = it->second;
  mailbox_.erase(it);
  mail->state = Mail::State::taken;
  lock.unlock();

  std::string error;
  const Tensor& from = mail->buffer;
  if (!buffer.defined() || from.numel() != buffer.numel() || from.dtype() != buffer.dtype()) {
    error = "buffers differ: rank " + std::to_string(src) + " sends " + describe(from) + ", rank " +
            std::to_string(rank) + " receives into " + describe(buffer);
  } else if (buffer.numel() > 0) {
    try {
      flat_view(buffer, 0, buffer.numel(), buffer.device()).copy_from(flat_view(from, 0, from.numel(), from.device()));
    } catch (const std::exception& e) {
      error = std::string("copy failed: ") + e.what();
    }
  }
  lock.lock();
  mail->state = Mail::State::done;
  mail->error = error;
  cv_.notify_all();
  if (!error.empty()) throw CollectiveError(CollectiveErrorKind::invalid, label + ": " + error);
}

// ---------------------------------------------------------------- one rank

class LocalCollective final : public Collective {
 public:
  LocalCollective(std::shared_ptr<LocalGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->world(); }
  std::string name() const override { return "local"; }

  std::shared_ptr<Work> allreduce(const Tensor& buffer, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& buffer, int root) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  std::shared_ptr<Work> allgather(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> send(const Tensor& buffer, int dst, int tag) override;
  std::shared_ptr<Work> recv(const Tensor& buffer, int src, int tag) override;
  std::shared_ptr<Work> barrier() override;
  void abort(const std::string& reason) override { group_->abort(rank_, reason); }

 private:
  // Runs one collective: arrive, body(label, deadline), and the errors into
  // the returned Work.
  template <class Body>
  std::shared_ptr<Work> run(Posting posting, Body body);
  template <class Body>
  std::shared_ptr<Work> run_p2p(const std::string& label, Body body);
  std::string where() const { return " on rank " + std::to_string(rank_) + " of " + std::to_string(group_->world()); }

  std::shared_ptr<LocalGroup> group_;
  const int rank_;
  std::uint64_t next_seq_ = 0;
};

template <class Body>
std::shared_ptr<Work> LocalCollective::run(Posting posting, Body body) {
  posting.seq = next_seq_++;
  const std::string label = std::string(to_string(posting.kind)) + " #" + std::to_string(posting.seq) + where();
  const Deadline deadline = Clock::now() + group_->options().timeout;
  try {
    const Device device = posting.a.device();
    group_->arrive(rank_, std::move(posting), label, deadline);
    // Valid buffers on a GPU (all on that one): the sums and copies below
    // run on the calling thread's current GPU, which must be theirs.
    if (device.is_cuda()) kernels::Registry::instance().for_device(device).make_current(device.index);
    body(label, deadline);
    group_->sync(rank_, label, deadline, /*last=*/true);
    return completed_work();
  } catch (const CollectiveError&) {
    group_->leave_after_error(rank_);
    return completed_work(std::current_exception());
  } catch (const std::exception& e) {
    const std::string what = label + ": failed: " + e.what();
    group_->fail(what);
    group_->leave_after_error(rank_);
    return completed_work(std::make_exception_ptr(CollectiveError(CollectiveErrorKind::aborted, what)));
  }
}

template <class Body>
std::shared_ptr<Work> LocalCollective::run_p2p(const std::string& label, Body body) {
  const Deadline deadline = Clock::now() + group_->options().timeout;
  try {
    body(label, deadline);
    return completed_work();
  } catch (const CollectiveError&) {
    return completed_work(std::current_exception());
  } catch (const std::exception& e) {
    return completed_work(
        std::make_exception_ptr(CollectiveError(CollectiveErrorKind::invalid, label + ": " + e.what())));
  }
}

std::shared_ptr<Work> LocalCollective::allreduce(const Tensor& buffer, ReduceOp op) {
  Posting posting;
  posting.kind = OpKind::allreduce;
  posting.a = buffer;
  posting.reduce = op;
  return run(std::move(posting), [&](const std::string& label, Deadline deadline) {
    const int w = group_->world();
    const std::int64_t n = buffer.numel();
    const Device device = buffer.device();
    // Reduce-scatter: chunk r of every buffer, summed into chunk r of ours.
    const auto [begin, end] = chunk_range(n, w, rank_);
    if (end > begin && w > 1) {
      std::vector<Tensor> sources;
      sources.reserve(static_cast<std::size_t>(w));
      for (int j = 0; j < w; ++j) sources.push_back(flat_view(group_->posting(j).a, begin, end - begin, device));
      const Tensor mine = sources[static_cast<std::size_t>(rank_)];
      kernels::ops::sum_n(sources, mine);
      if (op == ReduceOp::mean) kernels::ops::scale(mine, 1.0f / static_cast<float>(w));
    }
    if (w == 1) return;
    group_->sync(rank_, label, deadline, /*last=*/false);
    // All-gather: every other chunk from the rank that reduced it.
    for (int j = 0; j < w; ++j) {
      if (j == rank_) continue;
      const auto [b, e] = chunk_range(n, w, j);
      if (e > b) flat_view(buffer, b, e - b, device).copy_from(flat_view(group_->posting(j).a, b, e - b, device));
    }
  });
}

std::shared_ptr<Work> LocalCollective::broadcast(const Tensor& buffer, int root) {
  Posting posting;
  posting.kind = OpKind::broadcast;
  posting.a = buffer;
  posting.root = root;
  return run(std::move(posting), [&](const std::string&, Deadline) {
    if (rank_ == root || buffer.numel() == 0) return;
    const Device device = buffer.device();
    flat_view(buffer, 0, buffer.numel(), device)
        .copy_from(flat_view(group_->posting(root).a, 0, buffer.numel(), device));
  });
}

std::shared_ptr<Work> LocalCollective::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  Posting posting;
  posting.kind = OpKind::reduce_scatter;
  posting.a = input;
  posting.b = output;
  posting.reduce = op;
  return run(std::move(posting), [&](const std::string&, Deadline) {
    const int w = group_->world();
    const std::int64_t chunk = output.numel();
    if (chunk == 0) return;
    const Device device = output.device();
    std::vector<Tensor> sources;
    sources.reserve(static_cast<std::size_t>(w));
    for (int j = 0; j < w; ++j) sources.push_back(flat_view(group_->posting(j).a, rank_ * chunk, chunk, device));
    const Tensor out = flat_view(output, 0, chunk, device);
    kernels::ops::sum_n(sources, out);
    if (op == ReduceOp::mean && w > 1) kernels::ops::scale(out, 1.0f / static_cast<float>(w));
  });
}

std::shared_ptr<Work> LocalCollective::allgather(const Tensor& input, const Tensor& output) {
  Posting posting;
  posting.kind = OpKind::allgather;
  posting.a = input;
  posting.b = output;
  return run(std::move(posting), [&](const std::string&, Deadline) {
    const std::int64_t chunk = input.numel();
    if (chunk == 0) return;
    const Device device = output.device();
    for (int j = 0; j < group_->world(); ++j) {
      const Tensor from = flat_view(group_->posting(j).a, 0, chunk, device);
      const Tensor to = flat_view(output, j * chunk, chunk, device);
      if (to.raw() != from.raw()) to.copy_from(from);  // in place: already there
    }
  });
}

std::shared_ptr<Work> LocalCollective::barrier() {
  Posting posting;
  posting.kind = OpKind::barrier;
  return run(std::move(posting), [](const std::string&, Deadline) {});
}

std::shared_ptr<Work> LocalCollective::send(const Tensor& buffer, int dst, int tag) {
  const std::string label = "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")" + where();
  return run_p2p(label,
                 [&](const std::string& l, Deadline deadline) { group_->send(rank_, buffer, dst, tag, l, deadline); });
}

std::shared_ptr<Work> LocalCollective::recv(const Tensor& buffer, int src, int tag) {
  const std::string label = "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")" + where();
  return run_p2p(label,
                 [&](const std::string& l, Deadline deadline) { group_->recv(rank_, buffer, src, tag, l, deadline); });
}

}  // namespace

std::vector<std::unique_ptr<Collective>> make_local_group(int world, CollectiveOptions options) {
  if (world < 1) throw std::invalid_argument("make_local_group: world " + std::to_string(world) + " must be >= 1");
  if (options.timeout.count() <= 0)
    throw std::invalid_argument("make_local_group: the timeout must be positive, got " +
                                std::to_string(options.timeout.count()) + " ms");
  auto group = std::make_shared<LocalGroup>(world, options);
  std::vector<std::unique_ptr<Collective>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<LocalCollective>(group, r));
  return ranks;
}

}  // namespace troupe::net
