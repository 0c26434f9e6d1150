// 2-D convolution on the GPU: cuDNN 9's legacy convolution API for the three
// products (forward, backward data, backward filter), plus two small
// kernels for the per-channel bias and its gradient.
//
// Plans: descriptors for a shape are made once and kept in the device's
// plan cache (a model has a handful of conv shapes; the cache is cleared if
// it ever grows past kMaxPlans). Each direction's algorithm is chosen the
// first time it runs, from cuDNN's *_v7 heuristics (no benchmarking runs):
// the first algorithm that cuDNN reports as supported, that runs in plain
// FP32, and whose workspace fits under kMaxWorkspace. The workspace is one
// per-device buffer, grown as needed.
//
// Precision: the descriptors ask for CUDNN_FMA_MATH. On sm_80+ the default
// would allow TF32 tensor cores, whose 10-bit mantissa is far from the
// reference's float results; FP32 is the contract here. Under
// Conv2dShape::precision bf16 or fp16 (--precision) a plan of its own asks for
// CUDNN_TENSOR_OP_MATH on the same fp32 buffers: cuDNN then runs TF32 tensor
// cores, more precise than bf16 (10 mantissa bits against 7) and what
// PyTorch's cuDNN convolutions do by default; a true bf16 or fp16
// convolution would need half-width copies of x, w and y and writes a
// half-width output, which the reference contract (fp32 outputs) does not
// allow. TF32 keeps fp32's range, so fp16's loss scaling never sees an
// overflow from a convolution.
#include <climits>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/launch.cuh"

namespace troupe::kernels {

using cuda::block_sum;
using cuda::check_launch;
using cuda::ConvPlan;
using cuda::current_device_state;
using cuda::DeviceState;
using cuda::for_each_index;

namespace {

constexpr std::size_t kMaxWorkspace = std::size_t{1} << 30;  // 1 GiB
constexpr std::size_t kMaxPlans = 64;

// --precision bf16 or fp16: cuDNN's TF32 tensor cores (see the file comment).
bool tensor_cores(const Conv2dShape& s) { return s.precision != Precision::fp32; }

std::string describe(const Conv2dShape& s) {
  auto v = [](std::int64_t x) { return std::to_string(x); };
  return "x [" + v(s.n) + ", " + v(s.c) + ", " + v(s.h) + ", " + v(s.w) + "], w [" + v(s.k) + ", " + v(s.c) + ", " +
         v(s.r) + ", " + v(s.s) + "], stride " + v(s.stride_h) + "x" + v(s.stride_w) + ", pad " + v(s.pad_h) + "x" +
         v(s.pad_w);
}

// cuDNN's legacy descriptors take int sizes.
int as_int(std::int64_t value, const Conv2dShape& s) {
  if (value < 0 || value > INT_MAX)
    throw std::invalid_argument("cuda backend: conv2d size " + std::to_string(value) +
                                " does not fit cuDNN's int descriptors (" + describe(s) + ")");
  return static_cast<int>(value);
}

ConvPlan& plan_for(DeviceState& st, const Conv2dShape& s) {
  const cuda::ConvKey key{s.n, s.c,        s.h,        s.w,     s.k,     s.r,
                          s.s, s.stride_h, s.stride_w, s.pad_h, s.pad_w, tensor_cores(s) ? 1 : 0};
  auto found = st.conv_plans.find(key);
  if (found != st.conv_plans.end()) return *found->second;
  if (st.conv_plans.size() >= kMaxPlans) st.conv_plans.clear();  // host objects only: safe any time

  auto plan = std::make_unique<ConvPlan>();
  TROUPE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->x));
  TROUPE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->y));
  TROUPE_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan->w));
  TROUPE_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan->conv));
  TROUPE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(s.n, s),
                                                as_int(s.c, s), as_int(s.h, s), as_int(s.w, s)));
  TROUPE_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, as_int(s.k, s),
                                                as_int(s.c, s), as_int(s.r, s), as_int(s.s, s)));
  TROUPE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan->conv, as_int(s.pad_h, s), as_int(s.pad_w, s),
                                                     as_int(s.stride_h, s), as_int(s.stride_w, s), 1, 1,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  TROUPE_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, tensor_cores(s) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  int n = 0, k = 0, p = 0, q = 0;
  TROUPE_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan->conv, plan->x, plan->w, &n, &k, &p, &q));
  if (n != s.n || k != s.k || p != s.p() || q != s.q())
    throw std::logic_error("cuda backend: cuDNN computes output [" + std::to_string(n) + ", " + std::to_string(k) +
                           ", " + std::to_string(p) + ", " + std::to_string(q) + "] for " + describe(s) +
                           ", troupe expects p = " + std::to_string(s.p()) + ", q = " + std::to_string(s.q()));
  TROUPE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, p, q));

  ConvPlan& result = *plan;
  st.conv_plans.emplace(key, std::move(plan));
  return result;
}

// The first usable entry of a heuristic list (best first): supported, plain
// FP32 math, workspace (as cuDNN reports it for this algorithm) under the cap.
template <class Perf, class Algo, class List, class Bytes>
void choose_algorithm(const char* direction, const Conv2dShape& s, int max_count, List list, Bytes workspace_bytes,
                      Algo& algo, std::size_t& bytes) {
  std::vector<Perf> perfs(static_cast<std::size_t>(max_count));
  int returned = 0;
  TROUPE_CUDNN_CHECK(list(max_count, &returned, perfs.data()));
  for (int i = 0; i < returned; ++i) {
    const Perf& perf = perfs[static_cast<std::size_t>(i)];
    if (perf.status != CUDNN_STATUS_SUCCESS) continue;
    // ALLOW_CONVERSION computes in fp16: never. Tensor-core (TF32) math only
    // under bf16 or fp16.
    if (perf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (perf.mathType == CUDNN_TENSOR_OP_MATH && !tensor_cores(s)) continue;
    std::size_t needed = 0;
    if (workspace_bytes(perf.algo, &needed) != CUDNN_STATUS_SUCCESS || needed > kMaxWorkspace) continue;
    algo = perf.algo;
    bytes = needed;
    return;
  }
  throw std::runtime_error(std::string("cuda backend: cuDNN offers no usable ") + direction + " algorithm (" +
                           (tensor_cores(s) ? "TF32 or FP32" : "FP32") + ", workspace <= 1 GiB) for conv2d " +
                           describe(s));
}

// y[n, k, p, q] += bias[k]
struct ConvBiasAdd {
  std::int64_t pq, k;
  const float* bias;
  float* y;
  __device__ void operator()(std::size_t i) const { y[i] += bias[(static_cast<std::int64_t>(i) / pq) % k]; }
};

// db[k] = sum over n, p, q of dy[n, k, p, q]: one block per output channel,
// threads striding over the n contiguous runs of p*q floats (coalesced),
// then a block reduction in double. Fixed order, no atomics: deterministic.
__global__ void conv_bias_grad_kernel(std::int64_t n, std::int64_t k, std::int64_t pq, const float* dy, float* db) {
  for (std::int64_t channel = blockIdx.x; channel < k; channel += gridDim.x) {
    double acc = 0.0;
    for (std::int64_t j = threadIdx.x; j < n * pq; j += blockDim.x) {
      const std::int64_t image = j / pq, at = j % pq;
      acc += dy[(image * k + channel) * pq + at];
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) db[channel] = static_cast<float>(acc);
    __syncthreads();  // block_sum's shared array is reused by the next channel
  }
}

void zero(DeviceState& st, float* p, std::int64_t count) {
  if (count > 0) TROUPE_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<std::size_t>(count) * sizeof(float), st.stream));
}

}  // namespace

void CudaBackend::conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  const std::int64_t pq = s.p() * s.q(), outputs = s.n * s.k * pq;
  if (outputs <= 0) return;
  DeviceState& st = current_device_state();
  if (s.c * s.r * s.s == 0) {
    zero(st, y, outputs);  // an empty sum; cuDNN rejects zero-sized filters
  } else {
    std::lock_guard<std::mutex> lock(st.mutex);
    cudnnHandle_t handle = cuda::cudnn_handle(st);
    ConvPlan& plan = plan_for(st, s);
    if (!plan.have_fwd) {
      choose_algorithm<cudnnConvolutionFwdAlgoPerf_t>(
          "forward", s, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
          [&](int count, int* returned, cudnnConvolutionFwdAlgoPerf_t* perfs) {
            return cudnnGetConvolutionForwardAlgorithm_v7(handle, plan.x, plan.w, plan.conv, plan.y, count, returned,
                                                          perfs);
          },
          [&](cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
            return cudnnGetConvolutionForwardWorkspaceSize(handle, plan.x, plan.w, plan.conv, plan.y, algo, bytes);
          },
          plan.fwd_algo, plan.fwd_bytes);
      plan.have_fwd = true;
    }
    void* ws = cuda::workspace(st, plan.fwd_bytes);
    const float alpha = 1.0f, beta = 0.0f;  // beta 0: y is overwritten, never read
    TROUPE_CUDNN_CHECK(cudnnConvolutionForward(handle, &alpha, plan.x, x, plan.w, w, plan.conv, plan.fwd_algo, ws,
                                               plan.fwd_bytes, &beta, plan.y, y));
  }
  if (bias) for_each_index(st, static_cast<std::size_t>(outputs), ConvBiasAdd{pq, s.k, bias, y}, "conv2d_bias_add");
}

void CudaBackend::conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  const std::int64_t inputs = s.n * s.c * s.h * s.w;
  if (inputs <= 0) return;
  DeviceState& st = current_device_state();
  if (s.k * s.r * s.s * s.p() * s.q() == 0) {
    zero(st, dx, inputs);
    return;
  }
  std::lock_guard<std::mutex> lock(st.mutex);
  cudnnHandle_t handle = cuda::cudnn_handle(st);
  ConvPlan& plan = plan_for(st, s);
  if (!plan.have_bwd_data) {
    choose_algorithm<cudnnConvolutionBwdDataAlgoPerf_t>(
        "backward-data", s, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
        [&](int count, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perfs) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, plan.w, plan.y, plan.conv, plan.x, count, returned,
                                                             perfs);
        },
        [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, plan.w, plan.y, plan.conv, plan.x, algo, bytes);
        },
        plan.bwd_data_algo, plan.bwd_data_bytes);
    plan.have_bwd_data = true;
  }
  void* ws = cuda::workspace(st, plan.bwd_data_bytes);
  const float alpha = 1.0f, beta = 0.0f;  // overwrite dx (inputs no window covers get 0)
  TROUPE_CUDNN_CHECK(cudnnConvolutionBackwardData(handle, &alpha, plan.w, w, plan.y, dy, plan.conv, plan.bwd_data_algo,
                                                  ws, plan.bwd_data_bytes, &beta, plan.x, dx));
}

void CudaBackend::conv2d_backward_filter(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db) {
  const std::int64_t pq = s.p() * s.q(), weights = s.k * s.c * s.r * s.s;
  DeviceState& st = current_device_state();
  if (weights > 0) {
    if (s.n * pq == 0) {
      zero(st, dw, weights);  // no outputs, so no contributions
    } else {
      std::lock_guard<std::mutex> lock(st.mutex);
      cudnnHandle_t handle = cuda::cudnn_handle(st);
      ConvPlan& plan = plan_for(st, s);
      if (!plan.have_bwd_filter) {
        choose_algorithm<cudnnConvolutionBwdFilterAlgoPerf_t>(
            "backward-filter", s, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
            [&](int count, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perfs) {
              return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, plan.x, plan.y, plan.conv, plan.w, count,
                                                                   returned, perfs);
            },
            [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
              return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, plan.x, plan.y, plan.conv, plan.w, algo,
                                                                    bytes);
            },
            plan.bwd_filter_algo, plan.bwd_filter_bytes);
        plan.have_bwd_filter = true;
      }
      void* ws = cuda::workspace(st, plan.bwd_filter_bytes);
      const float alpha = 1.0f, beta = 0.0f;  // overwrite dw: backward ops never accumulate
      TROUPE_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &alpha, plan.x, x, plan.y, dy, plan.conv,
                                                        plan.bwd_filter_algo, ws, plan.bwd_filter_bytes, &beta, plan.w,
                                                        dw));
    }
  }
  if (db && s.k > 0) {
    // n * pq == 0 still launches: every db[k] is written (as 0).
    const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(s.k, 65535));
    conv_bias_grad_kernel<<<blocks, cuda::kThreads, 0, st.stream>>>(s.n, s.k, pq, dy, db);
    check_launch("conv_bias_grad_kernel", __FILE__, __LINE__);
  }
}

}  // namespace troupe::kernels
