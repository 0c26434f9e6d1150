// Collective backends: allreduce bandwidth of the local backend.
//
//   bench_collective --benchmark_min_time=2
//
// The benchmark thread is rank 0; a helper thread runs rank 1 for exactly as
// many iterations. Each iteration is timed on rank 0 (manual time) and the
// figures are NCCL's: algbw = bytes / time, busbw = algbw * 2 (W - 1) / W,
// the bandwidth a ring would need on each link, comparable across world
// sizes. A single-thread memcpy of the same size is the machine's yardstick.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "net/collective/local.hpp"

namespace {

using troupe::kernels::Device;
using troupe::kernels::DType;
using troupe::kernels::Shape;
using troupe::kernels::Tensor;
using namespace troupe::net;

void report(benchmark::State& state, double bytes, double seconds, int world) {
  const double algbw = bytes * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * 2.0 * (world - 1) / world;
}

void BM_LocalAllreduce(benchmark::State& state) {
  constexpr int world = 2;
  const std::int64_t bytes = state.range(0);
  const std::int64_t n = bytes / 4;
  auto group = make_local_group(world);
  std::vector<Tensor> buffers;
  for (int r = 0; r < world; ++r) buffers.push_back(Tensor::zeros(Shape{n}, DType::f32, Device::cpu(r)));

  const auto iterations = state.max_iterations;
  std::thread peer([&] {
    for (benchmark::IterationCount i = 0; i < iterations; ++i)
      group[1]->allreduce(buffers[1], ReduceOp::sum)->wait(Clock::now() + std::chrono::seconds(60));
  });
  double seconds = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    group[0]->allreduce(buffers[0], ReduceOp::sum)->wait(Clock::now() + std::chrono::seconds(60));
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    state.SetIterationTime(s);
    seconds += s;
  }
  peer.join();
  report(state, static_cast<double>(bytes), seconds, world);
}
BENCHMARK(BM_LocalAllreduce)->Arg(4 << 20)->Arg(64 << 20)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 0);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] = benchmark::Counter(
      static_cast<double>(bytes) * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Memcpy)->Arg(4 << 20)->Arg(64 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
