// `troupe node --resume` with two nodes: a job stopped in the middle of an
// epoch and resumed ends like an uninterrupted one: the same step count, the
// same data seen (each replica continues at its own clock) and, in sync,
// bitwise the same parameters. Real processes on loopback, real data.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <regex>
#include <thread>

#include "models/checkpoint/checkpoint.hpp"
#include "tests/cluster/process.hpp"
#include "tests/support/ports.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;
using testing::Process;
namespace fs = std::filesystem;

// One run of a two-node job (coordinator and one worker, one CPU device
// each) to its end; returns both exit statuses and the logs.
struct NodesRun {
  std::vector<int> status;
  std::string logs;
};

NodesRun run_two_nodes(const std::string& dir, const std::string& name, const std::string& job_text, bool resume) {
  const std::string job = dir + "/" + name + ".toml";
  std::ofstream(job) << job_text;
  const std::string address = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
  std::vector<std::string> args{TROUPE_BINARY, "node",  "--listen",  address, "--job",          job, "--min-nodes", "2",
                                "--devices",   "cpu:0", "--timeout", "30",    "--wait-timeout", "60"};
  if (resume) args.push_back("--resume");
  Process coordinator(args, dir + "/" + name + "-coordinator.log");
  Process worker({TROUPE_BINARY, "node", "--join", address, "--devices", "cpu:0", "--timeout", "30"},
                 dir + "/" + name + "-worker.log");
  NodesRun r;
  r.status = {coordinator.wait_for(180s), worker.wait_for(30s)};
  r.logs = "--- coordinator:\n" + coordinator.output() + "--- worker:\n" + worker.output();
  return r;
}

checkpoint::State newest(const std::string& dir) {
  auto path = checkpoint::Directory(dir, 0).latest();
  EXPECT_TRUE(path.has_value()) << "no checkpoint in " << dir;
  return path ? checkpoint::read(*path) : checkpoint::State{};
}

std::string job(const std::string& mode, int steps, const std::string& checkpoints) {
  return "model = \"mlp\"\ndata = \"fashion-mnist\"\nseed = 5\nbatch = 32\nlr = 0.02\noptimizer = \"sgd\"\n"
         "mode = \"" +
         mode + "\"\nsteps = " + std::to_string(steps) + "\ncheckpoint_dir = \"" + checkpoints + "\"\n";
}

// "S synchronous steps, P gradients pushed, A applied by the server"
std::vector<long long> accounting(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"((\d+) synchronous steps, (\d+) gradients pushed, (\d+) applied)")))
    return {};
  return {std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3])};
}

std::string fresh(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("troupe-node-resume-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// An epoch has 937 steps of 2 x 32: 37 and 80 are in the middle of it.
TEST(NodeResume, SyncStoppedMidEpochAndResumedEqualsAnUninterruptedRunBitwise) {
  const std::string dir = fresh("sync");
  NodesRun first = run_two_nodes(dir, "first", job("sync", 37, dir + "/ckpt"), false);
  ASSERT_EQ(first.status, (std::vector<int>{0, 0})) << first.logs;
  EXPECT_EQ(newest(dir + "/ckpt").position.replica_clocks, (std::vector<std::uint64_t>{37, 37}));
  NodesRun second = run_two_nodes(dir, "second", job("sync", 80, dir + "/ckpt"), true);
  ASSERT_EQ(second.status, (std::vector<int>{0, 0})) << second.logs;
  EXPECT_EQ(accounting(second.logs), (std::vector<long long>{80 - 37, 0, 0})) << second.logs;
  NodesRun whole = run_two_nodes(dir, "whole", job("sync", 80, dir + "/whole"), false);
  ASSERT_EQ(whole.status, (std::vector<int>{0, 0})) << whole.logs;
  const checkpoint::State resumed = newest(dir + "/ckpt"), uninterrupted = newest(dir + "/whole");
  EXPECT_EQ(resumed.position.global_step, 80u);
  EXPECT_EQ(uninterrupted.position.global_step, 80u);
  EXPECT_EQ(resumed.position.replica_clocks, uninterrupted.position.replica_clocks);
  EXPECT_TRUE(resumed.parameters == uninterrupted.parameters) << "resumed parameters differ from an uninterrupted run";
}

// The same with a BatchNorm model whose statistics are every replica's
// batch together (`batchnorm sync=true`): the checkpoint carries the
// running statistics, the resumed replicas start from them, and the end is
// bitwise the uninterrupted run's, parameters and statistics alike.
TEST(NodeResume, ASyncBatchNormModelStoppedMidEpochAndResumedEqualsAnUninterruptedRunBitwise) {
  const std::string dir = fresh("sync-bn");
  const std::string spec = dir + "/bn.spec";
  std::ofstream(spec) << "name bn_cnn\ninput 1 28 28\nconv2d filters=4 kernel=3 bias=false\nbatchnorm sync=true\n"
                         "relu\nmaxpool2d pool=2\nflatten\ndense units=10\n";
  auto bn_job = [&](int steps, const std::string& checkpoints) {
    std::string text = job("sync", steps, checkpoints);
    return "model = \"" + spec + "\"\n" + text.substr(text.find('\n') + 1);  // the spec for "mlp"
  };
  NodesRun first = run_two_nodes(dir, "first", bn_job(37, dir + "/ckpt"), false);
  ASSERT_EQ(first.status, (std::vector<int>{0, 0})) << first.logs;
  const checkpoint::State stopped = newest(dir + "/ckpt");
  ASSERT_FALSE(stopped.model_state.empty());
  EXPECT_NE(stopped.model_state[0], 0.0f) << "the running mean did not move";
  NodesRun second = run_two_nodes(dir, "second", bn_job(80, dir + "/ckpt"), true);
  ASSERT_EQ(second.status, (std::vector<int>{0, 0})) << second.logs;
  EXPECT_EQ(accounting(second.logs), (std::vector<long long>{80 - 37, 0, 0})) << second.logs;
  NodesRun whole = run_two_nodes(dir, "whole", bn_job(80, dir + "/whole"), false);
  ASSERT_EQ(whole.status, (std::vector<int>{0, 0})) << whole.logs;
  const checkpoint::State resumed = newest(dir + "/ckpt"), uninterrupted = newest(dir + "/whole");
  EXPECT_EQ(resumed.position.global_step, 80u);
  EXPECT_TRUE(resumed.parameters == uninterrupted.parameters) << "resumed parameters differ from an uninterrupted run";
  EXPECT_TRUE(resumed.model_state == uninterrupted.model_state)
      << "resumed running statistics differ from an uninterrupted run";
}

TEST(NodeResume, AsyncStoppedMidEpochAndResumedPushesOnlyWhatRemained) {
  const std::string dir = fresh("async");
  NodesRun first = run_two_nodes(dir, "first", job("async", 41, dir + "/ckpt"), false);
  ASSERT_EQ(first.status, (std::vector<int>{0, 0})) << first.logs;
  const checkpoint::State stopped = newest(dir + "/ckpt");
  ASSERT_EQ(stopped.position.replica_clocks.size(), 2u);
  EXPECT_EQ(std::accumulate(stopped.position.replica_clocks.begin(), stopped.position.replica_clocks.end(), 0ull), 41u);
  NodesRun second = run_two_nodes(dir, "second", job("async", 100, dir + "/ckpt"), true);
  ASSERT_EQ(second.status, (std::vector<int>{0, 0})) << second.logs;
  EXPECT_EQ(accounting(second.logs), (std::vector<long long>{0, 100 - 41, 100 - 41})) << second.logs;
  const checkpoint::State end = newest(dir + "/ckpt");
  EXPECT_EQ(end.position.global_step, 100u);
  // Every push is one step of one replica: the clocks add up to the steps
  // only if each replica continued at its own clock.
  EXPECT_EQ(std::accumulate(end.position.replica_clocks.begin(), end.position.replica_clocks.end(), 0ull), 100u)
      << second.logs;
}

// Coordinator loss: the worker does not exit; it keeps trying to
// join the same address (--rejoin-timeout, 120 s by default), and a
// coordinator restarted there with --resume takes it back and finishes the
// job from its newest checkpoint, without restarting the worker.
TEST(NodeResume, AWorkerRejoinsACoordinatorRestartedWithResume) {
  const std::string dir = fresh("rejoin");
  const std::string job_path = dir + "/job.toml";
  std::ofstream(job_path) << job("async", 600, dir + "/ckpt") << "checkpoint_every = 40\n";
  const std::string address = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
  auto coordinator_args = [&](bool resume) {
    std::vector<std::string> a{TROUPE_BINARY,    "node", "--listen",    address, "--job",     job_path,
                               "--min-nodes",    "2",    "--devices",   "cpu:0", "--timeout", "30",
                               "--wait-timeout", "60",   "--log-every", "20"};
    if (resume) a.push_back("--resume");
    return a;
  };
  auto first = std::make_unique<Process>(coordinator_args(false), dir + "/coordinator1.log");
  Process worker({TROUPE_BINARY, "node", "--join", address, "--devices", "cpu:0", "--timeout", "30"},
                 dir + "/worker.log");
  // Kill the coordinator once it has written a checkpoint past the start.
  ASSERT_TRUE(first->wait_for_output("(step 80)", 120s)) << first->output() << worker.output();
  first->signal(SIGKILL);
  ASSERT_EQ(first->wait_for(10s), 128 + SIGKILL);
  ASSERT_TRUE(worker.wait_for_output("rejoining " + address, 10s)) << worker.output();
  EXPECT_TRUE(worker.running()) << "the worker exited after losing its coordinator:\n" << worker.output();
  // The same address, a moment later: the worker's attempts find it.
  std::this_thread::sleep_for(1s);
  Process second(coordinator_args(true), dir + "/coordinator2.log");
  const int coordinator_status = second.wait_for(180s);
  const int worker_status = worker.wait_for(30s);
  const std::string logs = "--- first coordinator:\n" + first->output() + "--- restarted coordinator:\n" +
                           second.output() + "--- worker:\n" + worker.output();
  EXPECT_EQ(coordinator_status, 0) << logs;
  EXPECT_EQ(worker_status, 0) << logs;
  EXPECT_NE(second.output().find("resumed from"), std::string::npos) << logs;
  const checkpoint::State end = newest(dir + "/ckpt");
  EXPECT_EQ(end.position.global_step, 600u) << logs;
}

}  // namespace
}  // namespace troupe
