// The GPU warm-up (models/warm_up.hpp) on every zoo model kind: it must
// really run (an error it swallowed would leave the first timed step to pay
// for the libraries again), once per device, model and batch sizes, and
// leave the caller's model as it was.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/registry.hpp"
#include "models/model.hpp"
#include "models/warm_up.hpp"
#include "tests/gpu/gpu_support.hpp"

namespace troupe::models {
namespace {

using kernels::Device;
using kernels::DType;
using kernels::Shape;

struct Case {
  const char* name;
  DataShape data;
  bool regression;
};

TEST(WarmUpOnGpu, RunsForEveryZooModelOnceAndLeavesTheModelAlone) {
  TROUPE_REQUIRE_GPUS(1);
  const std::vector<Case> cases{
      {"mlp", {Shape{1, 28, 28}, DType::f32, 10}, false},
      {"cnn", {Shape{1, 28, 28}, DType::f32, 10}, false},
      {"textcnn", {Shape{300}, DType::i32, 45, 1, 10000}, false},  // token ids: an i32 input
      {"linreg", {Shape{1}, DType::f32, 0, 1}, true},              // regression: an f32 target
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const ModelSpec spec = zoo_spec(c.name, c.data);
    // The caller's model, built before the warm-up as a replica is.
    Model mine(spec, Device::cuda(0));
    mine.initialize(7);
    const std::vector<float> before = mine.parameters().to(Device::cpu()).to_vector();
    // Batch sizes no other test of this binary trains with: a job run
    // earlier in the same process has warmed its own (model, batch) pairs.
    EXPECT_EQ(warm_up_device(spec, Device::cuda(0), 61, 997, c.regression), WarmUp::warmed);
    EXPECT_EQ(warm_up_device(spec, Device::cuda(0), 61, 997, c.regression), WarmUp::already_warm);
    // Another batch size is other kernels and algorithms: warmed again.
    EXPECT_EQ(warm_up_device(spec, Device::cuda(0), 509, 997, c.regression), WarmUp::warmed);
    EXPECT_EQ(mine.parameters().to(Device::cpu()).to_vector(), before);
  }
  EXPECT_EQ(warm_up_device(zoo_spec("mlp", cases[0].data), Device::cpu(), 64, 1000, false), WarmUp::not_a_gpu);
}

}  // namespace
}  // namespace troupe::models
