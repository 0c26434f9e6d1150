// The `local` backend on device memory: several logical replicas on one GPU
// (`--devices cuda:0,cuda:0`) reduce one another's device buffers with the
// cuda kernels (sum_n) on that GPU's stream, with no host staging, one
// thread per rank as the device actors run them. Checked against plain
// references on random data; skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>

#include "kernels/ops.hpp"
#include "net/collective/local.hpp"
#include "tests/gpu/gpu_support.hpp"

namespace troupe::net {
namespace {

using gpu_test::on_device;
using gpu_test::random_values;
using kernels::Device;
using kernels::Tensor;
using namespace std::chrono_literals;

Device on_gpu_0(int) { return Device::cuda(0); }

TEST(LocalOnOneGpu, AllreduceOfLogicalReplicasMatchesTheReference) {
  TROUPE_REQUIRE_GPUS(1);
  for (int w : {2, 3}) {
    auto group = make_local_group(w);
    gpu_test::expect_allreduce_matches_reference(group, on_gpu_0, {1, 1000, 1 << 20});
  }
}

TEST(LocalOnOneGpu, BroadcastReduceScatterAllgather) {
  TROUPE_REQUIRE_GPUS(1);
  auto group = make_local_group(2);
  gpu_test::expect_broadcast_from_each_root(group, on_gpu_0);
  gpu_test::expect_scatter_gather_match_reference(group, on_gpu_0, 4099);
}

// The ranks' work is only queued when the all-reduce returns: a scale
// queued by rank 0 just before it is in everyone's result, since all of it
// runs on the GPU's one stream in call order.
TEST(LocalOnOneGpu, ReducesWorkStillQueuedOnTheStream) {
  TROUPE_REQUIRE_GPUS(1);
  auto group = make_local_group(2);
  const auto a = random_values(1 << 18, 1), b = random_values(1 << 18, 2);
  std::vector<std::vector<float>> outputs(2);
  gpu_test::run_ranks(group, on_gpu_0, [&](int r, Collective& c) {
    Tensor t = on_device(r == 0 ? a : b, Device::cuda(0));
    if (r == 0) {
      gpu_test::spin_on_compute_stream(0, 30.0);
      kernels::ops::scale(t, 2.0f);
    }
    c.allreduce(t, ReduceOp::sum)->wait(Clock::now() + 30s);
    outputs[static_cast<std::size_t>(r)] = t.to_vector();
  });
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(outputs[1][i], 2.0 * a[i] + b[i], 1e-5) << i;
  EXPECT_EQ(outputs[0], outputs[1]);
}

}  // namespace
}  // namespace troupe::net
