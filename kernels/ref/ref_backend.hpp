// RefBackend: the reference implementation of every op, in plain C++ with no
// BLAS and no intrinsics, written to be obviously correct rather than fast.
// Every other backend is tested against it.
//
// The math lives in templates (ref/*.hpp) so the gradient checks can run it
// in double precision; this class instantiates them for float. Its methods
// are defined in ref_backend_dense.cpp (matrix, convolution, pooling,
// embedding) and ref_backend_elementwise.cpp (everything else).
#pragma once

#include "kernels/host_backend.hpp"

namespace troupe::kernels {

class RefBackend final : public HostBackend {
 public:
  std::string name() const override { return "ref"; }
  TROUPE_BACKEND_OP_OVERRIDES
};

}  // namespace troupe::kernels
