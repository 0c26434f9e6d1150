// Test entry point: says which backends this binary compares with ref, so a
// log shows at a glance whether the GPU path ran or skipped.
#include <gtest/gtest.h>

#include <cstdio>

#include "kernels/registry.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto& registry = troupe::kernels::Registry::instance();
  std::string names;
  for (const auto& n : registry.names()) names += " " + n;
  std::printf("troupe kernels tests: backends linked:%s; CUDA devices: %d%s\n", names.c_str(),
              troupe::kernels::cuda_device_count(),
              troupe::kernels::cuda_device_count() == 0 && registry.find("cuda") ? " (GPU comparisons will skip)" : "");
  return RUN_ALL_TESTS();
}
