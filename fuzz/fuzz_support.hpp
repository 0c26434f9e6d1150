// What the fuzz targets share (fuzz/README.md).
#pragma once

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace troupe::fuzz {

// A failed property: print what and abort, so that libFuzzer saves the input
// as a crash.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz property failed: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

#define TROUPE_FUZZ_CHECK(cond, what)                                    \
  do {                                                                   \
    if (!(cond)) ::troupe::fuzz::fail(std::string(#cond ": ") + (what)); \
  } while (0)

// An in-memory file (memfd) that readers open by path (/proc/self/fd/N), as
// they open a real one; one per process, rewritten for every input.
class MemFile {
 public:
  MemFile() {
    fd_ = ::memfd_create("troupe-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& write(const void* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0 || (size > 0 && ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size))) {
      std::perror("memfd write");
      std::abort();
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// Waits up to `ms` for `events` on fd: true when they came (or an error or
// hang-up the next call reports), false at the deadline. libFuzzer's
// per-input timer is a SIGALRM every -timeout/2 s that interrupts whichever
// thread it lands on: a bare poll() returning -1 with EINTR is no timeout.
// (control_http took two such interruptions for "no answer and no close
// within 60 s" hangs: docs/FUZZING.md.)
inline bool wait_for_fd(int fd, short events, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;  // the next call on fd reports it
  }
}

// Closes a socket with a reset (SO_LINGER 0), so that millions of short
// loopback connections leave nothing in TIME_WAIT.
inline void close_with_reset(int fd) {
  if (fd < 0) return;
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
}

// Reads the input from the front, a byte or a piece at a time; past the end
// it gives zeros and empty pieces.
class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}
  std::uint8_t byte() {
    if (rest_.empty()) return 0;
    const auto b = static_cast<std::uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    return b;
  }
  std::string_view rest() const { return rest_; }

 private:
  std::string_view rest_;
};

}  // namespace troupe::fuzz
