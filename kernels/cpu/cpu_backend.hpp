// CpuBackend: the fast CPU implementation. Matrix products go to OpenBLAS;
// convolution uses whichever of oneDNN and im2col + sgemm measured faster at
// the seed models' shapes (see the note in cpu_backend_dense.cpp and
// docs/BENCHMARKS.md); sigmoid and tanh go to oneDNN's eltwise (the note in
// cpu_backend_elementwise.cpp); the rest are vectorisable loops over the
// shared per-element math in kernels/math/.
//
// Methods are defined in cpu_backend_dense.cpp (matrix, convolution, pooling,
// embedding), cpu_backend_batchnorm.cpp (batch normalisation) and
// cpu_backend_elementwise.cpp (everything else).
#pragma once

#include "kernels/host_backend.hpp"

namespace troupe::kernels {

class CpuBackend final : public HostBackend {
 public:
  std::string name() const override { return "cpu"; }
  // OpenBLAS's thread count (process-wide) and oneDNN's OpenMP team size
  // for the calling thread.
  void set_threads(int threads) override;
  TROUPE_BACKEND_OP_OVERRIDES
};

}  // namespace troupe::kernels
