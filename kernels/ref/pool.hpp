// Reference pooling (NCHW, no padding; see Pool2dShape).
// Max pooling: the first maximum in row-major window order wins, and argmax
// is h * W + w inside the (n, c) input plane: the convention every backend
// follows (backend.hpp).
// Average pooling: the window sums in double, and backward scatters each
// dy / area to its window, the opposite direction to the gather the fast
// backends use (math/pool.hpp).
#pragma once

#include <cstdint>

#include "kernels/backend.hpp"

namespace troupe::kernels::ref {

template <class T>
void maxpool2d_forward(const Pool2dShape& sh, const T* x, T* y, std::int32_t* argmax) {
  const std::int64_t P = sh.p(), Q = sh.q();
  for (std::int64_t plane = 0; plane < sh.n * sh.c; ++plane) {
    const T* xp = x + plane * sh.h * sh.w;
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t q = 0; q < Q; ++q) {
        std::int64_t best = (p * sh.stride_h) * sh.w + q * sh.stride_w;
        for (std::int64_t i = 0; i < sh.window_h; ++i)
          for (std::int64_t j = 0; j < sh.window_w; ++j) {
            const std::int64_t at = (p * sh.stride_h + i) * sh.w + q * sh.stride_w + j;
            if (xp[at] > xp[best]) best = at;  // strict: an equal later value never wins
          }
        const std::int64_t yi = (plane * P + p) * Q + q;
        y[yi] = xp[best];
        argmax[yi] = static_cast<std::int32_t>(best);
      }
  }
}

// dx = 0, then each dy goes to the input element that won its window
// (windows that overlap may send several to one element; they add up).
template <class T>
void maxpool2d_backward(const Pool2dShape& sh, const T* dy, const std::int32_t* argmax, T* dx) {
  const std::int64_t plane_size = sh.h * sh.w, PQ = sh.p() * sh.q();
  for (std::int64_t i = 0; i < sh.n * sh.c * plane_size; ++i) dx[i] = T(0);
  for (std::int64_t plane = 0; plane < sh.n * sh.c; ++plane)
    for (std::int64_t i = 0; i < PQ; ++i) dx[plane * plane_size + argmax[plane * PQ + i]] += dy[plane * PQ + i];
}

template <class T>
void avgpool2d_forward(const Pool2dShape& sh, const T* x, T* y) {
  const std::int64_t P = sh.p(), Q = sh.q();
  const double area = double(sh.window_h * sh.window_w);
  for (std::int64_t plane = 0; plane < sh.n * sh.c; ++plane) {
    const T* xp = x + plane * sh.h * sh.w;
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t q = 0; q < Q; ++q) {
        double sum = 0.0;
        for (std::int64_t i = 0; i < sh.window_h; ++i)
          for (std::int64_t j = 0; j < sh.window_w; ++j)
            sum += double(xp[(p * sh.stride_h + i) * sh.w + q * sh.stride_w + j]);
        y[(plane * P + p) * Q + q] = T(sum / area);
      }
  }
}

// dx = 0, then each window adds dy / area to every element it covers.
template <class T>
void avgpool2d_backward(const Pool2dShape& sh, const T* dy, T* dx) {
  const std::int64_t P = sh.p(), Q = sh.q(), plane_size = sh.h * sh.w;
  const double area = double(sh.window_h * sh.window_w);
  for (std::int64_t i = 0; i < sh.n * sh.c * plane_size; ++i) dx[i] = T(0);
  for (std::int64_t plane = 0; plane < sh.n * sh.c; ++plane) {
    T* dxp = dx + plane * plane_size;
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t q = 0; q < Q; ++q) {
        const T share = T(double(dy[(plane * P + p) * Q + q]) / area);
        for (std::int64_t i = 0; i < sh.window_h; ++i)
          for (std::int64_t j = 0; j < sh.window_w; ++j)
            dxp[(p * sh.stride_h + i) * sh.w + q * sh.stride_w + j] += share;
      }
  }
}

template <class T>
void global_avgpool2d_forward(std::int64_t planes, std::int64_t plane_size, const T* x, T* y) {
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < plane_size; ++i) sum += double(x[plane * plane_size + i]);
    y[plane] = T(sum / double(plane_size));
  }
}

template <class T>
void global_avgpool2d_backward(std::int64_t planes, std::int64_t plane_size, const T* dy, T* dx) {
  for (std::int64_t plane = 0; plane < planes; ++plane)
    for (std::int64_t i = 0; i < plane_size; ++i)
      dx[plane * plane_size + i] = T(double(dy[plane]) / double(plane_size));
}

}  // namespace troupe::kernels::ref
