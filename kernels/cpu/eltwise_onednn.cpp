// Sigmoid and tanh through oneDNN (libdnnl 2.6) on flat f32 buffers: the
// *_use_dst_for_bwd algorithms, whose backward takes the forward output y,
// as the Backend's does.
//
// Primitives are JIT-compiled per length and direction and cached, as the
// convolutions are (conv_onednn.cpp): thread_local engine, stream and cache,
// so concurrent replicas share nothing and take no lock. A layer sees a
// handful of lengths (its batch sizes); the cache is cleared if it ever grows
// past kMaxEntries (host objects only, so clearing is safe at any time).
#include "kernels/cpu/eltwise_onednn.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <map>
#include <tuple>

namespace troupe::kernels::cpu {

namespace {

using dnnl::memory;

constexpr std::size_t kMaxEntries = 256;

struct Key {
  Eltwise f;
  bool backward;
  std::size_t n;
  bool operator<(const Key& o) const { return std::tie(f, backward, n) < std::tie(o.f, o.backward, o.n); }
};

// One primitive and the memory objects it runs on, their handles set per call.
struct Entry {
  dnnl::primitive primitive;
  memory data, diff_dst, diff_src;  // forward: data = src, diff_src = dst; backward: data = dst (y)
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

dnnl::algorithm algorithm_of(Eltwise f) {
  return f == Eltwise::sigmoid ? dnnl::algorithm::eltwise_logistic_use_dst_for_bwd
                               : dnnl::algorithm::eltwise_tanh_use_dst_for_bwd;
}

Entry& entry(Eltwise f, bool backward, std::size_t n) {
  ThreadState& ts = thread_state();
  const Key key{f, backward, n};
  auto found = ts.cache.find(key);
  if (found != ts.cache.end()) return found->second;
  if (ts.cache.size() >= kMaxEntries) ts.cache.clear();

  using namespace dnnl;
  const memory::desc md({static_cast<memory::dim>(n)}, memory::data_type::f32, memory::format_tag::a);
  const eltwise_forward::primitive_desc forward(
      eltwise_forward::desc(prop_kind::forward_training, algorithm_of(f), md, 0.0f, 0.0f), ts.engine);
  Entry e;
  e.data = memory(md, ts.engine, DNNL_MEMORY_NONE);
  e.diff_dst = memory(md, ts.engine, DNNL_MEMORY_NONE);
  e.diff_src = memory(md, ts.engine, DNNL_MEMORY_NONE);
  if (backward) {
    e.primitive = eltwise_backward(eltwise_backward::primitive_desc(
        eltwise_backward::desc(algorithm_of(f), md, md, 0.0f, 0.0f), ts.engine, forward));
  } else {
    e.primitive = eltwise_forward(forward);
  }
  return ts.cache.emplace(key, std::move(e)).first->second;
}

void* handle(const float* p) { return const_cast<float*>(p); }

}  // namespace

void eltwise_forward_onednn(Eltwise f, std::size_t n, const float* x, float* y) {
  if (n == 0) return;
  Entry& e = entry(f, false, n);
  e.data.set_data_handle(handle(x));
  e.diff_src.set_data_handle(y);
  dnnl::stream& stream = thread_state().stream;
  e.primitive.execute(stream, {{DNNL_ARG_SRC, e.data}, {DNNL_ARG_DST, e.diff_src}});
  stream.wait();
}

void eltwise_backward_onednn(Eltwise f, std::size_t n, const float* y, const float* dy, float* dx) {
  if (n == 0) return;
  Entry& e = entry(f, true, n);
  e.data.set_data_handle(handle(y));
  e.diff_dst.set_data_handle(handle(dy));
  e.diff_src.set_data_handle(dx);
  dnnl::stream& stream = thread_state().stream;
  e.primitive.execute(stream,
                      {{DNNL_ARG_DST, e.data}, {DNNL_ARG_DIFF_DST, e.diff_dst}, {DNNL_ARG_DIFF_SRC, e.diff_src}});
  stream.wait();
}

}  // namespace troupe::kernels::cpu
