// Dense-op benchmarks on the cpu backend: sgemm at the MLP's shapes (forward,
// weight gradient, input gradient), a large square sgemm as the machine's
// practical ceiling, and convolution at the seed CNN's and the text CNN's
// shapes, in both CPU variants (oneDNN, im2col + sgemm) and as CpuBackend
// dispatches it. Each reports GFLOP/s (2 flops per multiply-add).
//
// Run single-threaded, so figures compare per core and do not depend on what
// else the machine runs (OpenBLAS uses pthreads, oneDNN OpenMP):
//
//   OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 ./bench/bench_kernels
//     --benchmark_filter='Sgemm|Conv' --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true          (one line)
//
// Results: docs/BENCHMARKS-kernels-dense.md. As in llm.c's dev/cuda, every
// convolution variant is first checked against the reference backend on the
// same inputs, and a wrong one reports an error instead of a time.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>  // before math/random.hpp, which uses log/sqrt/cos without including it
#include <string>

#include "kernels/cpu/conv_variants.hpp"
#include "kernels/math/random.hpp"
#include "kernels/ops.hpp"
#include "kernels/registry.hpp"

namespace troupe::kernels {
namespace {

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.f32()[i] = 2.0f * math::random_uniform(seed, static_cast<std::uint64_t>(i)) - 1.0f;
  return t;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// ---------------------------------------------------------------- sgemm
// Args: m, n, k, trans_a, trans_b.
void BM_Sgemm(benchmark::State& state) {
  BackendOverride use(DeviceKind::cpu, "cpu");
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 1);
  Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 2);
  Tensor c = Tensor::zeros({m, n});
  for (auto _ : state) {
    ops::gemm(a, b, c, ta, tb);
    benchmark::DoNotOptimize(c.raw());
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * double(m) * double(n) * double(k));
}
// The MLP 784-256-128-10 at batch 64. Forward: X[64, in] W[in, out].
BENCHMARK(BM_Sgemm)
    ->ArgNames({"m", "n", "k", "ta", "tb"})
    ->Args({64, 256, 784, 0, 0})
    ->Args({64, 128, 256, 0, 0})
    ->Args({64, 10, 128, 0, 0})
    // Weight gradient: dW[in, out] = X^T dY.
    ->Args({784, 256, 64, 1, 0})
    ->Args({256, 128, 64, 1, 0})
    ->Args({128, 10, 64, 1, 0})
    // Input gradient: dX[64, in] = dY W^T.
    ->Args({64, 784, 256, 0, 1})
    ->Args({64, 256, 128, 0, 1})
    ->Args({64, 128, 10, 0, 1})
    // The ceiling: large enough that packing and edges no longer matter.
    ->Args({2048, 2048, 2048, 0, 0})
    ->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------- convolution

enum Direction : int { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };
enum Variant : int { kBackend = 0, kOneDnn = 1, kIm2col = 2, kOneDnnBlocked = 3 };
enum Layer : int { kSeedCnn = 0, kTextCnn = 1, kResnet16 = 2, kResnet32 = 3, kResnet64 = 4 };

// The seed CNN's first layer: 64 images 1x28x28, 32 filters 3x3.
// The text CNN's conv1d: 64 sequences of 7 channels x 300, 64 filters of
// width 5, stored as 4-D with height 1.
// The resnet's 3x3 convolutions at its batch 128, same padding: 16
// channels at 28x28, 32 at 14x14, 64 at 7x7 (anchors/torch_resnet.py).
Conv2dShape layer_shape(int layer) {
  Conv2dShape s;
  if (layer >= kResnet16) {
    const std::int64_t channels = layer == kResnet16 ? 16 : layer == kResnet32 ? 32 : 64;
    const std::int64_t side = layer == kResnet16 ? 28 : layer == kResnet32 ? 14 : 7;
    s.n = 128;
    s.c = channels;
    s.h = side;
    s.w = side;
    s.k = channels;
    s.r = 3;
    s.s = 3;
    s.pad_h = 1;
    s.pad_w = 1;
    return s;
  }
  if (layer == kSeedCnn) {
    s.n = 64;
    s.c = 1;
    s.h = 28;
    s.w = 28;
    s.k = 32;
    s.r = 3;
    s.s = 3;
  } else {
    s.n = 64;
    s.c = 7;
    s.h = 1;
    s.w = 300;
    s.k = 64;
    s.r = 1;
    s.s = 5;
  }
  return s;
}

struct ConvBuffers {
  Tensor x, w, bias, y, dy, dx, dw, db;
  explicit ConvBuffers(const Conv2dShape& s)
      : x(random_tensor({s.n, s.c, s.h, s.w}, 3)),
        w(random_tensor({s.k, s.c, s.r, s.s}, 4)),
        bias(random_tensor({s.k}, 5)),
        y(Tensor::zeros({s.n, s.k, s.p(), s.q()})),
        dy(random_tensor({s.n, s.k, s.p(), s.q()}, 6)),
        dx(Tensor::zeros({s.n, s.c, s.h, s.w})),
        dw(Tensor::zeros({s.k, s.c, s.r, s.s})),
        db(Tensor::zeros({s.k})) {}
};

// One call of `direction` in `variant`, writing into b.y, b.dx or b.dw/b.db.
void run_conv(int variant, int direction, const Conv2dShape& s, ConvBuffers& b) {
  Backend& cpu = Registry::instance().get("cpu");
  switch (direction) {
    case kForward:
      if (variant == kOneDnn)
        cpu::conv2d_forward_onednn(s, b.x.f32(), b.w.f32(), b.bias.f32(), b.y.f32());
      else if (variant == kOneDnnBlocked)
        cpu::conv2d_forward_onednn_blocked(s, b.x.f32(), b.w.f32(), b.bias.f32(), b.y.f32());
      else if (variant == kIm2col)
        cpu::conv2d_forward_im2col(s, b.x.f32(), b.w.f32(), b.bias.f32(), b.y.f32());
      else
        cpu.conv2d_forward(s, b.x.f32(), b.w.f32(), b.bias.f32(), b.y.f32());
      break;
    case kBackwardData:
      if (variant == kOneDnn)
        cpu::conv2d_backward_data_onednn(s, b.dy.f32(), b.w.f32(), b.dx.f32());
      else if (variant == kOneDnnBlocked)
        cpu::conv2d_backward_data_onednn_blocked(s, b.dy.f32(), b.w.f32(), b.dx.f32());
      else if (variant == kIm2col)
        cpu::conv2d_backward_data_im2col(s, b.dy.f32(), b.w.f32(), b.dx.f32());
      else
        cpu.conv2d_backward_data(s, b.dy.f32(), b.w.f32(), b.dx.f32());
      break;
    default:
      if (variant == kOneDnn)
        cpu::conv2d_backward_filter_onednn(s, b.x.f32(), b.dy.f32(), b.dw.f32(), b.db.f32());
      else if (variant == kOneDnnBlocked)
        cpu::conv2d_backward_filter_onednn_blocked(s, b.x.f32(), b.dy.f32(), b.dw.f32(), b.db.f32());
      else if (variant == kIm2col)
        cpu::conv2d_backward_filter_im2col(s, b.x.f32(), b.dy.f32(), b.dw.f32(), b.db.f32());
      else
        cpu.conv2d_backward_filter(s, b.x.f32(), b.dy.f32(), b.dw.f32(), b.db.f32());
      break;
  }
}

double relative_error(const Tensor& got, const Tensor& want) {
  const auto g = got.to_vector(), w = want.to_vector();
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    diff += (double(g[i]) - w[i]) * (double(g[i]) - w[i]);
    norm += double(w[i]) * w[i];
  }
  return diff == 0.0 ? 0.0 : std::sqrt(diff / std::max(norm, 1e-300));
}

// Checks one variant against ref on the benchmark's own inputs; returns an
// empty string when it agrees.
std::string check_against_ref(int variant, int direction, const Conv2dShape& s) {
  ConvBuffers got(s), want(s);
  run_conv(variant, direction, s, got);
  Backend& ref = Registry::instance().get("ref");
  if (direction == kForward)
    ref.conv2d_forward(s, want.x.f32(), want.w.f32(), want.bias.f32(), want.y.f32());
  else if (direction == kBackwardData)
    ref.conv2d_backward_data(s, want.dy.f32(), want.w.f32(), want.dx.f32());
  else
    ref.conv2d_backward_filter(s, want.x.f32(), want.dy.f32(), want.dw.f32(), want.db.f32());
  const double err = direction == kForward ? relative_error(got.y, want.y)
                     : direction == kBackwardData
                         ? relative_error(got.dx, want.dx)
                         : std::max(relative_error(got.dw, want.dw), relative_error(got.db, want.db));
  return err <= 1e-5 ? std::string() : "differs from ref: relative error " + std::to_string(err);
}

// Args: layer, direction, variant.
void BM_Conv(benchmark::State& state) {
  const int layer = int(state.range(0)), direction = int(state.range(1)), variant = int(state.range(2));
  const Conv2dShape s = layer_shape(layer);
  if (std::string error = check_against_ref(variant, direction, s); !error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  ConvBuffers b(s);
  run_conv(variant, direction, s, b);  // warm up: builds and caches oneDNN primitives
  for (auto _ : state) {
    run_conv(variant, direction, s, b);
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * double(s.n * s.k * s.p() * s.q()) * double(s.c * s.r * s.s));
  static const char* const directions[] = {"forward", "backward_data", "backward_filter"};
  static const char* const variants[] = {"backend", "onednn", "im2col", "onednn_blocked"};
  static const char* const layers[] = {"seed_cnn ", "text_cnn ", "resnet16 ", "resnet32 ", "resnet64 "};
  state.SetLabel(std::string(layers[layer]) + directions[direction] + " " + variants[variant]);
}
BENCHMARK(BM_Conv)
    ->ArgNames({"layer", "dir", "variant"})
    ->ArgsProduct({{kSeedCnn, kTextCnn, kResnet16, kResnet32, kResnet64},
                   {kForward, kBackwardData, kBackwardFilter},
                   {kBackend, kOneDnn, kIm2col, kOneDnnBlocked}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace troupe::kernels
