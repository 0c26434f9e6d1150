// Status checks for the CUDA runtime, cuBLAS and cuDNN.
//
// Every call into a CUDA library goes through one of these macros, and every
// kernel launch is followed by TROUPE_CUDA_CHECK_LAUNCH: a failed launch
// (bad geometry, too much shared memory, a sticky error from an earlier
// kernel) is only visible through cudaGetLastError, and an unchecked one
// surfaces much later as a wrong number. The error names the call, the
// library's error string and the source line.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace troupe::kernels::cuda {

[[noreturn]] inline void throw_cuda_error(const char* what, const std::string& error, const char* file, int line) {
  throw std::runtime_error(std::string("cuda backend: ") + what + " failed: " + error + " (" + file + ":" +
                           std::to_string(line) + ")");
}

inline void check_cuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess)
    throw_cuda_error(what, std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status), file, line);
}

inline void check_cublas(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cuda_error(what, cublasGetStatusString(status), file, line);
}

inline void check_cudnn(cudnnStatus_t status, const char* what, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS) throw_cuda_error(what, cudnnGetErrorString(status), file, line);
}

}  // namespace troupe::kernels::cuda

#define TROUPE_CUDA_CHECK(call) ::troupe::kernels::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define TROUPE_CUBLAS_CHECK(call) ::troupe::kernels::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define TROUPE_CUDNN_CHECK(call) ::troupe::kernels::cuda::check_cudnn((call), #call, __FILE__, __LINE__)
// After every <<<...>>>: `name` is the kernel, for the message.
#define TROUPE_CUDA_CHECK_LAUNCH(name) \
  ::troupe::kernels::cuda::check_cuda(cudaGetLastError(), "launch of " name, __FILE__, __LINE__)
