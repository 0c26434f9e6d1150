#include "kernels/host_backend.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace troupe::kernels {

// Backend's defaults for staging memory (the cuda backend overrides them
// with cudaHostAlloc / cudaFreeHost): ordinary aligned host memory.
void* Backend::allocate_pinned(std::size_t bytes) {
  void* p = std::aligned_alloc(64, bytes == 0 ? 64 : (bytes + 63) / 64 * 64);
  if (!p) throw HostOutOfMemory(bytes);
  return p;
}

void Backend::deallocate_pinned(void* ptr) noexcept { std::free(ptr); }

HostOutOfMemory::HostOutOfMemory(std::size_t bytes) noexcept {
  std::snprintf(what_, sizeof what_, "out of host memory: could not allocate %.2f GiB (%zu bytes)",
                static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0), bytes);
}

void* HostBackend::allocate(std::size_t bytes, int) {
  constexpr std::size_t alignment = 64;
  std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (!p) throw HostOutOfMemory(bytes);
  return p;
}

void HostBackend::deallocate(void* ptr, int) noexcept { std::free(ptr); }

void HostBackend::copy_to_host(void* host_dst, const void* src, std::size_t bytes, int) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}

void HostBackend::copy_from_host(void* dst, const void* host_src, std::size_t bytes, int) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}

void HostBackend::copy_on_device(void* dst, const void* src, std::size_t bytes, int) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

void HostBackend::fill(std::size_t n, float value, float* x) {
  for (std::size_t i = 0; i < n; ++i) x[i] = value;
}

void HostBackend::fill_i32(std::size_t n, std::int32_t value, std::int32_t* x) {
  for (std::size_t i = 0; i < n; ++i) x[i] = value;
}

void HostBackend::synchronize(int) {}

}  // namespace troupe::kernels
