// Two `troupe node` processes, one GPU each, reducing through one NCCL group
// across the nodes: the coordinator chooses it for the view (every node
// cuda: on distinct GPUs, NCCL loads on both), sends the NCCL unique id in
// the view message, and both build their ranks with make_nccl_group. The
// two nodes run on one machine (cuda:0 and cuda:1 of one host), which is as
// close to two hosts as a test with one machine gets: NCCL still bootstraps
// through the id's socket address, and the ranks are in two processes.
//
// Needs two GPUs and NCCL: it skips with a message otherwise (it has not yet
// run anywhere: no machine with two GPUs was available when it was written).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "models/checkpoint/checkpoint.hpp"
#include "net/collective/nccl.hpp"
#include "tests/cluster/process.hpp"
#include "tests/gpu/gpu_support.hpp"
#include "tests/support/ports.hpp"
#include "tests/support/single_process.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The troupe binary: next to this test's executable (scripts/gpu-bundle.sh
// puts both in bin/), else the one this build made.
std::string troupe_binary() {
  const fs::path beside = fs::read_symlink("/proc/self/exe").parent_path() / "troupe";
  if (fs::exists(beside)) return beside.string();
#ifdef TROUPE_BINARY
  if (fs::exists(TROUPE_BINARY)) return TROUPE_BINARY;
#endif
  return "";
}

TEST(NcclAcrossNodes, TwoNodesOnTwoGpusTrainInSyncThroughOneNcclGroupAndEqualOneProcess) {
  TROUPE_REQUIRE_GPUS(2);
  if (const std::string why = net::nccl_unavailable(); !why.empty()) GTEST_SKIP() << "NCCL is unavailable: " << why;
  const std::string troupe = troupe_binary();
  ASSERT_FALSE(troupe.empty()) << "no troupe binary beside this test or in the build";

  const fs::path dir = fs::temp_directory_path() / ("troupe-nccl-nodes-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string checkpoints = (dir / "ckpt").string();
  const std::string job = (dir / "job.toml").string();
  {
    std::ofstream out(job);
    out << "model = \"mlp\"\ndata = \"fashion-mnist\"\nseed = 5\nbatch = 32\nsteps = 30\nlr = 0.02\nmode = \"sync\"\n"
        << "checkpoint_dir = \"" << checkpoints << "\"\n[optimizer]\nname = \"sgd\"\n";
  }
  const std::string address = "127.0.0.1:" + std::to_string(testing::free_loopback_port());
  testing::Process coordinator({troupe, "node", "--listen", address, "--job", job, "--min-nodes", "2", "--devices",
                                "cuda:0", "--timeout", "60", "--wait-timeout", "120"},
                               (dir / "coordinator.log").string());
  testing::Process worker(
      {troupe, "node", "--join", address, "--devices", "cuda:1", "--timeout", "60", "--rejoin-timeout", "0"},
      (dir / "worker.log").string());
  const auto logs = [&] { return "--- coordinator:\n" + coordinator.output() + "--- worker:\n" + worker.output(); };
  ASSERT_EQ(coordinator.wait_for(300s), 0) << logs();
  ASSERT_EQ(worker.wait_for(30s), 0) << logs();
  EXPECT_NE(coordinator.output().find("view 0 reduces through nccl"), std::string::npos) << logs();
  EXPECT_NE(worker.output().find("one NCCL group across the nodes"), std::string::npos) << logs();

  // Two replicas of batch 32 in sync take the steps one process takes with
  // batch 64 (the node tests check this on the CPU to 1e-5; a GPU's sums
  // differ in their last bits, hence 1e-4).
  const auto latest = checkpoint::Directory(checkpoints, 0).latest();
  ASSERT_TRUE(latest.has_value()) << logs();
  const checkpoint::State state = checkpoint::read(*latest);
  EXPECT_EQ(state.position.global_step, 30u);
  EXPECT_LT(testing::rel_diff(state.parameters, testing::single_process_mlp_parameters(64, 30, 0.02f)), 1e-4) << logs();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace troupe
