// Backend: one implementation of every numeric op for one kind of device.
//
// There are three: `ref` (plain C++ that is obviously correct; the yardstick),
// `cpu` (fast: OpenBLAS, oneDNN, vectorisable loops) and `cuda` (cuBLAS,
// cuDNN, custom kernels). The public API in ops.hpp validates shapes, dtypes
// and devices once, then calls the backend chosen by the registry for the
// tensors' device. Backends therefore take raw pointers to contiguous
// row-major memory on their device and may assume valid arguments, except
// where a comment says they must check data (ids, labels).
//
// Conventions that every backend follows, so that all three agree:
// - Backward ops overwrite their outputs (dx, dw, db), never accumulate.
// - Max pooling keeps the first maximum in row-major window order; its argmax
//   is the index h * W + w inside the input plane of the same (n, c).
// - Random numbers come from the counter-based generator in
//   math/random.hpp, so a seed gives the same numbers on every backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/device.hpp"

namespace troupe::kernels {

// What a matmul or convolution rounds its inputs to before multiplying
// (--precision, ops::MatmulPrecision); the products are summed in fp32 and
// the outputs are fp32 whatever it is. bf16: bfloat16 (nearest, ties to
// even; math/bf16.hpp), fp32's range. fp16: IEEE half (math/precision.hpp),
// whose range ends at 65504, hence dynamic loss scaling
// (models/loss_scale.hpp).
enum class Precision : std::uint8_t { fp32, bf16, fp16 };
const char* to_string(Precision p);

// C[m, n] = alpha * op(A) * op(B) + beta * C, all row-major and contiguous.
// op(A) is m x k: A is stored [m, k], or [k, m] when trans_a.
// op(B) is k x n: B is stored [k, n], or [n, k] when trans_b.
struct GemmShape {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  // Every element of A and B rounds to `precision` and the products are
  // summed in fp32. bf16: oneDNN's bf16 matmul on the cpu backend, cuBLAS's
  // CUBLAS_COMPUTE_32F_FAST_16BF on cuda; fp16: the rounded inputs through
  // sgemm on the cpu backend (oneDNN's f16 matmul needs AVX512-FP16),
  // CUBLAS_COMPUTE_32F_FAST_16F on cuda; the reference rounds its inputs.
  // C stays fp32.
  Precision precision = Precision::fp32;
};

// NCHW input [n, c, h, w], weights [k, c, r, s], output [n, k, p, q].
struct Conv2dShape {
  std::int64_t n = 0, c = 0, h = 0, w = 0;  // input
  std::int64_t k = 0, r = 0, s = 0;         // filters: count, height, width
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  // As GemmShape::precision: each direction's two inputs (x and w forward,
  // dy and w to the data, x and dy to the filter and bias) round to it and
  // the products are summed in fp32; outputs stay fp32. The cpu backend
  // runs oneDNN's bf16 primitives for bf16 and the f32 ones on rounded
  // inputs for fp16; cuda runs cuDNN's tensor-core (TF32) math on the fp32
  // buffers for either, more precise than both (10 mantissa bits, fp32's
  // range), as PyTorch's cuDNN convolutions do by default.
  Precision precision = Precision::fp32;
  std::int64_t p() const { return (h + 2 * pad_h - r) / stride_h + 1; }
  std::int64_t q() const { return (w + 2 * pad_w - s) / stride_w + 1; }
};

// Max and average pooling over NCHW input [n, c, h, w] -> [n, c, p, q], no
// padding: every window lies inside the input.
struct Pool2dShape {
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  std::int64_t window_h = 2, window_w = 2, stride_h = 2, stride_w = 2;
  // constexpr: callable in CUDA kernels (--expt-relaxed-constexpr).
  constexpr std::int64_t p() const { return (h - window_h) / stride_h + 1; }
  constexpr std::int64_t q() const { return (w - window_w) / stride_w + 1; }
};

// Batch normalisation over x [n, c, ...], seen as [n, c, spatial] where
// spatial is the product of the dimensions after the channel (1 when there
// are none, x [n, c]). Element (i, ch, j) is x[(i * c + ch) * spatial + j];
// the statistics of channel ch run over its count() = n * spatial elements.
struct BatchNormShape {
  std::int64_t n = 0, c = 0, spatial = 1;
  constexpr std::int64_t count() const { return n * spatial; }  // constexpr: usable in CUDA kernels
};

// SGD as PyTorch defines it:
//   g += weight_decay * p;  v = momentum * v + g;
//   step = nesterov ? g + momentum * v : v   (plain g when momentum == 0)
//   p -= lr * step
struct SgdParams {
  float lr = 0.01f, momentum = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
};

// The Adam family in one fused update. The optimizer (host side) computes the
// per-step coefficients, so Adam and Nadam share the kernel:
//   g += weight_decay * p                       (L2, as Keras/PyTorch Adam)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p -= lr * (coef_m * m + coef_g * g) / (sqrt(v * coef_v) + eps)
//   p -= lr * decoupled_weight_decay * p_old    (AdamW style, usually 0)
// Adam:  coef_m = 1 / (1 - beta1^t), coef_g = 0, coef_v = 1 / (1 - beta2^t).
// Nadam: see adam_coefficients() in ops.hpp (Keras' momentum schedule).
struct AdamParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-7f;
  float weight_decay = 0.0f, decoupled_weight_decay = 0.0f;
  float coef_m = 1.0f, coef_g = 0.0f, coef_v = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "ref", "cpu", "cuda"
  virtual DeviceKind device_kind() const = 0;
  // Devices of this kind that can run work now: 1 for host backends; for
  // cuda, cudaGetDeviceCount, where any error (no driver) counts as 0.
  virtual int device_count() const = 0;
  // CPU threads the calling thread's kernels may use (BLAS, oneDNN). Only
  // host backends with threaded libraries act on it.
  virtual void set_threads(int threads) { (void)threads; }

  // ---- memory (device_index selects the GPU; ignored on the host) ----
  virtual void* allocate(std::size_t bytes, int device_index) = 0;
  virtual void deallocate(void* ptr, int device_index) noexcept = 0;
  // Copies between this backend's device memory and host memory, or within
  // the device. Synchronous: the data is in place when they return.
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes, int device_index) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t bytes, int device_index) = 0;
  virtual void copy_on_device(void* dst, const void* src, std::size_t bytes, int device_index) = 0;
  virtual void fill(std::size_t n, float value, float* x) = 0;
  virtual void fill_i32(std::size_t n, std::int32_t value, std::int32_t* x) = 0;
  // Waits for all queued work on the device (a no-op on the host).
  virtual void synchronize(int device_index) = 0;
  // Makes the device the calling thread's current one, where the ops (which
  // take no device index) run; no waiting. A no-op on the host.
  virtual void make_current(int device_index) { (void)device_index; }

  // ---- staging between host and device (the parameter server's pushes
  // and pulls, actors/host_staging.hpp) ----
  // Page-locked ("pinned") host memory: the GPU copies to and from it at
  // full bus speed and without blocking the host. Host backends hand out
  // ordinary memory (these defaults).
  virtual void* allocate_pinned(std::size_t bytes);
  virtual void deallocate_pinned(void* ptr) noexcept;
  // Queue a copy on the device's stream, after the work queued before it,
  // and return at once (host backends: a plain, finished copy). The host
  // side is pinned memory that the caller leaves untouched until
  // synchronize(device_index) has returned, or (copy_from_host_async) until
  // later work on the device's stream has consumed the copy.
  virtual void copy_to_host_async(void* host_dst, const void* src, std::size_t bytes, int device_index) {
    copy_to_host(host_dst, src, bytes, device_index);
  }
  virtual void copy_from_host_async(void* dst, const void* host_src, std::size_t bytes, int device_index) {
    copy_from_host(dst, host_src, bytes, device_index);
  }

  // ---- dense layers ----
  virtual void gemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c) = 0;
  // The same gemm on `batch` matrices stored one after another: a + i m k,
  // b + i k n, c + i m n (attention's heads). By default a loop of gemm; the
  // cuda backend makes it one strided-batched cuBLAS call.
  virtual void gemm_batched(const GemmShape& s, std::int64_t batch, float alpha, const float* a, const float* b,
                            float beta, float* c) {
    for (std::int64_t i = 0; i < batch; ++i)
      gemm(s, alpha, a + i * s.m * s.k, b + i * s.k * s.n, beta, c + i * s.m * s.n);
  }
  // y[r, c] += bias[c] for a [rows, cols] matrix.
  virtual void bias_add(std::int64_t rows, std::int64_t cols, const float* bias, float* y) = 0;
  // db[c] = sum over r of dy[r, c].
  virtual void bias_grad(std::int64_t rows, std::int64_t cols, const float* dy, float* db) = 0;
  // y[b, j, i] = x[b, i, j] for `batch` matrices of [rows, cols].
  virtual void transpose(std::int64_t batch, std::int64_t rows, std::int64_t cols, const float* x, float* y) = 0;

  // ---- convolution (cross-correlation, as every framework computes it) ----
  // y = conv(x, w) + bias[k]; bias may be null.
  virtual void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) = 0;
  virtual void conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx) = 0;
  // dw from x and dy; db[k] = sum over n, p, q of dy (skipped when db is null).
  virtual void conv2d_backward_filter(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db) = 0;

  // ---- max pooling ----
  virtual void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax) = 0;
  virtual void maxpool2d_backward(const Pool2dShape& s, const float* dy, const std::int32_t* argmax, float* dx) = 0;

  // ---- average pooling ----
  // y = the mean of each window (divided by window_h * window_w).
  virtual void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) = 0;
  // dx[h, w] = sum of dy over the windows that hold (h, w), divided by the
  // window's area; 0 where no window reaches (the rows and columns that the
  // stride leaves out).
  virtual void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) = 0;
  // Over `planes` contiguous planes of plane_size elements (x [n, c, h, w]
  // with planes = n * c): y[p] = mean of plane p; dx[p, i] = dy[p] / plane_size.
  virtual void global_avgpool2d_forward(std::int64_t planes, std::int64_t plane_size, const float* x, float* y) = 0;
  virtual void global_avgpool2d_backward(std::int64_t planes, std::int64_t plane_size, const float* dy, float* dx) = 0;

  // ---- batch normalisation, in the steps of PyTorch's SyncBatchNorm ----
  // The statistics are sums, so that a caller can all-reduce them across
  // replicas between the steps. Sums are accumulated in double (or, on the
  // GPU, in per-thread doubles added in a fixed order) and stored as float.
  // sum[ch] = sum of x over channel ch.
  virtual void channel_sum(const BatchNormShape& s, const float* x, float* sum) = 0;
  // out[ch] = sum of (x - mean[ch])^2 over channel ch: the second pass of a
  // two-pass variance, which loses nothing to cancellation when the mean is
  // large against the spread (the sum of squares minus count * mean^2 does).
  virtual void channel_centered_sumsq(const BatchNormShape& s, const float* x, const float* mean, float* out) = 0;
  // y = gamma[ch] * (x - mean[ch]) / sqrt(var[ch] + eps) + beta[ch].
  virtual void batchnorm_forward(const BatchNormShape& s, const float* x, const float* mean, const float* var,
                                 const float* gamma, const float* beta, float eps, float* y) = 0;
  // sum_dy[ch] = sum of dy and sum_dy_xhat[ch] = sum of dy * xhat over
  // channel ch, xhat = (x - mean[ch]) / sqrt(var[ch] + eps): the gradients
  // of beta and gamma, and the two sums backward_data needs.
  virtual void batchnorm_backward_reduce(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                                         const float* var, float eps, float* sum_dy, float* sum_dy_xhat) = 0;
  // dx = gamma * invstd * (dy - sum_dy / count - xhat * sum_dy_xhat / count),
  // invstd = 1 / sqrt(var + eps), per channel: the gradient through batch
  // statistics that were taken over `count` elements per channel (on every
  // replica together, when the sums were all-reduced).
  virtual void batchnorm_backward_data(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                                       const float* var, const float* gamma, float eps, const float* sum_dy,
                                       const float* sum_dy_xhat, double count, float* dx) = 0;

  // ---- layer normalisation over the last dimension: x [rows, n] ----
  // Per row: mean and rstd = 1 / sqrt(var + eps), var the biased variance
  // (two passes, summed in double); y = gamma * (x - mean) * rstd + beta
  // (gamma, beta [n]). mean and rstd [rows] are kept for the backward pass.
  virtual void layernorm_forward(std::int64_t rows, std::int64_t n, const float* x, const float* gamma,
                                 const float* beta, float eps, float* y, float* mean, float* rstd) = 0;
  // With xhat = (x - mean) * rstd and g = dy * gamma, per row:
  // dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat)) (skipped when dx
  // is null); over the rows: dgamma[j] = sum of dy * xhat and dbeta[j] =
  // sum of dy (written, not added to; summed in double).
  virtual void layernorm_backward(std::int64_t rows, std::int64_t n, const float* x, const float* dy,
                                  const float* gamma, const float* mean, const float* rstd, float* dx, float* dgamma,
                                  float* dbeta) = 0;

  // ---- embedding: table [vocab, dim]; ids [count]; out [count, dim] ----
  // Both throw std::out_of_range naming the position of an id outside
  // [0, vocab).
  virtual void embedding_forward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,
                                 const float* table, float* out) = 0;
  // dtable = 0, then dtable[ids[i]] += dout[i] (scatter-add; repeated ids add up).
  virtual void embedding_backward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,
                                  const float* dout, float* dtable) = 0;

  // ---- activations ----
  virtual void relu_forward(std::size_t n, const float* x, float* y) = 0;
  // dx = x > 0 ? dy : 0 (x is the forward input; y works as well).
  virtual void relu_backward(std::size_t n, const float* x, const float* dy, float* dx) = 0;
  // Inverted dropout: element i is kept when random_uniform(seed, i) >= rate
  // and then scaled by 1 / (1 - rate). Backward recomputes the same mask
  // from the seed, so no mask is stored.
  virtual void dropout_forward(std::size_t n, float rate, std::uint64_t seed, const float* x, float* y) = 0;
  virtual void dropout_backward(std::size_t n, float rate, std::uint64_t seed, const float* dy, float* dx) = 0;
  // y = 1 / (1 + exp(-x)); dx = dy * y * (1 - y), from the forward output y.
  virtual void sigmoid_forward(std::size_t n, const float* x, float* y) = 0;
  virtual void sigmoid_backward(std::size_t n, const float* y, const float* dy, float* dx) = 0;
  // y = tanh(x); dx = dy * (1 - y^2), from the forward output y.
  virtual void tanh_forward(std::size_t n, const float* x, float* y) = 0;
  virtual void tanh_backward(std::size_t n, const float* y, const float* dy, float* dx) = 0;
  // Exact GELU (PyTorch's default, Keras' approximate=False):
  // y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); dx = dy * (Phi(x) + x phi(x)),
  // phi the standard normal density, from the forward input x.
  virtual void gelu_forward(std::size_t n, const float* x, float* y) = 0;
  virtual void gelu_backward(std::size_t n, const float* x, const float* dy, float* dx) = 0;
  // Softmax over each row of [rows, n]: y = exp(x - max) / sum exp(x - max);
  // dx = y * (dy - sum_j dy_j y_j) per row, from the forward output y.
  virtual void softmax_forward(std::int64_t rows, std::int64_t n, const float* x, float* y) = 0;
  virtual void softmax_backward(std::int64_t rows, std::int64_t n, const float* y, const float* dy, float* dx) = 0;
  // Causal softmax over stacked [n, n] score matrices ([rows, n], rows a
  // multiple of n): row r is query i = r % n, which sees keys 0..i only:
  // y[r, j] = softmax over j <= i of x[r, j], and 0 for j > i (masked keys
  // take no weight and, through softmax_backward on this y, no gradient).
  virtual void causal_softmax_forward(std::int64_t rows, std::int64_t n, const float* x, float* y) = 0;

  // ---- losses and metrics ----
  // Softmax + sparse categorical cross-entropy from logits [n, c], with
  // label smoothing e in [0, 1] (PyTorch's CrossEntropyLoss(label_smoothing=e)):
  // the target is t = (1 - e) onehot(labels[i]) + e / c, so
  // loss[i] = logsumexp(logits[i]) - (1 - e) logits[i, labels[i]] - (e / c) sum_j logits[i, j];
  // dlogits[i] = grad_scale * (softmax(logits[i]) - t)
  // (skipped when dlogits is null; dlogits may be the logits buffer). With
  // e = 0 the plain cross-entropy. Throws std::out_of_range for a label
  // outside [0, c).
  virtual void softmax_xent(std::int64_t n, std::int64_t c, const float* logits, const std::int32_t* labels,
                            float* loss, float* dlogits, float grad_scale, float smoothing) = 0;
  // loss[i] = mean over d of (pred - target)^2 for rows [n, d];
  // dpred = grad_scale * 2 * (pred - target) / d (skipped when null).
  virtual void mse(std::int64_t n, std::int64_t d, const float* pred, const float* target, float* loss, float* dpred,
                   float grad_scale) = 0;
  // correct[i] = 1 when labels[i] is among the k largest logits of row i
  // (ties count against: a label is in the top k when fewer than k logits
  // are strictly greater), else 0. A NaN logit counts as greater than any
  // other, and a NaN label logit is never correct: a diverged model must not
  // score as accurate.
  virtual void topk_correct(std::int64_t n, std::int64_t c, std::int64_t k, const float* logits,
                            const std::int32_t* labels, float* correct) = 0;
  // Sum of n floats, accumulated in double, returned to the host.
  virtual double reduce_sum(std::size_t n, const float* x) = 0;
  // Sum of the squares of n floats, accumulated in double (the squared L2
  // norm a gradient-norm clip needs), returned to the host.
  virtual double reduce_sum_squares(std::size_t n, const float* x) = 0;

  // ---- element-wise and buffers ----
  virtual void add(std::size_t n, const float* a, const float* b, float* y) = 0;  // y = a + b
  virtual void scale(std::size_t n, float alpha, float* x) = 0;                   // x *= alpha
  virtual void axpy(std::size_t n, float alpha, const float* x, float* y) = 0;    // y += alpha x
  // dst = sum of `count` buffers (the local step of an all-reduce); dst may
  // alias one of the sources.
  virtual void sum_n(std::size_t n, const float* const* srcs, int count, float* dst) = 0;
  // Copies `rows` rows of `cols` floats: row i of src starts at
  // src + i * src_pitch and lands at dst + i * dst_pitch (pitches in
  // elements, at least cols). The two regions do not overlap.
  virtual void copy_2d(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t src_pitch, float* dst,
                       std::int64_t dst_pitch) = 0;

  // ---- fused optimizer updates on flat buffers ----
  virtual void sgd_update(std::size_t n, const SgdParams& p, float* param, const float* grad,
                          float* velocity) = 0;  // velocity unused (may be null) if momentum == 0
  virtual void adam_update(std::size_t n, const AdamParams& p, float* param, const float* grad, float* m, float* v) = 0;

  // ---- seeded initialisers (counter-based: same numbers on every backend) ----
  virtual void init_uniform(std::size_t n, float low, float high, std::uint64_t seed, float* x) = 0;
  virtual void init_normal(std::size_t n, float mean, float stddev, std::uint64_t seed, float* x) = 0;
};

}  // namespace troupe::kernels

// Declare every memory function, and every op, of Backend as overrides, so
// that a backend class writes out only what is its own (see
// ref/ref_backend.hpp).
#define TROUPE_BACKEND_MEMORY_OVERRIDES                                                               \
  void* allocate(std::size_t bytes, int device_index) override;                                       \
  void deallocate(void* ptr, int device_index) noexcept override;                                     \
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes, int device_index) override;   \
  void copy_from_host(void* dst, const void* host_src, std::size_t bytes, int device_index) override; \
  void copy_on_device(void* dst, const void* src, std::size_t bytes, int device_index) override;      \
  void fill(std::size_t n, float value, float* x) override;                                           \
  void fill_i32(std::size_t n, std::int32_t value, std::int32_t* x) override;                         \
  void synchronize(int device_index) override;

#define TROUPE_BACKEND_OP_OVERRIDES                                                                                   \
  void gemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c) override;          \
  void bias_add(std::int64_t rows, std::int64_t cols, const float* bias, float* y) override;                          \
  void bias_grad(std::int64_t rows, std::int64_t cols, const float* dy, float* db) override;                          \
  void transpose(std::int64_t batch, std::int64_t rows, std::int64_t cols, const float* x, float* y) override;        \
  void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) override;    \
  void conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx) override;               \
  void conv2d_backward_filter(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db) override;  \
  void maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax) override;              \
  void maxpool2d_backward(const Pool2dShape& s, const float* dy, const std::int32_t* argmax, float* dx) override;     \
  void avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) override;                                    \
  void avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) override;                                 \
  void global_avgpool2d_forward(std::int64_t planes, std::int64_t plane_size, const float* x, float* y) override;     \
  void global_avgpool2d_backward(std::int64_t planes, std::int64_t plane_size, const float* dy, float* dx) override;  \
  void channel_sum(const BatchNormShape& s, const float* x, float* sum) override;                                     \
  void channel_centered_sumsq(const BatchNormShape& s, const float* x, const float* mean, float* out) override;       \
  void batchnorm_forward(const BatchNormShape& s, const float* x, const float* mean, const float* var,                \
                         const float* gamma, const float* beta, float eps, float* y) override;                        \
  void batchnorm_backward_reduce(const BatchNormShape& s, const float* x, const float* dy, const float* mean,         \
                                 const float* var, float eps, float* sum_dy, float* sum_dy_xhat) override;            \
  void batchnorm_backward_data(const BatchNormShape& s, const float* x, const float* dy, const float* mean,           \
                               const float* var, const float* gamma, float eps, const float* sum_dy,                  \
                               const float* sum_dy_xhat, double count, float* dx) override;                           \
  void layernorm_forward(std::int64_t rows, std::int64_t n, const float* x, const float* gamma, const float* beta,    \
                         float eps, float* y, float* mean, float* rstd) override;                                     \
  void layernorm_backward(std::int64_t rows, std::int64_t n, const float* x, const float* dy, const float* gamma,     \
                          const float* mean, const float* rstd, float* dx, float* dgamma, float* dbeta) override;     \
  void embedding_forward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,           \
                         const float* table, float* out) override;                                                    \
  void embedding_backward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,          \
                          const float* dout, float* dtable) override;                                                 \
  void relu_forward(std::size_t n, const float* x, float* y) override;                                                \
  void relu_backward(std::size_t n, const float* x, const float* dy, float* dx) override;                             \
  void dropout_forward(std::size_t n, float rate, std::uint64_t seed, const float* x, float* y) override;             \
  void dropout_backward(std::size_t n, float rate, std::uint64_t seed, const float* dy, float* dx) override;          \
  void sigmoid_forward(std::size_t n, const float* x, float* y) override;                                             \
  void sigmoid_backward(std::size_t n, const float* y, const float* dy, float* dx) override;                          \
  void tanh_forward(std::size_t n, const float* x, float* y) override;                                                \
  void tanh_backward(std::size_t n, const float* y, const float* dy, float* dx) override;                             \
  void gelu_forward(std::size_t n, const float* x, float* y) override;                                                \
  void gelu_backward(std::size_t n, const float* x, const float* dy, float* dx) override;                             \
  void softmax_forward(std::int64_t rows, std::int64_t n, const float* x, float* y) override;                         \
  void softmax_backward(std::int64_t rows, std::int64_t n, const float* y, const float* dy, float* dx) override;      \
  void causal_softmax_forward(std::int64_t rows, std::int64_t n, const float* x, float* y) override;                  \
  void softmax_xent(std::int64_t n, std::int64_t c, const float* logits, const std::int32_t* labels, float* loss,     \
                    float* dlogits, float grad_scale, float smoothing) override;                                      \
  void mse(std::int64_t n, std::int64_t d, const float* pred, const float* target, float* loss, float* dpred,         \
           float grad_scale) override;                                                                                \
  void topk_correct(std::int64_t n, std::int64_t c, std::int64_t k, const float* logits, const std::int32_t* labels,  \
                    float* correct) override;                                                                         \
  double reduce_sum(std::size_t n, const float* x) override;                                                          \
  double reduce_sum_squares(std::size_t n, const float* x) override;                                                  \
  void add(std::size_t n, const float* a, const float* b, float* y) override;                                         \
  void scale(std::size_t n, float alpha, float* x) override;                                                          \
  void axpy(std::size_t n, float alpha, const float* x, float* y) override;                                           \
  void sum_n(std::size_t n, const float* const* srcs, int count, float* dst) override;                                \
  void copy_2d(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t src_pitch, float* dst,            \
               std::int64_t dst_pitch) override;                                                                      \
  void sgd_update(std::size_t n, const SgdParams& p, float* param, const float* grad, float* velocity) override;      \
  void adam_update(std::size_t n, const AdamParams& p, float* param, const float* grad, float* m, float* v) override; \
  void init_uniform(std::size_t n, float low, float high, std::uint64_t seed, float* x) override;                     \
  void init_normal(std::size_t n, float mean, float stddev, std::uint64_t seed, float* x) override;
