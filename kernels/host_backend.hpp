// HostBackend: memory management for backends that compute on host memory
// (ref and cpu). Allocations are 64-byte aligned, a cache line and an
// AVX-512 register, so vector loops and BLAS never see a split load at the
// start of a buffer.
#pragma once

#include <cstddef>
#include <new>

#include "kernels/backend.hpp"

namespace troupe::kernels {

// Host memory that could not be had: a std::bad_alloc (so that every
// catch of one still works) that says how much was asked for, since a bare
// "std::bad_alloc" is all a user would otherwise see.
class HostOutOfMemory : public std::bad_alloc {
 public:
  explicit HostOutOfMemory(std::size_t bytes) noexcept;
  const char* what() const noexcept override { return what_; }

 private:
  char what_[96];
};

class HostBackend : public Backend {
 public:
  DeviceKind device_kind() const override { return DeviceKind::cpu; }
  int device_count() const override { return 1; }
  TROUPE_BACKEND_MEMORY_OVERRIDES
};

}  // namespace troupe::kernels
