// Validation and dispatch for the public ops. Everything a backend may assume
// (see backend.hpp) is checked here, once, with an error naming the op and
// the tensors.
#include "kernels/ops.hpp"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/registry.hpp"

namespace troupe::kernels {

const char* to_string(Precision p) {
  switch (p) {
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
    case Precision::fp32:
      break;
  }
  return "fp32";
}

}  // namespace troupe::kernels

namespace troupe::kernels::ops {

namespace {

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string("ops::") + op + ": " + what);
}

// The checks below test first and build their message only when they fail:
// a message built on every call (Tensor::describe, Shape::str) cost the gpt's
// step 2% in string work.
void require_defined(const char* op, const char* name, const Tensor& t) {
  if (!(t.defined() && (t.raw() != nullptr || t.numel() == 0) && t.rank() > 0))
    fail(op, std::string(name) + " is undefined");
}

void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  require_defined(op, name, t);
  if (!(t.dtype() == dtype)) fail(op, std::string(name) + " " + t.describe() + " must be " + to_string(dtype));
}

void require_shape(const char* op, const char* name, const Tensor& t, const Shape& expected) {
  if (!(t.shape() == expected)) fail(op, std::string(name) + " " + t.describe() + " must have shape " + expected.str());
}

// All tensors of one call live on one device; returns the backend for it.
Backend& backend_for(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  const Tensor* first = nullptr;
  const char* first_name = nullptr;
  for (auto [name, t] : ts) {
    if (!t->defined() || t->raw() == nullptr) continue;
    if (!first) {
      first = t;
      first_name = name;
    } else if (t->device() != first->device()) {
      fail(op, std::string(first_name) + " " + first->describe() + " and " + name + " " + t->describe() +
                   " are on different devices");
    }
  }
  return Registry::instance().for_device(first ? first->device() : Device::cpu());
}

std::size_t count(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }

bool present(const Tensor& t) { return t.raw() != nullptr; }

void require_same(const char* op, const char* an, const Tensor& a, const char* bn, const Tensor& b) {
  require_dtype(op, an, a, DType::f32);
  require_dtype(op, bn, b, DType::f32);
  if (!(a.shape() == b.shape()))
    fail(op, std::string(an) + " " + a.describe() + " and " + bn + " " + b.describe() + " must have the same shape");
}

}  // namespace

// ---------------------------------------------------------------- dense

namespace {
// op(a) [m, k] times op(b) [k, n] from the last two dimensions of a and b;
// throws naming the op when the inner dimensions differ.
GemmShape gemm_shape(const char* op, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  const std::int64_t ar = a.size(a.rank() - 2), ac = a.size(a.rank() - 1);
  const std::int64_t br = b.size(b.rank() - 2), bc = b.size(b.rank() - 1);
  GemmShape s;
  s.trans_a = trans_a;
  s.trans_b = trans_b;
  s.m = trans_a ? ac : ar;
  s.k = trans_a ? ar : ac;
  const std::int64_t kb = trans_b ? bc : br;
  s.n = trans_b ? br : bc;
  if (!(s.k == kb))
    fail(op, "inner dimensions differ: op(a) is " + std::to_string(s.m) + "x" + std::to_string(s.k) + " (a " +
                 a.describe() + (trans_a ? ", transposed" : "") + "), op(b) is " + std::to_string(kb) + "x" +
                 std::to_string(s.n) + " (b " + b.describe() + (trans_b ? ", transposed" : "") + ")");
  return s;
}
}  // namespace

namespace {
thread_local MatmulPrecision thread_matmul_precision = MatmulPrecision::fp32;
}  // namespace

MatmulPrecision matmul_precision() { return thread_matmul_precision; }

MatmulPrecisionScope::MatmulPrecisionScope(MatmulPrecision p) : saved_(thread_matmul_precision) {
  thread_matmul_precision = p;
}

MatmulPrecisionScope::~MatmulPrecisionScope() { thread_matmul_precision = saved_; }

void gemm_batched(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float alpha,
                  float beta) {
  const char* op = "gemm_batched";
  require_dtype(op, "a", a, DType::f32);
  require_dtype(op, "b", b, DType::f32);
  require_dtype(op, "c", c, DType::f32);
  if (!(a.rank() == 3 && b.rank() == 3 && c.rank() == 3))
    fail(op,
         "a " + a.describe() + ", b " + b.describe() + ", c " + c.describe() + " must all be 3-D [batch, rows, cols]");
  const std::int64_t batch = a.size(0);
  if (!(b.size(0) == batch && c.size(0) == batch))
    fail(op, "a " + a.describe() + ", b " + b.describe() + " and c " + c.describe() + " differ in their batch");
  GemmShape s = gemm_shape(op, a, b, trans_a, trans_b);
  s.precision = thread_matmul_precision;
  require_shape(op, "c", c, Shape{batch, s.m, s.n});
  backend_for(op, {{"a", &a}, {"b", &b}, {"c", &c}}).gemm_batched(s, batch, alpha, a.f32(), b.f32(), beta, c.f32());
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a, bool trans_b, float alpha, float beta) {
  const char* op = "gemm";
  require_dtype(op, "a", a, DType::f32);
  require_dtype(op, "b", b, DType::f32);
  require_dtype(op, "c", c, DType::f32);
  if (!(a.rank() == 2 && b.rank() == 2 && c.rank() == 2))
    fail(op, "a " + a.describe() + ", b " + b.describe() + ", c " + c.describe() + " must all be 2-D");
  GemmShape s = gemm_shape(op, a, b, trans_a, trans_b);
  s.precision = thread_matmul_precision;
  require_shape(op, "c", c, Shape{s.m, s.n});
  backend_for(op, {{"a", &a}, {"b", &b}, {"c", &c}}).gemm(s, alpha, a.f32(), b.f32(), beta, c.f32());
}

void bias_add(const Tensor& y, const Tensor& bias) {
  const char* op = "bias_add";
  require_dtype(op, "y", y, DType::f32);
  require_dtype(op, "bias", bias, DType::f32);
  const std::int64_t cols = y.size(y.rank() - 1);
  if (!(bias.shape() == Shape{cols}))
    fail(op, "bias " + bias.describe() + " must have shape " + Shape{cols}.str() + ", the last dimension of y " +
                 y.describe());
  backend_for(op, {{"y", &y}, {"bias", &bias}})
      .bias_add(y.numel() / std::max<std::int64_t>(cols, 1), cols, bias.f32(), y.f32());
}

void bias_grad(const Tensor& dy, const Tensor& db) {
  const char* op = "bias_grad";
  require_dtype(op, "dy", dy, DType::f32);
  require_dtype(op, "db", db, DType::f32);
  const std::int64_t cols = dy.size(dy.rank() - 1);
  if (!(db.shape() == Shape{cols}))
    fail(op, "db " + db.describe() + " must have shape " + Shape{cols}.str() + ", the last dimension of dy " +
                 dy.describe());
  backend_for(op, {{"dy", &dy}, {"db", &db}})
      .bias_grad(dy.numel() / std::max<std::int64_t>(cols, 1), cols, dy.f32(), db.f32());
}

void transpose_last2(const Tensor& x, const Tensor& y) {
  const char* op = "transpose_last2";
  require_dtype(op, "x", x, DType::f32);
  require_dtype(op, "y", y, DType::f32);
  if (!(x.rank() >= 2)) fail(op, "x " + x.describe() + " must have at least 2 dimensions");
  std::vector<std::int64_t> dims = x.shape().dims();
  std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
  require_shape(op, "y", y, Shape(dims));
  if (!(x.raw() != y.raw() || x.numel() == 0)) fail(op, "x and y must not alias");
  const std::int64_t rows = x.size(x.rank() - 2), cols = x.size(x.rank() - 1);
  const std::int64_t batch = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  backend_for(op, {{"x", &x}, {"y", &y}}).transpose(batch, rows, cols, x.f32(), y.f32());
}

// ---------------------------------------------------------------- convolution

namespace {

Conv2dShape conv2d_shape(const char* op, const Shape& x, const Shape& w, const Conv2dOptions& o) {
  if (!(x.rank() == 4)) fail(op, "x " + x.str() + " must be 4-D [n, c, h, w]");
  if (!(w.rank() == 4)) fail(op, "w " + w.str() + " must be 4-D [k, c, r, s]");
  if (!(x[1] == w[1]))
    fail(op, "x " + x.str() + " has " + std::to_string(x[1]) + " channels but w " + w.str() + " expects " +
                 std::to_string(w[1]));
  if (!(o.stride_h > 0 && o.stride_w > 0 && o.pad_h >= 0 && o.pad_w >= 0))
    fail(op, "strides must be positive and paddings non-negative");
  Conv2dShape s;
  s.n = x[0];
  s.c = x[1];
  s.h = x[2];
  s.w = x[3];
  s.k = w[0];
  s.r = w[2];
  s.s = w[3];
  s.stride_h = o.stride_h;
  s.stride_w = o.stride_w;
  s.pad_h = o.pad_h;
  s.pad_w = o.pad_w;
  s.precision = thread_matmul_precision;
  if (!(s.r >= 1 && s.s >= 1 && s.h + 2 * s.pad_h >= s.r && s.w + 2 * s.pad_w >= s.s))
    fail(op, "filter " + w.str() + " does not fit input " + x.str() + " with padding " + std::to_string(s.pad_h) + "x" +
                 std::to_string(s.pad_w));
  return s;
}

Shape conv2d_y_shape(const Conv2dShape& s) { return Shape{s.n, s.k, s.p(), s.q()}; }

}  // namespace

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dOptions& o) {
  return conv2d_y_shape(conv2d_shape("conv2d_output_shape", x, w, o));
}

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dOptions& o) {
  const char* op = "conv2d_forward";
  require_dtype(op, "x", x, DType::f32);
  require_dtype(op, "w", w, DType::f32);
  require_dtype(op, "y", y, DType::f32);
  Conv2dShape s = conv2d_shape(op, x.shape(), w.shape(), o);
  require_shape(op, "y", y, conv2d_y_shape(s));
  if (present(bias)) {
    require_dtype(op, "bias", bias, DType::f32);
    require_shape(op, "bias", bias, Shape{s.k});
  }
  backend_for(op, {{"x", &x}, {"w", &w}, {"bias", &bias}, {"y", &y}})
      .conv2d_forward(s, x.f32(), w.f32(), present(bias) ? bias.f32() : nullptr, y.f32());
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dOptions& o) {
  const char* op = "conv2d_backward_data";
  require_dtype(op, "dy", dy, DType::f32);
  require_dtype(op, "w", w, DType::f32);
  require_dtype(op, "dx", dx, DType::f32);
  Conv2dShape s = conv2d_shape(op, dx.shape(), w.shape(), o);
  require_shape(op, "dy", dy, conv2d_y_shape(s));
  backend_for(op, {{"dy", &dy}, {"w", &w}, {"dx", &dx}}).conv2d_backward_data(s, dy.f32(), w.f32(), dx.f32());
}

void conv2d_backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db,
                            const Conv2dOptions& o) {
  const char* op = "conv2d_backward_filter";
  require_dtype(op, "x", x, DType::f32);
  require_dtype(op, "dy", dy, DType::f32);
  require_dtype(op, "dw", dw, DType::f32);
  Conv2dShape s = conv2d_shape(op, x.shape(), dw.shape(), o);
  require_shape(op, "dy", dy, conv2d_y_shape(s));
  if (present(db)) {
    require_dtype(op, "db", db, DType::f32);
    require_shape(op, "db", db, Shape{s.k});
  }
  backend_for(op, {{"x", &x}, {"dy", &dy}, {"dw", &dw}, {"db", &db}})
      .conv2d_backward_filter(s, x.f32(), dy.f32(), dw.f32(), present(db) ? db.f32() : nullptr);
}

namespace {
// A 1-D tensor [n, c, l] seen as [n, c, 1, l]; a filter [k, c, r] as [k, c, 1, r].
Tensor as_2d(const char* op, const char* name, const Tensor& t) {
  if (!present(t)) return t;
  if (!(t.rank() == 3)) fail(op, std::string(name) + " " + t.describe() + " must be 3-D");
  return t.reshape(Shape{t.size(0), t.size(1), 1, t.size(2)});
}
Conv2dOptions as_2d(const Conv1dOptions& o) { return {1, o.stride, 0, o.pad}; }
}  // namespace

Shape conv1d_output_shape(const Shape& x, const Shape& w, const Conv1dOptions& o) {
  const char* op = "conv1d_output_shape";
  if (!(x.rank() == 3 && w.rank() == 3)) fail(op, "x " + x.str() + " and w " + w.str() + " must be 3-D");
  Shape y = conv2d_output_shape(Shape{x[0], x[1], 1, x[2]}, Shape{w[0], w[1], 1, w[2]}, as_2d(o));
  return Shape{y[0], y[1], y[3]};
}

void conv1d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv1dOptions& o) {
  const char* op = "conv1d_forward";
  conv2d_forward(as_2d(op, "x", x), as_2d(op, "w", w), bias, as_2d(op, "y", y), as_2d(o));
}

void conv1d_backward_data(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv1dOptions& o) {
  const char* op = "conv1d_backward_data";
  conv2d_backward_data(as_2d(op, "dy", dy), as_2d(op, "w", w), as_2d(op, "dx", dx), as_2d(o));
}

void conv1d_backward_filter(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor& db,
                            const Conv1dOptions& o) {
  const char* op = "conv1d_backward_filter";
  conv2d_backward_filter(as_2d(op, "x", x), as_2d(op, "dy", dy), as_2d(op, "dw", dw), db, as_2d(o));
}

// ---------------------------------------------------------------- pooling

namespace {
Pool2dShape pool2d_shape(const char* op, const Shape& x, const Pool2dOptions& o) {
  if (!(x.rank() == 4)) fail(op, "x " + x.str() + " must be 4-D [n, c, h, w]");
  if (!(o.window_h > 0 && o.window_w > 0 && o.stride_h > 0 && o.stride_w > 0))
    fail(op, "window and stride must be positive");
  if (!(x[2] >= o.window_h && x[3] >= o.window_w))
    fail(op,
         "window " + std::to_string(o.window_h) + "x" + std::to_string(o.window_w) + " does not fit input " + x.str());
  Pool2dShape s;
  s.n = x[0];
  s.c = x[1];
  s.h = x[2];
  s.w = x[3];
  s.window_h = o.window_h;
  s.window_w = o.window_w;
  s.stride_h = o.stride_h;
  s.stride_w = o.stride_w;
  return s;
}
}  // namespace

Shape maxpool2d_output_shape(const Shape& x, const Pool2dOptions& o) {
  Pool2dShape s = pool2d_shape("maxpool2d_output_shape", x, o);
  return Shape{s.n, s.c, s.p(), s.q()};
}

void maxpool2d_forward(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool2dOptions& o) {
  const char* op = "maxpool2d_forward";
  require_dtype(op, "x", x, DType::f32);
  require_dtype(op, "y", y, DType::f32);
  require_dtype(op, "argmax", argmax, DType::i32);
  Pool2dShape s = pool2d_shape(op, x.shape(), o);
  const Shape ys{s.n, s.c, s.p(), s.q()};
  require_shape(op, "y", y, ys);
  require_shape(op, "argmax", argmax, ys);
  backend_for(op, {{"x", &x}, {"y", &y}, {"argmax", &argmax}}).maxpool2d_forward(s, x.f32(), y.f32(), argmax.i32());
}

void maxpool2d_backward(const Tensor& dy, const Tensor& argmax, const Tensor& dx, const Pool2dOptions& o) {
  const char* op = "maxpool2d_backward";
  require_dtype(op, "dy", dy, DType::f32);
  require_dtype(op, "argmax", argmax, DType::i32);
  require_dtype(op, "dx", dx, DType::f32);
  Pool2dShape s = pool2d_shape(op, dx.shape(), o);
  const Shape ys{s.n, s.c, s.p(), s.q()};
  require_shape(op, "dy", dy, ys);
  require_shape(op, "argmax", argmax, ys);
  backend_for(op, {{"dy", &dy}, {"argmax", &argmax}, {"dx", &dx}})
      .maxpool2d_backward(s, dy.f32(), argmax.i32(), dx.f32());
}

namespace {
Pool2dOptions as_2d(const Pool1dOptions& o) { return {1, o.window, 1, o.stride}; }
}  // namespace

Shape maxpool1d_output_shape(const Shape& x, const Pool1dOptions& o) {
  if (!(x.rank() == 3)) fail("maxpool1d_output_shape", "x " + x.str() + " must be 3-D [n, c, length]");
  Shape y = maxpool2d_output_shape(Shape{x[0], x[1], 1, x[2]}, as_2d(o));
  return Shape{y[0], y[1], y[3]};
}

void maxpool1d_forward(const Tensor& x, const Tensor& y, const Tensor& argmax, const Pool1dOptions& o) {
  const char* op = "maxpool1d_forward";
  maxpool2d_forward(as_2d(op, "x", x), as_2d(op, "y", y), as_2d(op, "argmax", argmax), as_2d(o));
}

void maxpool1d_backward(const Tensor& dy, const Tensor& argmax, const Tensor& dx, const Pool1dOptions& o) {
  const char* op = "maxpool1d_backward";
  maxpool2d_backward(as_2d(op, "dy", dy), as_2d(op, "argmax", argmax), as_2d(op, "dx", dx), as_2d(o));
}

Shape avgpool2d_output_shape(const Shape& x, const Pool2dOptions& o) {
  Pool2dShape s = pool2d_shape("avgpool2d_output_shape", x, o);
  return Shape{s.n, s.c, s.p(), s.q()};
}

void avgpool2d_forward(const Tensor& x, const Tensor& y, const Pool2dOptions& o) {
  const char* op = "avgpool2d_forward";
  require_dtype(op, "x", x, DType::f32);
  require_dtype(op, "y", y, DType::f32);
  Pool2dShape s = pool2d_shape(op, x.shape(), o);
  require_shape(op, "y", y, Shape{s.n, s.c, s.p(), s.q()});
  backend_for(op, {{"x", &x}, {"y", &y}}).avgpool2d_forward(s, x.f32(), y.f32());
}

void avgpool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dOptions& o) {
  const char* op = "avgpool2d_backward";
  require_dtype(op, "dy", dy, DType::f32);
  require_dtype(op, "dx", dx, DType::f32);
  Pool2dShape s = pool2d_shape(op, dx.shape(), o);
  require_shape(op, "dy", dy, Shape{s.n, s.c, s.p(), s.q()});
  backend_for(op, {{"dy", &dy}, {"dx", &dx}}).avgpool2d_backward(s, dy.f32(), dx.f32());
}

namespace {
// x (or dx) [n, c, h, w] with a non-empty plane, pooled to [n, c].
void require_global_pool(const char* op, const char* x_name, const Tensor& x, const char* y_name, const Tensor& y) {
  require_dtype(op, x_name, x, DType::f32);
  require_dtype(op, y_name, y, DType::f32);
  if (!(x.rank() == 4)) fail(op, std::string(x_name) + " " + x.describe() + " must be 4-D [n, c, h, w]");
  if (!(x.size(2) > 0 && x.size(3) > 0))
    fail(op, std::string(x_name) + " " + x.describe() + " has empty planes: there is nothing to average");
  require_shape(op, y_name, y, Shape{x.size(0), x.size(1)});
}
}  // namespace

void global_avgpool2d_forward(const Tensor& x, const Tensor& y) {
  const char* op = "global_avgpool2d_forward";
  require_global_pool(op, "x", x, "y", y);
  backend_for(op, {{"x", &x}, {"y", &y}})
      .global_avgpool2d_forward(x.size(0) * x.size(1), x.size(2) * x.size(3), x.f32(), y.f32());
}

void global_avgpool2d_backward(const Tensor& dy, const Tensor& dx) {
  const char* op = "global_avgpool2d_backward";
  require_global_pool(op, "dx", dx, "dy", dy);
  backend_for(op, {{"dy", &dy}, {"dx", &dx}})
      .global_avgpool2d_backward(dx.size(0) * dx.size(1), dx.size(2) * dx.size(3), dy.f32(), dx.f32());
}

// ---------------------------------------------------------------- batch normalisation

namespace {

BatchNormShape batchnorm_shape(const char* op, const Tensor& x) {
  require_dtype(op, "x", x, DType::f32);
  if (!(x.rank() >= 2)) fail(op, "x " + x.describe() + " must be [n, c, ...], at least 2-D");
  BatchNormShape s;
  s.n = x.size(0);
  s.c = x.size(1);
  for (int d = 2; d < x.rank(); ++d) s.spatial *= x.size(d);
  return s;
}

// A per-channel tensor of x: f32 [c].
void require_channels(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  require_dtype(op, name, t, DType::f32);
  const Shape want{x.size(1)};
  if (!(t.shape() == want))
    fail(op, std::string(name) + " " + t.describe() + " must have shape " + want.str() + ", the channels of x " +
                 x.describe());
}

void require_eps(const char* op, float eps) {
  if (!(std::isfinite(eps) && eps >= 0.0f)) fail(op, "eps " + std::to_string(eps) + " must be finite and >= 0");
}

}  // namespace

void channel_sum(const Tensor& x, const Tensor& sum) {
  const char* op = "channel_sum";
  const BatchNormShape s = batchnorm_shape(op, x);
  require_channels(op, "sum", sum, x);
  backend_for(op, {{"x", &x}, {"sum", &sum}}).channel_sum(s, x.f32(), sum.f32());
}

void channel_centered_sumsq(const Tensor& x, const Tensor& mean, const Tensor& out) {
  const char* op = "channel_centered_sumsq";
  const BatchNormShape s = batchnorm_shape(op, x);
  require_channels(op, "mean", mean, x);
  require_channels(op, "out", out, x);
  backend_for(op, {{"x", &x}, {"mean", &mean}, {"out", &out}})
      .channel_centered_sumsq(s, x.f32(), mean.f32(), out.f32());
}

void batchnorm_forward(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& gamma, const Tensor& beta,
                       float eps, const Tensor& y) {
  const char* op = "batchnorm_forward";
  const BatchNormShape s = batchnorm_shape(op, x);
  require_channels(op, "mean", mean, x);
  require_channels(op, "var", var, x);
  require_channels(op, "gamma", gamma, x);
  require_channels(op, "beta", beta, x);
  require_same(op, "x", x, "y", y);
  require_eps(op, eps);
  backend_for(op, {{"x", &x}, {"mean", &mean}, {"var", &var}, {"gamma", &gamma}, {"beta", &beta}, {"y", &y}})
      .batchnorm_forward(s, x.f32(), mean.f32(), var.f32(), gamma.f32(), beta.f32(), eps, y.f32());
}

void batchnorm_backward_reduce(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& var, float eps,
                               const Tensor& sum_dy, const Tensor& sum_dy_xhat) {
  const char* op = "batchnorm_backward_reduce";
  const BatchNormShape s = batchnorm_shape(op, x);
  require_same(op, "x", x, "dy", dy);
  require_channels(op, "mean", mean, x);
  require_channels(op, "var", var, x);
  require_channels(op, "sum_dy", sum_dy, x);
  require_channels(op, "sum_dy_xhat", sum_dy_xhat, x);
  require_eps(op, eps);
  backend_for(
      op, {{"x", &x}, {"dy", &dy}, {"mean", &mean}, {"var", &var}, {"sum_dy", &sum_dy}, {"sum_dy_xhat", &sum_dy_xhat}})
      .batchnorm_backward_reduce(s, x.f32(), dy.f32(), mean.f32(), var.f32(), eps, sum_dy.f32(), sum_dy_xhat.f32());
}

void batchnorm_backward_data(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& var,
                             const Tensor& gamma, float eps, const Tensor& sum_dy, const Tensor& sum_dy_xhat,
                             double count, const Tensor& dx) {
  const char* op = "batchnorm_backward_data";
  const BatchNormShape s = batchnorm_shape(op, x);
  require_same(op, "x", x, "dy", dy);
  require_same(op, "x", x, "dx", dx);
  require_channels(op, "mean", mean, x);
  require_channels(op, "var", var, x);
  require_channels(op, "gamma", gamma, x);
  require_channels(op, "sum_dy", sum_dy, x);
  require_channels(op, "sum_dy_xhat", sum_dy_xhat, x);
  require_eps(op, eps);
  // The statistics cover at least this replica's own elements; a count below
  // that is a mistake (a batch size passed for n * h * w, say).
  if (!(std::isfinite(count) && count > 0.0 && count >= double(s.count())))
    fail(op, "count " + std::to_string(count) + " must be finite, positive and at least the " +
                 std::to_string(s.count()) + " elements per channel of x " + x.describe());
  backend_for(op, {{"x", &x},
                   {"dy", &dy},
                   {"mean", &mean},
                   {"var", &var},
                   {"gamma", &gamma},
                   {"sum_dy", &sum_dy},
                   {"sum_dy_xhat", &sum_dy_xhat},
                   {"dx", &dx}})
      .batchnorm_backward_data(s, x.f32(), dy.f32(), mean.f32(), var.f32(), gamma.f32(), eps, sum_dy.f32(),
                               sum_dy_xhat.f32(), count, dx.f32());
}

// ---------------------------------------------------------------- embedding

namespace {
// x [..., n] as [rows, n], with gamma [n] (and beta [n]) and mean, rstd [rows].
std::pair<std::int64_t, std::int64_t> layernorm_rows(const char* op, const Tensor& x, const Tensor& gamma,
                                                     const Tensor& mean, const Tensor& rstd) {
  require_dtype(op, "x", x, DType::f32);
  const std::int64_t n = x.size(x.rank() - 1);
  if (!(n > 0)) fail(op, "x " + x.describe() + " has an empty last dimension");
  const std::int64_t rows = x.numel() / n;
  require_dtype(op, "gamma", gamma, DType::f32);
  require_shape(op, "gamma", gamma, Shape{n});
  require_dtype(op, "mean", mean, DType::f32);
  require_shape(op, "mean", mean, Shape{rows});
  require_dtype(op, "rstd", rstd, DType::f32);
  require_shape(op, "rstd", rstd, Shape{rows});
  return {rows, n};
}
}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_forward";
  const auto [rows, n] = layernorm_rows(op, x, gamma, mean, rstd);
  require_dtype(op, "beta", beta, DType::f32);
  require_shape(op, "beta", beta, Shape{n});
  require_same(op, "x", x, "y", y);
  require_eps(op, eps);
  if (!(eps > 0.0f)) fail(op, "eps must be > 0 (a constant row would divide by 0)");
  backend_for(op, {{"x", &x}, {"gamma", &gamma}, {"beta", &beta}, {"y", &y}, {"mean", &mean}, {"rstd", &rstd}})
      .layernorm_forward(rows, n, x.f32(), gamma.f32(), beta.f32(), eps, y.f32(), mean.f32(), rstd.f32());
}

void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  const char* op = "layernorm_backward";
  const auto [rows, n] = layernorm_rows(op, x, gamma, mean, rstd);
  require_same(op, "x", x, "dy", dy);
  if (dx.defined()) require_same(op, "x", x, "dx", dx);
  require_dtype(op, "dgamma", dgamma, DType::f32);
  require_shape(op, "dgamma", dgamma, Shape{n});
  require_dtype(op, "dbeta", dbeta, DType::f32);
  require_shape(op, "dbeta", dbeta, Shape{n});
  backend_for(op, {{"x", &x},
                   {"dy", &dy},
                   {"gamma", &gamma},
                   {"mean", &mean},
                   {"rstd", &rstd},
                   {"dx", &dx},
                   {"dgamma", &dgamma},
                   {"dbeta", &dbeta}})
      .layernorm_backward(rows, n, x.f32(), dy.f32(), gamma.f32(), mean.f32(), rstd.f32(),
                          dx.defined() ? dx.f32() : nullptr, dgamma.f32(), dbeta.f32());
}

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const char* op = "embedding_forward";
  require_dtype(op, "ids", ids, DType::i32);
  require_dtype(op, "table", table, DType::f32);
  require_dtype(op, "out", out, DType::f32);
  if (!(table.rank() == 2)) fail(op, "table " + table.describe() + " must be 2-D [vocab, dim]");
  std::vector<std::int64_t> dims = ids.shape().dims();
  dims.push_back(table.size(1));
  require_shape(op, "out", out, Shape(dims));
  backend_for(op, {{"ids", &ids}, {"table", &table}, {"out", &out}})
      .embedding_forward(ids.numel(), table.size(0), table.size(1), ids.i32(), table.f32(), out.f32());
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  const char* op = "embedding_backward";
  require_dtype(op, "ids", ids, DType::i32);
  require_dtype(op, "dout", dout, DType::f32);
  require_dtype(op, "dtable", dtable, DType::f32);
  if (!(dtable.rank() == 2)) fail(op, "dtable " + dtable.describe() + " must be 2-D [vocab, dim]");
  std::vector<std::int64_t> dims = ids.shape().dims();
  dims.push_back(dtable.size(1));
  require_shape(op, "dout", dout, Shape(dims));
  backend_for(op, {{"ids", &ids}, {"dout", &dout}, {"dtable", &dtable}})
      .embedding_backward(ids.numel(), dtable.size(0), dtable.size(1), ids.i32(), dout.f32(), dtable.f32());
}

// ---------------------------------------------------------------- activations

namespace {
void require_rate(const char* op, float rate) {
  if (!(rate >= 0.0f && rate < 1.0f)) fail(op, "rate " + std::to_string(rate) + " must be in [0, 1)");
}
}  // namespace

void relu_forward(const Tensor& x, const Tensor& y) {
  require_same("relu_forward", "x", x, "y", y);
  backend_for("relu_forward", {{"x", &x}, {"y", &y}}).relu_forward(count(x), x.f32(), y.f32());
}

void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const char* op = "relu_backward";
  require_same(op, "x", x, "dy", dy);
  require_same(op, "x", x, "dx", dx);
  backend_for(op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}}).relu_backward(count(x), x.f32(), dy.f32(), dx.f32());
}

void dropout_forward(const Tensor& x, const Tensor& y, float rate, std::uint64_t seed) {
  const char* op = "dropout_forward";
  require_same(op, "x", x, "y", y);
  require_rate(op, rate);
  backend_for(op, {{"x", &x}, {"y", &y}}).dropout_forward(count(x), rate, seed, x.f32(), y.f32());
}

void dropout_backward(const Tensor& dy, const Tensor& dx, float rate, std::uint64_t seed) {
  const char* op = "dropout_backward";
  require_same(op, "dy", dy, "dx", dx);
  require_rate(op, rate);
  backend_for(op, {{"dy", &dy}, {"dx", &dx}}).dropout_backward(count(dy), rate, seed, dy.f32(), dx.f32());
}

namespace {
// An element-wise op y = f(x) and its backward dx = f'(in) * dy, where `in`
// is x or y (in_name says which).
void require_unary(const char* op, const Tensor& x, const Tensor& y) { require_same(op, "x", x, "y", y); }
void require_unary_backward(const char* op, const char* in_name, const Tensor& in, const Tensor& dy, const Tensor& dx) {
  require_same(op, in_name, in, "dy", dy);
  require_same(op, in_name, in, "dx", dx);
}
}  // namespace

void sigmoid_forward(const Tensor& x, const Tensor& y) {
  const char* op = "sigmoid_forward";
  require_unary(op, x, y);
  backend_for(op, {{"x", &x}, {"y", &y}}).sigmoid_forward(count(x), x.f32(), y.f32());
}

void sigmoid_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const char* op = "sigmoid_backward";
  require_unary_backward(op, "y", y, dy, dx);
  backend_for(op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}}).sigmoid_backward(count(y), y.f32(), dy.f32(), dx.f32());
}

void tanh_forward(const Tensor& x, const Tensor& y) {
  const char* op = "tanh_forward";
  require_unary(op, x, y);
  backend_for(op, {{"x", &x}, {"y", &y}}).tanh_forward(count(x), x.f32(), y.f32());
}

void tanh_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const char* op = "tanh_backward";
  require_unary_backward(op, "y", y, dy, dx);
  backend_for(op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}}).tanh_backward(count(y), y.f32(), dy.f32(), dx.f32());
}

void gelu_forward(const Tensor& x, const Tensor& y) {
  const char* op = "gelu_forward";
  require_unary(op, x, y);
  backend_for(op, {{"x", &x}, {"y", &y}}).gelu_forward(count(x), x.f32(), y.f32());
}

void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const char* op = "gelu_backward";
  require_unary_backward(op, "x", x, dy, dx);
  backend_for(op, {{"x", &x}, {"dy", &dy}, {"dx", &dx}}).gelu_backward(count(x), x.f32(), dy.f32(), dx.f32());
}

namespace {
// [rows, n] for softmax over the last dimension of t.
std::pair<std::int64_t, std::int64_t> softmax_rows(const Tensor& t) {
  const std::int64_t n = t.size(t.rank() - 1);
  return {n == 0 ? 0 : t.numel() / n, n};
}
}  // namespace

void softmax_forward(const Tensor& x, const Tensor& y) {
  const char* op = "softmax_forward";
  require_same(op, "x", x, "y", y);
  const auto [rows, n] = softmax_rows(x);
  backend_for(op, {{"x", &x}, {"y", &y}}).softmax_forward(rows, n, x.f32(), y.f32());
}

void causal_softmax_forward(const Tensor& x, const Tensor& y) {
  const char* op = "causal_softmax_forward";
  require_same(op, "x", x, "y", y);
  if (!(x.rank() >= 2 && x.size(x.rank() - 1) == x.size(x.rank() - 2)))
    fail(op, "x " + x.describe() + " must be stacked square score matrices [..., n, n]");
  const auto [rows, n] = softmax_rows(x);
  backend_for(op, {{"x", &x}, {"y", &y}}).causal_softmax_forward(rows, n, x.f32(), y.f32());
}

void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const char* op = "softmax_backward";
  require_same(op, "y", y, "dy", dy);
  require_same(op, "y", y, "dx", dx);
  const auto [rows, n] = softmax_rows(y);
  backend_for(op, {{"y", &y}, {"dy", &dy}, {"dx", &dx}}).softmax_backward(rows, n, y.f32(), dy.f32(), dx.f32());
}

// ---------------------------------------------------------------- losses and metrics

void softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& loss, const Tensor& dlogits,
                  float grad_scale, float label_smoothing) {
  const char* op = "softmax_xent";
  if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f))
    fail(op, "label_smoothing " + std::to_string(label_smoothing) + " must be in [0, 1]");
  require_dtype(op, "logits", logits, DType::f32);
  require_dtype(op, "labels", labels, DType::i32);
  require_dtype(op, "loss", loss, DType::f32);
  if (!(logits.rank() == 2 && logits.size(1) > 0))
    fail(op, "logits " + logits.describe() + " must be 2-D [n, classes] with classes > 0");
  const std::int64_t n = logits.size(0), c = logits.size(1);
  require_shape(op, "labels", labels, Shape{n});
  require_shape(op, "loss", loss, Shape{n});
  if (present(dlogits)) require_same(op, "logits", logits, "dlogits", dlogits);
  backend_for(op, {{"logits", &logits}, {"labels", &labels}, {"loss", &loss}, {"dlogits", &dlogits}})
      .softmax_xent(n, c, logits.f32(), labels.i32(), loss.f32(), present(dlogits) ? dlogits.f32() : nullptr,
                    grad_scale, label_smoothing);
}

void mse(const Tensor& pred, const Tensor& target, const Tensor& loss, const Tensor& dpred, float grad_scale) {
  const char* op = "mse";
  require_same(op, "pred", pred, "target", target);
  require_dtype(op, "loss", loss, DType::f32);
  if (!(pred.rank() == 1 || pred.rank() == 2)) fail(op, "pred " + pred.describe() + " must be [n] or [n, d]");
  const std::int64_t n = pred.size(0), d = pred.rank() == 2 ? pred.size(1) : 1;
  if (!(d > 0)) fail(op, "pred " + pred.describe() + " has no columns");
  require_shape(op, "loss", loss, Shape{n});
  if (present(dpred)) require_same(op, "pred", pred, "dpred", dpred);
  backend_for(op, {{"pred", &pred}, {"target", &target}, {"loss", &loss}, {"dpred", &dpred}})
      .mse(n, d, pred.f32(), target.f32(), loss.f32(), present(dpred) ? dpred.f32() : nullptr, grad_scale);
}

void topk_correct(const Tensor& logits, const Tensor& labels, const Tensor& correct, std::int64_t k) {
  const char* op = "topk_correct";
  require_dtype(op, "logits", logits, DType::f32);
  require_dtype(op, "labels", labels, DType::i32);
  require_dtype(op, "correct", correct, DType::f32);
  if (!(logits.rank() == 2)) fail(op, "logits " + logits.describe() + " must be 2-D [n, classes]");
  const std::int64_t n = logits.size(0), c = logits.size(1);
  if (!(k >= 1 && k <= c)) fail(op, "k = " + std::to_string(k) + " must be in [1, " + std::to_string(c) + "]");
  require_shape(op, "labels", labels, Shape{n});
  require_shape(op, "correct", correct, Shape{n});
  backend_for(op, {{"logits", &logits}, {"labels", &labels}, {"correct", &correct}})
      .topk_correct(n, c, k, logits.f32(), labels.i32(), correct.f32());
}

double sum(const Tensor& x) {
  require_dtype("sum", "x", x, DType::f32);
  return backend_for("sum", {{"x", &x}}).reduce_sum(count(x), x.f32());
}

double sum_squares(const Tensor& x) {
  require_dtype("sum_squares", "x", x, DType::f32);
  return backend_for("sum_squares", {{"x", &x}}).reduce_sum_squares(count(x), x.f32());
}

double l2_norm(const Tensor& x) { return std::sqrt(sum_squares(x)); }

// ---------------------------------------------------------------- element-wise

void fill(const Tensor& x, float value) {
  require_dtype("fill", "x", x, DType::f32);
  backend_for("fill", {{"x", &x}}).fill(count(x), value, x.f32());
}

void add(const Tensor& a, const Tensor& b, const Tensor& y) {
  require_same("add", "a", a, "b", b);
  require_same("add", "a", a, "y", y);
  backend_for("add", {{"a", &a}, {"b", &b}, {"y", &y}}).add(count(a), a.f32(), b.f32(), y.f32());
}

void scale(const Tensor& x, float alpha) {
  require_dtype("scale", "x", x, DType::f32);
  backend_for("scale", {{"x", &x}}).scale(count(x), alpha, x.f32());
}

void axpy(float alpha, const Tensor& x, const Tensor& y) {
  require_same("axpy", "x", x, "y", y);
  backend_for("axpy", {{"x", &x}, {"y", &y}}).axpy(count(x), alpha, x.f32(), y.f32());
}

void sum_n(const std::vector<Tensor>& srcs, const Tensor& dst) {
  const char* op = "sum_n";
  if (!(!srcs.empty())) fail(op, "no source buffers");
  std::vector<const float*> ptrs;
  for (std::size_t i = 0; i < srcs.size(); ++i) {
    const std::string name = "srcs[" + std::to_string(i) + "]";
    require_same(op, name.c_str(), srcs[i], "dst", dst);
    if (!(srcs[i].device() == dst.device()))
      fail(op, name + " " + srcs[i].describe() + " and dst " + dst.describe() + " are on different devices");
    ptrs.push_back(srcs[i].f32());
  }
  backend_for(op, {{"dst", &dst}}).sum_n(count(dst), ptrs.data(), static_cast<int>(ptrs.size()), dst.f32());
}

namespace {
// The half-open element range [first, end) that `rows` rows of `cols`
// elements at `offset` with `pitch` cover inside a tensor of `numel`
// elements; fails naming the tensor when it does not fit. Every product is
// checked before it is formed, so no argument can overflow it.
std::pair<std::int64_t, std::int64_t> copy_2d_span(const char* op, const char* name, const Tensor& t,
                                                   std::int64_t offset, std::int64_t pitch, std::int64_t rows,
                                                   std::int64_t cols) {
  const std::string where = std::string(name) + " " + t.describe() + ": " + std::to_string(rows) + " rows of " +
                            std::to_string(cols) + " at offset " + std::to_string(offset) + " with pitch " +
                            std::to_string(pitch);
  if (!(offset >= 0 && pitch >= cols)) fail(op, where + ": the offset must be >= 0 and the pitch >= cols");
  const std::int64_t numel = t.numel();
  // The last row ends at offset + (rows - 1) * pitch + cols <= numel.
  const bool fits = offset <= numel && cols <= numel - offset &&
                    (rows == 1 || (pitch > 0 && rows - 1 <= (numel - offset - cols) / pitch));
  if (!(fits)) fail(op, where + " reach past its " + std::to_string(numel) + " elements");
  return {offset, offset + (rows - 1) * pitch + cols};
}
}  // namespace

void copy_2d(const Tensor& src, std::int64_t src_offset, std::int64_t src_pitch, const Tensor& dst,
             std::int64_t dst_offset, std::int64_t dst_pitch, std::int64_t rows, std::int64_t cols) {
  const char* op = "copy_2d";
  require_dtype(op, "src", src, DType::f32);
  require_dtype(op, "dst", dst, DType::f32);
  if (!(rows >= 0 && cols >= 0))
    fail(op, "rows " + std::to_string(rows) + " and cols " + std::to_string(cols) + " must be >= 0");
  Backend& backend = backend_for(op, {{"src", &src}, {"dst", &dst}});
  if (rows == 0 || cols == 0) return;
  const auto [src_first, src_end] = copy_2d_span(op, "src", src, src_offset, src_pitch, rows, cols);
  const auto [dst_first, dst_end] = copy_2d_span(op, "dst", dst, dst_offset, dst_pitch, rows, cols);
  // Regions of one buffer (two views of it, or one tensor) must not overlap:
  // compared as address ranges, so interleaved rows count as overlapping.
  const auto address = [](const Tensor& t, std::int64_t i) {
    return reinterpret_cast<std::uintptr_t>(t.f32()) + static_cast<std::uintptr_t>(i) * sizeof(float);
  };
  if (!(address(src, src_end) <= address(dst, dst_first) || address(dst, dst_end) <= address(src, src_first)))
    fail(op, "the regions of src " + src.describe() + " [" + std::to_string(src_first) + ", " +
                 std::to_string(src_end) + ") and dst " + dst.describe() + " [" + std::to_string(dst_first) + ", " +
                 std::to_string(dst_end) + ") overlap");
  backend.copy_2d(rows, cols, src.f32() + src_offset, src_pitch, dst.f32() + dst_offset, dst_pitch);
}

// ---------------------------------------------------------------- optimizers

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& velocity, const SgdParams& p) {
  const char* op = "sgd_update";
  require_same(op, "param", param, "grad", grad);
  if (p.momentum != 0.0f) require_same(op, "param", param, "velocity", velocity);
  backend_for(op, {{"param", &param}, {"grad", &grad}, {"velocity", &velocity}})
      .sgd_update(count(param), p, param.f32(), grad.f32(), p.momentum != 0.0f ? velocity.f32() : nullptr);
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamParams& p) {
  const char* op = "adam_update";
  require_same(op, "param", param, "grad", grad);
  require_same(op, "param", param, "m", m);
  require_same(op, "param", param, "v", v);
  backend_for(op, {{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}})
      .adam_update(count(param), p, param.f32(), grad.f32(), m.f32(), v.f32());
}

AdamParams adam_coefficients(AdamParams p, std::int64_t t) {
  if (!(t >= 1)) fail("adam_coefficients", "step " + std::to_string(t) + " must be >= 1");
  p.coef_m = static_cast<float>(1.0 / (1.0 - std::pow(double(p.beta1), double(t))));
  p.coef_g = 0.0f;
  p.coef_v = static_cast<float>(1.0 / (1.0 - std::pow(double(p.beta2), double(t))));
  return p;
}

AdamParams nadam_coefficients(AdamParams p, std::int64_t t, double& m_schedule) {
  if (!(t >= 1)) fail("nadam_coefficients", "step " + std::to_string(t) + " must be >= 1");
  // Keras (tf.keras.optimizers.Nadam): momentum_cache_t = beta1 * (1 - 0.5 * 0.96^(0.004 t)).
  const double b1 = p.beta1;
  const double u_t = b1 * (1.0 - 0.5 * std::pow(0.96, 0.004 * double(t)));
  const double u_next = b1 * (1.0 - 0.5 * std::pow(0.96, 0.004 * double(t + 1)));
  const double schedule_new = m_schedule * u_t;
  const double schedule_next = schedule_new * u_next;
  m_schedule = schedule_new;
  p.coef_m = static_cast<float>(u_next / (1.0 - schedule_next));
  p.coef_g = static_cast<float>((1.0 - u_t) / (1.0 - schedule_new));
  p.coef_v = static_cast<float>(1.0 / (1.0 - std::pow(double(p.beta2), double(t))));
  return p;
}

// ---------------------------------------------------------------- initialisers

void init_uniform(const Tensor& x, float low, float high, std::uint64_t seed) {
  require_dtype("init_uniform", "x", x, DType::f32);
  if (!(low <= high)) fail("init_uniform", "low " + std::to_string(low) + " > high " + std::to_string(high));
  backend_for("init_uniform", {{"x", &x}}).init_uniform(count(x), low, high, seed, x.f32());
}

void init_normal(const Tensor& x, float mean, float stddev, std::uint64_t seed) {
  require_dtype("init_normal", "x", x, DType::f32);
  if (!(stddev >= 0.0f)) fail("init_normal", "stddev " + std::to_string(stddev) + " < 0");
  backend_for("init_normal", {{"x", &x}}).init_normal(count(x), mean, stddev, seed, x.f32());
}

void glorot_uniform(const Tensor& x, std::int64_t fan_in, std::int64_t fan_out, std::uint64_t seed) {
  if (!(fan_in > 0 && fan_out > 0)) fail("glorot_uniform", "fans must be positive");
  const float limit = static_cast<float>(std::sqrt(6.0 / double(fan_in + fan_out)));
  init_uniform(x, -limit, limit, seed);
}

void he_normal(const Tensor& x, std::int64_t fan_in, std::uint64_t seed) {
  if (!(fan_in > 0)) fail("he_normal", "fan_in must be positive");
  init_normal(x, 0.0f, static_cast<float>(std::sqrt(2.0 / double(fan_in))), seed);
}

void he_uniform(const Tensor& x, std::int64_t fan_in, std::uint64_t seed) {
  if (!(fan_in > 0)) fail("he_uniform", "fan_in must be positive");
  const float limit = static_cast<float>(std::sqrt(6.0 / double(fan_in)));
  init_uniform(x, -limit, limit, seed);
}

}  // namespace troupe::kernels::ops
