// What the cuda backend keeps per GPU: one stream, the cuBLAS and cuDNN
// handles, a cuDNN workspace, cached convolution plans and a little device
// scratch for reductions and bad-data reports.
//
// A DeviceState is created on first use of its device (so a process that
// never touches a GPU never initialises CUDA, and the static registration
// is safe on machines without a driver), and lives until the process ends.
// It is deliberately never destroyed: destroying streams and handles from
// static destructors races with the CUDA runtime's own teardown.
//
// Thread safety: creation is guarded by a std::once_flag per device. After
// that, custom kernels only read `stream` and `max_blocks`; everything that
// is shared mutable state (the handles, the workspace, the plan cache, the
// scratch slots) is used with `mutex` held for the whole op, so two device
// actors sharing one GPU (two logical replicas on cuda:0) cannot interleave
// a workspace resize or a scratch read-back.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "kernels/cuda/check.hpp"

namespace troupe::kernels::cuda {

// cuDNN descriptors and the algorithms chosen for one convolution shape.
// Algorithms are picked lazily, per direction, the first time it runs.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool have_fwd = false, have_bwd_data = false, have_bwd_filter = false;
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo{};
  std::size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;

  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {  // statuses ignored: nothing useful to do with a failed destroy
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

// n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w, tensor cores (0 or 1)
using ConvKey = std::array<std::int64_t, 12>;

struct DeviceState {
  int index = 0;
  cudaStream_t stream = nullptr;
  // Cap on blocks for grid-stride kernels: 16 blocks of 256 threads per SM
  // is two full waves at 2048 resident threads per SM (sm_90), enough to
  // hide memory latency; more blocks only add scheduling overhead.
  unsigned max_blocks = 0;

  std::mutex mutex;                 // guards everything below (see the file comment)
  cublasHandle_t cublas = nullptr;  // lazily, by cublas_handle()
  cudnnHandle_t cudnn = nullptr;    // lazily, by cudnn_handle(): loads cuDNN
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  std::map<ConvKey, std::unique_ptr<ConvPlan>> conv_plans;
  // First bad position found by a checking kernel (atomicMin); all ones
  // when there is none.
  unsigned long long* error_slot = nullptr;
  // Per-block partial sums of reduce_sum, then the total at [kReduceBlocks].
  double* partials = nullptr;
  static constexpr unsigned kReduceBlocks = 1024;
};

// cudaGetDeviceCount, asked once; any error counts as 0 devices.
int device_count();
// The state of GPU `index`, created on first use. Throws std::runtime_error
// when there is no such GPU. Does not change the current device.
DeviceState& device_state(int index);
// The state of the calling thread's current device (cudaGetDevice): the ops
// that take no device_index run there.
DeviceState& current_device_state();

// The following need st.mutex held.
cublasHandle_t cublas_handle(DeviceState& st);
cudnnHandle_t cudnn_handle(DeviceState& st);
// A workspace of at least `bytes`, grown (never shrunk) as needed.
void* workspace(DeviceState& st, std::size_t bytes);
// Bad-data reports: reset before the checking kernel, read after it (the
// read synchronizes the stream). read returns -1 when nothing was reported.
void reset_error_slot(DeviceState& st);
std::int64_t read_error_slot(DeviceState& st);
// One i32 from device memory (to name the bad id or label in an error).
std::int32_t read_i32(DeviceState& st, const std::int32_t* device_ptr);

}  // namespace troupe::kernels::cuda
