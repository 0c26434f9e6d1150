// Mixed-precision gemm on the cpu backend. bf16: A and B are rounded to bf16 into
// per-thread scratch (nearest, ties to even, math/bf16.hpp: what the
// reference does), then oneDNN's matmul multiplies them into an f32 C; a
// primitive is built once per shape and thread. With AVX512-BF16 oneDNN
// runs its brgemm bf16 kernels (brg:avx512_core_bf16). Measured 2026-12-03
// on the 2-core AVX-512 EPYC VM (AVX512-BF16), one thread, the gpt's
// projections: 1.8x to 2.0x fp32's speed including the two casts
// (768x384x128: 378 against 717 us), 1.5x on attention's 64x64x32. Where
// oneDNN builds no bf16 matmul (a CPU without AVX-512), the rounded inputs
// go through the fp32 sgemm: the same numbers, no speed-up. fp16 always
// takes that path: oneDNN's f16 matmul needs AVX512-FP16, which the EPYC
// cores here lack, so fp16 on a CPU gives a GPU's fp16 numbers (for tests
// of loss scaling) and no speed.
#include "kernels/cpu/gemm_mixed.hpp"

#include <cblas.h>

#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "kernels/math/precision.hpp"

namespace troupe::kernels::cpu {

namespace {

using dnnl::memory;

struct Key {
  bool trans_a, trans_b;
  std::int64_t m, n, k;
  bool operator<(const Key& o) const {
    return std::tie(trans_a, trans_b, m, n, k) < std::tie(o.trans_a, o.trans_b, o.m, o.n, o.k);
  }
};

struct Entry {
  bool ok = false;  // oneDNN built it; otherwise the sgemm fallback
  dnnl::matmul matmul;
  memory::desc a, b, c;
};

struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Entry> cache;
  std::vector<std::uint16_t> a16, b16;
  std::vector<float> a32, b32, product;
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

Entry& entry_for(ThreadState& st, const GemmShape& s) {
  const Key key{s.trans_a, s.trans_b, s.m, s.n, s.k};
  auto found = st.cache.find(key);
  if (found != st.cache.end()) return found->second;
  Entry e;
  // A is [m, k] (stored [k, m] when transposed), B [k, n] (stored [n, k]).
  e.a = memory::desc({s.m, s.k}, memory::data_type::bf16, s.trans_a ? memory::format_tag::ba : memory::format_tag::ab);
  e.b = memory::desc({s.k, s.n}, memory::data_type::bf16, s.trans_b ? memory::format_tag::ba : memory::format_tag::ab);
  e.c = memory::desc({s.m, s.n}, memory::data_type::f32, memory::format_tag::ab);
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.c), st.engine);
    e.matmul = dnnl::matmul(pd);
    e.ok = true;
  } catch (const dnnl::error&) {
    e.ok = false;  // no bf16 matmul on this CPU: the fallback below
  }
  return st.cache.emplace(key, std::move(e)).first->second;
}

void round_into(const float* x, std::size_t n, std::vector<std::uint16_t>& out) {
  if (out.size() < n) out.resize(n);
  std::uint16_t* o = out.data();
  for (std::size_t i = 0; i < n; ++i) o[i] = math::bf16_bits(x[i]);
}

void round_into(Precision p, const float* x, std::size_t n, std::vector<float>& out) {
  if (out.size() < n) out.resize(n);
  float* o = out.data();
  for (std::size_t i = 0; i < n; ++i) o[i] = math::round_to(p, x[i]);
}

}  // namespace

void gemm_mixed(const GemmShape& s, float alpha, const float* a, const float* b, float beta, float* c) {
  ThreadState& st = thread_state();
  const auto na = static_cast<std::size_t>(s.m * s.k), nb = static_cast<std::size_t>(s.k * s.n),
             nc = static_cast<std::size_t>(s.m * s.n);
  const bool bf16 = s.precision == Precision::bf16;
  Entry* e = bf16 ? &entry_for(st, s) : nullptr;
  if (!e || !e->ok) {
    round_into(s.precision, a, na, st.a32);
    round_into(s.precision, b, nb, st.b32);
    cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), alpha, st.a32.data(),
                static_cast<int>(s.trans_a ? s.m : s.k), st.b32.data(), static_cast<int>(s.trans_b ? s.k : s.n), beta,
                c, static_cast<int>(s.n));
    return;
  }
  round_into(a, na, st.a16);
  round_into(b, nb, st.b16);
  // C directly when it is plainly the product; otherwise the product first,
  // then alpha and beta (C not read at beta == 0, as in BLAS).
  const bool direct = alpha == 1.0f && beta == 0.0f;
  if (!direct && st.product.size() < nc) st.product.resize(nc);
  float* out = direct ? c : st.product.data();
  memory am(e->a, st.engine, st.a16.data()), bm(e->b, st.engine, st.b16.data()), cm(e->c, st.engine, out);
  e->matmul.execute(st.stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  st.stream.wait();
  if (!direct) {
    for (std::size_t i = 0; i < nc; ++i) c[i] = beta == 0.0f ? alpha * out[i] : alpha * out[i] + beta * c[i];
  }
}

}  // namespace troupe::kernels::cpu
