// Per-device state of the cuda backend (see device_state.hpp): lazy,
// thread-safe creation of streams, handles and scratch, the grown cuDNN
// workspace, and the read-back of bad-data reports.
#include "kernels/cuda/device_state.hpp"
#include "kernels/cuda/stream.hpp"

#include <algorithm>
#include <climits>
#include <string>

namespace troupe::kernels::cuda {

namespace {

struct Slot {
  std::once_flag once;
  std::unique_ptr<DeviceState> state;
};

// One slot per device, sized when first asked. Never freed (see the header).
Slot* slots() {
  static Slot* all = new Slot[static_cast<std::size_t>(std::max(device_count(), 1))];
  return all;
}

std::unique_ptr<DeviceState> create_state(int index) {
  auto st = std::make_unique<DeviceState>();
  st->index = index;
  int previous = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&previous));
  TROUPE_CUDA_CHECK(cudaSetDevice(index));
  // Put the caller's device back however this function leaves.
  struct RestoreDevice {
    int device;
    ~RestoreDevice() { (void)cudaSetDevice(device); }
  } restore{previous};
  // A blocking stream (not cudaStreamNonBlocking): it stays ordered with the
  // legacy default stream, so code elsewhere that uses plain cudaMemcpy on
  // our tensors cannot overtake queued kernels.
  TROUPE_CUDA_CHECK(cudaStreamCreate(&st->stream));
  int sm_count = 0;
  TROUPE_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, index));
  st->max_blocks = static_cast<unsigned>(std::max(sm_count, 1)) * 16u;
  TROUPE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st->error_slot), sizeof(unsigned long long)));
  TROUPE_CUDA_CHECK(
      cudaMalloc(reinterpret_cast<void**>(&st->partials), (DeviceState::kReduceBlocks + 1) * sizeof(double)));
  return st;
}

}  // namespace

int device_count() {
  static const int count = [] {
    int n = 0;
    const cudaError_t status = cudaGetDeviceCount(&n);
    if (status != cudaSuccess) {
      // No driver, an old driver ("CUDA driver version is insufficient for
      // CUDA runtime version"), no GPU: all mean "no CUDA devices here".
      (void)cudaGetLastError();  // leave no error behind for the next check
      return 0;
    }
    return n;
  }();
  return count;
}

DeviceState& device_state(int index) {
  const int count = device_count();
  if (index < 0 || index >= count)
    throw std::runtime_error("cuda backend: cuda:" + std::to_string(index) + " requested, but this machine has " +
                             std::to_string(count) + " usable CUDA device(s)");
  Slot& slot = slots()[index];
  std::call_once(slot.once, [&] { slot.state = create_state(index); });
  return *slot.state;
}

cudaStream_t compute_stream(int device_index) { return device_state(device_index).stream; }

DeviceState& current_device_state() {
  int index = 0;
  TROUPE_CUDA_CHECK(cudaGetDevice(&index));
  return device_state(index);
}

cublasHandle_t cublas_handle(DeviceState& st) {
  if (!st.cublas) {
    cublasHandle_t handle = nullptr;
    TROUPE_CUBLAS_CHECK(cublasCreate(&handle));
    TROUPE_CUBLAS_CHECK(cublasSetStream(handle, st.stream));
    // Full FP32 (no TF32 tensor cores): results must match the reference to
    // float rounding, and TF32's 10-bit mantissa does not.
    TROUPE_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
    st.cublas = handle;
  }
  return st.cublas;
}

cudnnHandle_t cudnn_handle(DeviceState& st) {
  if (!st.cudnn) {
    cudnnHandle_t handle = nullptr;
    TROUPE_CUDNN_CHECK(cudnnCreate(&handle));
    TROUPE_CUDNN_CHECK(cudnnSetStream(handle, st.stream));
    st.cudnn = handle;
  }
  return st.cudnn;
}

void* workspace(DeviceState& st, std::size_t bytes) {
  if (bytes <= st.workspace_bytes) return st.workspace;
  if (st.workspace) {
    // cudaFree waits for the device, so no queued convolution still uses it.
    TROUPE_CUDA_CHECK(cudaFree(st.workspace));
    st.workspace = nullptr;
    st.workspace_bytes = 0;
  }
  // Round up to 1 MiB so that a sequence of slightly larger requests does not
  // reallocate each time.
  const std::size_t rounded = (bytes + (1u << 20) - 1) & ~((std::size_t{1} << 20) - 1);
  TROUPE_CUDA_CHECK(cudaMalloc(&st.workspace, rounded));
  st.workspace_bytes = rounded;
  return st.workspace;
}

void reset_error_slot(DeviceState& st) {
  TROUPE_CUDA_CHECK(cudaMemsetAsync(st.error_slot, 0xff, sizeof(unsigned long long), st.stream));
}

std::int64_t read_error_slot(DeviceState& st) {
  unsigned long long first_bad = 0;
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(&first_bad, st.error_slot, sizeof first_bad, cudaMemcpyDeviceToHost, st.stream));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
  return first_bad == ULLONG_MAX ? -1 : static_cast<std::int64_t>(first_bad);
}

std::int32_t read_i32(DeviceState& st, const std::int32_t* device_ptr) {
  std::int32_t value = 0;
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(&value, device_ptr, sizeof value, cudaMemcpyDeviceToHost, st.stream));
  TROUPE_CUDA_CHECK(cudaStreamSynchronize(st.stream));
  return value;
}

}  // namespace troupe::kernels::cuda
