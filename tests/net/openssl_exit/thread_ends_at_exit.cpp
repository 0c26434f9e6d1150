// A process whose last OpenSSL user is a thread that ends while the process
// exits, as troupe's detached actors can (util/openssl_init.hpp says why).
// cluster_tests runs it: it exits 0 when the thread's SHA-256 works to the
// end and, under AddressSanitizer, LeakSanitizer finds nothing (its own
// exit status, 23, otherwise). With OpenSSL's default exit-time cleanup the
// thread's hash after it crashes (SIGSEGV in OpenSSL 3.0); exits 3 if it
// fails instead, 4 when the thread did not finish within 10 s.
#include "net/crypto/crypto.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

std::atomic<bool> hashed{false}, go{false}, done{false}, failed{false};

// Registered before OpenSSL's first use, so it runs after any exit-time
// cleanup OpenSSL registers (atexit runs in reverse): the thread's last hash
// and its end fall after that cleanup, the window CI once hit by chance.
void let_the_thread_end() {
  go = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // A moment for the thread's own exit (its thread-local destructors).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (!done) {
    std::fputs("thread_ends_at_exit: the thread did not finish within 10 s\n", stderr);
    std::_Exit(4);
  }
  if (failed) {
    std::fputs("thread_ends_at_exit: SHA-256 failed after OpenSSL's exit-time cleanup\n", stderr);
    std::_Exit(3);
  }
}

}  // namespace

int main() {
  std::atexit(let_the_thread_end);
  std::thread([] {
    troupe::net::sha256("before the exit");
    hashed = true;
    while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    try {
      if (troupe::net::sha256("abc").size() != 32) failed = true;
    } catch (const std::exception&) {
      failed = true;
    }
    done = true;
  }).detach();
  while (!hashed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 0;
}
