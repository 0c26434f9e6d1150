// The one stream every cuda op for a GPU is queued on (device_state.hpp),
// for code outside kernels/ that orders its own streams after those ops
// with events (the NCCL collective backend, net/collective/nccl.cpp)
// without pulling in the cuBLAS and cuDNN headers.
#pragma once

#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

// Creates the device's state on first use; throws std::runtime_error when
// there is no such GPU.
cudaStream_t compute_stream(int device_index);

}  // namespace troupe::kernels::cuda
