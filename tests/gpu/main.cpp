// gpu_tests: the GPU tests of the collectives and the actor runtime (label
// gpu). Says first what this machine has, so a run where everything skipped
// cannot be mistaken for a pass.
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/registry.hpp"
#include "net/collective/nccl.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int gpus = troupe::kernels::cuda_device_count();
  const std::string nccl = troupe::net::nccl_unavailable();
  std::printf("CUDA devices: %d%s\n", gpus, gpus == 0 ? " (every GPU test will skip)" : "");
  std::printf("NCCL: %s\n",
              nccl.empty() ? ("loads, version " + std::to_string(troupe::net::nccl_version())).c_str() : nccl.c_str());
  std::fflush(stdout);
  return RUN_ALL_TESTS();
}
