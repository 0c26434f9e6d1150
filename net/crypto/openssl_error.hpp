// Inside net/crypto only: turns a failed OpenSSL call into an exception.
#pragma once

namespace troupe::net {

// Throws std::runtime_error("OpenSSL <call> failed: <the oldest error on
// this thread's queue>") and clears the queue, so the next failure reports
// its own.
[[noreturn]] void openssl_fail(const char* call);

}  // namespace troupe::net
