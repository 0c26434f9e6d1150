// The tcp collective backend (tcp.hpp): the sender and receiver threads, and
// the ring algorithms the calling thread runs on them. The connections come
// from ring_setup.cpp.
//
// One operation, on the calling thread:
//   1. check the arguments (a bad one fails with invalid; nothing was sent);
//   2. queue every receive job of the operation for the receiver thread (in
//      the order the frames will arrive on the stream) and the sends that
//      are ready now for the sender thread;
//   3. per chunk, in stream order: wait for its receive, sum it (from a
//      staging slot) or take it (it landed in the buffer), and queue the
//      send it enables (the next ring step of the same chunk);
//   4. wait until every queued send is written, so no thread reads the
//      caller's buffer after the call returns.
// Any failure breaks the group (see tcp.hpp); the failed call then clears the
// queues and waits for both threads to leave the jobs they were doing.
#include "net/tcp/tcp.hpp"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "net/tcp/ring_link.hpp"
#include "net/tcp/ring_setup.hpp"
#include "net/tcp/wire.hpp"

namespace troupe::net {

namespace {

using namespace troupe::net::ring;
using wire::FrameFields;
using wire::IoError;

// The numbers of schema::OpKind.
enum Kind : std::uint16_t {
  kAllreduce = 0,
  kBroadcast = 1,
  kReduceScatter = 2,
  kAllgather = 3,
  kBarrier = 4,
  kSend = 5
};

const char* kind_name(std::uint16_t kind) {
  switch (kind) {
    case kAllreduce:
      return "allreduce";
    case kBroadcast:
      return "broadcast";
    case kReduceScatter:
      return "reduce_scatter";
    case kAllgather:
      return "allgather";
    case kBarrier:
      return "barrier";
    case kSend:
      return "send";
  }
  return "an unknown operation";
}

// Staging slots for incoming partial sums: the receiver runs at most this
// many chunks ahead of the summing thread.
constexpr std::uint64_t kStagingSlots = 4;

// A byte range of the operation's buffer.
struct Segment {
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

// Thrown inside an operation when the group broke; carries the kind.
struct Broken {
  CollectiveErrorKind kind;
  std::string detail;
};

struct SendJob {
  FrameFields frame;  // length set; crc32c computed by the sender thread (plaintext links)
  const char* data = nullptr;
  Deadline deadline;
};

struct RecvJob {
  FrameFields expect;    // length is the exact payload size expected
  char* dest = nullptr;  // null: the next staging slot
  std::uint64_t staged_index = 0;
  Deadline deadline;
  // Receive only once this many sends are done: an all-gather receives into
  // the bytes the reduce-scatter sent from. (The peer cannot send them before
  // it had ours, so this never waits in practice; it makes the order explicit,
  // for ThreadSanitizer too.)
  std::uint64_t after_sends = 0;
};

// Float sums, vectorised by the compiler.
void add_into(float* __restrict dst, const float* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}
void scale(float* p, std::size_t n, float s) {
  for (std::size_t i = 0; i < n; ++i) p[i] *= s;
}

int mod(int a, int w) { return ((a % w) + w) % w; }

class TcpGroup final : public Collective {
 public:
  TcpGroup(const TcpGroupConfig& config, Link send, Link recv);
  ~TcpGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string name() const override { return "tcp"; }

  std::shared_ptr<Work> allreduce(const Tensor& buffer, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(const Tensor& buffer, int root) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  std::shared_ptr<Work> allgather(const Tensor& input, const Tensor& output) override;
  std::shared_ptr<Work> send(const Tensor& buffer, int dst, int tag) override;
  std::shared_ptr<Work> recv(const Tensor& buffer, int src, int tag) override;
  std::shared_ptr<Work> barrier() override;
  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    break_locked(CollectiveErrorKind::aborted, "aborted (on rank " + std::to_string(rank_) + "): " + reason);
  }

 private:
  // ---- operation plumbing (calling thread)
  template <class Body>
  std::shared_ptr<Work> run(const std::string& label, Body body);
  std::string where() const { return " on rank " + std::to_string(rank_) + " of " + std::to_string(world_); }
  std::string peer(int r) const {
    return "rank " + std::to_string(r) + " (" + addresses_[static_cast<std::size_t>(r)] + ")";
  }
  int next() const { return (rank_ + 1) % world_; }
  int prev() const { return (rank_ + world_ - 1) % world_; }
  FrameFields frame(std::uint16_t kind, std::uint64_t seq, std::uint64_t total, std::uint32_t step, std::uint32_t chunk,
                    std::uint64_t length) const {
    FrameFields f;
    f.job_id = job_id_;
    f.kind = kind;
    f.op_seq = seq;
    f.total_bytes = total;
    f.step = step;
    f.chunk = chunk;
    f.length = length;
    return f;
  }
  std::uint64_t post_send(const FrameFields& f, const char* data, Deadline deadline);
  std::uint64_t post_recv(const FrameFields& expect, char* dest, Deadline deadline, std::uint64_t after_sends = 0);
  void wait_recv(std::uint64_t index, const FrameFields& expect, Deadline deadline);
  void wait_sends(Deadline deadline);
  char* staging(std::uint64_t staged_index) { return staging_[staged_index % kStagingSlots].data(); }
  void release_staging() {
    std::lock_guard<std::mutex> lock(mu_);
    ++staged_released_;
    recv_cv_.notify_one();  // a staging slot is free
  }
  void quiesce();
  std::size_t chunks_of(std::size_t bytes) const { return (bytes + chunk_bytes_ - 1) / chunk_bytes_; }
  Segment chunk_in(const Segment& s, std::size_t c) const {
    const std::size_t off = c * chunk_bytes_;
    return {s.offset + off, std::min(chunk_bytes_, s.bytes - off)};
  }

  // The ring algorithms on a host buffer of bytes `base`. The reduce-scatter
  // returns the index of each of its sends, [step][chunk], for the
  // all-gather that follows it on the same buffer.
  using SendIndex = std::vector<std::vector<std::uint64_t>>;
  SendIndex ring_reduce_scatter(std::uint16_t kind, std::uint64_t seq, std::uint64_t total, char* base,
                                const std::vector<Segment>& segs, ReduceOp op, bool gather_after, Deadline deadline);
  void ring_allgather(std::uint16_t kind, std::uint64_t seq, std::uint64_t total, char* base,
                      const std::vector<Segment>& segs, std::uint32_t step_base, const SendIndex* after,
                      Deadline deadline);

  // ---- failure
  void break_locked(CollectiveErrorKind kind, std::string detail) {
    if (broken_) return;  // the first failure is the one to report
    broken_ = true;
    broken_kind_ = kind;
    broken_detail_ = std::move(detail);
    // Wakes every poll() on these sockets, here and (by EOF) on the peers.
    if (send_fd_ >= 0) ::shutdown(send_fd_, SHUT_RDWR);
    if (recv_fd_ >= 0) ::shutdown(recv_fd_, SHUT_RDWR);
    notify_all_locked();
  }
  void fail(CollectiveErrorKind kind, std::string detail) {
    std::lock_guard<std::mutex> lock(mu_);
    break_locked(kind, std::move(detail));
  }
  void notify_all_locked() {
    send_cv_.notify_all();
    recv_cv_.notify_all();
    done_cv_.notify_all();
  }
  [[noreturn]] void throw_broken_locked() { throw Broken{broken_kind_, broken_detail_}; }

  // ---- the two I/O threads
  void sender_loop();
  void receiver_loop();
  void receive_one(const RecvJob& job);

  const int rank_;
  const int world_;
  const std::uint64_t job_id_;
  const CollectiveOptions options_;
  const std::size_t chunk_bytes_;
  const std::vector<std::string> addresses_;
  Link send_link_;  // to rank r+1
  Link recv_link_;  // from rank r-1
  const int send_fd_;
  const int recv_fd_;
  std::uint64_t next_seq_ = 0;
  // What an operation sends from that is not the caller's buffer
  // (reduce_scatter's copy of its input, barrier's words). A member, not a
  // local of the operation: after a failure the sender thread may still be
  // reading it until quiesce() returns, which is after the operation's body
  // has unwound (fuzz/tcp_frames found the use after free).
  std::vector<char> scratch_;

  std::mutex mu_;
  // One condition variable per waiter, so a chunk wakes only the thread it
  // concerns: the sender (send_cv_), the receiver (recv_cv_), the caller
  // (done_cv_).
  std::condition_variable send_cv_, recv_cv_, done_cv_;
  std::deque<SendJob> send_queue_;
  std::uint64_t sends_posted_ = 0, sends_done_ = 0;
  bool send_busy_ = false;
  std::deque<RecvJob> recv_queue_;
  std::uint64_t recvs_posted_ = 0, recvs_done_ = 0;
  bool recv_busy_ = false;
  std::vector<std::vector<char>> staging_;
  std::uint64_t staged_posted_ = 0, staged_released_ = 0;
  bool broken_ = false;
  CollectiveErrorKind broken_kind_ = CollectiveErrorKind::aborted;
  std::string broken_detail_;
  bool stopping_ = false;
  std::thread sender_;
  std::thread receiver_;
};

TcpGroup::TcpGroup(const TcpGroupConfig& config, Link send, Link recv)
    : rank_(config.rank),
      world_(static_cast<int>(config.addresses.size())),
      job_id_(config.job_id),
      options_(config.options),
      chunk_bytes_(config.chunk_bytes),
      addresses_(config.addresses),
      send_link_(std::move(send)),
      recv_link_(std::move(recv)),
      send_fd_(send_link_.fd),
      recv_fd_(recv_link_.fd) {
  if (world_ > 1) {
    if (send_link_.sealed()) {
      const int helpers =
          config.seal_helpers >= 0 ? config.seal_helpers : ring_seal_helpers(std::thread::hardware_concurrency());
      send_link_.sealer->set_helpers(helpers, config.seal_spin);
      recv_link_.opener->set_helpers(helpers, config.seal_spin);
    }
    staging_.assign(kStagingSlots, std::vector<char>(chunk_bytes_));
    sender_ = std::thread([this] { sender_loop(); });
    receiver_ = std::thread([this] { receiver_loop(); });
  }
}

TcpGroup::~TcpGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    notify_all_locked();
  }
  if (sender_.joinable()) sender_.join();
  if (receiver_.joinable()) receiver_.join();
  for (int fd : {send_fd_, recv_fd_}) {
    if (fd < 0) continue;
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }
}

// ------------------------------------------------------------ I/O threads

void TcpGroup::sender_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    send_cv_.wait(lock, [&] { return stopping_ || !send_queue_.empty(); });
    if (stopping_) return;
    SendJob job = send_queue_.front();
    send_queue_.pop_front();
    if (broken_) continue;  // dropped: the operation fails anyway
    send_busy_ = true;
    lock.unlock();
    try {
      if (send_link_.sealed()) {
        // The header's record, then the payload's: with seal helpers each
        // of its records goes out as soon as it is sealed (the header with
        // the first). The tag covers every byte, so no CRC.
        const auto header = wire::encode_frame_header(job.frame);
        send_link_.sealer->append(header.data(), header.size());
        send_link_.sealer->write_split(send_fd_, job.data, job.frame.length, wire::kRingRecordBytes, job.deadline);
      } else {
        job.frame.crc32c = wire::crc32c(job.data, job.frame.length);
        const auto header = wire::encode_frame_header(job.frame);
        wire::write_all(send_fd_, header.data(), header.size(), job.data, job.frame.length, job.deadline);
      }
    } catch (const IoError& e) {
      fail(e.timed_out ? CollectiveErrorKind::timeout : CollectiveErrorKind::aborted,
           e.timed_out ? "timed out after " + format_timeout(options_.timeout) + " waiting for " + peer(next()) +
                             " to take " + kind_name(job.frame.kind) + " step " + std::to_string(job.frame.step) +
                             " chunk " + std::to_string(job.frame.chunk)
                       : "connection to " + peer(next()) + " lost: " + e.what());
    } catch (const std::exception& e) {
      fail(CollectiveErrorKind::aborted, std::string("sending to ") + peer(next()) + ": " + e.what());
    }
    lock.lock();
    send_busy_ = false;
    ++sends_done_;
    done_cv_.notify_all();
    recv_cv_.notify_one();  // the receiver may wait for this send (after_sends)
  }
}

void TcpGroup::receiver_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    recv_cv_.wait(lock, [&] { return stopping_ || !recv_queue_.empty(); });
    if (stopping_) return;
    RecvJob job = recv_queue_.front();
    recv_queue_.pop_front();
    if (broken_) continue;
    if (job.after_sends > sends_done_) {
      if (!recv_cv_.wait_until(lock, job.deadline,
                               [&] { return broken_ || stopping_ || sends_done_ >= job.after_sends; }))
        break_locked(CollectiveErrorKind::timeout, "timed out after " + format_timeout(options_.timeout) +
                                                       " waiting for " + peer(next()) + " to take this rank's frames");
      if (broken_ || stopping_) continue;
    }
    if (!job.dest) {  // wait for a free staging slot
      if (!recv_cv_.wait_until(lock, job.deadline, [&] {
            return broken_ || stopping_ || staged_released_ + kStagingSlots > job.staged_index;
          })) {
        break_locked(CollectiveErrorKind::timeout,
                     "timed out after " + format_timeout(options_.timeout) + " summing staged chunks");
      }
      if (broken_ || stopping_) continue;
      job.dest = staging(job.staged_index);
    }
    recv_busy_ = true;
    lock.unlock();
    try {
      receive_one(job);
    } catch (const Broken& b) {
      fail(b.kind, b.detail);
    } catch (const IoError& e) {
      const FrameFields& x = job.expect;
      fail(e.timed_out ? CollectiveErrorKind::timeout : CollectiveErrorKind::aborted,
           e.timed_out
               ? "timed out after " + format_timeout(options_.timeout) + " waiting for " + peer(prev()) + " to send " +
                     kind_name(x.kind) + " step " + std::to_string(x.step) + " chunk " + std::to_string(x.chunk)
               : "connection from " + peer(prev()) + " lost: " + e.what());
    } catch (const std::exception& e) {
      fail(CollectiveErrorKind::aborted, std::string("receiving from ") + peer(prev()) + ": " + e.what());
    }
    lock.lock();
    recv_busy_ = false;
    ++recvs_done_;
    done_cv_.notify_all();
  }
}

// Reads one frame and checks it against what this rank expects; never reads
// or allocates by a length the peer sent.
void TcpGroup::receive_one(const RecvJob& job) {
  const FrameFields& x = job.expect;
  const std::string from = "frame from " + peer(prev()) + " (expected " + kind_name(x.kind) + " #" +
                           std::to_string(x.op_seq) + " step " + std::to_string(x.step) + " chunk " +
                           std::to_string(x.chunk) + "): ";
  auto bad = [&](CollectiveErrorKind kind, const std::string& what) { throw Broken{kind, from + what}; };
  // The 4-byte length prefix at offset 4 and the header at 8, aligned for
  // Cap'n Proto. Sealed, the two come in one record; the payload follows
  // in one more, or, from a sender with seal helpers, in the records
  // wire::split_records gives (at most wire::kRingRecordBytes each).
  alignas(8) unsigned char buffer[8 + wire::kMaxHeaderBytes];
  const unsigned char* prefix = buffer + 4;
  unsigned char* header = buffer + 8;
  std::size_t sealed_bytes = 0;
  if (recv_link_.sealed())
    sealed_bytes = recv_link_.opener->read(recv_fd_, buffer + 4, 4 + wire::kMaxHeaderBytes, job.deadline);
  else
    wire::read_all(recv_fd_, buffer + 4, 4, job.deadline);
  const std::uint32_t header_bytes =
      static_cast<std::uint32_t>(prefix[0]) | (static_cast<std::uint32_t>(prefix[1]) << 8) |
      (static_cast<std::uint32_t>(prefix[2]) << 16) | (static_cast<std::uint32_t>(prefix[3]) << 24);
  if (header_bytes == 0 || header_bytes > wire::kMaxHeaderBytes || header_bytes % 8 != 0 ||
      (recv_link_.sealed() && sealed_bytes != 4 + header_bytes))
    bad(CollectiveErrorKind::aborted, "header length field " + std::to_string(header_bytes) +
                                          " bytes (expected a multiple of 8, at most " +
                                          std::to_string(wire::kMaxHeaderBytes) + ", filling its record)");
  if (!recv_link_.sealed()) wire::read_all(recv_fd_, header, header_bytes, job.deadline);
  FrameFields f;
  try {
    f = wire::decode_frame_header(header, header_bytes);
  } catch (const std::runtime_error& e) {
    bad(CollectiveErrorKind::aborted, e.what());
  }
  if (f.job_id != x.job_id)
    bad(CollectiveErrorKind::aborted, "job id " + hex(f.job_id) + ", expected " + hex(x.job_id));
  if (f.kind != x.kind || f.op_seq != x.op_seq)
    bad(CollectiveErrorKind::invalid, std::string("the peer issued ") + kind_name(f.kind) + " #" +
                                          std::to_string(f.op_seq) + " (op number or kind differs)");
  if (f.total_bytes != x.total_bytes)
    bad(CollectiveErrorKind::invalid, "the peer's buffer has " + std::to_string(f.total_bytes) +
                                          " bytes, this rank's " + std::to_string(x.total_bytes) +
                                          " (total_bytes differs)");
  if (f.step != x.step) bad(CollectiveErrorKind::aborted, "step " + std::to_string(f.step));
  if (f.chunk != x.chunk) bad(CollectiveErrorKind::aborted, "chunk " + std::to_string(f.chunk));
  if (f.length != x.length)
    bad(CollectiveErrorKind::aborted,
        "payload length field " + std::to_string(f.length) + " bytes, expected " + std::to_string(x.length));
  if (recv_link_.sealed()) {
    // Opened in place: when the tag does not match, the destination holds
    // garbage and the operation fails (the group is broken), so nothing
    // trains on it.
    recv_link_.opener->read_exact_split(recv_fd_, job.dest, x.length, wire::kRingRecordBytes, job.deadline);
    return;
  }
  wire::read_all(recv_fd_, job.dest, x.length, job.deadline);
  const std::uint32_t crc = wire::crc32c(job.dest, x.length);
  if (crc != f.crc32c)
    bad(CollectiveErrorKind::aborted, "crc32c " + hex(f.crc32c) + " in the header, " + hex(crc) + " of the payload");
}

// ------------------------------------------------------- calling thread

std::uint64_t TcpGroup::post_send(const FrameFields& f, const char* data, Deadline deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) throw_broken_locked();
  send_queue_.push_back({f, data, deadline});
  send_cv_.notify_one();
  return sends_posted_++;
}

std::uint64_t TcpGroup::post_recv(const FrameFields& expect, char* dest, Deadline deadline, std::uint64_t after_sends) {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_) throw_broken_locked();
  RecvJob job{expect, dest, 0, deadline, after_sends};
  if (!dest) job.staged_index = staged_posted_++;
  recv_queue_.push_back(job);
  recv_cv_.notify_one();
  return recvs_posted_++;
}

void TcpGroup::wait_recv(std::uint64_t index, const FrameFields& x, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_cv_.wait_until(lock, deadline, [&] { return broken_ || recvs_done_ > index; }))
    break_locked(CollectiveErrorKind::timeout, "timed out after " + format_timeout(options_.timeout) + " waiting for " +
                                                   peer(prev()) + " to send " + kind_name(x.kind) + " step " +
                                                   std::to_string(x.step) + " chunk " + std::to_string(x.chunk));
  if (broken_) throw_broken_locked();
}

void TcpGroup::wait_sends(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!done_cv_.wait_until(lock, deadline, [&] { return broken_ || sends_done_ == sends_posted_; }))
    break_locked(CollectiveErrorKind::timeout, "timed out after " + format_timeout(options_.timeout) + " waiting for " +
                                                   peer(next()) + " to take this rank's frames");
  if (broken_) throw_broken_locked();
}

// After a failure: no job may touch the caller's buffers once we return.
// The sockets are shut down, so a thread inside a job leaves it at once.
void TcpGroup::quiesce() {
  std::unique_lock<std::mutex> lock(mu_);
  sends_posted_ -= send_queue_.size();
  send_queue_.clear();
  recvs_posted_ -= recv_queue_.size();
  recv_queue_.clear();
  staged_posted_ = staged_released_ = 0;
  done_cv_.wait_until(lock, Clock::now() + options_.timeout, [&] { return !send_busy_ && !recv_busy_; });
  recvs_done_ = recvs_posted_;
  sends_done_ = sends_posted_;
}

template <class Body>
std::shared_ptr<Work> TcpGroup::run(const std::string& label, Body body) {
  const Deadline deadline = Clock::now() + options_.timeout;
  try {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_) throw_broken_locked();
    }
    body(deadline);
    return completed_work();
  } catch (const CollectiveError&) {  // bad arguments: nothing was sent
    return completed_work(std::current_exception());
  } catch (const Broken& b) {
    quiesce();
    return completed_work(std::make_exception_ptr(CollectiveError(b.kind, label + ": " + b.detail)));
  } catch (const std::exception& e) {
    fail(CollectiveErrorKind::aborted, std::string("failed: ") + e.what());
    quiesce();
    return completed_work(
        std::make_exception_ptr(CollectiveError(CollectiveErrorKind::aborted, label + ": failed: " + e.what())));
  }
}

// Reduce-scatter on the ring, in place: after W-1 steps rank r's segment r
// holds the sum over all ranks (each rank adds its own contribution to the
// partial sum it received and passes it on). Step s sends segment r-1-s and
// receives segment r-2-s, which is the one step s+1 sends, chunk by chunk.
TcpGroup::SendIndex TcpGroup::ring_reduce_scatter(std::uint16_t kind, std::uint64_t seq, std::uint64_t total,
                                                  char* base, const std::vector<Segment>& segs, ReduceOp op,
                                                  bool gather_after, Deadline deadline) {
  const int w = world_;
  auto send_seg = [&](int s) { return segs[static_cast<std::size_t>(mod(rank_ - 1 - s, w))]; };
  auto recv_seg = [&](int s) { return segs[static_cast<std::size_t>(mod(rank_ - 2 - s, w))]; };
  std::vector<std::uint64_t> ids;
  std::vector<FrameFields> expects;
  for (int s = 0; s < w - 1; ++s) {
    const Segment seg = recv_seg(s);
    for (std::size_t c = 0; c < chunks_of(seg.bytes); ++c) {
      expects.push_back(frame(kind, seq, total, static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(c),
                              chunk_in(seg, c).bytes));
      ids.push_back(post_recv(expects.back(), nullptr, deadline));
    }
  }
  SendIndex sent(static_cast<std::size_t>(w - 1));
  const Segment first = send_seg(0);
  for (std::size_t c = 0; c < chunks_of(first.bytes); ++c) {
    const Segment ch = chunk_in(first, c);
    sent[0].push_back(
        post_send(frame(kind, seq, total, 0, static_cast<std::uint32_t>(c), ch.bytes), base + ch.offset, deadline));
  }
  std::size_t k = 0;
  std::uint64_t staged = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    staged = staged_posted_ - ids.size();  // the staged index of this operation's first receive
  }
  for (int s = 0; s < w - 1; ++s) {
    const Segment seg = recv_seg(s);
    for (std::size_t c = 0; c < chunks_of(seg.bytes); ++c, ++k, ++staged) {
      wait_recv(ids[k], expects[k], deadline);
      const Segment ch = chunk_in(seg, c);
      auto* dst = reinterpret_cast<float*>(base + ch.offset);
      add_into(dst, reinterpret_cast<const float*>(staging(staged)), ch.bytes / sizeof(float));
      release_staging();
      const bool last = s == w - 2;
      if (last && op == ReduceOp::mean) scale(dst, ch.bytes / sizeof(float), 1.0f / static_cast<float>(w));
      if (!last || gather_after) {
        const auto index = post_send(
            frame(kind, seq, total, static_cast<std::uint32_t>(s + 1), static_cast<std::uint32_t>(c), ch.bytes),
            base + ch.offset, deadline);
        if (!last) sent[static_cast<std::size_t>(s + 1)].push_back(index);
      }
    }
  }
  return sent;
}

// All-gather on the ring: rank r starts with segment r; step t sends segment
// r-t and receives segment r-t-1 straight into the buffer, which step t+1
// forwards. Frames are numbered from step_base.
void TcpGroup::ring_allgather(std::uint16_t kind, std::uint64_t seq, std::uint64_t total, char* base,
                              const std::vector<Segment>& segs, std::uint32_t step_base, const SendIndex* after,
                              Deadline deadline) {
  const int w = world_;
  auto recv_seg = [&](int t) { return segs[static_cast<std::size_t>(mod(rank_ - t - 1, w))]; };
  std::vector<std::uint64_t> ids;
  std::vector<FrameFields> expects;
  for (int t = 0; t < w - 1; ++t) {
    const Segment seg = recv_seg(t);
    for (std::size_t c = 0; c < chunks_of(seg.bytes); ++c) {
      const Segment ch = chunk_in(seg, c);
      expects.push_back(
          frame(kind, seq, total, step_base + static_cast<std::uint32_t>(t), static_cast<std::uint32_t>(c), ch.bytes));
      // The reduce-scatter's step t sent from this very chunk.
      const std::uint64_t after_sends = after ? (*after)[static_cast<std::size_t>(t)][c] + 1 : 0;
      ids.push_back(post_recv(expects.back(), base + ch.offset, deadline, after_sends));
    }
  }
  if (!after) {  // else the reduce-scatter already posted step 0's sends
    const Segment mine = segs[static_cast<std::size_t>(rank_)];
    for (std::size_t c = 0; c < chunks_of(mine.bytes); ++c) {
      const Segment ch = chunk_in(mine, c);
      post_send(frame(kind, seq, total, step_base, static_cast<std::uint32_t>(c), ch.bytes), base + ch.offset,
                deadline);
    }
  }
  std::size_t k = 0;
  for (int t = 0; t < w - 1; ++t) {
    const Segment seg = recv_seg(t);
    for (std::size_t c = 0; c < chunks_of(seg.bytes); ++c, ++k) {
      wait_recv(ids[k], expects[k], deadline);
      if (t < w - 2) {
        const Segment ch = chunk_in(seg, c);
        post_send(frame(kind, seq, total, step_base + static_cast<std::uint32_t>(t + 1), static_cast<std::uint32_t>(c),
                        ch.bytes),
                  base + ch.offset, deadline);
      }
    }
  }
}

// ------------------------------------------------------------ operations

std::string describe(const Tensor& t) { return t.defined() ? t.describe() : std::string("an undefined tensor"); }

// Throws CollectiveError(invalid) unless `t` is a usable host buffer.
void check_buffer(const std::string& label, const std::string& what, const Tensor& t, bool needs_f32) {
  auto invalid = [&](const std::string& m) { throw CollectiveError(CollectiveErrorKind::invalid, label + ": " + m); };
  if (!t.defined() || (t.numel() > 0 && t.raw() == nullptr)) invalid(what + " is " + describe(t));
  if (t.device().is_cuda())
    invalid(what + " is " + t.describe() +
            ": the tcp backend moves host buffers only (stage GPU buffers on the host, or use nccl)");
  if (needs_f32 && t.dtype() != kernels::DType::f32) invalid(what + " is " + t.describe() + ": reductions need f32");
}

// allreduce's segments: W near-equal parts cut on 64-byte boundaries.
std::vector<Segment> aligned_segments(std::size_t bytes, int w) {
  constexpr std::size_t kAlign = 64;
  const std::size_t per = (bytes + static_cast<std::size_t>(w) - 1) / static_cast<std::size_t>(w);
  const std::size_t step = (per + kAlign - 1) / kAlign * kAlign;
  std::vector<Segment> segs;
  for (int r = 0; r < w; ++r) {
    const std::size_t begin = std::min(bytes, step * static_cast<std::size_t>(r));
    segs.push_back({begin, std::min(bytes, begin + step) - begin});
  }
  return segs;
}

std::vector<Segment> equal_segments(std::size_t each, int w) {
  std::vector<Segment> segs;
  for (int r = 0; r < w; ++r) segs.push_back({each * static_cast<std::size_t>(r), each});
  return segs;
}

std::shared_ptr<Work> TcpGroup::allreduce(const Tensor& buffer, ReduceOp op) {
  const std::uint64_t seq = next_seq_++;
  const std::string label = "allreduce #" + std::to_string(seq) + where();
  return run(label, [&](Deadline deadline) {
    check_buffer(label, "the buffer", buffer, true);
    if (world_ == 1 || buffer.numel() == 0) return;
    char* base = static_cast<char*>(buffer.raw());
    const auto segs = aligned_segments(buffer.bytes(), world_);
    const auto sent =
        ring_reduce_scatter(kAllreduce, seq, buffer.bytes(), base, segs, op, /*gather_after=*/true, deadline);
    ring_allgather(kAllreduce, seq, buffer.bytes(), base, segs, static_cast<std::uint32_t>(world_ - 1), &sent,
                   deadline);
    wait_sends(deadline);
  });
}

std::shared_ptr<Work> TcpGroup::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  const std::uint64_t seq = next_seq_++;
  const std::string label = "reduce_scatter #" + std::to_string(seq) + where();
  return run(label, [&](Deadline deadline) {
    check_buffer(label, "the input", input, true);
    check_buffer(label, "the output", output, true);
    const auto w = static_cast<std::int64_t>(world_);
    if (input.numel() % w != 0)
      throw CollectiveError(CollectiveErrorKind::invalid,
                            label + ": the input " + input.describe() + " has " + std::to_string(input.numel()) +
                                " elements, not a multiple of the group size " + std::to_string(w));
    if (output.numel() != input.numel() / w)
      throw CollectiveError(CollectiveErrorKind::invalid, label + ": the output " + output.describe() +
                                                              " should have " + std::to_string(input.numel() / w) +
                                                              " elements (input " + input.describe() + " / " +
                                                              std::to_string(w) + " ranks)");
    const std::size_t each = output.bytes();
    if (each == 0) return;
    // The ring sums in place, so it works on a copy and leaves the input as
    // it was (the output may be this rank's chunk of the input).
    std::vector<char>& work = scratch_;
    work.assign(input.bytes(), 0);
    std::memcpy(work.data(), input.raw(), input.bytes());
    if (world_ > 1) {
      ring_reduce_scatter(kReduceScatter, seq, input.bytes(), work.data(), equal_segments(each, world_), op,
                          /*gather_after=*/false, deadline);
      wait_sends(deadline);
    }
    std::memmove(output.raw(), work.data() + each * static_cast<std::size_t>(rank_), each);
  });
}

std::shared_ptr<Work> TcpGroup::allgather(const Tensor& input, const Tensor& output) {
  const std::uint64_t seq = next_seq_++;
  const std::string label = "allgather #" + std::to_string(seq) + where();
  return run(label, [&](Deadline deadline) {
    check_buffer(label, "the input", input, false);
    check_buffer(label, "the output", output, false);
    if (output.numel() != input.numel() * world_ || output.dtype() != input.dtype())
      throw CollectiveError(CollectiveErrorKind::invalid,
                            label + ": the output " + output.describe() + " should be " +
                                kernels::to_string(input.dtype()) + " with " + std::to_string(input.numel() * world_) +
                                " elements (input " + input.describe() + " x " + std::to_string(world_) + " ranks)");
    const std::size_t each = input.bytes();
    if (each == 0) return;
    char* base = static_cast<char*>(output.raw());
    char* mine = base + each * static_cast<std::size_t>(rank_);
    if (mine != input.raw()) std::memmove(mine, input.raw(), each);
    if (world_ == 1) return;
    ring_allgather(kAllgather, seq, output.bytes(), base, equal_segments(each, world_), 0, nullptr, deadline);
    wait_sends(deadline);
  });
}

std::shared_ptr<Work> TcpGroup::broadcast(const Tensor& buffer, int root) {
  const std::uint64_t seq = next_seq_++;
  const std::string label = "broadcast #" + std::to_string(seq) + " from rank " + std::to_string(root) + where();
  return run(label, [&](Deadline deadline) {
    check_buffer(label, "the buffer", buffer, false);
    if (root < 0 || root >= world_)
      throw CollectiveError(CollectiveErrorKind::invalid, label + ": root " + std::to_string(root) +
                                                              " is not a rank of a group of " + std::to_string(world_));
    if (world_ == 1 || buffer.numel() == 0) return;
    char* base = static_cast<char*>(buffer.raw());
    const Segment all{0, buffer.bytes()};
    const std::size_t n = chunks_of(all.bytes);
    const int distance = mod(rank_ - root, world_);  // hops from the root
    const bool forwards = distance < world_ - 1;
    const auto total = static_cast<std::uint64_t>(buffer.bytes());
    if (distance == 0) {
      for (std::size_t c = 0; c < n; ++c) {
        const Segment ch = chunk_in(all, c);
        post_send(frame(kBroadcast, seq, total, 0, static_cast<std::uint32_t>(c), ch.bytes), base + ch.offset,
                  deadline);
      }
    } else {
      std::vector<std::uint64_t> ids;
      std::vector<FrameFields> expects;
      for (std::size_t c = 0; c < n; ++c) {
        const Segment ch = chunk_in(all, c);
        expects.push_back(frame(kBroadcast, seq, total, 0, static_cast<std::uint32_t>(c), ch.bytes));
        ids.push_back(post_recv(expects.back(), base + ch.offset, deadline));
      }
      for (std::size_t c = 0; c < n; ++c) {
        wait_recv(ids[c], expects[c], deadline);
        if (forwards) post_send(expects[c], base + chunk_in(all, c).offset, deadline);
      }
    }
    wait_sends(deadline);
  });
}

std::shared_ptr<Work> TcpGroup::barrier() {
  const std::uint64_t seq = next_seq_++;
  const std::string label = "barrier #" + std::to_string(seq) + where();
  return run(label, [&](Deadline deadline) {
    if (world_ == 1) return;
    // An all-gather of one word per rank: after its W-1 steps every rank has
    // heard (through the ring) from every other.
    // (In scratch_, which outlives a failure's quiesce().)
    scratch_.assign(static_cast<std::size_t>(world_) * 4, 0);
    const auto word = static_cast<std::uint32_t>(rank_);
    std::memcpy(scratch_.data() + 4 * static_cast<std::size_t>(rank_), &word, 4);
    ring_allgather(kBarrier, seq, scratch_.size(), scratch_.data(), equal_segments(4, world_), 0, nullptr, deadline);
    wait_sends(deadline);
  });
}

std::shared_ptr<Work> TcpGroup::send(const Tensor& buffer, int dst, int tag) {
  const std::string label = "send to rank " + std::to_string(dst) + " (tag " + std::to_string(tag) + ")" + where();
  return run(label, [&](Deadline deadline) {
    check_buffer(label, "the buffer", buffer, false);
    if (dst < 0 || dst >= world_ || dst == rank_ || dst != next())
      throw CollectiveError(CollectiveErrorKind::invalid,
                            label + ": the tcp backend sends along the ring only, from rank " + std::to_string(rank_) +
                                " to rank " + std::to_string(next()) + " (not to rank " + std::to_string(dst) + ")");
    const Segment all{0, buffer.bytes()};
    const auto total = static_cast<std::uint64_t>(buffer.bytes());
    const auto seq = static_cast<std::uint64_t>(static_cast<std::int64_t>(tag));
    const char* base = static_cast<const char*>(buffer.raw());
    const std::size_t n = std::max<std::size_t>(1, chunks_of(all.bytes));  // one frame even when empty
    for (std::size_t c = 0; c < n; ++c) {
      const Segment ch = all.bytes ? chunk_in(all, c) : Segment{};
      post_send(frame(kSend, seq, total, 0, static_cast<std::uint32_t>(c), ch.bytes), base + ch.offset, deadline);
    }
    wait_sends(deadline);
    // The receiver acknowledges its copy on the same connection.
    unsigned char ack[wire::kAckBytes];
    try {
      receive_message(send_link_, ack, sizeof ack, deadline);
    } catch (const IoError& e) {
      throw Broken{e.timed_out ? CollectiveErrorKind::timeout : CollectiveErrorKind::aborted,
                   e.timed_out ? "timed out after " + format_timeout(options_.timeout) + " waiting for " +
                                     peer(next()) + " to receive"
                               : "connection to " + peer(next()) + " lost: " + e.what()};
    }
    std::uint32_t magic = 0, got_tag = 0;
    for (int i = 3; i >= 0; --i) {
      magic = (magic << 8) | ack[i];
      got_tag = (got_tag << 8) | ack[4 + i];
    }
    if (magic != wire::kAckMagic || static_cast<int>(got_tag) != tag)
      throw Broken{CollectiveErrorKind::aborted, "bad acknowledgement from " + peer(next()) + " (magic " + hex(magic) +
                                                     ", tag " + std::to_string(static_cast<int>(got_tag)) + ")"};
  });
}

std::shared_ptr<Work> TcpGroup::recv(const Tensor& buffer, int src, int tag) {
  const std::string label = "recv from rank " + std::to_string(src) + " (tag " + std::to_string(tag) + ")" + where();
  return run(label, [&](Deadline deadline) {
    check_buffer(label, "the buffer", buffer, false);
    if (src < 0 || src >= world_ || src == rank_ || src != prev())
      throw CollectiveError(CollectiveErrorKind::invalid,
                            label + ": the tcp backend receives along the ring only, on rank " + std::to_string(rank_) +
                                " from rank " + std::to_string(prev()) + " (not from rank " + std::to_string(src) +
                                ")");
    const Segment all{0, buffer.bytes()};
    const auto total = static_cast<std::uint64_t>(buffer.bytes());
    const auto seq = static_cast<std::uint64_t>(static_cast<std::int64_t>(tag));
    char* base = static_cast<char*>(buffer.raw());
    const std::size_t n = std::max<std::size_t>(1, chunks_of(all.bytes));
    std::vector<std::uint64_t> ids;
    std::vector<FrameFields> expects;
    for (std::size_t c = 0; c < n; ++c) {
      const Segment ch = all.bytes ? chunk_in(all, c) : Segment{};
      expects.push_back(frame(kSend, seq, total, 0, static_cast<std::uint32_t>(c), ch.bytes));
      ids.push_back(post_recv(expects.back(), base + ch.offset, deadline));
    }
    for (std::size_t c = 0; c < n; ++c) wait_recv(ids[c], expects[c], deadline);
    unsigned char ack[wire::kAckBytes];
    for (int i = 0; i < 4; ++i) {
      ack[i] = static_cast<unsigned char>(wire::kAckMagic >> (8 * i));
      ack[4 + i] = static_cast<unsigned char>(static_cast<std::uint32_t>(tag) >> (8 * i));
    }
    try {
      send_message(recv_link_, ack, sizeof ack, deadline);
    } catch (const IoError& e) {
      throw Broken{CollectiveErrorKind::aborted, "connection from " + peer(prev()) + " lost: " + e.what()};
    }
  });
}

}  // namespace

std::unique_ptr<Collective> make_tcp_group(TcpGroupConfig config) {
  const int world = static_cast<int>(config.addresses.size());
  auto invalid = [&](const std::string& m) {
    if (config.listen_fd >= 0) ::close(config.listen_fd);
    throw std::invalid_argument("make_tcp_group: " + m);
  };
  if (world < 1) invalid("no addresses");
  if (config.rank < 0 || config.rank >= world)
    invalid("rank " + std::to_string(config.rank) + " is not in 0.." + std::to_string(world - 1));
  if (config.options.timeout.count() <= 0 || config.connect_timeout.count() <= 0)
    invalid("the timeouts must be positive");
  if (config.chunk_bytes == 0 || config.chunk_bytes % 4 != 0 || config.chunk_bytes > (std::size_t{1} << 30))
    invalid("chunk_bytes " + std::to_string(config.chunk_bytes) + " must be a positive multiple of 4, at most 1 GiB");
  if (world == 1) {
    if (config.listen_fd >= 0) ::close(config.listen_fd);
    return std::make_unique<TcpGroup>(config, Link{}, Link{});
  }
  int listen_fd = config.listen_fd;
  if (listen_fd < 0) {
    const std::string& mine = config.addresses[static_cast<std::size_t>(config.rank)];
    const auto colon = mine.rfind(':');
    if (colon == std::string::npos || mine.substr(colon + 1) == "0")
      invalid("rank " + std::to_string(config.rank) + "'s address '" + mine +
              "' needs a port (0 only with a pre-bound listen_fd)");
    listen_fd = listen_tcp(mine, nullptr);
  }
  RingLinks links = connect_ring(config, listen_fd);
  return std::make_unique<TcpGroup>(config, std::move(links.send), std::move(links.recv));
}

int ring_seal_helpers(unsigned cores) { return static_cast<int>(std::min(3u, cores >= 8 ? cores / 4 - 1 : 0u)); }

}  // namespace troupe::net
