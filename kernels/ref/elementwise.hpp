// Reference element-wise ops, the local sum of an all-reduce and the 2-D
// strided copy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::kernels::ref {

template <class T>
void add(std::size_t n, const T* a, const T* b, T* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

template <class T>
void scale(std::size_t n, T alpha, T* x) {
  for (std::size_t i = 0; i < n; ++i) x[i] *= alpha;
}

template <class T>
void axpy(std::size_t n, T alpha, const T* x, T* y) {
  for (std::size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// dst[i] = srcs[0][i] + srcs[1][i] + ... in source order. Every source
// element i is read before dst[i] is written, so dst may alias a source.
template <class T>
void sum_n(std::size_t n, const T* const* srcs, int count, T* dst) {
  for (std::size_t i = 0; i < n; ++i) {
    T sum = srcs[0][i];
    for (int k = 1; k < count; ++k) sum += srcs[k][i];
    dst[i] = sum;
  }
}

// Row i of src (at src + i * src_pitch) to dst + i * dst_pitch, element by
// element.
template <class T>
void copy_2d(std::int64_t rows, std::int64_t cols, const T* src, std::int64_t src_pitch, T* dst,
             std::int64_t dst_pitch) {
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) dst[i * dst_pitch + j] = src[i * src_pitch + j];
}

}  // namespace troupe::kernels::ref
