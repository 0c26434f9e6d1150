// Pooling math shared by the cpu loops and the cuda kernels: one call is one
// output element (or, for average pooling's backward, one input element).
// The reference backend has its own independent version (ref/pool.hpp),
// which is what the tests compare against.
#pragma once

#include <cstdint>

#include "kernels/backend.hpp"
#include "kernels/math/host_device.hpp"

namespace troupe::kernels::math {

// The maximum of the window_h x window_w window whose top-left corner is
// (h0, w0) in a plane of width `width`; returns its index h * width + w.
// The comparison is strict, so the first maximum in row-major window order
// wins (the convention in backend.hpp), and a NaN in the first position
// stays the result, exactly as in ref.
TROUPE_HD std::int32_t max_in_window(const float* plane, std::int64_t width, std::int64_t h0, std::int64_t w0,
                                     std::int64_t window_h, std::int64_t window_w, float& max_value) {
  std::int64_t best = h0 * width + w0;
  float v = plane[best];
  for (std::int64_t i = 0; i < window_h; ++i) {
    const float* row = plane + (h0 + i) * width + w0;
    for (std::int64_t j = 0; j < window_w; ++j) {
      if (row[j] > v) {
        v = row[j];
        best = (h0 + i) * width + w0 + j;
      }
    }
  }
  max_value = v;
  return static_cast<std::int32_t>(best);
}

// The mean of the window of s at output (p, q) in one input plane: the sum
// in float, in row-major window order, divided by the area. Windows are a
// few elements (4 to 49), where float loses nothing the tests can see.
TROUPE_HD float mean_of_window(const Pool2dShape& s, const float* plane, std::int64_t p, std::int64_t q) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < s.window_h; ++i) {
    const float* row = plane + (p * s.stride_h + i) * s.w + q * s.stride_w;
    for (std::int64_t j = 0; j < s.window_w; ++j) sum += row[j];
  }
  return sum / static_cast<float>(s.window_h * s.window_w);
}

// The outputs whose windows hold input row h (or column, with the width's
// numbers): o * stride <= h < o * stride + window, so o runs from
// ceil((h - window + 1) / stride) to floor(h / stride), within [0, outputs).
// Empty (first > last) for the rows that the stride leaves out.
struct WindowRange {
  std::int64_t first, last;
};
TROUPE_HD WindowRange windows_holding(std::int64_t h, std::int64_t window, std::int64_t stride, std::int64_t outputs) {
  const std::int64_t first = h < window ? 0 : (h - window) / stride + 1;
  const std::int64_t last = h / stride < outputs - 1 ? h / stride : outputs - 1;
  return {first, last};
}

// Average pooling's input gradient at (h, w) of one plane, gathered: the sum
// of dy over the windows that hold (h, w), divided by the area. Each input
// is written once, by one thread on the GPU, with no atomics and no zeroing
// pass, whether or not the windows overlap.
TROUPE_HD float avgpool_input_grad(const Pool2dShape& s, const float* dy_plane, std::int64_t h, std::int64_t w) {
  const std::int64_t P = s.p(), Q = s.q();
  const WindowRange rows = windows_holding(h, s.window_h, s.stride_h, P);
  const WindowRange cols = windows_holding(w, s.window_w, s.stride_w, Q);
  float sum = 0.0f;
  for (std::int64_t p = rows.first; p <= rows.last; ++p)
    for (std::int64_t q = cols.first; q <= cols.last; ++q) sum += dy_plane[p * Q + q];
  return sum / static_cast<float>(s.window_h * s.window_w);
}

}  // namespace troupe::kernels::math
