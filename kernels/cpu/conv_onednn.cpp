// Convolution through oneDNN (libdnnl 2.6). troupe's tensors are plain
// NCHW / OIHW. On plain memory oneDNN 2.6 has only its gemm-based
// convolution (x64:gemm:jit: an im2col in plain C++, then its JIT sgemm),
// which on the resnet's 16-64 channel 3x3 layers spent more time in the
// im2col than in the sgemm. The "blocked" variants let the primitive choose
// its layout (format_tag::any: nChw16c and blocked weights on AVX-512, the
// direct JIT kernels) and reorder troupe's plain buffers into it and the
// result back, through scratch buffers each thread keeps and reuses.
//
// Creating a oneDNN primitive JIT-compiles code for one shape, which costs
// far more than running it on a small batch, so primitives are built once
// per shape and direction and cached. The cache, the engine and the stream
// are thread_local: each thread that runs convolutions (one per replica)
// owns its own, so concurrent calls share no mutable state and take no lock.
// oneDNN's memory objects wrap our buffers without copying; only their data
// handles change between calls.
//
// bf16 (Conv2dShape::precision): the same primitives with each direction's two
// inputs in bfloat16 and its output in f32; the reorders into the
// primitive's layout also convert (round to nearest even, as the reference
// rounds), so bf16 costs no extra pass over the data. Where oneDNN builds no
// bf16 convolution (a CPU without AVX-512), the inputs are rounded into f32
// scratch and the f32 primitive runs: the same numbers, no speed-up. fp16
// always takes that path (oneDNN's f16 convolutions need AVX512-FP16): a
// GPU's fp16 numbers, for tests of loss scaling, at fp32's speed.
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/conv_variants.hpp"
#include "kernels/math/precision.hpp"

namespace troupe::kernels::cpu {

namespace {

using dnnl::memory;

enum class Direction { forward, forward_with_bias, backward_data, backward_filter, backward_filter_with_bias };

struct Key {
  Direction direction;
  bool blocked, bf16;
  std::int64_t n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w;
  bool operator<(const Key& o) const {
    return std::tie(direction, blocked, bf16, n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w) <
           std::tie(o.direction, o.blocked, o.bf16, o.n, o.c, o.h, o.w, o.k, o.r, o.s, o.stride_h, o.stride_w, o.pad_h,
                    o.pad_w);
  }
};

// One argument of a primitive: troupe's plain buffer (`user`) and, when the
// primitive wants another layout, that layout's memory (`inner`, on a
// scratch buffer) and the reorder between them.
struct Arg {
  memory user, inner;
  dnnl::reorder convert;  // user -> inner for an input, inner -> user for an output
  bool reordered = false;
  const memory& used() const { return reordered ? inner : user; }
};

// One cached primitive and the memory objects it runs on.
struct Entry {
  bool ok = true;  // false: oneDNN has no bf16 primitive here (the f32 fallback)
  dnnl::primitive primitive;
  Arg src, weights, dst;  // named as in forward; the diff_* in backward
  memory bias;            // always plain: [k]
};

struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Entry> cache;
  // The blocked layouts' buffers, one per argument, grown to the largest
  // shape seen: a thread runs one convolution at a time, so every cached
  // primitive shares them.
  std::vector<float> scratch[3];
  std::vector<float> rounded[2];  // the fallback's rounded inputs (fp16; bf16 where oneDNN has none)
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

struct Descs {
  memory::desc x, w, b, y;
  memory::dims strides, pad_l, pad_r;
};

// Which of x, w and y are bfloat16: a direction's two inputs under
// --precision bf16 (Conv2dShape::precision; its output stays f32).
struct Bf16 {
  bool x = false, w = false, y = false;
};

Bf16 bf16_inputs(Direction direction, bool bf16) {
  if (!bf16) return {};
  switch (direction) {
    case Direction::forward:
    case Direction::forward_with_bias:
      return {true, true, false};
    case Direction::backward_data:
      return {false, true, true};
    case Direction::backward_filter:
    case Direction::backward_filter_with_bias:
      break;
  }
  return {true, false, true};
}

// `any`: the primitive chooses the layouts of x, w and y.
Descs descs(const Conv2dShape& s, bool any, Bf16 bf16 = {}) {
  using tag = memory::format_tag;
  const auto f32 = memory::data_type::f32;
  auto type = [&](bool b) { return b ? memory::data_type::bf16 : f32; };
  Descs d;
  d.x = memory::desc({s.n, s.c, s.h, s.w}, type(bf16.x), any ? tag::any : tag::nchw);
  d.w = memory::desc({s.k, s.c, s.r, s.s}, type(bf16.w), any ? tag::any : tag::oihw);
  d.b = memory::desc({s.k}, f32, tag::x);
  d.y = memory::desc({s.n, s.k, s.p(), s.q()}, type(bf16.y), any ? tag::any : tag::nchw);
  d.strides = {s.stride_h, s.stride_w};
  d.pad_l = {s.pad_h, s.pad_w};
  // Right padding so that the output is exactly p x q: the rows and columns
  // that the last stride does not reach are simply not read.
  d.pad_r = {(s.p() - 1) * s.stride_h + s.r - s.h - s.pad_h, (s.q() - 1) * s.stride_w + s.s - s.w - s.pad_w};
  return d;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d, const dnnl::engine& engine, bool with_bias) {
  using namespace dnnl;
  auto desc = with_bias ? convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, d.x,
                                                    d.w, d.b, d.y, d.strides, d.pad_l, d.pad_r)
                        : convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, d.x,
                                                    d.w, d.y, d.strides, d.pad_l, d.pad_r);
  return convolution_forward::primitive_desc(desc, engine);
}

// The plain memory of an argument and, when `wanted` differs from it, the
// inner memory (its handle set per call, to a scratch buffer) and the
// reorder; `input`: user -> inner, else inner -> user.
Arg make_arg(const memory::desc& plain, const memory::desc& wanted, const dnnl::engine& engine, bool input) {
  Arg a;
  a.user = memory(plain, engine, DNNL_MEMORY_NONE);
  if (wanted == plain) return a;
  a.inner = memory(wanted, engine, DNNL_MEMORY_NONE);
  a.reordered = true;
  a.convert = input ? dnnl::reorder(a.user, a.inner) : dnnl::reorder(a.inner, a.user);
  return a;
}

Entry build(const Conv2dShape& s, Direction direction, bool blocked);

Entry& entry(const Conv2dShape& s, Direction direction, bool blocked) {
  ThreadState& ts = thread_state();
  const Key key{
      direction, blocked, s.precision == Precision::bf16, s.n, s.c, s.h, s.w, s.k, s.r, s.s, s.stride_h, s.stride_w,
      s.pad_h,   s.pad_w};
  auto found = ts.cache.find(key);
  if (found != ts.cache.end()) return found->second;
  Entry e;
  try {
    e = build(s, direction, blocked);
  } catch (const dnnl::error&) {
    if (s.precision != Precision::bf16) throw;
    e = Entry{};
    e.ok = false;  // no bf16 convolution on this CPU: the fallback
  }
  return ts.cache.emplace(key, std::move(e)).first->second;
}

// The primitive for a shape and direction, and its arguments' memory.
Entry build(const Conv2dShape& s, Direction direction, bool blocked) {
  ThreadState& ts = thread_state();
  using namespace dnnl;
  const Descs plain = descs(s, false);
  // A bf16 primitive reads bf16 even in plain layouts: the reorder converts.
  const bool bf16 = s.precision == Precision::bf16;
  const Descs d = descs(s, blocked, bf16_inputs(direction, bf16));
  // The backward primitives' forward hint: one oneDNN builds (all bf16, or
  // all f32), not the mixed types of the backward op itself.
  const Descs h = bf16 ? descs(s, blocked, {true, true, true}) : d;
  Entry e;
  // Handles start null (DNNL_MEMORY_NONE); each call sets them.
  e.bias = memory(plain.b, ts.engine, DNNL_MEMORY_NONE);
  switch (direction) {
    case Direction::forward:
    case Direction::forward_with_bias: {
      auto pd = forward_pd(d, ts.engine, direction == Direction::forward_with_bias);
      e.primitive = convolution_forward(pd);
      e.src = make_arg(plain.x, pd.src_desc(), ts.engine, true);
      e.weights = make_arg(plain.w, pd.weights_desc(), ts.engine, true);
      e.dst = make_arg(plain.y, pd.dst_desc(), ts.engine, false);
      break;
    }
    case Direction::backward_data: {
      auto hint = forward_pd(h, ts.engine, false);
      convolution_backward_data::desc desc(algorithm::convolution_direct, d.x, d.w, d.y, d.strides, d.pad_l, d.pad_r);
      convolution_backward_data::primitive_desc pd(desc, ts.engine, hint);
      e.primitive = convolution_backward_data(pd);
      e.src = make_arg(plain.x, pd.diff_src_desc(), ts.engine, false);
      e.weights = make_arg(plain.w, pd.weights_desc(), ts.engine, true);
      e.dst = make_arg(plain.y, pd.diff_dst_desc(), ts.engine, true);
      break;
    }
    case Direction::backward_filter:
    case Direction::backward_filter_with_bias: {
      const bool with_bias = direction == Direction::backward_filter_with_bias;
      auto hint = forward_pd(h, ts.engine, with_bias);
      auto desc = with_bias ? convolution_backward_weights::desc(algorithm::convolution_direct, d.x, d.w, d.b, d.y,
                                                                 d.strides, d.pad_l, d.pad_r)
                            : convolution_backward_weights::desc(algorithm::convolution_direct, d.x, d.w, d.y,
                                                                 d.strides, d.pad_l, d.pad_r);
      convolution_backward_weights::primitive_desc pd(desc, ts.engine, hint);
      e.primitive = convolution_backward_weights(pd);
      e.src = make_arg(plain.x, pd.src_desc(), ts.engine, true);
      e.weights = make_arg(plain.w, pd.diff_weights_desc(), ts.engine, false);
      e.dst = make_arg(plain.y, pd.diff_dst_desc(), ts.engine, true);
      break;
    }
  }
  return e;
}

void* handle(const float* p) { return const_cast<float*>(p); }

// Points `a` at troupe's buffer `data`, and its inner memory at scratch
// buffer `slot`; an input is reordered into the inner layout now.
void bind(Arg& a, const float* data, int slot, bool input) {
  ThreadState& ts = thread_state();
  a.user.set_data_handle(handle(data));
  if (!a.reordered) return;
  std::vector<float>& buffer = ts.scratch[slot];
  const std::size_t floats = (a.inner.get_desc().get_size() + sizeof(float) - 1) / sizeof(float);
  if (buffer.size() < floats) buffer.resize(floats);
  a.inner.set_data_handle(buffer.data());
  if (input) a.convert.execute(ts.stream, a.user, a.inner);
}

// An output in another layout goes back into troupe's buffer.
void unbind(Arg& a) {
  if (a.reordered) a.convert.execute(thread_state().stream, a.inner, a.user);
}

// The fallback: `data` rounded to s.precision into the thread's scratch `slot`.
const float* rounded(const Conv2dShape& s, const float* data, std::int64_t count, int slot) {
  std::vector<float>& out = thread_state().rounded[slot];
  out.resize(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = math::round_to(s.precision, data[i]);
  return out.data();
}

Conv2dShape as_f32(Conv2dShape s) {
  s.precision = Precision::fp32;
  return s;
}

// Whether a direction runs the f32 primitive on rounded inputs.
bool falls_back(const Conv2dShape& s, const Entry* e) { return s.precision == Precision::fp16 || (e && !e->ok); }

std::int64_t x_count(const Conv2dShape& s) { return s.n * s.c * s.h * s.w; }
std::int64_t w_count(const Conv2dShape& s) { return s.k * s.c * s.r * s.s; }
std::int64_t y_count(const Conv2dShape& s) { return s.n * s.k * s.p() * s.q(); }

void forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y, bool blocked) {
  auto fallback = [&] {
    forward(as_f32(s), rounded(s, x, x_count(s), 0), rounded(s, w, w_count(s), 1), bias, y, blocked);
  };
  if (falls_back(s, nullptr)) return fallback();
  Entry& e = entry(s, bias ? Direction::forward_with_bias : Direction::forward, blocked);
  if (falls_back(s, &e)) return fallback();
  bind(e.src, x, 0, true);
  bind(e.weights, w, 1, true);
  bind(e.dst, y, 2, false);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, e.src.used()}, {DNNL_ARG_WEIGHTS, e.weights.used()}, {DNNL_ARG_DST, e.dst.used()}};
  if (bias) {
    e.bias.set_data_handle(handle(bias));
    args.emplace(DNNL_ARG_BIAS, e.bias);
  }
  dnnl::stream& stream = thread_state().stream;
  e.primitive.execute(stream, args);
  unbind(e.dst);
  stream.wait();
}

void backward_data(const Conv2dShape& s, const float* dy, const float* w, float* dx, bool blocked) {
  auto fallback = [&] {
    backward_data(as_f32(s), rounded(s, dy, y_count(s), 0), rounded(s, w, w_count(s), 1), dx, blocked);
  };
  if (falls_back(s, nullptr)) return fallback();
  Entry& e = entry(s, Direction::backward_data, blocked);
  if (falls_back(s, &e)) return fallback();
  bind(e.src, dx, 0, false);
  bind(e.weights, w, 1, true);
  bind(e.dst, dy, 2, true);
  dnnl::stream& stream = thread_state().stream;
  e.primitive.execute(
      stream,
      {{DNNL_ARG_DIFF_SRC, e.src.used()}, {DNNL_ARG_WEIGHTS, e.weights.used()}, {DNNL_ARG_DIFF_DST, e.dst.used()}});
  unbind(e.src);
  stream.wait();
}

void backward_filter(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db, bool blocked) {
  auto fallback = [&] {
    backward_filter(as_f32(s), rounded(s, x, x_count(s), 0), rounded(s, dy, y_count(s), 1), dw, db, blocked);
  };
  if (falls_back(s, nullptr)) return fallback();
  Entry& e = entry(s, db ? Direction::backward_filter_with_bias : Direction::backward_filter, blocked);
  if (falls_back(s, &e)) return fallback();
  bind(e.src, x, 0, true);
  bind(e.weights, dw, 1, false);
  bind(e.dst, dy, 2, true);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, e.src.used()}, {DNNL_ARG_DIFF_WEIGHTS, e.weights.used()}, {DNNL_ARG_DIFF_DST, e.dst.used()}};
  if (db) {
    e.bias.set_data_handle(db);
    args.emplace(DNNL_ARG_DIFF_BIAS, e.bias);
  }
  dnnl::stream& stream = thread_state().stream;
  e.primitive.execute(stream, args);
  unbind(e.weights);
  stream.wait();
}

}  // namespace

void conv2d_forward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  forward(s, x, w, bias, y, false);
}
void conv2d_backward_data_onednn(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  backward_data(s, dy, w, dx, false);
}
void conv2d_backward_filter_onednn(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db) {
  backward_filter(s, x, dy, dw, db, false);
}

void conv2d_forward_onednn_blocked(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  forward(s, x, w, bias, y, true);
}
void conv2d_backward_data_onednn_blocked(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  backward_data(s, dy, w, dx, true);
}
void conv2d_backward_filter_onednn_blocked(const Conv2dShape& s, const float* x, const float* dy, float* dw,
                                           float* db) {
  backward_filter(s, x, dy, dw, db, true);
}

}  // namespace troupe::kernels::cpu
