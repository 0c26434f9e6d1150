// Convolution through oneDNN (libdnnl 2.6), on plain NCHW / OIHW memory.
//
// Creating a oneDNN primitive JIT-compiles code for one shape, which costs
// far more than running it on a small batch, so primitives are built once
// per shape and direction and cached. The cache, the engine and the stream
// are thread_local: each thread that runs convolutions (one per replica)
// owns its own, so concurrent calls share no mutable state and take no lock.
// oneDNN's memory objects wrap our buffers without copying; only their data
// handles change between calls.
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <tuple>

#include "kernels/cpu/conv_variants.hpp"

namespace troupe::kernels::cpu {

namespace {

using dnnl::memory;

enum class Direction { forward, forward_with_bias, backward_data, backward_filter, backward_filter_with_bias };

struct Key {
  Direction direction;
  std::int64_t n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w;
  bool operator<(const Key& o) const {
    return std::tie(direction, n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w) <
           std::tie(o.direction, o.n, o.c, o.h, o.w, o.k, o.r, o.s, o.stride_h, o.stride_w, o.pad_h, o.pad_w);
  }
};

// One cached primitive and the memory objects it runs on.
struct Entry {
  dnnl::primitive primitive;
  memory src, weights, bias, dst;  // named as in forward; the diff_* in backward
};

struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Entry> cache;
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

struct Descs {
  memory::desc x, w, b, y;
  memory::dims strides, pad_l, pad_r;
};

Descs descs(const Conv2dShape& s) {
  using tag = memory::format_tag;
  const auto f32 = memory::data_type::f32;
  Descs d;
  d.x = memory::desc({s.n, s.c, s.h, s.w}, f32, tag::nchw);
  d.w = memory::desc({s.k, s.c, s.r, s.s}, f32, tag::oihw);
  d.b = memory::desc({s.k}, f32, tag::x);
  d.y = memory::desc({s.n, s.k, s.p(), s.q()}, f32, tag::nchw);
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

Entry& entry(const Conv2dShape& s, Direction direction) {
  ThreadState& ts = thread_state();
  const Key key{direction, s.n, s.c, s.h, s.w, s.k, s.r, s.s, s.stride_h, s.stride_w, s.pad_h, s.pad_w};
  auto found = ts.cache.find(key);
  if (found != ts.cache.end()) return found->second;

  using namespace dnnl;
  const Descs d = descs(s);
  Entry e;
  // Handles start null (DNNL_MEMORY_NONE); each call sets them.
  e.src = memory(d.x, ts.engine, DNNL_MEMORY_NONE);
  e.weights = memory(d.w, ts.engine, DNNL_MEMORY_NONE);
  e.bias = memory(d.b, ts.engine, DNNL_MEMORY_NONE);
  e.dst = memory(d.y, ts.engine, DNNL_MEMORY_NONE);
  switch (direction) {
    case Direction::forward:
    case Direction::forward_with_bias:
      e.primitive = convolution_forward(forward_pd(d, ts.engine, direction == Direction::forward_with_bias));
      break;
    case Direction::backward_data: {
      auto hint = forward_pd(d, ts.engine, false);
      convolution_backward_data::desc desc(algorithm::convolution_direct, d.x, d.w, d.y, d.strides, d.pad_l, d.pad_r);
      e.primitive = convolution_backward_data(convolution_backward_data::primitive_desc(desc, ts.engine, hint));
      break;
    }
    case Direction::backward_filter:
    case Direction::backward_filter_with_bias: {
      const bool with_bias = direction == Direction::backward_filter_with_bias;
      auto hint = forward_pd(d, ts.engine, with_bias);
      auto desc = with_bias ? convolution_backward_weights::desc(algorithm::convolution_direct, d.x, d.w, d.b, d.y,
                                                                 d.strides, d.pad_l, d.pad_r)
                            : convolution_backward_weights::desc(algorithm::convolution_direct, d.x, d.w, d.y,
                                                                 d.strides, d.pad_l, d.pad_r);
      e.primitive = convolution_backward_weights(convolution_backward_weights::primitive_desc(desc, ts.engine, hint));
      break;
    }
  }
  return ts.cache.emplace(key, std::move(e)).first->second;
}

void* handle(const float* p) { return const_cast<float*>(p); }

}  // namespace

void conv2d_forward_onednn(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  Entry& e = entry(s, bias ? Direction::forward_with_bias : Direction::forward);
  e.src.set_data_handle(handle(x));
  e.weights.set_data_handle(handle(w));
  e.dst.set_data_handle(y);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.src}, {DNNL_ARG_WEIGHTS, e.weights}, {DNNL_ARG_DST, e.dst}};
  if (bias) {
    e.bias.set_data_handle(handle(bias));
    args.emplace(DNNL_ARG_BIAS, e.bias);
  }
  dnnl::stream& stream = thread_state().stream;
  e.primitive.execute(stream, args);
  stream.wait();
}

void conv2d_backward_data_onednn(const Conv2dShape& s, const float* dy, const float* w, float* dx) {
  Entry& e = entry(s, Direction::backward_data);
  e.src.set_data_handle(dx);
  e.weights.set_data_handle(handle(w));
  e.dst.set_data_handle(handle(dy));
  dnnl::stream& stream = thread_state().stream;
  e.primitive.execute(stream, {{DNNL_ARG_DIFF_SRC, e.src}, {DNNL_ARG_WEIGHTS, e.weights}, {DNNL_ARG_DIFF_DST, e.dst}});
  stream.wait();
}

void conv2d_backward_filter_onednn(const Conv2dShape& s, const float* x, const float* dy, float* dw, float* db) {
  Entry& e = entry(s, db ? Direction::backward_filter_with_bias : Direction::backward_filter);
  e.src.set_data_handle(handle(x));
  e.weights.set_data_handle(dw);
  e.dst.set_data_handle(handle(dy));
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, e.src}, {DNNL_ARG_DIFF_WEIGHTS, e.weights}, {DNNL_ARG_DIFF_DST, e.dst}};
  if (db) {
    e.bias.set_data_handle(db);
    args.emplace(DNNL_ARG_DIFF_BIAS, e.bias);
  }
  dnnl::stream& stream = thread_state().stream;
  e.primitive.execute(stream, args);
  stream.wait();
}

}  // namespace troupe::kernels::cpu
