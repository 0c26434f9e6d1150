// CpuBackend's dense ops: gemm through oneDNN (large) or OpenBLAS (small), bias and transpose as plain
// loops the compiler vectorises, convolution through oneDNN or im2col +
// sgemm (conv_onednn.cpp, conv_im2col.cpp), pooling and embedding as tight
// loops.
//
// Pooling: loops over the shared window math (math/pool.hpp), the same
// functions the cuda kernels run, so the CPU tests check them. Max pooling
// must keep troupe's argmax convention, which oneDNN's pooling does not
// expose. Average pooling could go to oneDNN (pooling_avg), but it is one
// streaming pass over x (each input read once for non-overlapping windows)
// that these loops run at memory speed without a primitive to build and
// cache per shape.
//
// Convolution: oneDNN for all three directions. Measured 2026-11-21 with
// bench_kernels (docs/BENCHMARKS-kernels-dense.md), one thread, on a shared
// 2-core AVX-512 EPYC VM; median CPU time of 5 interleaved repetitions,
// oneDNN vs im2col + OpenBLAS:
//   seed CNN  64x1x28x28, 32 3x3    forward 575 vs 636 us, backward data
//                                   494 vs 945 us, backward filter 1442 vs 2017 us
//   text CNN  64x7x1x300, 64 1x5    forward 875 vs 1260 us, backward data
//                                   850 vs 2605 us, backward filter 2008 vs 2473 us
// Noise on that machine is about 20% (CpuBackend's own row, the same oneDNN
// code, measured up to 20% apart from the oneDNN row), so the seed forward
// margin alone is weak; an earlier run gave 473 vs 626 us there, and oneDNN
// won all six in every run. oneDNN 2.6 picks its gemm-based convolution
// (x64:gemm:jit) for plain NCHW at these shapes; it batches the im2col over
// the whole minibatch and uses its own JIT sgemm, where our im2col runs one
// OpenBLAS call per image with small matrices (K = 9 for the seed CNN).
// im2col stays built and benchmarked (conv_variants.hpp) for other shapes.
//
// Since 2026-12-02 oneDNN also runs in the layouts its primitive chooses
// (the _blocked variants: nChw16c, the direct JIT AVX-512 kernels, troupe's
// NCHW reordered in and out). bench_kernels, one thread, an AVX-512 EPYC VM
// busy with a build, plain vs blocked (us):
//   resnet 3x3, batch 128, 16 ch 28x28: forward 8254 vs 3954, backward data
//     12431 vs 4905, backward filter 21474 vs 4027; 32 ch 14x14: 6895 vs
//     3029, 8856 vs 3695, 9042 vs 3247; 64 ch 7x7: 4648 vs 2644, 6086 vs
//     3088, 6042 vs 2913
//   seed CNN forward 682 vs 495, backward data 437 vs 3732, backward filter
//     1893 vs 506; text CNN 935 vs 660, 898 vs 1503, 2537 vs 2253
// so blocked wherever the channels written are 16 or more (blocked_pays).
//
// Threading: OpenBLAS and oneDNN keep their own thread pools, sized by
// OPENBLAS_NUM_THREADS / OMP_NUM_THREADS; nothing here changes them, because
// a process-wide setting would fight the replicas' own threads.
#include <cblas.h>
#include <dnnl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu/conv_variants.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/gemm_mixed.hpp"
#include "kernels/cpu/sums.hpp"
#include "kernels/math/pool.hpp"
#include "kernels/ref/conv.hpp"
#include "kernels/ref/embedding.hpp"

namespace troupe::kernels {

namespace {

int blas_int(std::int64_t v) { return static_cast<int>(std::max<std::int64_t>(v, 1)); }

// Shapes with an empty dimension: nothing for a library to compute, and
// some (oneDNN, BLAS leading dimensions) reject them; the reference loops
// produce the right zeros and biases.
bool degenerate(const Conv2dShape& s) { return s.n == 0 || s.c == 0 || s.k == 0; }

// gemm: oneDNN's sgemm from this much work (m x n x k) up, OpenBLAS below.
// Measured 2026-12-03 on the 2-core AVX-512 EPYC VM, one thread, best of 3
// (the gpt's shapes, B x T = 768 rows, width 128): oneDNN 1.05x to 1.20x
// OpenBLAS's speed on every projection (768x384x128 forward, its weight and
// input gradients, 768x512x128, 512x128x768, ...; 102 to 114 GF/s against 90
// to 102), OpenBLAS 1.1x oneDNN's on attention's 64x64x32 products and on the
// cnn's input gradient (64x5408x64, B transposed: 504 against 559 us; the
// cnn trained 2.5% slower through oneDNN), hence OpenBLAS for a transposed
// B with k <= 64. oneDNN
// also keeps its speed with OPENBLAS_CORETYPE set, and writes C at beta = 0
// without OpenBLAS's separate zeroing pass.
// But it is opt-in (TROUPE_GEMM=onednn, read once): with it, the mlp
// trained by the plain trainer with --log-every 1 aborted on a Ctrl-C
// ("corrupted size vs. prev_size", glibc's heap check; 4 of 6 runs of
// CliIssue11.CtrlCExits130AndSaysResumeWithResume, never through OpenBLAS;
// no write past C found in a guard-band test of dnnl_sgemm), and a trainer
// that can corrupt its heap is not worth 10%. Until that is understood,
// fp32 gemm stays on OpenBLAS.
constexpr std::int64_t kOnednnGemmWork = std::int64_t{1} << 20;
bool onednn_gemm_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("TROUPE_GEMM");
    return v && std::string(v) == "onednn";
  }();
  return allowed;
}

}  // namespace

void CpuBackend::gemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c) {
  if (s.m == 0 || s.n == 0) return;
  if (s.k == 0) {
    // An empty product: BLAS would reject lda = 0, and C = beta * C is all
    // that is left (not read when beta == 0, as in BLAS).
    for (std::int64_t i = 0; i < s.m * s.n; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  if (s.precision != Precision::fp32) {
    cpu::gemm_mixed(s, alpha, a, b, beta, c);
    return;
  }
  const std::int64_t lda = std::max<std::int64_t>(1, s.trans_a ? s.m : s.k);
  const std::int64_t ldb = std::max<std::int64_t>(1, s.trans_b ? s.k : s.n);
  if (s.m * s.n * s.k >= kOnednnGemmWork && !(s.trans_b && s.k <= 64) && onednn_gemm_allowed()) {
    // oneDNN's JIT sgemm (row-major, as troupe's), where it is the faster.
    const dnnl_status_t status = dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.m, s.n, s.k, alpha, a, lda,
                                            b, ldb, beta, c, std::max<std::int64_t>(1, s.n));
    if (status == dnnl_success) return;
  }
  cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans,
              blas_int(s.m), blas_int(s.n), blas_int(s.k), alpha, a, blas_int(lda), b, blas_int(ldb), beta, c,
              blas_int(s.n));
}

void CpuBackend::bias_add(std::int64_t rows, std::int64_t cols, const float* bias, float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* __restrict__ row = y + r * cols;
    const float* __restrict__ b = bias;
    for (std::int64_t c = 0; c < cols; ++c) row[c] += b[c];
  }
}

void CpuBackend::bias_grad(std::int64_t rows, std::int64_t cols, const float* dy, float* db) {
  // Row by row rather than column by column: dy is read once, in order, and
  // the inner loop is a vector add into db (which stays in L1 for the
  // layer widths we have).
  std::fill(db, db + cols, 0.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* __restrict__ row = dy + r * cols;
    float* __restrict__ out = db;
    for (std::int64_t c = 0; c < cols; ++c) out[c] += row[c];
  }
}

void CpuBackend::transpose(std::int64_t batch, std::int64_t rows, std::int64_t cols, const float* x, float* y) {
  // 32x32 tiles: one tile of x and one of y (4 KB each) stay in L1, so the
  // strided writes hit cache lines that the tile's other rows fill.
  constexpr std::int64_t tile = 32;
  for (std::int64_t b = 0; b < batch; ++b) {
    const float* __restrict__ xb = x + b * rows * cols;
    float* __restrict__ yb = y + b * rows * cols;
    for (std::int64_t i0 = 0; i0 < rows; i0 += tile) {
      const std::int64_t i1 = std::min(i0 + tile, rows);
      for (std::int64_t j0 = 0; j0 < cols; j0 += tile) {
        const std::int64_t j1 = std::min(j0 + tile, cols);
        for (std::int64_t i = i0; i < i1; ++i)
          for (std::int64_t j = j0; j < j1; ++j) yb[j * rows + i] = xb[i * cols + j];
      }
    }
  }
}

// Blocked layouts pad channels to the vector width (16 floats on AVX-512):
// worth it where the channels a direction writes are that many (the
// output's filters forward and for the filter gradient, the input's
// channels backward to the data); the seed cnn's 1-channel input gradient
// took 8.5x as long blocked (3.7 ms against 0.44).
bool blocked_pays(std::int64_t channels_written) { return channels_written >= 16; }

void CpuBackend::conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  if (degenerate(s)) return ref::conv2d_forward(s, x, w, bias, y);
  if (blocked_pays(s.k)) return cpu::conv2d_forward_onednn_blocked(s, x, w, bias, y);
  cpu::conv2d_forward_onednn(s, x, w, bias, y);
}

void CpuBackend::conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  if (degenerate(s)) return ref::conv2d_backward_data(s, dy, w, dx);
  if (blocked_pays(s.c) && blocked_pays(s.k)) return cpu::conv2d_backward_data_onednn_blocked(s, dy, w, dx);
  cpu::conv2d_backward_data_onednn(s, dy, w, dx);
}

void CpuBackend::conv2d_backward_filter(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db) {
  if (degenerate(s)) return ref::conv2d_backward_filter(s, x, dy, dw, db);
  if (blocked_pays(s.k)) return cpu::conv2d_backward_filter_onednn_blocked(s, x, dy, dw, db);
  cpu::conv2d_backward_filter_onednn(s, x, dy, dw, db);
}

void CpuBackend::maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax) {
  const std::int64_t P = s.p(), Q = s.q();
  for (std::int64_t plane = 0; plane < s.n * s.c; ++plane) {
    const float* xp = x + plane * s.h * s.w;
    float* yp = y + plane * P * Q;
    std::int32_t* ap = argmax + plane * P * Q;
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t q = 0; q < Q; ++q)
        ap[p * Q + q] =
            math::max_in_window(xp, s.w, p * s.stride_h, q * s.stride_w, s.window_h, s.window_w, yp[p * Q + q]);
  }
}

void CpuBackend::maxpool2d_backward(const Pool2dShape& s, const float* dy, const std::int32_t* argmax, float* dx) {
  const std::int64_t plane_size = s.h * s.w, PQ = s.p() * s.q();
  std::fill(dx, dx + s.n * s.c * plane_size, 0.0f);
  for (std::int64_t plane = 0; plane < s.n * s.c; ++plane) {
    float* dxp = dx + plane * plane_size;
    const float* dyp = dy + plane * PQ;
    const std::int32_t* ap = argmax + plane * PQ;
    for (std::int64_t i = 0; i < PQ; ++i) dxp[ap[i]] += dyp[i];
  }
}

void CpuBackend::avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) {
  const std::int64_t P = s.p(), Q = s.q();
  for (std::int64_t plane = 0; plane < s.n * s.c; ++plane) {
    const float* xp = x + plane * s.h * s.w;
    float* yp = y + plane * P * Q;
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t q = 0; q < Q; ++q) yp[p * Q + q] = math::mean_of_window(s, xp, p, q);
  }
}

// Gathered per input element (math::avgpool_input_grad), so every dx is
// written once and no zeroing pass is needed.
void CpuBackend::avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  const std::int64_t PQ = s.p() * s.q();
  for (std::int64_t plane = 0; plane < s.n * s.c; ++plane) {
    const float* dyp = dy + plane * PQ;
    float* dxp = dx + plane * s.h * s.w;
    for (std::int64_t h = 0; h < s.h; ++h)
      for (std::int64_t w = 0; w < s.w; ++w) dxp[h * s.w + w] = math::avgpool_input_grad(s, dyp, h, w);
  }
}

void CpuBackend::global_avgpool2d_forward(std::int64_t planes, std::int64_t plane_size, const float* x, float* y) {
  const std::size_t len = static_cast<std::size_t>(plane_size);
  for (std::int64_t p = 0; p < planes; ++p)
    y[p] = static_cast<float>(cpu::sum_in_double(len, x + p * plane_size) / double(plane_size));
}

void CpuBackend::global_avgpool2d_backward(std::int64_t planes, std::int64_t plane_size, const float* dy, float* dx) {
  const float size = static_cast<float>(plane_size);
  for (std::int64_t p = 0; p < planes; ++p) {
    const float share = dy[p] / size;
    float* __restrict__ out = dx + p * plane_size;
    for (std::int64_t i = 0; i < plane_size; ++i) out[i] = share;
  }
}

void CpuBackend::embedding_forward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,
                                   const float* table, float* out) {
  ref::check_embedding_ids("embedding_forward", count, vocab, ids);
  const auto row_bytes = static_cast<std::size_t>(dim) * sizeof(float);
  if (row_bytes == 0) return;
  for (std::int64_t i = 0; i < count; ++i) std::memcpy(out + i * dim, table + std::int64_t{ids[i]} * dim, row_bytes);
}

void CpuBackend::embedding_backward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,
                                    const float* dout, float* dtable) {
  ref::check_embedding_ids("embedding_backward", count, vocab, ids);
  std::fill(dtable, dtable + vocab * dim, 0.0f);
  for (std::int64_t i = 0; i < count; ++i) {
    float* __restrict__ row = dtable + std::int64_t{ids[i]} * dim;
    const float* __restrict__ g = dout + i * dim;
    for (std::int64_t d = 0; d < dim; ++d) row[d] += g[d];
  }
}

}  // namespace troupe::kernels
