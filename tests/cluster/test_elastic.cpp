// Elastic membership, as a user runs it: real `troupe node`
// processes on loopback, training the mlp on the real Fashion-MNIST, with a
// fault at a given step. Nodes are killed (SIGKILL), stopped (SIGSTOP),
// drained (SIGTERM, troupe ctl drain) and added while the job runs; the
// survivors never stop, the coordinator exits 0, and in sync every example
// of an epoch is used exactly once whatever joins or leaves.
#include <gtest/gtest.h>

#include <csignal>
#include <regex>
#include <thread>

#include "tests/cluster/cluster.hpp"
#include "tests/cluster/netns.hpp"

namespace troupe {
namespace {

const char* kJob = R"(model = "mlp"
data = "fashion-mnist"
seed = 5
batch = 32
)";

std::string job(const std::string& mode, int epochs) {
  return std::string(kJob) + "epochs = " + std::to_string(epochs) + "\nmode = \"" + mode + "\"\n";
}

double final_accuracy(const std::string& out) {
  std::smatch m;
  if (std::regex_search(out, m, std::regex(R"(test accuracy ([0-9.]+) )"))) return std::stod(m[1]);
  return -1;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// "epoch E trained on X examples (the data set has N) in V views": every
// example at most once, and all but the last partial global batch (the jobs
// drop it, drop_remainder) -- exactly once per epoch, counted.
void expect_exactly_once(const std::string& out, int views, int largest_global_batch) {
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m, std::regex(R"(trained on (\d+) examples \(the data set has (\d+)\) in (\d+) views)")))
      << out;
  const long used = std::stol(m[1]), n = std::stol(m[2]);
  EXPECT_LE(used, n) << out;
  EXPECT_GT(used, n - largest_global_batch) << out;
  EXPECT_EQ(std::stoi(m[3]), views) << out;
}

// Node indices follow the order the joins reached the coordinator, not the
// order the workers were started: a worker's index, found by its pid in the
// coordinator's "node N joined: ... pid P" line ("" if not there).
std::string node_index(const std::string& log, int pid) {
  std::smatch joined;
  if (!std::regex_search(log, joined, std::regex("node (\\d+) joined: [^\\n]*pid " + std::to_string(pid) + "\\b")))
    return "";
  return joined[1].str();
}

// Waits (polling every 5 ms, for a window of a few hundred: a joiner's
// join is logged before it loads the data and says it is ready) until the
// coordinator logs that `joiner` joined; false after 60 s.
bool wait_for_join(const Process& coordinator, const Process& joiner) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (node_index(coordinator.output(), joiner.pid()).empty()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

std::string mode_tag(const std::string& mode) { return mode == "ssp:2" ? "ssp" : mode; }

// kill -9 of a worker in the first epoch: removed at the next step boundary,
// the survivors go on in a view of 2 and finish; no process exits non-zero
// but the killed one.
TEST(Elastic, AKilledWorkerIsRemovedAndTheSurvivorsFinishInEveryMode) {
  for (const std::string mode : {"sync", "async", "ssp:2"}) {
    SCOPED_TRACE(mode);
    Cluster c("elastic-kill-" + mode_tag(mode), job(mode, 2), 2, {"--start-nodes", "3"}, {}, 1);
    ASSERT_TRUE(wait_for_step(*c.coordinator, 100, 120s)) << c.logs();
    c.workers[1]->signal(SIGKILL);
    const auto killed_at = std::chrono::steady_clock::now();
    ASSERT_TRUE(c.coordinator->wait_for_output("the survivors go on in a new view", 10s)) << c.logs();
    EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 5s) << c.logs();
    EXPECT_EQ(c.coordinator->wait_for(120s), 0) << c.logs();
    EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << c.logs();
    const std::string out = c.coordinator->output();
    EXPECT_EQ(count(out, "coordinator: view "), 1) << out;
    EXPECT_NE(out.find(": 2 replica(s) on 2 node(s) (was 3 on 3)"), std::string::npos) << out;
    EXPECT_NE(c.workers[0]->output().find("view 1: replicas 1..1 of 2"), std::string::npos) << c.logs();
    if (mode == "sync") {
      // Exactly once: the epoch the view changed in used every example once.
      expect_exactly_once(out, 2, 96);
      // The survivors hold the same bits (the coordinator compares digests).
      EXPECT_NE(out.find("the 2 replicas agree bitwise"), std::string::npos) << out;
    }
    EXPECT_GE(final_accuracy(out), 0.84) << out;
  }
}

// The gpt on a text file, as the mlp above: a worker killed at step 30 of
// the first epoch, the survivors go on in a view of 2 and finish, in every
// mode; in sync the epoch's text windows (its examples) are each used once
// across the two views, and the survivors agree bitwise.
TEST(Elastic, AKilledWorkerOfAGptOnTextIsRemovedAndTheSurvivorsFinishInEveryMode) {
  const std::string dir = temp_dir("elastic-gpt-text");
  std::string words;
  const char* pieces[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ", "dog.\n"};
  for (int i = 0; i < 4000; ++i) words += pieces[(i * 7 + i / 5) % 9];
  const std::string text = write_file(dir, "text.txt", words);
  for (const std::string mode : {"sync", "async", "ssp:2"}) {
    SCOPED_TRACE(mode);
    Cluster c("elastic-gpt-" + mode_tag(mode),
              "model = \"gpt\"\ndata = \"text:" + text +
                  "\"\ncontext = 16\nlayers = 2\nheads = 2\nwidth = 32\nseed = 5\nbatch = 4\nepochs = 1\n"
                  "lr = 0.003\nmode = \"" +
                  mode + "\"\n",
              2, {"--start-nodes", "3"}, {}, 1);
    ASSERT_TRUE(wait_for_step(*c.coordinator, 30, 120s)) << c.logs();
    c.workers[1]->signal(SIGKILL);
    ASSERT_TRUE(c.coordinator->wait_for_output("the survivors go on in a new view", 10s)) << c.logs();
    EXPECT_EQ(c.coordinator->wait_for(120s), 0) << c.logs();
    EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << c.logs();
    const std::string out = c.coordinator->output();
    EXPECT_NE(out.find(": 2 replica(s) on 2 node(s) (was 3 on 3)"), std::string::npos) << out;
    if (mode == "sync") {
      expect_exactly_once(out, 2, 12);
      EXPECT_NE(out.find("the 2 replicas agree bitwise"), std::string::npos) << out;
    }
    // It learned: the validation loss (nats per byte) is below the uniform
    // guess over the text's bytes, log(22) = 3.09.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(test loss ([0-9.]+) )"))) << out;
    EXPECT_LT(std::stod(m[1]), 3.0) << out;
  }
}

// The same with a BatchNorm model whose statistics are reduced across the
// replicas (`batchnorm sync=true`): after the kill the survivors' steps
// reduce through the new view's collective, every example is used once,
// the two agree bitwise (parameters and optimizer state) and the model
// learns.
TEST(Elastic, ASyncBatchNormModelLosesAWorkerAndTheSurvivorsFinishExactly) {
  const std::string specs = temp_dir("elastic-bn-spec");
  const std::string spec = write_file(specs, "bn.spec",
                                      "name bn_cnn\ninput 1 28 28\nconv2d filters=4 kernel=3 bias=false\nbatchnorm "
                                      "sync=true\nrelu\nmaxpool2d pool=2\nflatten\ndense units=10\n");
  Cluster c("elastic-bn", "model = \"" + spec + "\"\ndata = \"fashion-mnist\"\nseed = 5\nbatch = 32\nepochs = 1\n", 2,
            {"--start-nodes", "3"}, {}, 1);
  ASSERT_TRUE(wait_for_step(*c.coordinator, 100, 120s)) << c.logs();
  c.workers[1]->signal(SIGKILL);
  ASSERT_TRUE(c.coordinator->wait_for_output("the survivors go on in a new view", 10s)) << c.logs();
  EXPECT_EQ(c.coordinator->wait_for(120s), 0) << c.logs();
  EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << c.logs();
  const std::string out = c.coordinator->output();
  expect_exactly_once(out, 2, 96);
  EXPECT_NE(out.find("the 2 replicas agree bitwise"), std::string::npos) << out;
  EXPECT_GE(final_accuracy(out), 0.75) << out;
}

// A checkpoint written after a view change records the data segment the
// survivors train, so a resume continues it exactly: a job of 3 nodes loses
// one at step 100 (the rest of epoch 1 is split among 2), stops at step 400
// with a checkpoint, and a coordinator restarted with --resume and one
// worker finish the epoch. Counted across both runs (the checkpoint carries
// the epoch's count), every example of the epoch is used once.
TEST(Elastic, AResumeAfterAViewChangeContinuesTheSegmentExactly) {
  const std::string checkpoints = temp_dir("elastic-resume-ckpt");
  const std::string stop_at_400 = job("sync", 1) + "steps = 400\ncheckpoint_dir = \"" + checkpoints + "\"\n";
  {
    Cluster c("elastic-resume-1", stop_at_400, 2, {"--start-nodes", "3"}, {}, 1);
    ASSERT_TRUE(wait_for_step(*c.coordinator, 100, 120s)) << c.logs();
    c.workers[1]->signal(SIGKILL);
    EXPECT_EQ(c.coordinator->wait_for(120s), 0) << c.logs();
    EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << c.logs();
    EXPECT_NE(c.coordinator->output().find(": 2 replica(s) on 2 node(s) (was 3 on 3)"), std::string::npos) << c.logs();
  }
  Cluster r("elastic-resume-2", job("sync", 1) + "checkpoint_dir = \"" + checkpoints + "\"\n", 1, {"--resume"});
  EXPECT_EQ(r.coordinator->wait_for(120s), 0) << r.logs();
  EXPECT_EQ(r.workers[0]->wait_for(10s), 0) << r.logs();
  const std::string out = r.coordinator->output();
  EXPECT_EQ(out.find("resume: "), std::string::npos) << "the same 2 replicas resumed: no new data order\n" << out;
  expect_exactly_once(out, 1, 96);
  EXPECT_NE(out.find("the 2 replicas agree bitwise"), std::string::npos) << out;
  EXPECT_GE(final_accuracy(out), 0.8) << out;
}

// A member that stops answering while a view forms: the job is paused below
// --min-nodes (2 of 3 after a kill), a third worker joins, and the survivor
// is stopped (SIGSTOP) as the joiner loads the data, so the view that takes
// the joiner in is sent to a member whose kernel takes the ring's
// connections and that answers nothing. When the heartbeats find it lost,
// the coordinator gives the view up and tells the joiner, which was waiting
// for the stopped member in its ring set-up: the joiner waits for the next
// view instead of ending. The view without the stopped member forms, the
// job goes on when a fourth worker joins, and the joiner -- a newcomer of
// the view that did not form, so of the next -- takes the job's state: the
// replicas end bitwise equal. With a cluster secret, as a real cluster runs:
// the ring's connections authenticate and are sealed, so a member waits for
// the stopped one's challenge (tests/net/test_tcp.cpp has the plaintext ring).
TEST(Elastic, AMemberStoppedWhileAViewFormsIsLeftOutAndTheOthersEnterTheNextView) {
  const std::vector<std::string> secret{"TROUPE_SECRET=a view that does not form"};
  Cluster c("elastic-stop-forming", job("sync", 1), 2, {"--start-nodes", "3", "--wait-timeout", "90"}, secret, 3);
  ASSERT_TRUE(wait_for_step(*c.coordinator, 40, 120s)) << c.logs();
  c.workers[0]->signal(SIGKILL);
  ASSERT_TRUE(c.coordinator->wait_for_output("training pauses: 2 of --min-nodes 3 nodes", 30s)) << c.logs();
  Process& joiner = c.add_worker(secret);
  // The joiner's join is logged before it loads the data and says it is
  // ready: the survivor stops in that window, before the view is sent.
  ASSERT_TRUE(wait_for_join(*c.coordinator, joiner)) << c.logs();
  c.workers[1]->signal(SIGSTOP);
  ASSERT_TRUE(c.coordinator->wait_for_output("could not form", 30s)) << c.logs();
  ASSERT_TRUE(joiner.wait_for_output("did not form", 30s)) << c.logs();
  Process& fourth = c.add_worker(secret);
  EXPECT_EQ(c.coordinator->wait_for(180s), 0) << c.logs();
  EXPECT_EQ(joiner.wait_for(10s), 0) << c.logs();
  EXPECT_EQ(fourth.wait_for(10s), 0) << c.logs();
  c.workers[1]->signal(SIGKILL);
  const std::string out = c.coordinator->output();
  EXPECT_NE(out.find("the 3 replicas agree bitwise"), std::string::npos) << c.logs();
  EXPECT_GE(final_accuracy(out), 0.8) << c.logs();
}

// The same while the first view forms: the coordinator gives the view up
// and tells the member still connecting the ring, which waits for the next
// view instead of ending; the job starts without the stopped node, as view
// 1, as soon as --min-nodes are there (here: at once, the default 1), and
// trains to the end.
TEST(Elastic, AMemberStoppedWhileTheFirstViewFormsIsLeftOutAndTheJobStartsWithoutIt) {
  const std::vector<std::string> secret{"TROUPE_SECRET=a first view that does not form"};
  Cluster c("elastic-stop-first-view", job("sync", 1), 1, {"--start-nodes", "3"}, secret, 1);
  ASSERT_TRUE(c.coordinator->wait_for_output("node 1 is ready", 60s)) << c.logs();
  Process& second = c.add_worker(secret);
  ASSERT_TRUE(wait_for_join(*c.coordinator, second)) << c.logs();
  c.workers[0]->signal(SIGSTOP);
  EXPECT_EQ(c.coordinator->wait_for(180s), 0) << c.logs();
  EXPECT_EQ(second.wait_for(10s), 0) << c.logs();
  c.workers[0]->signal(SIGKILL);
  const std::string out = c.coordinator->output();
  EXPECT_NE(out.find("view 0, the first, did not form"), std::string::npos) << c.logs();
  EXPECT_NE(out.find("node 1 of the view was lost"), std::string::npos) << c.logs();
  EXPECT_NE(out.find("starting again, as view 1, with 2 node(s), 2 replica(s)"), std::string::npos) << c.logs();
  EXPECT_NE(second.output().find("view 0 did not form"), std::string::npos) << c.logs();
  EXPECT_NE(second.output().find("view 1: replicas 1..1 of 2"), std::string::npos) << c.logs();
  EXPECT_NE(out.find("the 2 replicas agree bitwise"), std::string::npos) << c.logs();
  EXPECT_GE(final_accuracy(out), 0.8) << c.logs();
}

// Below --min-nodes after such a loss, the job waits for another node
// (within --wait-timeout) and starts with it, in async: the newcomer is one
// of the first view's members like the others, and every push carries the
// first view's number.
TEST(Elastic, AMemberLostWhileTheFirstViewFormsBelowMinNodesWaitsForAnotherNode) {
  const std::vector<std::string> secret{"TROUPE_SECRET=a first view short of nodes"};
  Cluster c("elastic-stop-first-view-min", job("async", 1), 1, {}, secret, 3);
  ASSERT_TRUE(c.coordinator->wait_for_output("node 1 is ready", 60s)) << c.logs();
  Process& second = c.add_worker(secret);
  ASSERT_TRUE(wait_for_join(*c.coordinator, second)) << c.logs();
  c.workers[0]->signal(SIGSTOP);
  ASSERT_TRUE(c.coordinator->wait_for_output("waiting for 1 more node(s) (--min-nodes 3)", 60s)) << c.logs();
  Process& third = c.add_worker(secret);
  EXPECT_EQ(c.coordinator->wait_for(180s), 0) << c.logs();
  EXPECT_EQ(second.wait_for(10s), 0) << c.logs();
  EXPECT_EQ(third.wait_for(10s), 0) << c.logs();
  c.workers[0]->signal(SIGKILL);
  const std::string out = c.coordinator->output();
  EXPECT_NE(out.find("starting again, as view 1, with 3 node(s), 3 replica(s)"), std::string::npos) << c.logs();
  EXPECT_NE(third.output().find("view 1: replicas 2..2 of 3"), std::string::npos) << c.logs();
  EXPECT_EQ(out.find("dropped: the job is in view"), std::string::npos) << c.logs();
  EXPECT_GE(final_accuracy(out), 0.8) << c.logs();
}

// A node that joins a running job is admitted at the next step boundary,
// takes the job's state, trains in the new view, and `troupe ctl status`
// lists it.
TEST(Elastic, ANodeJoinsARunningJobAtTheNextStepBoundary) {
  for (const std::string mode : {"sync", "async"}) {
    SCOPED_TRACE(mode);
    const std::string control = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
    Cluster c("elastic-join-" + mode_tag(mode), job(mode, 3), 1, {"--control", control, "--start-nodes", "2"}, {}, 1);
    ASSERT_TRUE(wait_for_step(*c.coordinator, 100, 120s)) << c.logs();
    Process& joiner = c.add_worker();
    ASSERT_TRUE(c.coordinator->wait_for_output(": 3 replica(s) on 3 node(s) (was 2 on 2)", 60s)) << c.logs();
    ASSERT_TRUE(joiner.wait_for_output("view 1: replicas 2..2 of 3", 10s)) << c.logs();
    Process status({TROUPE_BINARY, "ctl", "--at", control, "status"}, c.dir + "/status.log");
    EXPECT_EQ(status.wait_for(20s), 0) << status.output();
    const std::string json = status.output();
    EXPECT_NE(json.find("\"view\":1"), std::string::npos) << json;
    EXPECT_NE(json.find("\"index\":2"), std::string::npos) << json;
    EXPECT_EQ(c.coordinator->wait_for(180s), 0) << c.logs();
    EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << c.logs();
    EXPECT_EQ(joiner.wait_for(10s), 0) << c.logs();
    const std::string out = c.coordinator->output();
    if (mode == "sync") {
      expect_exactly_once(out, 2, 96);
      // The joiner took replica 0's state and kept it in step.
      EXPECT_NE(out.find("the 3 replicas agree bitwise"), std::string::npos) << out;
    }
    EXPECT_GE(final_accuracy(out), 0.84) << out;
  }
}

// The zoo's resnet (BatchNorm after every convolution, residual blocks)
// joined by a node in sync: the newcomer takes replica 0's parameters,
// optimizer state and running statistics at a step boundary and the three
// stay bitwise in step to the end.
TEST(Elastic, TheResnetJoinedByANodeInSyncKeepsItsReplicasInStep) {
  Cluster c("elastic-join-resnet",
            "model = \"resnet\"\ndata = \"fashion-mnist\"\nseed = 5\nbatch = 16\nsteps = 150\nmode = \"sync\"\n", 1,
            {"--start-nodes", "2"}, {}, 1);
  ASSERT_TRUE(wait_for_step(*c.coordinator, 5, 120s)) << c.logs();
  Process& joiner = c.add_worker();
  ASSERT_TRUE(c.coordinator->wait_for_output(": 3 replica(s) on 3 node(s) (was 2 on 2)", 60s)) << c.logs();
  EXPECT_EQ(c.coordinator->wait_for(180s), 0) << c.logs();
  EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << c.logs();
  EXPECT_EQ(joiner.wait_for(10s), 0) << c.logs();
  const std::string out = c.coordinator->output();
  EXPECT_NE(out.find("the 3 replicas agree bitwise"), std::string::npos) << out;
  EXPECT_NE(out.find("(150 steps"), std::string::npos) << out;
}

// SIGTERM on a worker and `troupe ctl drain` make a node leave at the next
// step boundary: no step is discarded, the node exits (143 after its signal,
// 0 when drained), and the job goes on to the end.
TEST(Elastic, DrainedWorkersLeaveAtAStepBoundaryWithNoStepLost) {
  const std::string control = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
  Cluster c("elastic-drain", job("sync", 3), 3, {"--control", control, "--start-nodes", "4"}, {}, 1);
  ASSERT_TRUE(wait_for_step(*c.coordinator, 100, 120s)) << c.logs();
  c.workers[2]->signal(SIGTERM);
  EXPECT_EQ(c.workers[2]->wait_for(20s), 128 + SIGTERM) << c.logs();
  ASSERT_TRUE(c.coordinator->wait_for_output(": 3 replica(s) on 3 node(s) (was 4 on 4)", 20s)) << c.logs();
  Process unknown({TROUPE_BINARY, "ctl", "--at", control, "drain", "9"}, c.dir + "/unknown.log");
  EXPECT_NE(unknown.wait_for(20s), 0) << unknown.output();
  EXPECT_NE(unknown.output().find("no node '9'"), std::string::npos) << unknown.output();
  const std::string index = node_index(c.coordinator->output(), c.workers[1]->pid());
  ASSERT_FALSE(index.empty()) << c.logs();
  Process drain({TROUPE_BINARY, "ctl", "--at", control, "drain", index}, c.dir + "/drain.log");
  EXPECT_EQ(drain.wait_for(20s), 0) << drain.output();
  EXPECT_NE(drain.output().find("leaves at the next step boundary"), std::string::npos) << drain.output();
  EXPECT_EQ(c.workers[1]->wait_for(30s), 0) << c.logs();
  EXPECT_EQ(c.coordinator->wait_for(180s), 0) << c.logs();
  EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << c.logs();
  const std::string out = c.coordinator->output();
  EXPECT_NE(out.find(": 2 replica(s) on 2 node(s) (was 3 on 3)"), std::string::npos) << out;
  EXPECT_EQ(out.find("all-reduce failed"), std::string::npos) << out;
  EXPECT_EQ(out.find("lost node"), std::string::npos) << out;
  expect_exactly_once(out, 3, 128);
  EXPECT_NE(out.find("the 2 replicas agree bitwise"), std::string::npos) << out;
}

// A view change and a mode switch asked for together both happen, the view
// first when they meet at one boundary (docs/ARCHITECTURE.md, "Order at a
// boundary"). The coordinator is stopped (SIGSTOP) while `ctl drain` and
// `ctl mode sync` are sent, so both requests wait in its sockets and arrive
// within a few steps of each other when it goes on (at one boundary or at
// two in a row). The job runs async: the switch to sync gathers the
// server's state into the replicas, and the end of the job checks them
// bitwise; no push is lost or applied twice. (This test found the job's
// thread waiting for the switch's answer while the view it had to form
// held the boundary: the switch was answered 409 after 10 s.)
TEST(Elastic, AViewChangeAndAModeSwitchAskedForTogetherBothHappen) {
  const std::string control = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
  // 3 epochs: one lasts about 5 s here, and under a loaded machine the
  // requests below can take seconds to arrive; they must find the job running.
  Cluster c("elastic-mode-view", job("async", 3), 2, {"--control", control, "--start-nodes", "3"}, {}, 1);
  ASSERT_TRUE(wait_for_step(*c.coordinator, 100, 120s)) << c.logs();
  const std::string index = node_index(c.coordinator->output(), c.workers[1]->pid());
  ASSERT_FALSE(index.empty()) << c.logs();
  c.coordinator->signal(SIGSTOP);
  Process drain({TROUPE_BINARY, "ctl", "--timeout", "30", "--at", control, "drain", index}, c.dir + "/drain.log");
  Process mode({TROUPE_BINARY, "ctl", "--timeout", "30", "--at", control, "mode", "sync"}, c.dir + "/mode.log");
  std::this_thread::sleep_for(500ms);  // both requests sent, waiting in the coordinator's sockets
  c.coordinator->signal(SIGCONT);
  EXPECT_EQ(drain.wait_for(40s), 0) << drain.output();
  EXPECT_EQ(mode.wait_for(40s), 0) << mode.output();
  EXPECT_NE(mode.output().find("mode is sync from step"), std::string::npos) << mode.output();
  EXPECT_EQ(c.workers[1]->wait_for(30s), 0) << c.logs();
  EXPECT_EQ(c.coordinator->wait_for(180s), 0) << c.logs();
  EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << c.logs();
  const std::string out = c.coordinator->output();
  EXPECT_NE(out.find(": 2 replica(s) on 2 node(s) (was 3 on 3)"), std::string::npos) << out;
  EXPECT_EQ(out.find("lost node"), std::string::npos) << out;
  const Accounting a = accounting(out);
  EXPECT_GT(a.pushed, 0) << out;
  EXPECT_EQ(a.pushed, a.applied) << "a push was lost or applied twice\n" << out;
  EXPECT_GT(a.sync, 0) << out;
  EXPECT_EQ(a.steps, a.sync + a.applied) << "global steps are not the updates applied\n" << out;
  EXPECT_NE(out.find("the 2 replicas agree bitwise"), std::string::npos) << out;
  EXPECT_GE(final_accuracy(out), 0.8) << out;
}

// A stopped worker (SIGSTOP: its process is there, its sockets open, it
// says nothing) is found by the heartbeats within seconds and removed; the
// survivors finish.
TEST(Elastic, AStoppedWorkerIsRemovedWithinSecondsAndTheSurvivorsFinish) {
  Cluster c("elastic-stop", job("sync", 2), 2, {"--start-nodes", "3"}, {}, 1);
  ASSERT_TRUE(wait_for_step(*c.coordinator, 100, 120s)) << c.logs();
  c.workers[1]->signal(SIGSTOP);
  const auto stopped_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(c.coordinator->wait_for_output("the survivors go on in a new view", 20s)) << c.logs();
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at, 10s) << c.logs();
  EXPECT_EQ(c.coordinator->wait_for(120s), 0) << c.logs();
  EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << c.logs();
  c.workers[1]->signal(SIGKILL);
  c.workers[1]->signal(SIGCONT);
  const std::string out = c.coordinator->output();
  expect_exactly_once(out, 2, 96);
  EXPECT_NE(out.find("the 2 replicas agree bitwise"), std::string::npos) << out;
  EXPECT_GE(final_accuracy(out), 0.84) << out;
}

// A worker cut off (its link taken down, each node in its own network
// namespace as separate hosts are): its process runs on and its sockets stay
// open, but nothing crosses; the heartbeats find it within seconds, the
// survivors go on without it and finish.
TEST(Elastic, AWorkerCutOffByItsLinkIsRemovedAndTheSurvivorsFinish) {
  Namespaces net(3);
  if (!net.ok()) GTEST_SKIP() << net.why();
  const std::string dir = temp_dir("elastic-netns");
  const std::string job_file = write_file(dir, "job.toml", job("sync", 2));
  const std::vector<std::string> secret{"TROUPE_SECRET=namespaces need a secret"};
  const std::string at = net.address(0) + ":7000";
  Process coordinator(
      net.exec(0, {TROUPE_BINARY, "node", "--listen", at, "--job", job_file, "--min-nodes", "1", "--start-nodes", "3",
                   "--devices", "cpu:0", "--log-every", "20", "--timeout", "30", "--wait-timeout", "120"}),
      dir + "/coordinator.log", secret);
  std::vector<std::unique_ptr<Process>> workers;
  for (int i = 1; i < 3; ++i)
    workers.push_back(std::make_unique<Process>(net.exec(i, {TROUPE_BINARY, "node", "--join", at, "--devices", "cpu:0",
                                                             "--timeout", "30", "--rejoin-timeout", "0"}),
                                                dir + "/worker" + std::to_string(i) + ".log", secret));
  auto logs = [&] {
    std::string out = "--- coordinator:\n" + coordinator.output();
    for (auto& w : workers) out += "--- worker:\n" + w->output();
    return out;
  };
  ASSERT_TRUE(wait_for_step(coordinator, 100, 120s)) << logs();
  ASSERT_TRUE(net.link(2, false)) << "ip link set down failed";
  const auto cut_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(coordinator.wait_for_output("the survivors go on in a new view", 20s)) << logs();
  EXPECT_LT(std::chrono::steady_clock::now() - cut_at, 10s) << logs();
  EXPECT_EQ(coordinator.wait_for(120s), 0) << logs();
  EXPECT_EQ(workers[0]->wait_for(10s), 0) << logs();
  // The cut-off worker lost its coordinator too (heartbeats) and, with
  // --rejoin-timeout 0, ends on its own: a failure, not a hang.
  EXPECT_EQ(workers[1]->wait_for(30s), 1) << logs();
  const std::string out = coordinator.output();
  EXPECT_NE(out.find(": 2 replica(s) on 2 node(s) (was 3 on 3)"), std::string::npos) << out;
  expect_exactly_once(out, 2, 96);
  EXPECT_NE(out.find("the 2 replicas agree bitwise"), std::string::npos) << out;
  EXPECT_GE(final_accuracy(out), 0.84) << out;
}

// A worker joins, leaves (SIGTERM) and joins again (a new process on the same
// host), with elastic_batch = "global": the global batch stays 64 (21 per
// replica in a view of 3, floor), the learning rate is unchanged, every
// example of each epoch is used once, and the replicas end bitwise equal.
TEST(Elastic, AWorkerJoinsLeavesAndJoinsAgainWithAFixedGlobalBatch) {
  Cluster c("elastic-rejoin", job("sync", 3) + "elastic_batch = \"global\"\n", 1, {"--start-nodes", "2"}, {}, 1);
  ASSERT_TRUE(wait_for_step(*c.coordinator, 60, 120s)) << c.logs();
  Process& first = c.add_worker();
  ASSERT_TRUE(
      c.coordinator->wait_for_output(": 3 replica(s) on 3 node(s) (was 2 on 2); global batch 63 (21 per replica)", 60s))
      << c.logs();
  ASSERT_TRUE(first.wait_for_output("view 1: replicas 2..2 of 3", 10s)) << c.logs();
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait_for(30s), 128 + SIGTERM) << c.logs();
  ASSERT_TRUE(
      c.coordinator->wait_for_output(": 2 replica(s) on 2 node(s) (was 3 on 3); global batch 64 (32 per replica)", 20s))
      << c.logs();
  Process& again = c.add_worker();
  ASSERT_TRUE(again.wait_for_output("view 3: replicas 2..2 of 3", 60s)) << c.logs();
  EXPECT_EQ(c.coordinator->wait_for(180s), 0) << c.logs();
  EXPECT_EQ(c.workers[0]->wait_for(10s), 0) << c.logs();
  EXPECT_EQ(again.wait_for(10s), 0) << c.logs();
  const std::string out = c.coordinator->output();
  EXPECT_EQ(count(out, "coordinator: view "), 3) << out;
  EXPECT_EQ(count(out, "(unchanged by the view)"), 3) << out;
  EXPECT_EQ(out.find("all-reduce failed"), std::string::npos) << out;
  EXPECT_EQ(out.find("lost node"), std::string::npos) << out;
  // Every epoch, whichever views it was trained in: each example once but
  // for the last partial global batch.
  const std::regex epoch_line(R"(epoch (\d+) trained on (\d+) examples \(the data set has (\d+)\))");
  int epochs = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), epoch_line); it != std::sregex_iterator();
       ++it, ++epochs) {
    const long used = std::stol((*it)[2]), n = std::stol((*it)[3]);
    EXPECT_LE(used, n) << it->str();
    EXPECT_GT(used, n - 64) << it->str();
  }
  EXPECT_GE(epochs, 1) << out;
  EXPECT_NE(out.find("the 3 replicas agree bitwise"), std::string::npos) << out;
  EXPECT_GE(final_accuracy(out), 0.84) << out;
}

}  // namespace
}  // namespace troupe
