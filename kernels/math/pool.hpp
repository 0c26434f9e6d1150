// Max-pooling index math shared by the cpu loops and the cuda kernels: one
// call is one output element. The reference backend has its own independent
// version (ref/pool.hpp), which is what the tests compare against.
#pragma once

#include <cstdint>

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

}  // namespace troupe::kernels::math
