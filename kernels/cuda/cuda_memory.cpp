// The cuda backend's memory functions (plain cudaMalloc, never managed
// memory: managed pages migrate on fault and would hide a missing copy),
// synchronous copies, device_count and registration.
#include <algorithm>
#include <memory>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/device_state.hpp"
#include "kernels/registry.hpp"

namespace troupe::kernels {

using cuda::device_state;
using cuda::DeviceState;

int CudaBackend::device_count() const { return cuda::device_count(); }

void* CudaBackend::allocate(std::size_t bytes, int device_index) {
  device_state(device_index);  // validates the index
  TROUPE_CUDA_CHECK(cudaSetDevice(device_index));
  // Never hand out null for 0 bytes (the host backends do not either):
  // cudaMalloc's allocations are 256-byte aligned anyway.
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes == 0 ? 256 : bytes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("cuda backend: cudaMalloc of " + std::to_string(bytes) +
                             " bytes on cuda:" + std::to_string(device_index) + " failed: " + cudaGetErrorName(status) +
                             ": " + cudaGetErrorString(status));
  }
  return ptr;
}

void CudaBackend::deallocate(void* ptr, int device_index) noexcept {
  if (!ptr) return;
  // cudaFree synchronizes the device first, so kernels still queued on our
  // stream finish before the memory is released. Errors cannot be thrown
  // from here; at process exit the runtime may already be shutting down.
  //
  // Unlike the other memory functions, this one puts the previous device
  // back: a tensor's last reference can drop anywhere (a message handled on
  // another device's thread), and that must not move the thread's ops to
  // the tensor's GPU.
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (cudaSetDevice(device_index) == cudaSuccess) (void)cudaFree(ptr);
  if (previous >= 0 && previous != device_index) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

namespace {

// cudaMemcpyAsync on the device's stream (ordered after queued kernels),
// then a wait: Backend's copies are synchronous.
void copy_and_wait(DeviceState& st, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, st.stream));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
}

}  // namespace

void CudaBackend::copy_to_host(void* host_dst, const void* src, std::size_t bytes, int device_index) {
  if (bytes == 0) return;
  DeviceState& st = device_state(device_index);
  TROUPE_CUDA_CHECK(cudaSetDevice(device_index));
  copy_and_wait(st, host_dst, src, bytes, cudaMemcpyDeviceToHost);
}

void CudaBackend::copy_from_host(void* dst, const void* host_src, std::size_t bytes, int device_index) {
  if (bytes == 0) return;
  DeviceState& st = device_state(device_index);
  TROUPE_CUDA_CHECK(cudaSetDevice(device_index));
  copy_and_wait(st, dst, host_src, bytes, cudaMemcpyHostToDevice);
}

void CudaBackend::copy_on_device(void* dst, const void* src, std::size_t bytes, int device_index) {
  if (bytes == 0 || dst == src) return;
  DeviceState& st = device_state(device_index);
  TROUPE_CUDA_CHECK(cudaSetDevice(device_index));
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  const std::size_t distance = d > s ? static_cast<std::size_t>(d - s) : static_cast<std::size_t>(s - d);
  if (distance >= bytes) {
    copy_and_wait(st, dst, src, bytes, cudaMemcpyDeviceToDevice);
    return;
  }
  // Overlapping ranges (memmove semantics, as the host backends give):
  // cudaMemcpy's result is undefined for overlap, so copy in chunks of
  // `distance` bytes, each disjoint from the ones it reads later, walking
  // away from the destination's side.
  if (d < s) {
    for (std::size_t off = 0; off < bytes; off += distance)
      TROUPE_CUDA_CHECK(
          cudaMemcpyAsync(d + off, s + off, std::min(distance, bytes - off), cudaMemcpyDeviceToDevice, st.stream));
  } else {
    for (std::size_t end = bytes; end > 0;) {
      const std::size_t len = std::min(distance, end);
      end -= len;
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(d + end, s + end, len, cudaMemcpyDeviceToDevice, st.stream));
    }
  }
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
}

void CudaBackend::make_current(int device_index) {
  device_state(device_index);  // validates the index
  TROUPE_CUDA_CHECK(cudaSetDevice(device_index));
}

void* CudaBackend::allocate_pinned(std::size_t bytes) {
  void* ptr = nullptr;
  // Portable: pinned for every GPU of the process, not only the current one
  // (two replicas on two GPUs may share one staging helper's lifetime).
  const cudaError_t status = cudaHostAlloc(&ptr, bytes == 0 ? 64 : bytes, cudaHostAllocPortable);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error("cuda backend: cudaHostAlloc of " + std::to_string(bytes) +
                             " pinned bytes failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
  }
  return ptr;
}

void CudaBackend::deallocate_pinned(void* ptr) noexcept {
  if (ptr) (void)cudaFreeHost(ptr);
  (void)cudaGetLastError();
}

void CudaBackend::copy_to_host_async(void* host_dst, const void* src, std::size_t bytes, int device_index) {
  if (bytes == 0) return;
  DeviceState& st = device_state(device_index);
  TROUPE_CUDA_CHECK(cudaSetDevice(device_index));
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, st.stream));
}

void CudaBackend::copy_from_host_async(void* dst, const void* host_src, std::size_t bytes, int device_index) {
  if (bytes == 0) return;
  DeviceState& st = device_state(device_index);
  TROUPE_CUDA_CHECK(cudaSetDevice(device_index));
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, st.stream));
}

void CudaBackend::synchronize(int device_index) {
  DeviceState& st = device_state(device_index);
  TROUPE_CUDA_CHECK(cudaSetDevice(device_index));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
}

void register_cuda_backend(Registry& registry) { registry.add(std::make_unique<CudaBackend>()); }

}  // namespace troupe::kernels
