// The actor runtime with replicas on GPUs, against the same job on CPU
// devices (reference kernels: this binary links the ref and cuda backends
// only). Fashion-MNIST from $TROUPE_FASHION_MNIST_DIR (scripts/gpu-check.sh
// points it into the bundle) or Debian's folder.
//
// Tolerance: parameters after 30 sync SGD steps of the mlp (lr 0.05) are
// compared by relative L2 distance, |gpu - cpu| / |cpu| < 1e-4. Both run FP32
// (cuBLAS without TF32), but cuBLAS and the reference loops sum each GEMM in
// another order, and the difference grows with the steps (tests/actors/
// test_job.cpp sees < 1e-5 between CPU runs that only reorder the all-reduce;
// a GEMM's own order moves more). The cnn's convolutions (cuDNN against the
// reference loops) get 1e-3 over 20 steps.
//
//   one replica on cuda:0, and two logical replicas on cuda:0 (local backend
//   on device memory): run on any GPU machine;
//   one replica per GPU (nccl): runs where 2 GPUs are; never run yet.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "job/job.hpp"
#include "tests/gpu/gpu_support.hpp"

namespace troupe::actors {
namespace {

using kernels::Device;

JobConfig job_on(std::vector<Device> devices, const std::string& mode, const std::string& model, std::int64_t batch,
                 std::int64_t steps) {
  // cpu: replicas train on the reference kernels here, deliberately.
  ::setenv("TROUPE_CPU_BACKEND", "ref", 1);
  JobConfig c;
  c.train.model = model;
  c.train.data = "fashion-mnist";
  c.train.epochs = 1;
  c.train.batch = batch;
  c.train.seed = 11;
  c.train.optimizer.name = "sgd";
  c.train.lr = 0.05f;
  c.train.max_steps = steps;
  c.devices = std::move(devices);
  c.mode = Mode::parse(mode);
  c.timeout = std::chrono::milliseconds(60000);
  c.collect_replica_parameters = true;
  return c;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d) / std::sqrt(n);
}

struct JobRun {
  JobResult result;
  std::vector<std::vector<float>> parameters;
  std::string collective;
};

JobRun run(const JobConfig& c) {
  Job job(c);
  JobRun out;
  out.collective = to_string(job.collective_choice().kind);
  out.result = job.run();
  out.parameters = job.replica_parameters();
  EXPECT_TRUE(out.result.error.empty()) << out.result.error;
  EXPECT_EQ(out.result.pushes, out.result.server.applied) << "a push was lost or applied twice";
  return out;
}

// Sync on `gpus` equals sync on as many CPU devices, within `tolerance`,
// and the GPU replicas are bitwise identical.
void expect_sync_matches_cpu(const std::vector<Device>& gpus, const std::string& expected_collective,
                             const std::string& model, std::int64_t steps, double tolerance) {
  std::vector<Device> cpus;
  for (std::size_t i = 0; i < gpus.size(); ++i) cpus.push_back(Device::cpu(static_cast<int>(i)));
  const std::int64_t batch = 64 / static_cast<std::int64_t>(gpus.size());
  const JobRun gpu = run(job_on(gpus, "sync", model, batch, steps));
  const JobRun cpu = run(job_on(cpus, "sync", model, batch, steps));
  EXPECT_EQ(gpu.collective, expected_collective);
  ASSERT_EQ(gpu.parameters.size(), gpus.size());
  ASSERT_EQ(cpu.parameters.size(), gpus.size());
  EXPECT_EQ(gpu.result.steps, steps);
  for (std::size_t r = 1; r < gpus.size(); ++r) EXPECT_EQ(gpu.parameters[r], gpu.parameters[0]) << "replica " << r;
  const double d = rel_diff(gpu.parameters[0], cpu.parameters[0]);
  EXPECT_LT(d, tolerance) << model << " on " << gpus.size() << " GPU replica(s) after " << steps << " steps";
  std::printf("[ info ] %s, %zu replica(s) (%s): |gpu - cpu| / |cpu| = %.3g after %lld steps\n", model.c_str(),
              gpus.size(), gpu.collective.c_str(), d, static_cast<long long>(steps));
}

TEST(DeviceActorsOnGpu, OneReplicaSyncEqualsTheCpuRun) {
  TROUPE_REQUIRE_GPUS(1);
  expect_sync_matches_cpu({Device::cuda(0)}, "local", "mlp", 30, 1e-4);
}

TEST(DeviceActorsOnGpu, TwoLogicalReplicasOnOneGpuSyncEqualTheCpuRun) {
  TROUPE_REQUIRE_GPUS(1);
  expect_sync_matches_cpu({Device::cuda(0), Device::cuda(0)}, "local", "mlp", 30, 1e-4);
}

TEST(DeviceActorsOnGpu, TwoLogicalReplicasOfTheCnnSyncEqualTheCpuRun) {
  TROUPE_REQUIRE_GPUS(1);
  expect_sync_matches_cpu({Device::cuda(0), Device::cuda(0)}, "local", "cnn", 20, 1e-3);
}

// Async through the parameter server, staged through pinned host buffers:
// every push applied once, and the model learns.
TEST(DeviceActorsOnGpu, TwoLogicalReplicasAsyncApplyEveryPushAndLearn) {
  TROUPE_REQUIRE_GPUS(1);
  JobConfig c = job_on({Device::cuda(0), Device::cuda(0)}, "async", "mlp", 64, 300);
  c.train.optimizer.name = "adam";
  c.train.lr = 1e-3f;
  const JobRun r = run(c);
  EXPECT_EQ(r.result.server.applied, 300);
  EXPECT_EQ(r.result.sync_steps, 0);
  EXPECT_GT(r.result.final.test_accuracy, 0.7) << "async mlp after 300 steps";
}

TEST(DeviceActorsOnGpu, ModeSwitchesBetweenSyncAndAsyncOnOneGpu) {
  TROUPE_REQUIRE_GPUS(1);
  JobConfig c = job_on({Device::cuda(0), Device::cuda(0)}, "sync", "mlp", 32, 200);
  c.switches = parse_switch_schedule("50:async,120:sync");
  const JobRun r = run(c);
  EXPECT_EQ(r.result.steps, 200);
  EXPECT_EQ(r.parameters[0], r.parameters[1]) << "sync at the end: the replicas must agree";
}

TEST(DeviceActorsOnGpu, OneReplicaPerGpuSyncThroughNcclEqualsTheCpuRun) {
  TROUPE_REQUIRE_GPUS(2);
  expect_sync_matches_cpu({Device::cuda(0), Device::cuda(1)}, "nccl", "mlp", 30, 1e-4);
}

}  // namespace
}  // namespace troupe::actors
