// The nccl backend's functions in a build without the CUDA backend
// (TROUPE_CUDA=OFF, or no CUDA toolkit): the id helpers work, everything
// that needs NCCL says it was not built (see nccl.hpp).
#include <stdexcept>

#include "net/collective/nccl.hpp"

namespace troupe::net {

namespace {

const char* kNotBuilt =
    "the nccl collective backend is not in this build (troupe was configured without the CUDA backend: "
    "TROUPE_CUDA=OFF, or nvcc, cuBLAS, cuDNN or NCCL were not found)";

}  // namespace

bool nccl_built() { return false; }
std::string nccl_unavailable() { return kNotBuilt; }
int nccl_version() { throw std::runtime_error(kNotBuilt); }
NcclId nccl_unique_id() { throw std::runtime_error(kNotBuilt); }

std::vector<std::unique_ptr<Collective>> make_nccl_group(const NcclId&, int, int, const std::vector<kernels::Device>&,
                                                         CollectiveOptions) {
  throw std::runtime_error(kNotBuilt);
}

std::vector<std::unique_ptr<Collective>> make_nccl_group(const std::vector<kernels::Device>&, CollectiveOptions) {
  throw std::runtime_error(kNotBuilt);
}

}  // namespace troupe::net
