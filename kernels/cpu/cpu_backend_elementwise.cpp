// CpuBackend's non-dense ops: straight loops over the shared per-element math
// of kernels/math/ (the same functions the cuda kernels call), shaped so that
// GCC at -O3 -march=native vectorises them: no calls or branches the
// vectoriser cannot see through in the hot loops, parameters copied to locals
// so stores through the float pointers cannot alias them, and reductions
// split over several independent accumulators.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/eltwise_onednn.hpp"
#include "kernels/cpu/sums.hpp"
#include "kernels/math/elementwise.hpp"
#include "kernels/math/init.hpp"
#include "kernels/math/random.hpp"

namespace troupe::kernels {

namespace {

// Labels are data, so the backend checks them (backend.hpp): a label outside
// [0, c) would index past its row.
void check_labels(const char* op, std::int64_t n, std::int64_t c, const std::int32_t* labels) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= c)
      throw std::out_of_range(std::string(op) + ": label " + std::to_string(labels[i]) + " of row " +
                              std::to_string(i) + " is outside [0, " + std::to_string(c) + ")");
  }
}

using cpu::kLanes;
using cpu::sum_in_double;

// Sum of (a - b)^2 over [0, n) in double.
double squared_distance(std::size_t n, const float* a, const float* b) {
  double lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) {
      const double d = static_cast<double>(a[i + l]) - static_cast<double>(b[i + l]);
      lane[l] += d * d;
    }
  double tail = 0.0;
  for (; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    tail += d * d;
  }
  for (std::size_t l = 0; l < kLanes; ++l) tail += lane[l];
  return tail;
}

// GCC vectorises neither a max reduction (NaN and signed-zero rules) nor the
// lane-array form of the sums (cpu/sums.hpp), so the lanes are a GCC vector
// type: one vmaxps per 16 logits with AVX-512, two with AVX2.
typedef float f32x16 __attribute__((vector_size(64)));

float row_max(std::int64_t c, const float* row) {
  f32x16 lane = row[0] - f32x16{};  // broadcast row[0]
  std::int64_t j = 0;
  for (; j + 16 <= c; j += 16) {
    f32x16 v;
    std::memcpy(&v, row + j, sizeof v);  // unaligned load: rows start anywhere
    lane = lane < v ? v : lane;
  }
  float max = row[0];
  for (; j < c; ++j) max = max < row[j] ? row[j] : max;
  for (int l = 0; l < 16; ++l) max = max < lane[l] ? lane[l] : max;
  return max;
}

// sum_n works on column blocks of this many floats: the 8 KiB accumulator
// stays in L1 while every source's slice of the block streams through it,
// and dst is written once per block instead of once per source.
constexpr std::size_t kSumBlock = 2048;

}  // namespace

// ---------------------------------------------------------------- activations

void CpuBackend::relu_forward(std::size_t n, const float* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = math::relu(x[i]);
}

void CpuBackend::relu_backward(std::size_t n, const float* x, const float* dy, float* dx) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = math::relu_grad(x[i], dy[i]);
}

void CpuBackend::dropout_forward(std::size_t n, float rate, std::uint64_t seed, const float* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] * math::dropout_factor(seed, i, rate);
}

// The mask is recomputed from the seed (counter-based), never stored.
void CpuBackend::dropout_backward(std::size_t n, float rate, std::uint64_t seed, const float* dy, float* dx) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = dy[i] * math::dropout_factor(seed, i, rate);
}

// Sigmoid and tanh go to oneDNN's eltwise primitives (eltwise_onednn.cpp),
// GELU stays a loop over the shared math (math/elementwise.hpp). Measured
// 2026-12-02 on the 2-core AVX-512 EPYC VM, one thread, 1 Mi floats in
// [-6, 6], -O3 -march=native, best of 7, ns per element:
//   sigmoid: loop 4.5,  oneDNN 0.9 (backward 1.2)
//   tanh:    loop 16.6, oneDNN 3.5 to 4.8 (backward 1.2)
//   gelu:    loop 16.8, oneDNN gelu_erf 1.3 (backward 2.3)
// The loops call glibc's expf, tanhf and erfcf one element at a time (GCC
// vectorises them only under -ffast-math); oneDNN evaluates vectorised
// polynomials. Its sigmoid and tanh are accurate (at most 2.8e-7 relative
// to the double reference, forward and backward). Its gelu_erf is not in
// the negative tail: it forms 1 + erf(x / sqrt 2), off by 4e-5 to 3e-4
// relative at x in [-4.5, -3] and returning 0 below x = -5.5, where the
// shared erfc form stays within 4e-6 everywhere (and the tests hold every
// backend to that: SmoothActivations.GeluKeepsItsNegativeTail). So GELU pays
// for accuracy with speed here. The shared sigmoid and tanh, which the cuda
// kernels run, are tested on the host directly
// (SmoothActivations.SharedMathMatchesRef).
void CpuBackend::sigmoid_forward(std::size_t n, const float* x, float* y) {
  cpu::eltwise_forward_onednn(cpu::Eltwise::sigmoid, n, x, y);
}

void CpuBackend::sigmoid_backward(std::size_t n, const float* y, const float* dy, float* dx) {
  cpu::eltwise_backward_onednn(cpu::Eltwise::sigmoid, n, y, dy, dx);
}

void CpuBackend::tanh_forward(std::size_t n, const float* x, float* y) {
  cpu::eltwise_forward_onednn(cpu::Eltwise::tanh, n, x, y);
}

void CpuBackend::tanh_backward(std::size_t n, const float* y, const float* dy, float* dx) {
  cpu::eltwise_backward_onednn(cpu::Eltwise::tanh, n, y, dy, dx);
}

// GELU in vectors: the shared erfc form (math::normal_cdf), its erfcf and
// expf from glibc's vector math library, libmvec (glibc 2.35+: 16 floats a
// call under AVX-512, 8 under AVX2; a few ulp, as the scalar ones), which
// GCC calls by itself only under -ffast-math. Measured 2026-12-03 on the
// 2-core AVX-512 EPYC VM, the gpt's training step: the scalar loops were a
// quarter of it (16% in erfcf alone). Without AVX2 the scalar loops stay.
#if defined(__AVX512F__)
#define TROUPE_GELU_LANES 16
using GeluVector = __m512;
extern "C" __m512 _ZGVeN16v_erfcf(__m512);
extern "C" __m512 _ZGVeN16v_expf(__m512);
inline __m512 vector_erfc(__m512 v) { return _ZGVeN16v_erfcf(v); }
inline __m512 vector_exp(__m512 v) { return _ZGVeN16v_expf(v); }
#elif defined(__AVX2__) && defined(__FMA__)
#define TROUPE_GELU_LANES 8
using GeluVector = __m256;
extern "C" __m256 _ZGVdN8v_erfcf(__m256);
extern "C" __m256 _ZGVdN8v_expf(__m256);
inline __m256 vector_erfc(__m256 v) { return _ZGVdN8v_erfcf(v); }
inline __m256 vector_exp(__m256 v) { return _ZGVdN8v_expf(v); }
#endif

#ifdef TROUPE_GELU_LANES
namespace {
constexpr std::size_t kGeluLanes = TROUPE_GELU_LANES;
// GeluVector is GCC's vector type (__m512, __m256): its arithmetic is
// elementwise, a scalar operand broadcast, so the formulas below are
// math/elementwise.hpp's, a vector of lanes at a time, with no staging
// arrays between the library calls.
inline GeluVector load(const float* p) {
  GeluVector v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, GeluVector v) { std::memcpy(p, &v, sizeof v); }
}  // namespace
#endif

void CpuBackend::gelu_forward(std::size_t n, const float* x, float* y) {
  std::size_t i = 0;
#ifdef TROUPE_GELU_LANES
  for (; i + kGeluLanes <= n; i += kGeluLanes) {
    const GeluVector v = load(x + i);
    const GeluVector cdf = vector_erfc(v * -0.70710678118654752f);  // 2 Phi(x)
    store(y + i, v * (cdf * 0.5f));
  }
#endif
  for (; i < n; ++i) y[i] = math::gelu(x[i]);
}

void CpuBackend::gelu_backward(std::size_t n, const float* x, const float* dy, float* dx) {
  std::size_t i = 0;
#ifdef TROUPE_GELU_LANES
  for (; i + kGeluLanes <= n; i += kGeluLanes) {
    const GeluVector v = load(x + i);
    const GeluVector cdf = vector_erfc(v * -0.70710678118654752f);
    const GeluVector pdf = vector_exp(v * v * -0.5f);  // sqrt(2 pi) phi(x)
    store(dx + i, load(dy + i) * (cdf * 0.5f + v * (pdf * 0.39894228040143268f)));
  }
#endif
  for (; i < n; ++i) dx[i] = math::gelu_grad(x[i], dy[i]);
}

namespace {
// One row of n: the softmax of its first `keys` values, 0 beyond them. As
// softmax_xent does it: the vectorised maximum, exponentials written
// straight into the output, their sum in double, one scaling pass; each
// pass reads a row that is still in L1 or L2.
//
// The exponentials through libmvec's vector expf where it is there (as
// GELU's above): the scalar expf was 3% of the gpt's training step, in its
// attention's causal rows.
void exp_shifted(std::size_t n, const float* x, float shift, float* out) {
  std::size_t j = 0;
#ifdef TROUPE_GELU_LANES
  for (; j + kGeluLanes <= n; j += kGeluLanes) store(out + j, vector_exp(load(x + j) - shift));
#endif
  for (; j < n; ++j) out[j] = std::exp(x[j] - shift);
}

void softmax_row(std::int64_t keys, std::int64_t n, const float* row, float* out) {
  const std::size_t cols = static_cast<std::size_t>(keys);
  const float max = row_max(keys, row);
  exp_shifted(cols, row, max, out);
  const float inv_sum = static_cast<float>(1.0 / sum_in_double(cols, out));
  for (std::size_t j = 0; j < cols; ++j) out[j] *= inv_sum;
  for (std::int64_t j = keys; j < n; ++j) out[j] = 0.0f;
}
}  // namespace

// Softmax row by row. (oneDNN's softmax primitive would vectorise the
// exponentials, as its eltwise does above; not measured yet. The rows here
// are a classifier's or an attention's, where the layers before them cost
// far more.)
void CpuBackend::softmax_forward(std::int64_t rows, std::int64_t n, const float* x, float* y) {
  for (std::int64_t r = 0; r < rows; ++r) softmax_row(n, n, x + r * n, y + r * n);
}

// The causal rows: query i = r % n over keys 0..i, zeros written beyond.
void CpuBackend::causal_softmax_forward(std::int64_t rows, std::int64_t n, const float* x, float* y) {
  for (std::int64_t r = 0; r < rows; ++r) softmax_row(r % n + 1, n, x + r * n, y + r * n);
}

void CpuBackend::softmax_backward(std::int64_t rows, std::int64_t n, const float* y, const float* dy, float* dx) {
  const std::size_t cols = static_cast<std::size_t>(n);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * n;
    const float* dyr = dy + r * n;
    float* out = dx + r * n;
    const float dot = static_cast<float>(cpu::dot_in_double(cols, dyr, yr));
    for (std::size_t j = 0; j < cols; ++j) out[j] = yr[j] * (dyr[j] - dot);
  }
}

// ---------------------------------------------------------------- losses and metrics

void CpuBackend::softmax_xent(std::int64_t n, std::int64_t c, const float* logits, const std::int32_t* labels,
                              float* loss, float* dlogits, float grad_scale, float smoothing) {
  check_labels("softmax_xent", n, c, labels);
  const double e = smoothing;
  const float uniform_target = static_cast<float>(double(grad_scale) * e / double(c));
  const float label_target = static_cast<float>(double(grad_scale) * (1.0 - e));
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = logits + i * c;
    // Subtracting the row max keeps every exponent <= 0: no overflow, and
    // the largest term is exactly 1 so the sum never underflows to 0.
    const float max = row_max(c, row);
    // Read before dlogits is written, so dlogits may be the logits buffer.
    const float label_logit = row[labels[i]];
    const double row_sum = e != 0.0 ? sum_in_double(static_cast<std::size_t>(c), row) : 0.0;
    double sum;
    if (dlogits) {
      float* drow = dlogits + i * c;
      exp_shifted(static_cast<std::size_t>(c), row, max, drow);
      sum = sum_in_double(static_cast<std::size_t>(c), drow);
      const float factor = static_cast<float>(double(grad_scale) / sum);
      if (e != 0.0) {
        for (std::int64_t j = 0; j < c; ++j) drow[j] = drow[j] * factor - uniform_target;
      } else {
        for (std::int64_t j = 0; j < c; ++j) drow[j] *= factor;
      }
      drow[labels[i]] -= label_target;
    } else {
      sum = 0.0;
      for (std::int64_t j = 0; j < c; ++j) sum += static_cast<double>(std::exp(row[j] - max));
    }
    loss[i] =
        static_cast<float>(double(max) + std::log(sum) - (1.0 - e) * double(label_logit) - (e / double(c)) * row_sum);
  }
}

void CpuBackend::mse(std::int64_t n, std::int64_t d, const float* pred, const float* target, float* loss, float* dpred,
                     float grad_scale) {
  const std::size_t cols = static_cast<std::size_t>(d);
  for (std::int64_t i = 0; i < n; ++i)
    loss[i] = static_cast<float>(squared_distance(cols, pred + i * d, target + i * d) / double(d));
  if (dpred) {
    const float factor = 2.0f * grad_scale / static_cast<float>(d);
    const std::size_t total = static_cast<std::size_t>(n) * cols;
    for (std::size_t j = 0; j < total; ++j) dpred[j] = factor * (pred[j] - target[j]);
  }
}

// Counting the logits strictly greater than the label's is one vectorisable
// pass per row, where a partial sort would be k passes or a heap.
void CpuBackend::topk_correct(std::int64_t n, std::int64_t c, std::int64_t k, const float* logits,
                              const std::int32_t* labels, float* correct) {
  check_labels("topk_correct", n, c, labels);
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = logits + i * c;
    const float label_logit = row[labels[i]];
    std::int32_t greater = 0;
    // !(a <= b): a is greater, or either is NaN. A NaN logit never makes a
    // prediction right: it outranks the label, and a NaN label logit is wrong.
    for (std::int64_t j = 0; j < c; ++j) greater += !(row[j] <= label_logit) ? 1 : 0;
    correct[i] = greater < k && label_logit == label_logit ? 1.0f : 0.0f;
  }
}

double CpuBackend::reduce_sum(std::size_t n, const float* x) { return sum_in_double(n, x); }

double CpuBackend::reduce_sum_squares(std::size_t n, const float* x) { return cpu::dot_in_double(n, x, x); }

// ---------------------------------------------------------------- element-wise

void CpuBackend::add(std::size_t n, const float* a, const float* b, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void CpuBackend::scale(std::size_t n, float alpha, float* x) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= alpha;
}

void CpuBackend::axpy(std::size_t n, float alpha, const float* x, float* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// Each block's sources are all read into the local accumulator before the
// block of dst is written, so dst may alias a source. Every loop pairs the
// local buffer with one or two read-only pointers, so the vectoriser needs no
// runtime alias check (which an aliased dst would fail, falling back to
// scalar code). Sources are added in order, as the reference does.
void CpuBackend::sum_n(std::size_t n, const float* const* srcs, int count, float* dst) {
  if (count == 1) {
    if (dst != srcs[0]) std::memmove(dst, srcs[0], n * sizeof(float));
    return;
  }
  alignas(64) float acc[kSumBlock];
  for (std::size_t start = 0; start < n; start += kSumBlock) {
    const std::size_t len = std::min(kSumBlock, n - start);
    const float* s0 = srcs[0] + start;
    const float* s1 = srcs[1] + start;
    for (std::size_t j = 0; j < len; ++j) acc[j] = s0[j] + s1[j];
    for (int k = 2; k < count; ++k) {
      const float* sk = srcs[k] + start;
      for (std::size_t j = 0; j < len; ++j) acc[j] += sk[j];
    }
    std::memcpy(dst + start, acc, len * sizeof(float));
  }
}

// One memcpy when both sides are contiguous, else one per row (the rows of a
// channel concatenation are whole images' worth of channels, kilobytes to
// megabytes each).
void CpuBackend::copy_2d(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t src_pitch, float* dst,
                         std::int64_t dst_pitch) {
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
  if (src_pitch == cols && dst_pitch == cols) {
    std::memcpy(dst, src, static_cast<std::size_t>(rows) * row_bytes);
    return;
  }
  for (std::int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_pitch, src + r * src_pitch, row_bytes);
}

// ---------------------------------------------------------------- optimizers

void CpuBackend::sgd_update(std::size_t n, const SgdParams& p, float* param, const float* grad, float* velocity) {
  // A local copy: `p` could otherwise alias param, and every store would
  // force the hyper-parameters to be reloaded.
  const SgdParams q = p;
  if (q.momentum == 0.0f) {
    for (std::size_t i = 0; i < n; ++i) math::sgd_step(q, param[i], grad[i], nullptr);
  } else {
    for (std::size_t i = 0; i < n; ++i) math::sgd_step(q, param[i], grad[i], velocity + i);
  }
}

void CpuBackend::adam_update(std::size_t n, const AdamParams& p, float* param, const float* grad, float* m, float* v) {
  const AdamParams q = p;  // see sgd_update
  for (std::size_t i = 0; i < n; ++i) math::adam_step(q, param[i], grad[i], m[i], v[i]);
}

// ---------------------------------------------------------------- initialisers

void CpuBackend::init_uniform(std::size_t n, float low, float high, std::uint64_t seed, float* x) {
  for (std::size_t i = 0; i < n; ++i) x[i] = math::uniform_in(low, high, math::random_uniform(seed, i));
}

void CpuBackend::init_normal(std::size_t n, float mean, float stddev, std::uint64_t seed, float* x) {
  for (std::size_t i = 0; i < n; ++i) x[i] = math::normal_with(mean, stddev, math::random_normal(seed, i));
}

}  // namespace troupe::kernels
