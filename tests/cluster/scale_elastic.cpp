// Elastic membership at scale (label `slow`): 8 nodes, each in its
// own network namespace joined by veth links to a bridge (as separate hosts
// are), the mlp on the real Fashion-MNIST, in sync and then in async. The
// job starts on 6 nodes; two nodes join while it trains and two are killed
// (kill -9) later: the views go 6 -> 7 -> 8 -> 7 -> 6 nodes, the
// coordinator exits 0, and in sync every example of each epoch is used once
// and the replicas end bitwise equal. Skips without root (ip netns).
#include <gtest/gtest.h>

#include <csignal>
#include <regex>
#include <thread>

#include "tests/cluster/cluster.hpp"
#include "tests/cluster/netns.hpp"

namespace troupe {
namespace {

constexpr int kNodes = 8;

// Async trains an epoch in a few seconds here: enough epochs that both
// joins and both kills land while the job runs (a first run with 3 ended
// before the second kill).
std::string job(const std::string& mode) {
  return "model = \"mlp\"\ndata = \"fashion-mnist\"\nseed = 5\nbatch = 32\nepochs = " +
         std::string(mode == "sync" ? "4" : "10") + "\nmode = \"" + mode + "\"\n";
}

// The coordinator's "view N at step S: W replica(s) on K node(s)" lines' K.
std::vector<int> node_counts(const std::string& out) {
  std::vector<int> counts;
  const std::regex line(R"(coordinator: view \d+ at step \d+: \d+ replica\(s\) on (\d+) node\(s\))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it)
    counts.push_back(std::stoi((*it)[1]));
  return counts;
}

class ElasticScale : public ::testing::TestWithParam<std::string> {};

TEST_P(ElasticScale, EightNodesInNamespacesWithTwoJoinsAndTwoKills) {
  const std::string mode = GetParam();
  Namespaces net(kNodes);
  if (!net.ok()) GTEST_SKIP() << net.why();
  const std::string dir = temp_dir("elastic-scale-" + mode);
  const std::string job_file = write_file(dir, "job.toml", job(mode));
  const std::vector<std::string> secret{"TROUPE_SECRET=eight namespaces need a secret"};
  const std::string at = net.address(0) + ":7000";
  Process coordinator(
      net.exec(0, {TROUPE_BINARY, "node", "--listen", at, "--job", job_file, "--min-nodes", "3", "--start-nodes", "6",
                   "--devices", "cpu:0", "--log-every", "20", "--timeout", "30", "--wait-timeout", "300"}),
      dir + "/coordinator.log", secret);
  std::vector<std::unique_ptr<Process>> workers(kNodes);
  auto start = [&](int i) {
    workers[static_cast<std::size_t>(i)] = std::make_unique<Process>(
        net.exec(
            i, {TROUPE_BINARY, "node", "--join", at, "--devices", "cpu:0", "--timeout", "30", "--rejoin-timeout", "0"}),
        dir + "/worker" + std::to_string(i) + ".log", secret);
  };
  auto logs = [&] {
    std::string out = "--- coordinator:\n" + coordinator.output();
    for (int i = 1; i < kNodes; ++i)
      if (workers[static_cast<std::size_t>(i)])
        out += "--- worker " + std::to_string(i) + ":\n" + workers[static_cast<std::size_t>(i)]->output();
    return out;
  };
  for (int i = 1; i < 6; ++i) start(i);
  ASSERT_TRUE(wait_for_step(coordinator, 40, 240s)) << logs();
  // Two joins, one after the other, then two kills, each once the view
  // before it formed.
  start(6);
  ASSERT_TRUE(coordinator.wait_for_output("coordinator: view 1 at", 120s)) << logs();
  start(7);
  ASSERT_TRUE(coordinator.wait_for_output("coordinator: view 2 at", 120s)) << logs();
  std::this_thread::sleep_for(1s);
  workers[1]->signal(SIGKILL);
  ASSERT_TRUE(coordinator.wait_for_output("coordinator: view 3 at", 30s)) << logs();
  std::this_thread::sleep_for(1s);
  workers[2]->signal(SIGKILL);
  ASSERT_TRUE(coordinator.wait_for_output("coordinator: view 4 at", 30s)) << logs();
  EXPECT_EQ(coordinator.wait_for(600s), 0) << logs();
  for (int i = 3; i < kNodes; ++i) EXPECT_EQ(workers[static_cast<std::size_t>(i)]->wait_for(20s), 0) << logs();
  const std::string out = coordinator.output();
  EXPECT_EQ(node_counts(out), (std::vector<int>{7, 8, 7, 6})) << out;
  EXPECT_NE(out.find("data plane " + net.subnet()), std::string::npos) << out;
  if (mode == "sync") {
    // Every epoch that had view changes: each example at most once, all but
    // the last partial global batch (at most 8 x 32) used.
    const std::regex epoch_line(R"(trained on (\d+) examples \(the data set has (\d+)\))");
    int epochs = 0;
    for (auto it = std::sregex_iterator(out.begin(), out.end(), epoch_line); it != std::sregex_iterator(); ++it) {
      ++epochs;
      EXPECT_LE(std::stol((*it)[1]), std::stol((*it)[2])) << it->str();
      EXPECT_GT(std::stol((*it)[1]), std::stol((*it)[2]) - 256) << it->str();
    }
    EXPECT_GE(epochs, 1) << out;
    EXPECT_NE(out.find("the 6 replicas agree bitwise"), std::string::npos) << out;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(test accuracy ([0-9.]+) )"))) << out;
  EXPECT_GE(std::stod(m[1]), 0.84) << out;
  std::printf("%s: views %s\n", mode.c_str(), out.substr(out.rfind("test accuracy")).c_str());
}

INSTANTIATE_TEST_SUITE_P(Modes, ElasticScale, ::testing::Values("sync", "async"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace troupe
