// Softmax over the last dimension on the GPU: cuDNN's softmax, which is not
// among the legacy calls cuDNN 9 deprecates. CUDNN_SOFTMAX_ACCURATE
// subtracts each row's maximum before exponentiating, as the reference does;
// MODE_INSTANCE over a [rows, n, 1, 1] tensor normalises each row's n
// values. Backward is cuDNN's y * (dy - sum(dy * y)) from the forward output.
//
// cuDNN's descriptors take int sizes, so a call covers at most INT_MAX / n
// rows and longer tensors are done in chunks of rows; a row of more than
// INT_MAX floats is refused.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/launch.cuh"

namespace troupe::kernels {

using cuda::current_device_state;
using cuda::DeviceState;

namespace {

// One tensor descriptor for the length of a call (a host object: cheap to
// make, and cuDNN reads it only while queuing the work).
class RowsDescriptor {
 public:
  RowsDescriptor() { TROUPE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_)); }
  ~RowsDescriptor() { cudnnDestroyTensorDescriptor(desc_); }  // status ignored: nothing to do about it
  RowsDescriptor(const RowsDescriptor&) = delete;
  RowsDescriptor& operator=(const RowsDescriptor&) = delete;
  cudnnTensorDescriptor_t set(std::int64_t rows, std::int64_t n) {
    TROUPE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(rows),
                                                  static_cast<int>(n), 1, 1));
    return desc_;
  }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

// Calls run(descriptor, first_row) for chunks of rows that fit cuDNN's ints.
template <class Run>
void for_row_chunks(const char* op, std::int64_t rows, std::int64_t n, Run run) {
  if (n > INT_MAX)
    throw std::invalid_argument(std::string("cuda backend: ") + op + " over rows of " + std::to_string(n) +
                                " elements, more than cuDNN's int descriptors hold");
  const std::int64_t chunk = std::max<std::int64_t>(1, INT_MAX / n);
  RowsDescriptor desc;
  for (std::int64_t first = 0; first < rows; first += chunk) run(desc.set(std::min(chunk, rows - first), n), first * n);
}

}  // namespace

void CudaBackend::softmax_forward(std::int64_t rows, std::int64_t n, const float* x, float* y) {
  if (rows == 0 || n == 0) return;
  DeviceState& st = current_device_state();
  std::lock_guard<std::mutex> lock(st.mutex);  // the cuDNN handle is shared
  cudnnHandle_t handle = cuda::cudnn_handle(st);
  const float one = 1.0f, zero = 0.0f;  // beta 0: y is overwritten, never read
  for_row_chunks("softmax_forward", rows, n, [&](cudnnTensorDescriptor_t desc, std::int64_t offset) {
    TROUPE_CUDNN_CHECK(cudnnSoftmaxForward(handle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, desc,
                                           x + offset, &zero, desc, y + offset));
  });
}

void CudaBackend::softmax_backward(std::int64_t rows, std::int64_t n, const float* y, const float* dy, float* dx) {
  if (rows == 0 || n == 0) return;
  DeviceState& st = current_device_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  cudnnHandle_t handle = cuda::cudnn_handle(st);
  const float one = 1.0f, zero = 0.0f;  // beta 0: dx is overwritten
  for_row_chunks("softmax_backward", rows, n, [&](cudnnTensorDescriptor_t desc, std::int64_t offset) {
    TROUPE_CUDNN_CHECK(cudnnSoftmaxBackward(handle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, desc,
                                            y + offset, desc, dy + offset, &zero, desc, dx + offset));
  });
}

namespace {

// Causal softmax: one warp per row (launch.cuh's warp rows), as cuDNN's
// softmax has no mask. Row r is query i = r % n over keys 0..i; the
// exponentials' sum in double, zeros written beyond the row's keys.
__global__ void causal_softmax_kernel(std::int64_t rows, std::int64_t n, const float* x, float* y) {
  const cuda::WarpRows w = cuda::warp_rows();
  for (std::int64_t r = w.first; r < rows; r += w.step) {
    const std::int64_t seen = r % n + 1;
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float row_max = -INFINITY;
    for (std::int64_t j = w.lane; j < seen; j += 32) row_max = fmaxf(row_max, xr[j]);
    row_max = cuda::warp_max(row_max);
    double sum = 0.0;
    for (std::int64_t j = w.lane; j < seen; j += 32) sum += expf(xr[j] - row_max);
    const float inv_sum = static_cast<float>(1.0 / cuda::warp_sum(sum));
    for (std::int64_t j = w.lane; j < n; j += 32) yr[j] = j < seen ? expf(xr[j] - row_max) * inv_sum : 0.0f;
  }
}

}  // namespace

void CudaBackend::causal_softmax_forward(std::int64_t rows, std::int64_t n, const float* x, float* y) {
  if (rows == 0 || n == 0) return;
  DeviceState& st = current_device_state();
  causal_softmax_kernel<<<cuda::blocks_for_rows(st, rows), cuda::kThreads, 0, st.stream>>>(rows, n, x, y);
  cuda::check_launch("causal_softmax_kernel", __FILE__, __LINE__);
}

}  // namespace troupe::kernels
