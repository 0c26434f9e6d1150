// CudaBackend: every op on NVIDIA GPUs, with cuBLAS for matrix products,
// cuDNN for convolution and softmax, and custom kernels for the rest (the
// cuDNN calls for pooling, activations and batch norm are deprecated in
// cuDNN 9, and its batch norm cannot be split into SyncBatchNorm's steps). The per-element
// math comes from kernels/math/ (shared with the cpu backend), so the CPU
// tests exercise the arithmetic these kernels run.
//
// Where things are:
//   device_state.hpp/.cpp  per-device stream, cuBLAS/cuDNN handles, scratch
//   cuda_memory.cpp        allocation, copies, synchronize, device_count,
//                          registration
//   cuda_dense.cu          gemm, bias, transpose, max and average pooling,
//                          embedding
//   cuda_conv.cu           conv2d forward and backward (cuDNN) + bias kernels
//   cuda_batchnorm.cu      batch normalisation's reductions and transforms
//   cuda_softmax.cu        softmax forward and backward (cuDNN)
//   cuda_elementwise.cu    fill, relu, dropout, sigmoid/tanh/gelu,
//                          add/scale/axpy, sum_n, copy_2d
//   cuda_loss.cu           softmax_xent, mse, topk_correct, reduce_sum(_squares)
//   cuda_optim.cu          sgd/adam updates and the seeded initialisers
//   check.hpp              status checks (TROUPE_CUDA_CHECK and friends)
//   launch.cuh             grid sizing, grid-stride loops, warp/block sums,
//                          warp-per-row loops
//
// Which GPU: the memory functions take a device_index and select it. The ops
// do not (ops.cpp cannot pass one), so they run on the calling thread's
// current CUDA device (cudaGetDevice). The caller sets it: the device actor
// that owns cuda:N calls cudaSetDevice(N) (or any memory function on cuda:N)
// at the start of each message it handles, since CAF may run an actor on
// any worker thread. allocate, the copies and synchronize leave their device
// current, so Tensor::zeros on cuda:N fills on cuda:N; deallocate restores
// the previous device, because a tensor can be freed on any thread.
//
// Ordering: all work for a device is queued on that device's one stream, so
// ops run in call order. Copies are synchronous (Backend's contract), and so
// are the ops that return data to the host (reduce_sum) or must report bad
// data (embedding ids, labels): they wait for the stream before returning.
// Everything else returns as soon as the work is queued.
#pragma once

#include "kernels/backend.hpp"

namespace troupe::kernels {

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }
  DeviceKind device_kind() const override { return DeviceKind::cuda; }
  // cudaGetDeviceCount; any error (no driver, "CUDA driver version is
  // insufficient for CUDA runtime version") counts as 0 devices.
  int device_count() const override;
  TROUPE_BACKEND_MEMORY_OVERRIDES
  TROUPE_BACKEND_OP_OVERRIDES
  void gemm_batched(const GemmShape& s, std::int64_t batch, float alpha, const float* a, const float* b, float beta,
                    float* c) override;
  // Staging (cuda_memory.cpp): cudaHostAlloc'd memory, and cudaMemcpyAsync
  // on the device's stream without the wait of the synchronous copies.
  void make_current(int device_index) override;  // cudaSetDevice
  void* allocate_pinned(std::size_t bytes) override;
  void deallocate_pinned(void* ptr) noexcept override;
  void copy_to_host_async(void* host_dst, const void* src, std::size_t bytes, int device_index) override;
  void copy_from_host_async(void* dst, const void* host_src, std::size_t bytes, int device_index) override;
};

}  // namespace troupe::kernels
