// HostBackend: memory management for backends that compute on host memory
// (ref and cpu). Allocations are 64-byte aligned, a cache line and an
// AVX-512 register, so vector loops and BLAS never see a split load at the
// start of a buffer.
#pragma once

#include "kernels/backend.hpp"

namespace troupe::kernels {

class HostBackend : public Backend {
 public:
  DeviceKind device_kind() const override { return DeviceKind::cpu; }
  int device_count() const override { return 1; }
  TROUPE_BACKEND_MEMORY_OVERRIDES
};

}  // namespace troupe::kernels
