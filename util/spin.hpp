// A bounded busy wait: for a thread that expects what it waits for within
// microseconds and would otherwise sleep and need waking (on a host with
// idle cores that are slow to wake). Used by the seal helpers
// (net/transport/sealed.cpp) and the push link's answer poll
// (net/push/push_link.cpp). Header-only.
#pragma once

#include <chrono>
#include <thread>

namespace troupe::util {

// Looks at `done()` until it is true or `limit` has passed, pausing the CPU
// between looks (the clock is read every 16 looks: it costs more than a
// look). Returns the last `done()`.
template <class Done>
bool spin_until(Done done, std::chrono::microseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (unsigned i = 1;; ++i) {
    if (done()) return true;
    if (i % 16 == 0 && std::chrono::steady_clock::now() >= until) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
}

}  // namespace troupe::util
