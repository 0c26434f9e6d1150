// Reference matrix ops: gemm, bias add and gradient, batched transpose.
//
// Templates on the element type so the tests can run them in double for
// finite-difference gradient checks; RefBackend instantiates them for float.
// Loops are written in the order of the formulas in backend.hpp, not for
// speed.
#pragma once

#include <cstdint>

#include "kernels/backend.hpp"
#include "kernels/math/precision.hpp"

namespace troupe::kernels::ref {

// C = alpha * op(A) * op(B) + beta * C (see GemmShape). As in BLAS, C is not
// read when beta == 0, so an uninitialised (even NaN) C is fine then.
// Each element of A and B rounds to s.precision first (bf16, fp16).
template <class T>
void gemm(const GemmShape& s, T alpha, const T* a, const T* b, T beta, T* c) {
  auto in = [&](T v) {
    return s.precision == Precision::fp32 ? v : T(math::round_to(s.precision, static_cast<float>(v)));
  };
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t j = 0; j < s.n; ++j) {
      T acc = T(0);
      for (std::int64_t p = 0; p < s.k; ++p) {
        const T av = in(s.trans_a ? a[p * s.m + i] : a[i * s.k + p]);
        const T bv = in(s.trans_b ? b[j * s.k + p] : b[p * s.n + j]);
        acc += av * bv;
      }
      T& out = c[i * s.n + j];
      out = beta == T(0) ? alpha * acc : alpha * acc + beta * out;
    }
  }
}

// y[r, c] += bias[c].
template <class T>
void bias_add(std::int64_t rows, std::int64_t cols, const T* bias, T* y) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) y[r * cols + c] += bias[c];
}

// db[c] = sum over r of dy[r, c] (overwrites db).
template <class T>
void bias_grad(std::int64_t rows, std::int64_t cols, const T* dy, T* db) {
  for (std::int64_t c = 0; c < cols; ++c) {
    T acc = T(0);
    for (std::int64_t r = 0; r < rows; ++r) acc += dy[r * cols + c];
    db[c] = acc;
  }
}

// y[b, j, i] = x[b, i, j] for `batch` matrices of [rows, cols].
template <class T>
void transpose(std::int64_t batch, std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  for (std::int64_t b = 0; b < batch; ++b) {
    const T* xb = x + b * rows * cols;
    T* yb = y + b * rows * cols;
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) yb[j * rows + i] = xb[i * cols + j];
  }
}

}  // namespace troupe::kernels::ref
