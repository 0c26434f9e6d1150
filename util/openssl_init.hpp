// Initialises OpenSSL's libcrypto once per process, without its exit-time
// cleanup. Every troupe function that calls OpenSSL calls this first
// (net/crypto, models/data/text_corpus), so it runs before OpenSSL's own
// implicit initialisation could.
#pragma once

#include <openssl/crypto.h>

namespace troupe::util {

// Why OPENSSL_INIT_NO_ATEXIT: OpenSSL keeps an error queue per thread and
// frees it from a thread-exit destructor. By default it also registers an
// atexit() cleanup that deletes that destructor's key. troupe's detached
// actors (device actors, the coordinator) compute SHA-256 on their own
// threads, and CAF 0.17 lets the actor system go once such a thread has
// finished its work but before the thread itself has ended; if the process
// exits in that window, the cleanup runs first: the thread's queue is never
// freed (LeakSanitizer reported 904 bytes from CRYPTO_zalloc in CI once), and
// a hash the thread starts after the cleanup crashes in OpenSSL 3.0
// (tests/net/openssl_exit). Without the atexit cleanup the destructor always
// runs, and what OpenSSL keeps for the process stays reachable from its
// globals.
inline void init_openssl() {
  static const bool initialised = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  (void)initialised;
}

}  // namespace troupe::util
