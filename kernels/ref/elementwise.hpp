// Reference element-wise ops and the local sum of an all-reduce.
#pragma once

#include <cstddef>

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

}  // namespace troupe::kernels::ref
