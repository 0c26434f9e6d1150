// RefBackend's dense ops: the templates of ref/*.hpp instantiated for float.
#include <vector>

#include "kernels/math/precision.hpp"
#include "kernels/ref/conv.hpp"
#include "kernels/ref/dense.hpp"
#include "kernels/ref/embedding.hpp"
#include "kernels/ref/pool.hpp"
#include "kernels/ref/ref_backend.hpp"

namespace troupe::kernels {

void RefBackend::gemm(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c) {
  ref::gemm(s, alpha, a, b, beta, c);
}

void RefBackend::bias_add(std::int64_t rows, std::int64_t cols, const float* bias, float* y) {
  ref::bias_add(rows, cols, bias, y);
}

void RefBackend::bias_grad(std::int64_t rows, std::int64_t cols, const float* dy, float* db) {
  ref::bias_grad(rows, cols, dy, db);
}

void RefBackend::transpose(std::int64_t batch, std::int64_t rows, std::int64_t cols, const float* x, float* y) {
  ref::transpose(batch, rows, cols, x, y);
}

namespace {
// Conv2dShape::precision: an input as a bf16 or fp16 convolution reads it,
// rounded into `copy`; unchanged in fp32.
const float* conv_input(const Conv2dShape& s, const float* data, std::int64_t count, std::vector<float>& copy) {
  if (s.precision == Precision::fp32) return data;
  copy.resize(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) copy[static_cast<std::size_t>(i)] = math::round_to(s.precision, data[i]);
  return copy.data();
}
std::int64_t x_count(const Conv2dShape& s) { return s.n * s.c * s.h * s.w; }
std::int64_t w_count(const Conv2dShape& s) { return s.k * s.c * s.r * s.s; }
std::int64_t y_count(const Conv2dShape& s) { return s.n * s.k * s.p() * s.q(); }
}  // namespace

void RefBackend::conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  std::vector<float> x16, w16;
  ref::conv2d_forward(s, conv_input(s, x, x_count(s), x16), conv_input(s, w, w_count(s), w16), bias, y);
}

void RefBackend::conv2d_backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  std::vector<float> dy16, w16;
  ref::conv2d_backward_data(s, conv_input(s, dy, y_count(s), dy16), conv_input(s, w, w_count(s), w16), dx);
}

void RefBackend::conv2d_backward_filter(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db) {
  std::vector<float> x16, dy16;
  ref::conv2d_backward_filter(s, conv_input(s, x, x_count(s), x16), conv_input(s, dy, y_count(s), dy16), dw, db);
}

void RefBackend::maxpool2d_forward(const Pool2dShape& s, const float* x, float* y, std::int32_t* argmax) {
  ref::maxpool2d_forward(s, x, y, argmax);
}

void RefBackend::maxpool2d_backward(const Pool2dShape& s, const float* dy, const std::int32_t* argmax, float* dx) {
  ref::maxpool2d_backward(s, dy, argmax, dx);
}

void RefBackend::avgpool2d_forward(const Pool2dShape& s, const float* x, float* y) { ref::avgpool2d_forward(s, x, y); }

void RefBackend::avgpool2d_backward(const Pool2dShape& s, const float* dy, float* dx) {
  ref::avgpool2d_backward(s, dy, dx);
}

void RefBackend::global_avgpool2d_forward(std::int64_t planes, std::int64_t plane_size, const float* x, float* y) {
  ref::global_avgpool2d_forward(planes, plane_size, x, y);
}

void RefBackend::global_avgpool2d_backward(std::int64_t planes, std::int64_t plane_size, const float* dy, float* dx) {
  ref::global_avgpool2d_backward(planes, plane_size, dy, dx);
}

void RefBackend::embedding_forward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,
                                   const float* table, float* out) {
  ref::embedding_forward(count, vocab, dim, ids, table, out);
}

void RefBackend::embedding_backward(std::int64_t count, std::int64_t vocab, std::int64_t dim, const std::int32_t* ids,
                                    const float* dout, float* dtable) {
  ref::embedding_backward(count, vocab, dim, ids, dout, dtable);
}

}  // namespace troupe::kernels
