// Records of a protected connection. After a handshake with the cluster
// secret (net/cluster/gate.hpp), every byte either way on a connection that
// may cross hosts — the gate's spliced CAF traffic and the tcp ring — travels
// in records:
//
//   u32 little-endian length L | L bytes of AES-256-GCM ciphertext | 16-byte tag
//
// The length is sent in the clear and covered by the tag (the AEAD's
// associated data); the nonce is the record's number in its direction, which
// both ends count, and each direction has a key of its own
// (net/crypto/aead.hpp). So a record that was altered (any bit, the length
// included), replayed, reordered, dropped or sent the wrong way fails to open,
// and the connection is dropped; nothing of that record or any later one is
// used.
//
// Both ends of a connection own one RecordSealer (what they send) and one
// RecordOpener (what they receive); a direction is used by one thread at a
// time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "net/crypto/aead.hpp"
#include "net/deadline.hpp"

namespace troupe::net::wire {

constexpr std::size_t kRecordPrefixBytes = 4;
constexpr std::size_t kRecordOverhead = kRecordPrefixBytes + kAeadTagBytes;

// A record that did not open: its bytes were changed on the way, or it was
// replayed, reordered or dropped (its number differs), or the peer holds
// other keys.
struct AuthenticationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Helper threads that seal or open the records of one frame in parallel
// (RecordSealer::write_split, RecordOpener::read_exact_split), each with a
// cipher of its own for the direction's key; the thread that owns the
// direction works too. On a host with idle cores this spreads AES-GCM over
// more than the one I/O thread per direction that otherwise does it in
// series with its socket copies (docs/BENCHMARKS.md, "Sealed links").
class RecordWorkers {
 public:
  // `helpers` threads (0: none; the owner does everything), each with a
  // twin of `aead`'s cipher. A thread that runs out of work, a helper
  // waiting for a piece or the owner waiting for one to be done, first
  // polls for up to `spin` before it sleeps (0: it sleeps at once). On a
  // host with idle cores that saves the wake-up of a sleeping thread per
  // hand-off, which under a hypervisor can cost tens of microseconds (an
  // idle virtual CPU halts and has to be scheduled again): a frame of
  // 1 MiB takes about 300 us to move, and every frame wakes the helpers
  // (docs/BENCHMARKS.md, "Sealed links"). A poll pauses the CPU
  // between looks and never holds the lock.
  RecordWorkers(const AeadDirection& aead, int helpers, std::chrono::microseconds spin = {});
  ~RecordWorkers();
  RecordWorkers(const RecordWorkers&) = delete;
  RecordWorkers& operator=(const RecordWorkers&) = delete;

  // One batch of `count` pieces: `work(i, cipher)` runs once for every
  // index i < count post()ed, on a helper or on the owner's thread (inside
  // finish() or wait_for()), with that thread's cipher. finish() returns
  // when every posted index is done and rethrows the first exception a
  // piece of work threw.
  void begin(std::function<void(std::size_t, AeadCipher&)> work, std::size_t count);
  void post(std::size_t index);
  void finish(AeadCipher& own);
  // Returns when piece `index` is done, with the end of the run of done
  // pieces from `index`: a sender writes pieces [index, end) at once.
  // Meanwhile the owner does `index` itself if no helper has started it,
  // and the next unstarted piece p if owner_may_run(p). Rethrows as
  // finish().
  std::size_t wait_for(std::size_t index, AeadCipher& own,
                       const std::function<bool(std::size_t)>& owner_may_run = nullptr);
  // Drops what is queued and waits for what runs (after the owner failed
  // mid-batch: no helper may touch the batch's buffers afterwards).
  void abandon();
  int helpers() const { return static_cast<int>(threads_.size()); }

 private:
  void helper_loop(AeadCipher& cipher);
  bool run_one(std::unique_lock<std::mutex>& lock, AeadCipher& cipher);  // false: queue empty
  // Returns once a piece has ended since the call (or on a spurious
  // wake-up: callers loop): polls for up to spin_ with `lock` released,
  // then sleeps on done_cv_.
  void await_an_end(std::unique_lock<std::mutex>& lock);
  std::vector<std::unique_ptr<AeadCipher>> ciphers_;
  std::vector<std::thread> threads_;
  const std::chrono::microseconds spin_;
  // Bumped under mu_ by post() / a piece's end (and stop): what a spinning
  // thread watches without the lock.
  std::atomic<std::uint64_t> posts_{0}, ends_{0};
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::function<void(std::size_t, AeadCipher&)> work_;
  std::deque<std::size_t> queue_;
  std::vector<char> done_;  // per piece of the batch
  std::size_t in_flight_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
};

// The record sizes a payload of `bytes` is split into: records of at most
// `record_bytes`, ramped at both ends (record_bytes / 8, / 4, / 2, then
// whole ones, the remainder in the middle, and down again), so that a
// sender writes its first record a few microseconds after it starts
// sealing and a receiver opens its last one a few microseconds after it
// has read it (docs/BENCHMARKS.md, "Sealed links"). One record for a
// payload of at most record_bytes / 8 (one empty record for no bytes).
// Both ends compute it from the frame's length, so it is never sent.
std::vector<std::size_t> split_records(std::size_t bytes, std::size_t record_bytes);

class RecordSealer {
 public:
  explicit RecordSealer(std::string_view key) : aead_(key) {}
  ~RecordSealer();
  // Seals `bytes` of `in` as one record of bytes + kRecordOverhead at `out`.
  // `in` may be out + kRecordPrefixBytes (sealed in place).
  void seal(const void* in, std::size_t bytes, char* out);
  // Seals a record into the pending buffer; flush() writes everything
  // pending in one go (IoError as wire::write_all).
  void append(const void* in, std::size_t bytes);
  void flush(int fd, Deadline deadline);
  // append then flush.
  void write(int fd, const void* in, std::size_t bytes, Deadline deadline);
  // Writes what is pending, then a payload: with helpers (set_helpers), as
  // append() of each record that split_records(bytes, record_bytes) gives,
  // in turn, but sealed in parallel and each written as soon as it and
  // those before it are sealed (the helpers seal the later ones while it
  // is written): the same bytes whichever threads seal them. Without, one
  // record, as write(). IoError as wire::write_all; the connection is
  // given up after one.
  void write_split(int fd, const void* in, std::size_t bytes, std::size_t record_bytes, Deadline deadline);
  // Helper threads for write_split (0: none, the default), polling for
  // up to `spin` before they sleep (RecordWorkers).
  void set_helpers(int helpers, std::chrono::microseconds spin = {});
  std::uint64_t records() const { return aead_.messages(); }

 private:
  char* reserve_pending(std::size_t bytes);  // room for `bytes` more pending bytes
  AeadDirection aead_;
  std::unique_ptr<RecordWorkers> workers_;
  // Records sealed and not yet written: [0, pending_bytes_) of pending_
  // (grown as needed, never zero-filled: a frame is sealed straight into it).
  std::unique_ptr<char[]> pending_;
  std::size_t pending_bytes_ = 0, pending_capacity_ = 0;
};

class RecordOpener {
 public:
  explicit RecordOpener(std::string_view key) : aead_(key) {}
  ~RecordOpener();
  // Reads one record of at most `max` bytes from `fd` and opens it into
  // `dest`; returns its length. Throws IoError (as wire::read_all),
  // std::runtime_error for a length over `max` (nothing more is read), and
  // AuthenticationError.
  std::size_t read(int fd, void* dest, std::size_t max, Deadline deadline);
  // As read(), for a record that must hold exactly `bytes`.
  void read_exact(int fd, void* dest, std::size_t bytes, Deadline deadline);
  // Reads a payload of `bytes` that write_split sent, one record or the
  // records split_records(bytes, record_bytes) gives (the first length
  // says which; anything else is refused), each into its place in `dest`,
  // and opens them, in parallel by the helpers (if any) while the later
  // ones are still being read. Throws as read_exact; after any error `dest`
  // holds garbage and every later read fails.
  void read_exact_split(int fd, void* dest, std::size_t bytes, std::size_t record_bytes, Deadline deadline);
  // Helper threads for read_exact_split (0: none, the default), polling
  // for up to `spin` before they sleep (RecordWorkers).
  void set_helpers(int helpers, std::chrono::microseconds spin = {});

  // From a buffer: when `in` (`available` bytes) starts with a whole record
  // of at most `max` bytes, opens it into `out` and returns the bytes it
  // took from `in` and its length; {0, 0} while the record is incomplete.
  // Throws as read().
  struct Opened {
    std::size_t consumed = 0;
    std::size_t bytes = 0;
  };
  Opened open(const char* in, std::size_t available, char* out, std::size_t max);
  std::uint64_t records() const { return aead_.messages(); }

 private:
  [[noreturn]] void refuse_length(std::size_t length, std::size_t max) const;
  void authenticate(const unsigned char prefix[kRecordPrefixBytes], const void* in, void* out, std::size_t bytes,
                    const unsigned char* tag);
  [[noreturn]] void refuse_record(std::uint64_t number) const;
  AeadDirection aead_;
  std::unique_ptr<RecordWorkers> workers_;
};

}  // namespace troupe::net::wire
