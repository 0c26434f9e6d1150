// A kernel that keeps a GPU busy for a given time, queued on the cuda
// kernels' compute stream: the GPU tests use it to hold back an operation
// ordered after that stream (the nccl backend's event) past a deadline.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/stream.hpp"
#include "tests/gpu/gpu_support.hpp"

namespace troupe::gpu_test {

namespace {

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}

}  // namespace

void spin_on_compute_stream(int device, double milliseconds) {
  if (cudaSetDevice(device) != cudaSuccess) throw std::runtime_error("cudaSetDevice failed");
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device) != cudaSuccess || khz <= 0) khz = 1500000;
  const long long cycles = static_cast<long long>(milliseconds * khz);
  spin_kernel<<<1, 1, 0, kernels::cuda::compute_stream(device)>>>(cycles);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw std::runtime_error(std::string("spin_kernel launch: ") + cudaGetErrorString(status));
}

}  // namespace troupe::gpu_test
