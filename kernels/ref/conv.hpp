// Reference 2-D convolution (cross-correlation, NCHW, see Conv2dShape):
// direct loops over every output element, written from the definition
//
//   y[n, k, p, q] = bias[k] + sum over c, r, s of
//                   x[n, c, p * stride_h - pad_h + r, q * stride_w - pad_w + s] * w[k, c, r, s]
//
// where x outside the image counts as zero. The two backward ops are the
// same sum read the other way round. Templates so the gradient checks can
// run them in double.
#pragma once

#include <cstdint>

#include "kernels/backend.hpp"

namespace troupe::kernels::ref {

namespace conv_detail {
// Visits every (input element, weight, output element) triple that meets in
// the sum above, skipping taps that fall into the zero padding.
template <class T, class Visit>
void for_each_tap(const Conv2dShape& sh, Visit&& visit) {
  const std::int64_t P = sh.p(), Q = sh.q();
  for (std::int64_t n = 0; n < sh.n; ++n)
    for (std::int64_t k = 0; k < sh.k; ++k)
      for (std::int64_t p = 0; p < P; ++p)
        for (std::int64_t q = 0; q < Q; ++q) {
          const std::int64_t yi = ((n * sh.k + k) * P + p) * Q + q;
          for (std::int64_t c = 0; c < sh.c; ++c)
            for (std::int64_t r = 0; r < sh.r; ++r) {
              const std::int64_t ih = p * sh.stride_h - sh.pad_h + r;
              if (ih < 0 || ih >= sh.h) continue;
              for (std::int64_t s = 0; s < sh.s; ++s) {
                const std::int64_t iw = q * sh.stride_w - sh.pad_w + s;
                if (iw < 0 || iw >= sh.w) continue;
                const std::int64_t xi = ((n * sh.c + c) * sh.h + ih) * sh.w + iw;
                const std::int64_t wi = ((k * sh.c + c) * sh.r + r) * sh.s + s;
                visit(xi, wi, yi);
              }
            }
        }
}
}  // namespace conv_detail

// y = conv(x, w) + bias; bias may be null.
template <class T>
void conv2d_forward(const Conv2dShape& sh, const T* x, const T* w, const T* bias, T* y) {
  const std::int64_t P = sh.p(), Q = sh.q();
  for (std::int64_t i = 0; i < sh.n * sh.k * P * Q; ++i) y[i] = bias ? bias[(i / (P * Q)) % sh.k] : T(0);
  conv_detail::for_each_tap<T>(sh, [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) { y[yi] += x[xi] * w[wi]; });
}

// dx = d(sum dy * y) / dx (overwrites dx).
template <class T>
void conv2d_backward_data(const Conv2dShape& sh, const T* dy, const T* w, T* dx) {
  for (std::int64_t i = 0; i < sh.n * sh.c * sh.h * sh.w; ++i) dx[i] = T(0);
  conv_detail::for_each_tap<T>(sh,
                               [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) { dx[xi] += dy[yi] * w[wi]; });
}

// dw (and db[k] = sum over n, p, q of dy, unless db is null); overwrites both.
template <class T>
void conv2d_backward_filter(const Conv2dShape& sh, const T* x, const T* dy, T* dw, T* db) {
  for (std::int64_t i = 0; i < sh.k * sh.c * sh.r * sh.s; ++i) dw[i] = T(0);
  conv_detail::for_each_tap<T>(sh,
                               [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) { dw[wi] += dy[yi] * x[xi]; });
  if (db) {
    const std::int64_t PQ = sh.p() * sh.q();
    for (std::int64_t k = 0; k < sh.k; ++k) {
      T acc = T(0);
      for (std::int64_t n = 0; n < sh.n; ++n)
        for (std::int64_t i = 0; i < PQ; ++i) acc += dy[(n * sh.k + k) * PQ + i];
      db[k] = acc;
    }
  }
}

}  // namespace troupe::kernels::ref
