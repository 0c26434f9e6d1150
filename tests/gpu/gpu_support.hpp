// Shared by the GPU tests (label gpu, binary gpu_tests): how a test skips
// on a machine with too few GPUs, host <-> device helpers, and a kernel
// that keeps a GPU's compute stream busy for a while (spin.cu).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "kernels/registry.hpp"
#include "kernels/tensor.hpp"
#include "net/collective/collective.hpp"

namespace troupe::gpu_test {

// Skips the test, with a message, unless the machine has `n` GPUs.
#define TROUPE_REQUIRE_GPUS(n)                                                                \
  do {                                                                                        \
    const int troupe_gpus_ = ::troupe::kernels::cuda_device_count();                          \
    if (troupe_gpus_ < (n))                                                                   \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s); this machine has " << troupe_gpus_ \
                   << ((n) > 1 ? " (multi-GPU: runs where that many GPUs are)" : "");         \
  } while (0)

inline std::vector<float> random_values(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

// A tensor on `device` holding `values` (the calling thread's current GPU
// becomes `device`'s, as the cuda ops need).
inline kernels::Tensor on_device(const std::vector<float>& values, kernels::Device device) {
  kernels::Tensor host = kernels::Tensor::from_vector({static_cast<std::int64_t>(values.size())}, values);
  return host.to(device);
}

// Makes `device` the calling thread's current GPU (the cuda ops run there).
inline void make_current(kernels::Device device) {
  kernels::Registry::instance().for_device(device).synchronize(device.index);
}

// Queues a kernel on cuda:device's compute stream that spins for about
// `milliseconds` (spin.cu): work the next op must wait for.
void spin_on_compute_stream(int device, double milliseconds);

// ---- one body for every backend's group (gpu_support.cpp) ----
// Rank r's buffers live on device_of(r): cuda:r for nccl, cuda:0 for
// logical replicas through local.
using DeviceOf = std::function<kernels::Device(int rank)>;

// Runs body(rank, collective) on one thread per rank, each with its
// device current; rethrows the first exception.
void run_ranks(std::vector<std::unique_ptr<net::Collective>>& group, const DeviceOf& device_of,
               const std::function<void(int, net::Collective&)>& body);
// allreduce sum and mean of random buffers of `sizes` against a double
// reference; every rank's result bitwise equal.
void expect_allreduce_matches_reference(std::vector<std::unique_ptr<net::Collective>>& group, const DeviceOf& device_of,
                                        const std::vector<std::int64_t>& sizes);
// broadcast from each root into NaN-poisoned buffers.
void expect_broadcast_from_each_root(std::vector<std::unique_ptr<net::Collective>>& group, const DeviceOf& device_of);
// reduce_scatter (sum) into NaN-poisoned chunks of `chunk` elements, then
// allgather of each rank's own input chunk, against references.
void expect_scatter_gather_match_reference(std::vector<std::unique_ptr<net::Collective>>& group,
                                           const DeviceOf& device_of, std::int64_t chunk);

}  // namespace troupe::gpu_test
