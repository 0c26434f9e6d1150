// Records of a protected connection (sealed.hpp).
#include "net/transport/sealed.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <utility>

#include "net/transport/socket.hpp"
#include "util/spin.hpp"

namespace troupe::net::wire {

namespace {
void put_length(char* p, std::size_t bytes) {
  const auto v = static_cast<std::uint32_t>(bytes);
  for (std::size_t i = 0; i < kRecordPrefixBytes; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
std::size_t get_length(const unsigned char* p) {
  std::uint32_t v = 0;
  for (std::size_t i = kRecordPrefixBytes; i-- > 0;) v = (v << 8) | p[i];
  return v;
}
}  // namespace

std::vector<std::size_t> split_records(std::size_t bytes, std::size_t record_bytes) {
  if (record_bytes == 0) throw std::invalid_argument("split_records: records of 0 bytes");
  const std::size_t smallest = std::max<std::size_t>(record_bytes / 8, 1);
  if (bytes <= smallest) return {bytes};
  // From both ends at once, each end's records doubling up to
  // record_bytes: what is left when they meet is the middle record.
  std::vector<std::size_t> front, back;
  std::size_t left = bytes, next_front = smallest, next_back = smallest;
  while (left > 0) {
    std::size_t n = std::min(next_front, left);
    front.push_back(n);
    left -= n;
    next_front = std::min(2 * next_front, record_bytes);
    if (left == 0) break;
    n = std::min(next_back, left);
    back.push_back(n);
    left -= n;
    next_back = std::min(2 * next_back, record_bytes);
  }
  front.insert(front.end(), back.rbegin(), back.rend());
  return front;
}

RecordWorkers::RecordWorkers(const AeadDirection& aead, int helpers, std::chrono::microseconds spin)
    : spin_(std::max(spin, std::chrono::microseconds(0))) {
  for (int i = 0; i < helpers; ++i) ciphers_.push_back(aead.twin());
  for (auto& cipher : ciphers_) threads_.emplace_back([this, c = cipher.get()] { helper_loop(*c); });
}

RecordWorkers::~RecordWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    posts_.fetch_add(1, std::memory_order_release);  // a spinning helper looks again
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void RecordWorkers::await_an_end(std::unique_lock<std::mutex>& lock) {
  const std::uint64_t seen = ends_.load(std::memory_order_relaxed);  // under the lock: no end is missed
  if (spin_.count() > 0) {
    lock.unlock();
    util::spin_until([&] { return ends_.load(std::memory_order_acquire) != seen; }, spin_);
    lock.lock();
  }
  if (ends_.load(std::memory_order_relaxed) == seen) done_cv_.wait(lock);
}

void RecordWorkers::begin(std::function<void(std::size_t, AeadCipher&)> work, std::size_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  work_ = std::move(work);
  queue_.clear();
  done_.assign(count, 0);
  error_ = nullptr;
}

void RecordWorkers::post(std::size_t index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(index);
    posts_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_one();
}

bool RecordWorkers::run_one(std::unique_lock<std::mutex>& lock, AeadCipher& cipher) {
  if (queue_.empty()) return false;
  const std::size_t index = queue_.front();
  queue_.pop_front();
  ++in_flight_;
  lock.unlock();
  std::exception_ptr error;
  try {
    work_(index, cipher);  // work_ changes only in begin(), after every piece is done
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  if (error && !error_) error_ = error;
  --in_flight_;
  done_[index] = 1;
  ends_.fetch_add(1, std::memory_order_release);
  done_cv_.notify_all();  // finish() waits for all, wait_for() for one
  return true;
}

void RecordWorkers::helper_loop(AeadCipher& cipher) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!stopping_ && queue_.empty() && spin_.count() > 0) {
      const std::uint64_t seen = posts_.load(std::memory_order_relaxed);
      lock.unlock();
      util::spin_until([&] { return posts_.load(std::memory_order_acquire) != seen; }, spin_);
      lock.lock();
    }
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    run_one(lock, cipher);
  }
}

void RecordWorkers::finish(AeadCipher& own) {
  std::unique_lock<std::mutex> lock(mu_);
  while (run_one(lock, own)) {}
  // What the helpers still run is CPU work on records already in memory:
  // it ends without waiting on any peer.
  while (!queue_.empty() || in_flight_ > 0) await_an_end(lock);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

std::size_t RecordWorkers::wait_for(std::size_t index, AeadCipher& own,
                                    const std::function<bool(std::size_t)>& owner_may_run) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!done_.at(index) && !error_) {
    // Posted in order and taken from the front: a piece no helper has
    // started is at the front once every piece before it has started.
    if (!queue_.empty() && (queue_.front() == index || (owner_may_run && owner_may_run(queue_.front())))) {
      run_one(lock, own);
      continue;
    }
    await_an_end(lock);
  }
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  std::size_t end = index;
  while (end < done_.size() && done_[end]) ++end;
  return end;
}

void RecordWorkers::abandon() {
  std::unique_lock<std::mutex> lock(mu_);
  queue_.clear();
  done_cv_.wait(lock, [&] { return in_flight_ == 0; });
  error_ = nullptr;
}

void RecordSealer::seal(const void* in, std::size_t bytes, char* out) {
  if (bytes > UINT32_MAX) throw std::invalid_argument("a record of more than 4 GiB");
  put_length(out, bytes);
  aead_.seal(out, kRecordPrefixBytes, in, out + kRecordPrefixBytes, bytes,
             reinterpret_cast<unsigned char*>(out + kRecordPrefixBytes + bytes));
}

char* RecordSealer::reserve_pending(std::size_t bytes) {
  const std::size_t need = pending_bytes_ + bytes;
  if (need > pending_capacity_) {
    std::unique_ptr<char[]> grown(new char[need]);
    // The first growth has no buffer to copy from (memcpy from null is
    // undefined even for no bytes: UBSan says so).
    if (pending_bytes_ > 0) std::memcpy(grown.get(), pending_.get(), pending_bytes_);
    pending_ = std::move(grown);
    pending_capacity_ = need;
  }
  char* at = pending_.get() + pending_bytes_;
  pending_bytes_ = need;
  return at;
}

void RecordSealer::append(const void* in, std::size_t bytes) {
  char* at = reserve_pending(bytes + kRecordOverhead);
  seal(in, bytes, at);
}

RecordSealer::~RecordSealer() = default;

void RecordSealer::set_helpers(int helpers, std::chrono::microseconds spin) {
  workers_ = helpers > 0 ? std::make_unique<RecordWorkers>(aead_, helpers, spin) : nullptr;
}

void RecordSealer::write_split(int fd, const void* in, std::size_t bytes, std::size_t record_bytes, Deadline deadline) {
  const std::vector<std::size_t> sizes = workers_ ? split_records(bytes, record_bytes) : std::vector<std::size_t>{};
  // Without helpers one record costs least (one cipher set-up, fewer reads
  // at the other end); the opener takes either layout.
  if (sizes.size() <= 1) {
    write(fd, in, bytes, deadline);
    return;
  }
  if (record_bytes > UINT32_MAX) throw std::invalid_argument("a record of more than 4 GiB");
  const std::size_t n = sizes.size();
  // Where each record's plaintext starts in `in` and its record in the
  // pending buffer, after the `before` bytes already pending (a frame's
  // header record, written with the first payload record).
  const std::size_t before = pending_bytes_;
  std::vector<std::size_t> in_at(n), out_at(n + 1);
  out_at[0] = before;
  for (std::size_t i = 1; i <= n; ++i) {
    if (i < n) in_at[i] = in_at[i - 1] + sizes[i - 1];
    out_at[i] = out_at[i - 1] + sizes[i - 1] + kRecordOverhead;
  }
  // Numbers first, in order: record i is message first + i whichever
  // thread seals it, so the bytes are those of n appends in turn.
  const std::uint64_t first = aead_.reserve(n);
  reserve_pending(bytes + n * kRecordOverhead);
  char* const buffer = pending_.get();
  const auto* src = static_cast<const char*>(in);
  auto seal_one = [&](std::size_t i, AeadCipher& cipher) {
    char* o = buffer + out_at[i];
    put_length(o, sizes[i]);
    cipher.seal(first + i, o, kRecordPrefixBytes, src + in_at[i], o + kRecordPrefixBytes, sizes[i],
                reinterpret_cast<unsigned char*>(o + kRecordPrefixBytes + sizes[i]));
  };
  workers_->begin(seal_one, n);
  for (std::size_t i = 0; i < n; ++i) workers_->post(i);
  try {
    // Each run of sealed records goes out while the helpers seal the
    // next ones; the first write (with what was pending) starts as soon
    // as the first, smallest record is sealed.
    // While record i is sealed by a helper the owner seals the next
    // unstarted one only if it is no bigger (it would otherwise hold back
    // the write of record i: the ramp's point).
    std::size_t written = 0;
    for (std::size_t i = 0; i < n;) {
      const std::size_t end =
          workers_->wait_for(i, aead_.cipher(), [&](std::size_t next) { return sizes[next] <= sizes[i]; });
      write_all(fd, buffer + written, out_at[end] - written, nullptr, 0, deadline);
      written = out_at[end];
      i = end;
    }
  } catch (...) {
    // No helper may still read `in` once the caller has the error; the
    // connection is given up.
    workers_->abandon();
    pending_bytes_ = 0;
    throw;
  }
  pending_bytes_ = 0;
}

void RecordSealer::flush(int fd, Deadline deadline) {
  // Emptied first: after a failed write the connection is given up anyway.
  const std::size_t bytes = std::exchange(pending_bytes_, 0);
  write_all(fd, pending_.get(), bytes, nullptr, 0, deadline);
}

void RecordSealer::write(int fd, const void* in, std::size_t bytes, Deadline deadline) {
  append(in, bytes);
  flush(fd, deadline);
}

void RecordOpener::refuse_length(std::size_t length, std::size_t max) const {
  throw std::runtime_error("record " + std::to_string(aead_.messages()) + " has a length field of " +
                           std::to_string(length) + " bytes, more than the " + std::to_string(max) +
                           " expected (altered on the way, or a peer that does not protect its link)");
}

void RecordOpener::authenticate(const unsigned char prefix[kRecordPrefixBytes], const void* in, void* out,
                                std::size_t bytes, const unsigned char* tag) {
  const std::uint64_t number = aead_.messages();
  if (!aead_.open(prefix, kRecordPrefixBytes, in, out, bytes, tag)) refuse_record(number);
}

std::size_t RecordOpener::read(int fd, void* dest, std::size_t max, Deadline deadline) {
  unsigned char prefix[kRecordPrefixBytes];
  read_all(fd, prefix, sizeof prefix, deadline);
  const std::size_t bytes = get_length(prefix);
  if (bytes > max) refuse_length(bytes, max);
  read_all(fd, dest, bytes, deadline);
  unsigned char tag[kAeadTagBytes];
  read_all(fd, tag, sizeof tag, deadline);
  authenticate(prefix, dest, dest, bytes, tag);  // in place
  return bytes;
}

void RecordOpener::read_exact(int fd, void* dest, std::size_t bytes, Deadline deadline) {
  unsigned char prefix[kRecordPrefixBytes];
  read_all(fd, prefix, sizeof prefix, deadline);
  const std::size_t length = get_length(prefix);
  if (length != bytes)
    throw std::runtime_error("record " + std::to_string(aead_.messages()) + " has a length field of " +
                             std::to_string(length) + " bytes, expected " + std::to_string(bytes) +
                             " (altered on the way, or a peer that does not protect its link)");
  read_all(fd, dest, bytes, deadline);
  unsigned char tag[kAeadTagBytes];
  read_all(fd, tag, sizeof tag, deadline);
  authenticate(prefix, dest, dest, bytes, tag);
}

RecordOpener::~RecordOpener() = default;

void RecordOpener::set_helpers(int helpers, std::chrono::microseconds spin) {
  workers_ = helpers > 0 ? std::make_unique<RecordWorkers>(aead_, helpers, spin) : nullptr;
}

void RecordOpener::refuse_record(std::uint64_t number) const {
  throw AuthenticationError("record " + std::to_string(number) +
                            " failed authentication: its bytes were altered on the way, or it was replayed, "
                            "reordered or dropped, or the peer holds other keys");
}

void RecordOpener::read_exact_split(int fd, void* dest, std::size_t bytes, std::size_t record_bytes,
                                    Deadline deadline) {
  if (aead_.spent()) refuse_record(aead_.messages());
  // The first record's length says the layout: the whole payload in one
  // record, or split_records' (the sender had helpers). Nothing else is
  // accepted, so the number of records is bounded by ours.
  unsigned char first_prefix[kRecordPrefixBytes];
  read_all(fd, first_prefix, kRecordPrefixBytes, deadline);
  const std::size_t first_length = get_length(first_prefix);
  // The split is worked out only when the payload is not one record (a
  // sender without helpers, the common case, costs no allocation here).
  const std::vector<std::size_t> sizes =
      first_length == bytes ? std::vector<std::size_t>{bytes} : split_records(bytes, record_bytes);
  if (first_length != bytes && (sizes.size() == 1 || first_length != sizes[0])) {
    aead_.spend();
    throw std::runtime_error("record " + std::to_string(aead_.messages()) + " has a length field of " +
                             std::to_string(first_length) + " bytes, expected " + std::to_string(bytes) +
                             (sizes.size() > 1 ? " (one record) or " + std::to_string(sizes[0]) + " (the first of " +
                                                     std::to_string(sizes.size()) + " records)"
                                               : std::string()) +
                             " (altered on the way, or a peer that does not protect its link)");
  }
  const std::size_t n = sizes.size();
  const std::uint64_t first = aead_.reserve(n);
  std::vector<std::array<unsigned char, kRecordPrefixBytes>> prefixes(n);
  std::vector<std::array<unsigned char, kAeadTagBytes>> tags(n);
  std::vector<char> failed(n, 0);  // each element written by the one thread that opens its record
  std::vector<std::size_t> at(n);
  for (std::size_t i = 1; i < n; ++i) at[i] = at[i - 1] + sizes[i - 1];
  char* d = static_cast<char*>(dest);
  auto open_one = [&](std::size_t i, AeadCipher& cipher) {
    if (!cipher.open(first + i, prefixes[i].data(), kRecordPrefixBytes, d + at[i], d + at[i], sizes[i], tags[i].data()))
      failed[i] = 1;
  };
  const bool parallel = workers_ && n > 1;
  if (parallel) workers_->begin(open_one, n);
  try {
    // Record i's tag and record i + 1's length prefix arrive together: one
    // read takes the ciphertext, the tag and the next length.
    unsigned char tail[kAeadTagBytes + kRecordPrefixBytes];
    std::memcpy(prefixes[0].data(), first_prefix, kRecordPrefixBytes);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t length = get_length(prefixes[i].data());
      if (length != sizes[i])
        throw std::runtime_error("record " + std::to_string(first + i) + " has a length field of " +
                                 std::to_string(length) + " bytes, expected " + std::to_string(sizes[i]) +
                                 " (altered on the way, or a peer that does not protect its link)");
      const bool last = i + 1 == n;
      read_all(fd, d + at[i], sizes[i], tail, kAeadTagBytes + (last ? 0 : kRecordPrefixBytes), deadline);
      std::memcpy(tags[i].data(), tail, kAeadTagBytes);
      if (!last) std::memcpy(prefixes[i + 1].data(), tail + kAeadTagBytes, kRecordPrefixBytes);
      if (parallel) {
        workers_->post(i);  // opened while the next one is read
      } else {
        open_one(i, aead_.cipher());
        if (failed[i]) {
          aead_.spend();
          refuse_record(first + i);
        }
      }
    }
  } catch (...) {
    // No helper may still write into `dest` once the caller has the error.
    if (parallel) workers_->abandon();
    aead_.spend();
    throw;
  }
  if (!parallel) return;
  workers_->finish(aead_.cipher());
  for (std::size_t i = 0; i < n; ++i)
    if (failed[i]) {
      aead_.spend();
      refuse_record(first + i);
    }
}

RecordOpener::Opened RecordOpener::open(const char* in, std::size_t available, char* out, std::size_t max) {
  if (available < kRecordPrefixBytes) return {};
  const auto* prefix = reinterpret_cast<const unsigned char*>(in);
  const std::size_t bytes = get_length(prefix);
  if (bytes > max) refuse_length(bytes, max);
  if (available < bytes + kRecordOverhead) return {};
  authenticate(prefix, in + kRecordPrefixBytes, out, bytes,
               reinterpret_cast<const unsigned char*>(in + kRecordPrefixBytes + bytes));
  return {bytes + kRecordOverhead, bytes};
}

}  // namespace troupe::net::wire
