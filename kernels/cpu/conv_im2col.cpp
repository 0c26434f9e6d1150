// Convolution as im2col + OpenBLAS sgemm, one image at a time.
//
// For image n, im2col lays out every receptive field as a column:
//   col[(c * R + r) * S + s, p * Q + q] = x[n, c, p*sh - ph + r, q*sw - pw + s]  (0 in padding)
// so that, with W seen as a [K, C*R*S] matrix,
//   forward          y_n [K, PQ]    = W * col
//   backward data    col            = W^T * dy_n, then col2im adds it back into dx_n
//   backward filter  dw [K, C*R*S] += dy_n * col^T
// Per image rather than one huge col for the batch: the col buffer stays a
// few hundred KB (in L2) and the output lands directly in NCHW order.
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/conv_variants.hpp"

namespace troupe::kernels::cpu {

namespace {

// A 1x1 filter with stride 1 and no padding reads the image as it is:
// im2col would be a copy.
bool col_is_input(const Conv2dShape& s) {
  return s.r == 1 && s.s == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0;
}

// One col buffer per thread, grown on demand: several replicas may run
// convolutions at once, and allocating per call would cost a page fault
// storm for every image.
float* col_buffer(std::size_t elements) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < elements) buffer.resize(elements);
  return buffer.data();
}

void im2col(const Conv2dShape& s, const float* x, float* col) {
  const std::int64_t P = s.p(), Q = s.q();
  for (std::int64_t c = 0; c < s.c; ++c)
    for (std::int64_t r = 0; r < s.r; ++r)
      for (std::int64_t t = 0; t < s.s; ++t) {
        float* out = col + ((c * s.r + r) * s.s + t) * P * Q;
        const float* plane = x + c * s.h * s.w;
        for (std::int64_t p = 0; p < P; ++p) {
          const std::int64_t ih = p * s.stride_h - s.pad_h + r;
          float* row = out + p * Q;
          if (ih < 0 || ih >= s.h) {
            std::fill(row, row + Q, 0.0f);
            continue;
          }
          const float* in = plane + ih * s.w;
          for (std::int64_t q = 0; q < Q; ++q) {
            const std::int64_t iw = q * s.stride_w - s.pad_w + t;
            row[q] = (iw >= 0 && iw < s.w) ? in[iw] : 0.0f;
          }
        }
      }
}

// The adjoint of im2col: dx (one image, zeroed here) += every column entry
// at the input position it was read from.
void col2im(const Conv2dShape& s, const float* col, float* dx) {
  const std::int64_t P = s.p(), Q = s.q();
  std::fill(dx, dx + s.c * s.h * s.w, 0.0f);
  for (std::int64_t c = 0; c < s.c; ++c)
    for (std::int64_t r = 0; r < s.r; ++r)
      for (std::int64_t t = 0; t < s.s; ++t) {
        const float* in = col + ((c * s.r + r) * s.s + t) * P * Q;
        float* plane = dx + c * s.h * s.w;
        for (std::int64_t p = 0; p < P; ++p) {
          const std::int64_t ih = p * s.stride_h - s.pad_h + r;
          if (ih < 0 || ih >= s.h) continue;
          float* out = plane + ih * s.w;
          const float* row = in + p * Q;
          for (std::int64_t q = 0; q < Q; ++q) {
            const std::int64_t iw = q * s.stride_w - s.pad_w + t;
            if (iw >= 0 && iw < s.w) out[iw] += row[q];
          }
        }
      }
}

int blas_int(std::int64_t v) { return static_cast<int>(std::max<std::int64_t>(v, 1)); }

}  // namespace

void conv2d_forward_im2col(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  const std::int64_t PQ = s.p() * s.q(), CRS = s.c * s.r * s.s;
  const bool direct = col_is_input(s);
  float* col = direct ? nullptr : col_buffer(static_cast<std::size_t>(CRS * PQ));
  for (std::int64_t n = 0; n < s.n; ++n) {
    const float* xn = x + n * s.c * s.h * s.w;
    float* yn = y + n * s.k * PQ;
    if (!direct) im2col(s, xn, col);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(s.k), blas_int(PQ), blas_int(CRS), 1.0f, w,
                blas_int(CRS), direct ? xn : col, blas_int(PQ), 0.0f, yn, blas_int(PQ));
    if (bias)
      for (std::int64_t k = 0; k < s.k; ++k) {
        const float b = bias[k];
        float* row = yn + k * PQ;
        for (std::int64_t i = 0; i < PQ; ++i) row[i] += b;
      }
  }
}

void conv2d_backward_data_im2col(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  const std::int64_t PQ = s.p() * s.q(), CRS = s.c * s.r * s.s;
  const bool direct = col_is_input(s);
  float* col = direct ? nullptr : col_buffer(static_cast<std::size_t>(CRS * PQ));
  for (std::int64_t n = 0; n < s.n; ++n) {
    float* dxn = dx + n * s.c * s.h * s.w;
    // In the 1x1 case col2im is the identity, so the product goes straight to dx.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(CRS), blas_int(PQ), blas_int(s.k), 1.0f, w,
                blas_int(CRS), dy + n * s.k * PQ, blas_int(PQ), 0.0f, direct ? dxn : col, blas_int(PQ));
    if (!direct) col2im(s, col, dxn);
  }
}

void conv2d_backward_filter_im2col(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db) {
  const std::int64_t PQ = s.p() * s.q(), CRS = s.c * s.r * s.s;
  const bool direct = col_is_input(s);
  float* col = direct ? nullptr : col_buffer(static_cast<std::size_t>(CRS * PQ));
  if (s.n == 0) std::fill(dw, dw + s.k * CRS, 0.0f);
  for (std::int64_t n = 0; n < s.n; ++n) {
    const float* xn = x + n * s.c * s.h * s.w;
    if (!direct) im2col(s, xn, col);
    // beta = 0 for the first image makes the op overwrite dw, as backward ops must.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(s.k), blas_int(CRS), blas_int(PQ), 1.0f,
                dy + n * s.k * PQ, blas_int(PQ), direct ? xn : col, blas_int(PQ), n == 0 ? 0.0f : 1.0f, dw,
                blas_int(CRS));
  }
  if (db) {
    for (std::int64_t k = 0; k < s.k; ++k) {
      float acc = 0.0f;
      for (std::int64_t n = 0; n < s.n; ++n) {
        const float* row = dy + (n * s.k + k) * PQ;
        for (std::int64_t i = 0; i < PQ; ++i) acc += row[i];
      }
      db[k] = acc;
    }
  }
}

}  // namespace troupe::kernels::cpu
