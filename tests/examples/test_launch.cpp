// examples/launch.hpp, the launcher the cluster examples share, with real
// child processes: a failed child stops the others at once (a chief whose
// worker died before joining would otherwise wait minutes for it), and a
// child that lost its port to another process is recognised so that the
// launcher can try fresh ports.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../../examples/launch.hpp"
#include "tests/support/ports.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string log_path(const std::string& name) {
  return (fs::path(::testing::TempDir()) / ("troupe_launch_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::unique_ptr<examples::Child> shell(const std::string& script, const std::string& name) {
  return std::make_unique<examples::Child>(std::vector<std::string>{"sh", "-c", script}, "", log_path(name), "/bin/sh");
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TEST(Launch, AFailedChildStopsTheOthersAtOnce) {
  auto failing = shell("sleep 0.3; exit 3", "failing");
  auto waiting = shell("exec sleep 60", "waiting");  // a chief waiting for its lost worker
  const auto start = Clock::now();
  const bool ended =
      examples::wait_all({failing.get(), waiting.get()}, std::chrono::seconds(50), examples::OnFailure::stop_the_rest);
  EXPECT_TRUE(ended);
  EXPECT_LT(seconds_since(start), 10.0);  // SIGTERM ends sleep at once; not the 50 s limit
  EXPECT_EQ(failing->status, 3);
  EXPECT_EQ(waiting->status, 128 + SIGTERM);
}

TEST(Launch, AChildIgnoringSigtermIsKilledAfterTheGrace) {
  // SIGTERM ignored (inherited through exec) before it says "ready"; the
  // failing child starts only then, or the SIGTERM could come first.
  auto stubborn = shell("trap '' TERM; echo ready; exec sleep 60", "stubborn");
  const auto ready_by = Clock::now() + std::chrono::seconds(20);
  while (stubborn->output().find("ready") == std::string::npos && Clock::now() < ready_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_NE(stubborn->output().find("ready"), std::string::npos) << "the shell did not start";
  auto failing = shell("exit 1", "failing2");
  const auto start = Clock::now();
  EXPECT_TRUE(examples::wait_all({failing.get(), stubborn.get()}, std::chrono::seconds(50),
                                 examples::OnFailure::stop_the_rest));
  const double took = seconds_since(start);
  EXPECT_GE(took, 9.0);  // the 10 s grace after SIGTERM
  EXPECT_LT(took, 30.0);
  EXPECT_EQ(stubborn->status, 128 + SIGKILL);
}

TEST(Launch, WithoutStopTheRestAFailureWaitsForTheOthers) {
  auto failing = shell("exit 1", "failing3");
  auto slow = shell("sleep 1; exit 0", "slow");
  EXPECT_TRUE(examples::wait_all({failing.get(), slow.get()}, std::chrono::seconds(30)));
  EXPECT_EQ(slow->status, 0);  // ran to its end
}

TEST(Launch, TheLimitKillsEveryoneAndSaysSo) {
  auto slow = shell("exec sleep 60", "slow2");
  EXPECT_FALSE(examples::wait_all({slow.get()}, std::chrono::seconds(1), examples::OnFailure::stop_the_rest));
  EXPECT_EQ(slow->status, 128 + SIGKILL);
}

TEST(Launch, ALostPortIsRecognisedFromTheChildsLog) {
  // What `troupe node` prints when another process bound its port first.
  auto lost = shell("echo 'troupe node: cannot listen on 127.0.0.1:47311: Address already in use'; exit 1", "lost");
  // What troupe prints today (net::listen_tcp), less its `ss` hint.
  auto taken = shell(
      "echo 'troupe: cannot listen on 127.0.0.1:44039: port 44039 is already in use by another "
      "process, or choose another port'; exit 1",
      "taken");
  auto other = shell("echo 'error: fit: worker node ended with status 1'; exit 1", "other");
  auto fine = shell("echo 'cannot listen on 127.0.0.1:1: Address already in use (retried)'; exit 0", "fine");
  examples::wait_all({lost.get(), taken.get(), other.get(), fine.get()}, std::chrono::seconds(10));
  EXPECT_TRUE(examples::lost_a_port({lost.get(), other.get()}));
  EXPECT_TRUE(examples::lost_a_port({other.get(), taken.get()}));
  EXPECT_FALSE(examples::lost_a_port({other.get()}));
  EXPECT_FALSE(examples::lost_a_port({fine.get()}));  // it exited 0: whatever it printed, it did not fail
}

// The real thing: `troupe node` told to listen on a port another process
// holds fails, and a launcher recognises it as a lost port (a launcher that
// looked for strerror's words alone had stopped recognising troupe's).
TEST(Launch, TroupeNodeOnATakenPortIsALostPort) {
  troupe::testing::HeldPort held;
  ASSERT_GT(held.port, 0);
  const int port = held.port;
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string log = (tmp / "troupe-launch-taken.log").string(), job = (tmp / "troupe-launch-taken.toml").string();
  std::ofstream(job) << "model = \"mlp\"\ndata = \"fashion-mnist\"\nepochs = 1\n";
  examples::Child node(
      {TROUPE_BINARY, "node", "--listen", "127.0.0.1:" + std::to_string(port), "--job", job, "--devices", "cpu:0"}, "",
      log, TROUPE_BINARY);
  EXPECT_TRUE(examples::wait_all({&node}, std::chrono::seconds(60)));
  EXPECT_NE(node.status, 0) << node.output();
  EXPECT_TRUE(examples::lost_a_port({&node})) << node.output();
  std::filesystem::remove(log);
  std::filesystem::remove(job);
}

}  // namespace
