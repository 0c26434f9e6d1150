// Dense-layer ops of the cuda backend: gemm (cuBLAS), bias add and bias
// gradient, batched transpose, max and average pooling, and embedding.
#include <climits>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/pool.hpp"

namespace troupe::kernels {

using cuda::blocks_for;
using cuda::check_launch;
using cuda::current_device_state;
using cuda::DeviceState;
using cuda::for_each_index;
using cuda::kThreads;

namespace {

// C = beta * C, for gemm with k == 0 (an empty sum). beta == 0 writes
// zeros, ignoring whatever (NaN) C held, as BLAS does.
struct ScaleOrZero {
  float beta;
  float* c;
  __device__ void operator()(std::size_t i) const { c[i] = beta == 0.0f ? 0.0f : beta * c[i]; }
};

struct BiasAdd {
  std::int64_t cols;
  const float* bias;
  float* y;
  __device__ void operator()(std::size_t i) const { y[i] += bias[static_cast<std::int64_t>(i) % cols]; }
};

// db[c] = sum over rows of dy[r, c]. A block owns 32 adjacent columns: its
// 32 x 32 threads read 32 consecutive floats per row (one 128-byte
// transaction per warp), each of the 32 row-groups strides down the rows,
// and shared memory adds the 32 partial sums of each column in a fixed
// order. No atomics, so the result is deterministic.
constexpr int kTile = 32;

__global__ void bias_grad_kernel(std::int64_t rows, std::int64_t cols, const float* dy, float* db) {
  __shared__ double partial[kTile][kTile + 1];  // +1: no bank conflicts on the column read
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kTile + threadIdx.x;
  double acc = 0.0;
  if (col < cols)
    for (std::int64_t r = threadIdx.y; r < rows; r += kTile) acc += dy[r * cols + col];
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    double total = 0.0;
    for (int j = 0; j < kTile; ++j) total += partial[j][threadIdx.x];
    db[col] = static_cast<float>(total);
  }
}

// y[b, j, i] = x[b, i, j] through a 32 x 32 tile in shared memory, so that
// both the global read (along x's rows) and the global write (along y's
// rows) are coalesced. The tile is 33 wide so the column-wise read from
// shared memory hits 32 different banks. Blocks are 32 x 8 threads, each
// thread moving 4 elements. Tile rows and batches loop in case they exceed
// the grid's y and z limits (65535).
__global__ void transpose_kernel(std::int64_t batch, std::int64_t rows, std::int64_t cols, const float* x, float* y) {
  __shared__ float tile[kTile][kTile + 1];
  const std::int64_t row_tiles = (rows + kTile - 1) / kTile;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  for (std::int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const float* xb = x + b * rows * cols;
    float* yb = y + b * rows * cols;
    for (std::int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
      const std::int64_t row0 = rt * kTile;
      for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
        const std::int64_t r = row0 + dy, c = col0 + threadIdx.x;
        if (r < rows && c < cols) tile[dy][threadIdx.x] = xb[r * cols + c];
      }
      __syncthreads();
      // y is [cols, rows]: its row index is x's column.
      for (int dy = threadIdx.y; dy < kTile; dy += blockDim.y) {
        const std::int64_t yr = col0 + dy, yc = row0 + threadIdx.x;
        if (yr < cols && yc < rows) yb[yr * rows + yc] = tile[threadIdx.x][dy];
      }
      __syncthreads();  // the tile is reused by the next iteration
    }
  }
}

// Max pooling, one thread per output element.
//
// Custom rather than cuDNN: the Backend contract keeps the argmax (the
// first maximum in row-major window order, as index h * W + w within the
// (n, c) plane) so that backward routes each gradient to exactly the
// element the reference picks. cuDNN's pooling keeps no indices and its
// backward recomputes the maximum, spreading ties differently.
struct MaxPoolForward {
  Pool2dShape s;
  std::int64_t p, q;
  const float* x;
  float* y;
  std::int32_t* argmax;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t out = static_cast<std::int64_t>(i);
    const std::int64_t oq = out % q, op = (out / q) % p, plane = out / (p * q);
    const float* xp = x + plane * s.h * s.w;
    const std::int64_t h0 = op * s.stride_h, w0 = oq * s.stride_w;
    std::int64_t best_at = h0 * s.w + w0;
    float best = xp[best_at];
    for (std::int64_t dh = 0; dh < s.window_h; ++dh)
      for (std::int64_t dw = 0; dw < s.window_w; ++dw) {
        const std::int64_t at = (h0 + dh) * s.w + (w0 + dw);
        const float v = xp[at];
        if (v > best) {  // strictly greater: the first maximum wins ties
          best = v;
          best_at = at;
        }
      }
    y[out] = best;
    argmax[out] = static_cast<std::int32_t>(best_at);
  }
};

// dx is zeroed first; then each dy goes to its argmax. Windows overlap when
// stride < window, so two outputs can route to one input: atomicAdd.
struct MaxPoolBackward {
  std::int64_t pq, hw;
  const float* dy;
  const std::int32_t* argmax;
  float* dx;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t plane = static_cast<std::int64_t>(i) / pq;
    const std::int32_t at = argmax[i];
    if (at >= 0 && at < hw)  // always true for an argmax from forward; guards memory
      atomicAdd(dx + plane * hw + at, dy[i]);
  }
};

// Average pooling, own kernels with the window math of math/pool.hpp (the
// cpu loops' own): cuDNN's pooling (cudnnPoolingForward/Backward) is
// deprecated in cuDNN 9. Forward is one thread per output; backward one
// thread per input element, gathering the windows that hold it, so every dx
// is written once, with no zeroing pass and no atomics even where windows
// overlap: deterministic, and the same sums in the same order as the cpu
// backend.
struct AvgPoolForward {
  Pool2dShape s;
  std::int64_t p, q;
  const float* x;
  float* y;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t out = static_cast<std::int64_t>(i);
    const std::int64_t oq = out % q, op = (out / q) % p, plane = out / (p * q);
    y[out] = math::mean_of_window(s, x + plane * s.h * s.w, op, oq);
  }
};

struct AvgPoolBackward {
  Pool2dShape s;
  std::int64_t pq;
  const float* dy;
  float* dx;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t in = static_cast<std::int64_t>(i);
    const std::int64_t w = in % s.w, h = (in / s.w) % s.h, plane = in / (s.h * s.w);
    dx[in] = math::avgpool_input_grad(s, dy + plane * pq, h, w);
  }
};

// Global average pooling forward: one warp per plane, summing in double
// (see launch.cuh's warp rows); a plane is a contiguous run of plane_size.
__global__ void global_avgpool_kernel(std::int64_t planes, std::int64_t plane_size, const float* x, float* y) {
  const cuda::WarpRows w = cuda::warp_rows();
  for (std::int64_t plane = w.first; plane < planes; plane += w.step) {
    const float* xp = x + plane * plane_size;
    double sum = 0.0;
    for (std::int64_t j = w.lane; j < plane_size; j += 32) sum += xp[j];
    sum = cuda::warp_sum(sum);
    if (w.lane == 0) y[plane] = static_cast<float>(sum / static_cast<double>(plane_size));
  }
}

struct GlobalAvgPoolBackward {
  std::int64_t plane_size;
  const float* dy;
  float* dx;
  __device__ void operator()(std::size_t i) const {
    dx[i] = dy[static_cast<std::int64_t>(i) / plane_size] / static_cast<float>(plane_size);
  }
};

// Embedding gather: out[i, d] = table[ids[i], d], one thread per output
// element (consecutive threads read consecutive floats of one table row).
struct EmbeddingGather {
  std::int64_t vocab, dim;
  const std::int32_t* ids;
  const float* table;
  float* out;
  unsigned long long* error_slot;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t pos = static_cast<std::int64_t>(i) / dim, d = static_cast<std::int64_t>(i) % dim;
    const std::int32_t id = ids[pos];
    if (id < 0 || id >= vocab) {
      atomicMin(error_slot, static_cast<unsigned long long>(pos));
      out[i] = 0.0f;  // written anyway: the call throws, but no garbage is left
      return;
    }
    out[i] = table[id * dim + d];
  }
};

// Embedding scatter-add: dtable[ids[i], d] += dout[i, d]. Repeated ids add
// up, hence atomicAdd (on sm_90 a float atomicAdd to global memory is one
// RED instruction resolved in L2).
struct EmbeddingScatter {
  std::int64_t vocab, dim;
  const std::int32_t* ids;
  const float* dout;
  float* dtable;
  unsigned long long* error_slot;
  __device__ void operator()(std::size_t i) const {
    const std::int64_t pos = static_cast<std::int64_t>(i) / dim, d = static_cast<std::int64_t>(i) % dim;
    const std::int32_t id = ids[pos];
    if (id < 0 || id >= vocab) {
      atomicMin(error_slot, static_cast<unsigned long long>(pos));
      return;
    }
    atomicAdd(dtable + id * dim + d, dout[i]);
  }
};

// The tensor-core mode of a mixed-precision GemmShape: fp32 buffers, the
// inputs converted to bf16 or fp16 inside cuBLAS, fp32 sums.
cublasComputeType_t compute_type(const GemmShape& s) {
  return s.precision == Precision::fp16 ? CUBLAS_COMPUTE_32F_FAST_16F : CUBLAS_COMPUTE_32F_FAST_16BF;
}

[[noreturn]] void throw_bad_id(const char* op, DeviceState& st, std::int64_t pos, const std::int32_t* ids,
                               std::int64_t vocab) {
  const std::int32_t id = cuda::read_i32(st, ids + pos);
  throw std::out_of_range(std::string("cuda backend: ") + op + ": ids[" + std::to_string(pos) +
                          "] = " + std::to_string(id) + " is outside [0, " + std::to_string(vocab) + ")");
}

}  // namespace

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
// (column-major) sees each row-major matrix as its transpose, so we pass B
// before A with the same transpose flags, and swap m and n. Leading
// dimensions are the row lengths as stored. cublasSgemm_64 takes 64-bit
// sizes, so no shape has to fit in an int.
void CudaBackend::gemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c) {
  if (s.m == 0 || s.n == 0) return;
  DeviceState& st = current_device_state();
  if (s.k == 0) {  // cuBLAS would do this too; spelled out so it is certain
    for_each_index(st, static_cast<std::size_t>(s.m * s.n), ScaleOrZero{beta, c}, "gemm_k0_scale");
    return;
  }
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const std::int64_t lda = s.trans_a ? s.m : s.k;  // A stored [k, m] or [m, k]
  const std::int64_t ldb = s.trans_b ? s.k : s.n;  // B stored [n, k] or [k, n]
  std::lock_guard<std::mutex> lock(st.mutex);
  // beta == 0: cuBLAS does not read C then, so NaN garbage in C is ignored.
  if (s.precision != Precision::fp32) {
    // fp32 in and out, the inputs converted to bf16 or fp16 for the tensor
    // cores and the products summed in fp32 (GemmShape::precision).
    TROUPE_CUBLAS_CHECK(cublasGemmEx_64(cuda::cublas_handle(st), op_b, op_a, s.n, s.m, s.k, &alpha, b, CUDA_R_32F, ldb,
                                        a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, s.n, compute_type(s),
                                        CUBLAS_GEMM_DEFAULT));
    return;
  }
  TROUPE_CUBLAS_CHECK(
      cublasSgemm_64(cuda::cublas_handle(st), op_b, op_a, s.n, s.m, s.k, &alpha, b, ldb, a, lda, &beta, c, s.n));
}

// One strided-batched call for the batch (attention's heads: many small
// GEMMs, which one launch each would leave the GPU idle between), with
// gemm's row-major trick: C^T = op(B)^T op(A)^T in column-major.
void CudaBackend::gemm_batched(const GemmShape& s, std::int64_t batch, float alpha, const float* a, const float* b,
                               float beta, float* c) {
  if (batch == 0 || s.m == 0 || s.n == 0) return;
  if (s.k == 0) {
    for_each_index(current_device_state(), static_cast<std::size_t>(batch * s.m * s.n), ScaleOrZero{beta, c},
                   "gemm_batched_k0_scale");
    return;
  }
  DeviceState& st = current_device_state();
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const std::int64_t lda = s.trans_a ? s.m : s.k;
  const std::int64_t ldb = s.trans_b ? s.k : s.n;
  std::lock_guard<std::mutex> lock(st.mutex);
  if (s.precision != Precision::fp32) {
    TROUPE_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
        cuda::cublas_handle(st), op_b, op_a, s.n, s.m, s.k, &alpha, b, CUDA_R_32F, ldb, s.k * s.n, a, CUDA_R_32F, lda,
        s.m * s.k, &beta, c, CUDA_R_32F, s.n, s.m * s.n, batch, compute_type(s), CUBLAS_GEMM_DEFAULT));
    return;
  }
  TROUPE_CUBLAS_CHECK(cublasSgemmStridedBatched_64(cuda::cublas_handle(st), op_b, op_a, s.n, s.m, s.k, &alpha, b, ldb,
                                                   s.k * s.n, a, lda, s.m * s.k, &beta, c, s.n, s.m * s.n, batch));
}

void CudaBackend::bias_add(std::int64_t rows, std::int64_t cols, const float* bias, float* y) {
  if (rows == 0 || cols == 0) return;
  for_each_index(current_device_state(), static_cast<std::size_t>(rows * cols), BiasAdd{cols, bias, y}, "bias_add");
}

void CudaBackend::bias_grad(std::int64_t rows, std::int64_t cols, const float* dy, float* db) {
  if (cols == 0) return;
  DeviceState& st = current_device_state();
  // rows == 0 still runs: every db[c] is written (as 0).
  const unsigned blocks = static_cast<unsigned>((cols + kTile - 1) / kTile);
  bias_grad_kernel<<<blocks, dim3(kTile, kTile), 0, st.stream>>>(rows, cols, dy, db);
  check_launch("bias_grad_kernel", __FILE__, __LINE__);
}

void CudaBackend::transpose(std::int64_t batch, std::int64_t rows, std::int64_t cols, const float* x, float* y) {
  if (batch == 0 || rows == 0 || cols == 0) return;
  DeviceState& st = current_device_state();
  const std::int64_t col_tiles = (cols + kTile - 1) / kTile, row_tiles = (rows + kTile - 1) / kTile;
  if (col_tiles > INT_MAX)
    throw std::invalid_argument("cuda backend: transpose with " + std::to_string(cols) + " columns exceeds the grid");
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(std::min<std::int64_t>(row_tiles, 65535)),
                  static_cast<unsigned>(std::min<std::int64_t>(batch, 65535)));
  transpose_kernel<<<grid, dim3(kTile, 8), 0, st.stream>>>(batch, rows, cols, x, y);
  check_launch("transpose_kernel", __FILE__, __LINE__);
}

void CudaBackend::maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax) {
  const std::int64_t p = s.p(), q = s.q();
  const std::int64_t outputs = s.n * s.c * p * q;
  if (outputs <= 0) return;
  for_each_index(current_device_state(), static_cast<std::size_t>(outputs), MaxPoolForward{s, p, q, x, y, argmax},
                 "maxpool2d_forward");
}

void CudaBackend::maxpool2d_backward(const Pool2dShape& s, const float* dy, const std::int32_t* argmax, float* dx) {
  const std::int64_t inputs = s.n * s.c * s.h * s.w;
  if (inputs <= 0) return;
  DeviceState& st = current_device_state();
  TROUPE_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(inputs) * sizeof(float), st.stream));
  const std::int64_t pq = s.p() * s.q();
  if (pq <= 0) return;
  for_each_index(st, static_cast<std::size_t>(s.n * s.c * pq), MaxPoolBackward{pq, s.h * s.w, dy, argmax, dx},
                 "maxpool2d_backward");
}

void CudaBackend::avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  const std::int64_t p = s.p(), q = s.q();
  const std::int64_t outputs = s.n * s.c * p * q;
  if (outputs <= 0) return;
  for_each_index(current_device_state(), static_cast<std::size_t>(outputs), AvgPoolForward{s, p, q, x, y},
                 "avgpool2d_forward");
}

void CudaBackend::avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  const std::int64_t inputs = s.n * s.c * s.h * s.w;
  if (inputs <= 0) return;
  for_each_index(current_device_state(), static_cast<std::size_t>(inputs), AvgPoolBackward{s, s.p() * s.q(), dy, dx},
                 "avgpool2d_backward");
}

void CudaBackend::global_avgpool2d_forward(std::int64_t planes, std::int64_t plane_size, const float* x, float* y) {
  if (planes == 0) return;
  DeviceState& st = current_device_state();
  global_avgpool_kernel<<<cuda::blocks_for_rows(st, planes), kThreads, 0, st.stream>>>(planes, plane_size, x, y);
  check_launch("global_avgpool_kernel", __FILE__, __LINE__);
}

void CudaBackend::global_avgpool2d_backward(std::int64_t planes, std::int64_t plane_size, const float* dy, float* dx) {
  for_each_index(current_device_state(), static_cast<std::size_t>(planes * plane_size),
                 GlobalAvgPoolBackward{plane_size, dy, dx}, "global_avgpool2d_backward");
}

void CudaBackend::embedding_forward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,
                                    const float* table, float* out) {
  if (count == 0 || dim == 0) return;  // (an id check with no output to write is skipped too)
  DeviceState& st = current_device_state();
  std::lock_guard<std::mutex> lock(st.mutex);  // the error slot is shared
  cuda::reset_error_slot(st);
  for_each_index(st, static_cast<std::size_t>(count * dim), EmbeddingGather{vocab, dim, ids, table, out, st.error_slot},
                 "embedding_forward");
  const std::int64_t bad = cuda::read_error_slot(st);
  if (bad >= 0) throw_bad_id("embedding_forward", st, bad, ids, vocab);
}

void CudaBackend::embedding_backward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,
                                     const float* dout, float* dtable) {
  DeviceState& st = current_device_state();
  std::lock_guard<std::mutex> lock(st.mutex);
  if (vocab * dim > 0)
    TROUPE_CUDA_CHECK(cudaMemsetAsync(dtable, 0, static_cast<std::size_t>(vocab * dim) * sizeof(float), st.stream));
  if (count == 0 || dim == 0) return;
  cuda::reset_error_slot(st);
  for_each_index(st, static_cast<std::size_t>(count * dim),
                 EmbeddingScatter{vocab, dim, ids, dout, dtable, st.error_slot}, "embedding_backward");
  const std::int64_t bad = cuda::read_error_slot(st);
  if (bad >= 0) throw_bad_id("embedding_backward", st, bad, ids, vocab);
}

}  // namespace troupe::kernels
