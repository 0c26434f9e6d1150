// Entry point of bench_kernels: the bench_kernels*.cpp files only register
// benchmarks, so that each group of ops can add its own file.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
