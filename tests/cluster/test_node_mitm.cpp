// A man in the middle between a worker and the coordinator of a running
// job, as real `troupe node` processes with a cluster secret: the worker
// joins through a proxy (tests/support/mitm_proxy.hpp) that lets the
// handshake through and, once training has reached step 100, flips one bit
// of one sealed record. The gate must drop that connection and say why, the
// job must fail over to the survivors (who end bitwise equal and accurate:
// nothing trained on the altered bytes), and the attacked worker must end on
// its own.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "tests/cluster/cluster.hpp"
#include "tests/cluster/process.hpp"
#include "tests/support/mitm_proxy.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;
using testing::Process;

const char* kJob = R"(model = "mlp"
data = "fashion-mnist"
seed = 5
batch = 32
epochs = 1
mode = "sync"
)";

TEST(NodeMitm, AnAlteredRecordDropsTheWorkerAndTheSurvivorsFinish) {
  const std::vector<std::string> secret{"TROUPE_SECRET=a secret the proxy does not know"};
  Cluster c("mitm", kJob, 1, {"--start-nodes", "3"}, secret, 1);
  const auto port = static_cast<std::uint16_t>(std::stoi(c.address.substr(c.address.rfind(':') + 1)));
  testing::AttackPlan plan;
  plan.attack = testing::Attack::flip_bit;
  plan.client_to_server = true;  // worker -> coordinator
  plan.wait_for_arm = true;
  testing::MitmProxy proxy(port, plan);
  // The proxy closes a client it cannot connect onwards (which a relay
  // takes as a refusal, not as a gate that is not up yet).
  ASSERT_TRUE(c.coordinator->wait_for_output("coordinator listening", 60s)) << c.logs();
  Process attacked({TROUPE_BINARY, "node", "--join", proxy.address(), "--devices", "cpu:0", "--timeout", "30",
                    "--rejoin-timeout", "0"},
                   c.dir + "/attacked.log", secret);
  auto logs = [&] { return c.logs() + "--- attacked worker:\n" + attacked.output(); };

  ASSERT_TRUE(wait_for_step(*c.coordinator, 100, 120s)) << logs();
  proxy.arm();
  ASSERT_TRUE(c.coordinator->wait_for_output("the survivors go on in a new view", 20s)) << logs();
  EXPECT_TRUE(proxy.attacked());
  const std::string out = c.coordinator->output();
  // The gate's log line: the connection, the worker, the record.
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(gate [^\n]*closed [^\n]*failed authentication)"))) << out;
  EXPECT_EQ(c.coordinator->wait_for(180s), 0) << logs();
  EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << logs();
  // Lost its coordinator; with --rejoin-timeout 0 it ends on its own.
  EXPECT_EQ(attacked.wait_for(30s), 1) << logs();
  const std::string final_out = c.coordinator->output();
  EXPECT_NE(final_out.find(": 2 replica(s) on 2 node(s) (was 3 on 3)"), std::string::npos) << final_out;
  EXPECT_NE(final_out.find("the 2 replicas agree bitwise"), std::string::npos) << final_out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(final_out, m, std::regex(R"(test accuracy ([0-9.]+) )"))) << final_out;
  EXPECT_GE(std::stod(m[1]), 0.8) << final_out;
}

}  // namespace
}  // namespace troupe
