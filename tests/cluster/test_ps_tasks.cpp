// ps tasks: `troupe node --ps --join ...` processes that host the
// parameter-server shards and serve the replicas' pushes on the data plane,
// beside a coordinator and a worker, on real loopback sockets, training on
// the real Fashion-MNIST. The seed's launch shapes (TF1 flags, TF_CONFIG)
// are in test_launchers.cpp.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <thread>

#include "models/checkpoint/checkpoint.hpp"
#include "tests/cluster/cluster.hpp"
#include "tests/cluster/process.hpp"
#include "tests/support/http.hpp"
#include "tests/support/single_process.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;
using testing::Process;
using testing::rel_diff;

const char* kMlpJob = R"(model = "mlp"
data = "fashion-mnist"
seed = 5
)";

// A ps task joining the cluster's coordinator.
std::unique_ptr<Process> start_ps_task(const Cluster& c, int k, std::vector<std::string> env = {}) {
  std::vector<std::string> args{TROUPE_BINARY, "node", "--ps", "--join", c.address, "--timeout", "30"};
  return std::make_unique<Process>(args, c.dir + "/ps" + std::to_string(k) + ".log", env);
}

// Two ps tasks joining the cluster's coordinator.
std::vector<std::unique_ptr<Process>> start_two_ps_tasks(const Cluster& c, const std::vector<std::string>& env = {}) {
  std::vector<std::unique_ptr<Process>> ps;
  ps.push_back(start_ps_task(c, 0, env));
  ps.push_back(start_ps_task(c, 1, env));
  return ps;
}

std::string all_logs(const Cluster& c, const std::vector<std::unique_ptr<Process>>& ps) {
  std::string out = c.logs();
  for (std::size_t k = 0; k < ps.size(); ++k) out += "--- ps " + std::to_string(k) + ":\n" + ps[k]->output();
  return out;
}

// The same job restarted with --resume, a coordinator, a worker and 2 ps
// tasks: the shards start from the newest checkpoint's state (scattered to
// the new ps tasks), every process ends 0, and the job does exactly its
// `steps` - `from` remaining steps, each push applied once.
void expect_resume_does_the_rest(const std::string& name, const std::string& job, std::uint64_t steps,
                                 std::uint64_t from) {
  Cluster c(name, job, 1, {"--ps-tasks", "2", "--resume"});
  auto ps = start_two_ps_tasks(c);
  ASSERT_EQ(c.wait_all(300s), (std::vector<int>{0, 0})) << all_logs(c, ps);
  for (auto& p : ps) EXPECT_EQ(p->wait_for(10s), 0) << all_logs(c, ps);
  const std::string out = c.coordinator->output();
  EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
  const Accounting a = accounting(out);
  EXPECT_EQ(a.pushed, a.applied) << out;
  EXPECT_EQ(static_cast<std::uint64_t>(a.pushed), steps - from) << out;
}

// "hosting shard(s) 0 (N floats)" -> N.
long long hosted_floats(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex(R"(hosting shard\(s\) [0-9,]+ \((\d+) floats\))"))) return -1;
  return std::stoll(m[1]);
}

// The sum over every node of a Prometheus series (`name` or `name{...}`),
// -1 when no line has it.
double series_sum(const std::string& text, const std::string& name) {
  double sum = -1;
  std::regex line("^" + name + R"((\{[^}]*\})? ([0-9.eE+-]+)$)");
  std::smatch m;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string l = text.substr(at, end - at);
    if (std::regex_match(l, m, line)) sum = (sum < 0 ? 0 : sum) + std::stod(m[2]);
    at = end + 1;
  }
  return sum;
}

// 2 workers (the coordinator and one worker node, a replica each) and 2 ps
// tasks, one epoch of the mlp in async and in ssp:2. Each ps task hosts one
// shard (the mlp's big layers split across both: every push reaches both),
// applies every push it gets, and the job learns as with one server. ssp
// runs with a cluster secret: every push and answer travels sealed.
TEST(PsTasks, TwoWorkersAndTwoPsTasksLearnInAsyncAndSsp) {
  for (const char* mode : {"async", "ssp:2"}) {
    SCOPED_TRACE(mode);
    const bool sealed = mode[0] == 's';
    const std::vector<std::string> env =
        sealed ? std::vector<std::string>{"TROUPE_SECRET=ps-tasks-test-secret-0123456789abcdef"}
               : std::vector<std::string>{};
    // The async run serves GET /metrics (no secret: loopback only).
    const int control_port = sealed ? 0 : troupe::testing::free_loopback_port();
    std::vector<std::string> coordinator_args{"--ps-tasks", "2"};
    if (control_port)
      coordinator_args.insert(coordinator_args.end(), {"--control", "127.0.0.1:" + std::to_string(control_port)});
    Cluster c(std::string("ps-tasks-") + (sealed ? "ssp" : "async"),
              std::string(kMlpJob) + "epochs = 1\nbatch = 32\nschedule = \"cosine:1875\"\nmode = \"" + mode +
                  "\"\nps_split_above = 10000\n",
              1, coordinator_args, env);
    std::vector<std::unique_ptr<Process>> ps;
    ps.push_back(start_ps_task(c, 0, env));
    ps.push_back(start_ps_task(c, 1, env));
    if (control_port) {
      // The shards run on the ps tasks, yet /metrics has every push's
      // staleness: shard 0 answers it to the pusher, whose step report
      // brings it to the coordinator with the push's time, so in any
      // scrape there is one staleness per push, neither lost nor counted
      // twice (node by node, summed here).
      double pushes = 0, staleness = 0, staleness_sum = 0;
      const auto until = std::chrono::steady_clock::now() + 120s;
      while (pushes < 200 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(200ms);
        const auto r = troupe::testing::http_get(control_port, "/metrics");
        if (r.status != 200) continue;
        pushes = series_sum(r.body, "troupe_push_seconds_count");
        staleness = series_sum(r.body, "troupe_push_staleness_count");
        staleness_sum = series_sum(r.body, "troupe_push_staleness_sum");
      }
      EXPECT_GE(pushes, 200) << "no scrape saw 200 pushes\n" << all_logs(c, ps);
      EXPECT_EQ(staleness, pushes);
      // Two replicas pushing by turns: about one update unseen per push.
      EXPECT_GT(staleness_sum, 0);
      EXPECT_LT(staleness_sum, 4 * pushes);
    }
    ASSERT_EQ(c.wait_all(300s), (std::vector<int>{0, 0})) << all_logs(c, ps);
    for (auto& p : ps) ASSERT_EQ(p->wait_for(10s), 0) << all_logs(c, ps);
    const std::string out = c.coordinator->output();
    EXPECT_NE(out.find("starting with 2 node(s), 2 replica(s) and 2 ps task(s)"), std::string::npos) << out;
    if (sealed) {
      EXPECT_NE(out.find("every link to another node is sealed"), std::string::npos) << out;
      for (auto& p : ps)
        EXPECT_NE(p->output().find("pushes on the data plane, sealed (AES-256-GCM)"), std::string::npos) << p->output();
    }
    const Accounting a = accounting(out);
    EXPECT_EQ(a.pushed, a.applied) << "a pushed gradient was lost or applied twice";
    EXPECT_EQ(a.steps, a.applied) << out;
    // One epoch of 60,000 / 32 batches dealt to 2 replicas.
    EXPECT_GE(a.pushed, 1874) << out;
    const std::string n = std::to_string(a.pushed);
    // Each shard (one per ps task) applied every push, as its task counted.
    EXPECT_NE(out.find(n + " applied by the server (by shard: " + n + ", " + n + ")"), std::string::npos) << out;
    // And said where a push's time went on it (PushServer::service_times).
    for (auto& p : ps) {
      EXPECT_NE(p->output().find("the job is done (" + n + " pushes applied here; per push on this server: read "),
                std::string::npos)
          << p->output();
      EXPECT_NE(p->output().find(" pushes))"), std::string::npos) << p->output();
    }
    // Every parameter is in exactly one shard: the parts add up to the mlp's
    // 235,146 parameters (784x256, 256x128 and 128x10 Dense layers with
    // biases), and no more than the padding of split layers to 16-float
    // bounds.
    const long long f0 = hosted_floats(ps[0]->output()), f1 = hosted_floats(ps[1]->output());
    EXPECT_GT(f0, 0) << ps[0]->output();
    EXPECT_GT(f1, 0) << ps[1]->output();
    EXPECT_GE(f0 + f1, 235146);
    EXPECT_LT(f0 + f1, 235146 + 16 * 8);
    // The staleness the shards saw: two replicas pushing concurrently, so
    // some push had an update it had not seen.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(staleness mean ([0-9.]+), max (\d+))"))) << out;
    EXPECT_GE(std::stoll(m[2]), 1) << out;
    EXPECT_LT(std::stod(m[1]), 4.0) << out;
    // As on one server (Node.ThreeNodesLearnInAsyncAndSsp: 85.1-85.3%).
    EXPECT_GE(a.accuracy, 0.84) << out;
  }
}

// Mode switches across shards on 2 ps tasks: entering async scatters
// replica 0's state to the shards (over CAF to the ps tasks), entering sync
// gathers it back to every replica, each at a step boundary. Every push is
// applied exactly once, global steps are synchronous steps plus updates
// applied, and the job ends in sync with the replicas bitwise equal.
TEST(PsTasks, ASwitchStormAcrossShardsOnPsTasksKeepsTheAccounting) {
  Cluster c("ps-switch",
            std::string(kMlpJob) + "epochs = 5\nbatch = 32\nsteps = 400\nmode = \"sync\"\n" +
                "switch = \"40:async,80:sync,120:ssp:1,160:sync,200:async,240:ssp:2,300:sync\"\n" +
                "ps_split_above = 10000\n",
            1, {"--ps-tasks", "2"});
  auto ps = start_two_ps_tasks(c);
  ASSERT_EQ(c.wait_all(300s), (std::vector<int>{0, 0})) << all_logs(c, ps);
  for (auto& p : ps) ASSERT_EQ(p->wait_for(10s), 0) << all_logs(c, ps);
  const std::string out = c.coordinator->output();
  const Accounting a = accounting(out);
  EXPECT_EQ(a.pushed, a.applied) << out;
  EXPECT_EQ(a.steps, 400) << out;
  EXPECT_EQ(a.steps, a.sync + a.applied) << "global steps are not the updates applied: " << out;
  EXPECT_GT(a.sync, 0) << out;
  EXPECT_GT(a.applied, 0) << out;
  const std::string n = std::to_string(a.applied);
  EXPECT_NE(out.find(n + " applied by the server (by shard: " + n + ", " + n + ")"), std::string::npos) << out;
  for (auto& p : ps)
    EXPECT_NE(p->output().find("the job is done (" + n + " pushes applied here; per push on this server: "),
              std::string::npos)
        << p->output();
  EXPECT_NE(out.find("the 2 replicas agree bitwise"), std::string::npos) << out;
}

// "rolled back to step S (LABEL) from step T" -> S, or -1.
long long rolled_back_to(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(rolled back to step (\d+) \()"))) return -1;
  return std::stoll(m[1]);
}

// "ps task (node K)" -> K, from a ps task's log.
std::string ps_node_index(const Process& p) {
  std::smatch m;
  const std::string out = p.output();
  if (!std::regex_search(out, m, std::regex(R"(as ps task \(node (\d+)\))"))) return "";
  return m[1];
}

// A ps task killed mid-run in async: the shards it hosted are gone with
// their state, and the other's are no longer of the same state. Within
// seconds the coordinator places both shards on the ps task left and rolls
// every replica and shard back to the newest checkpoint (never a mix of old
// and new parameters); the job then does the rest of its steps and every
// process but the killed one ends 0. The counts in the summary start at the
// checkpoint: each push after it applied once. With a cluster secret: the
// new push links are sealed as the first were.
TEST(PsTasks, AKilledPsTaskRollsTheJobBackToTheNewestCheckpointAndItGoesOnOnTheOtherPsTask) {
  const std::string checkpoints = temp_dir("ps-kill-ckpt");
  const std::string job = std::string(kMlpJob) + "epochs = 1\nsteps = 400\nbatch = 32\nmode = \"async\"\n" +
                          "checkpoint_every = 50\ncheckpoint_dir = \"" + checkpoints + "\"\n";
  const std::vector<std::string> env{"TROUPE_SECRET=ps-kill-test-secret-0123456789abcdef"};
  Cluster c("ps-kill", job, 1, {"--ps-tasks", "2"}, env);
  auto ps = start_two_ps_tasks(c, env);
  ASSERT_TRUE(wait_for_step(*c.coordinator, 120, 180s)) << all_logs(c, ps);
  ps[1]->signal(SIGKILL);
  EXPECT_TRUE(wait_for_text(*c.coordinator, "rolled back to step", 20s)) << all_logs(c, ps);
  ASSERT_EQ(c.wait_all(300s), (std::vector<int>{0, 0})) << all_logs(c, ps);
  EXPECT_EQ(ps[0]->wait_for(15s), 0) << all_logs(c, ps);
  const std::string out = c.coordinator->output();
  const long long back = rolled_back_to(out);
  EXPECT_GE(back, 100) << out;
  EXPECT_LT(back, 400) << out;
  EXPECT_EQ(back % 50, 0) << "not a checkpoint's step: " << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(lost node \d+ \(ps/)"))) << out;
  EXPECT_NE(out.find("parameter server placed anew on 1 ps task(s): shard(s) 0,1 on node"), std::string::npos) << out;
  EXPECT_NE(ps[0]->output().find("placed anew: hosting shard(s) 0,1 (235152 floats) for 2 replica(s); pushes on the "
                                 "data plane, sealed (AES-256-GCM)"),
            std::string::npos)
      << ps[0]->output();
  const Accounting a = accounting(out);
  EXPECT_EQ(a.steps, 400) << out;
  EXPECT_EQ(a.pushed, a.applied) << "a pushed gradient was lost or applied twice: " << out;
  EXPECT_EQ(a.pushed, 400 - back) << out;
  EXPECT_NE(out.find("counted from step " + std::to_string(back)), std::string::npos) << out;
  EXPECT_GE(a.accuracy, 0.7) << out;
}

// In sync mode the replicas hold the state: a ps task killed then loses
// nothing. Its shards are placed on the other ps task at the next step
// boundary, no step is rolled back, and the scheduled switch to async later
// scatters the replicas' state to the shards in their new place.
TEST(PsTasks, AKilledPsTaskInSyncModeLosesNothingAndTheSwitchToAsyncUsesTheNewPlacement) {
  Cluster c("ps-kill-sync",
            std::string(kMlpJob) + "epochs = 1\nsteps = 600\nbatch = 32\nmode = \"sync\"\nswitch = \"400:async\"\n", 1,
            {"--ps-tasks", "2"});
  auto ps = start_two_ps_tasks(c);
  ASSERT_TRUE(wait_for_step(*c.coordinator, 120, 180s)) << all_logs(c, ps);
  ps[1]->signal(SIGKILL);
  ASSERT_EQ(c.wait_all(300s), (std::vector<int>{0, 0})) << all_logs(c, ps);
  EXPECT_EQ(ps[0]->wait_for(15s), 0) << all_logs(c, ps);
  const std::string out = c.coordinator->output();
  EXPECT_NE(out.find("in sync mode the replicas hold the state, so nothing is lost"), std::string::npos) << out;
  EXPECT_EQ(out.find("rolled back"), std::string::npos) << out;
  const Accounting a = accounting(out);
  EXPECT_EQ(a.steps, 600) << out;
  EXPECT_EQ(a.sync, 400) << out;
  EXPECT_EQ(a.pushed, 200) << out;
  EXPECT_EQ(a.applied, 200) << out;
  // Both shards on the one ps task left, each applying every push.
  EXPECT_NE(out.find("200 applied by the server (by shard: 200, 200)"), std::string::npos) << out;
}

// A ps task asked to stop (SIGTERM, as a scheduler preempting it would):
// its shards' state is whole, so at the next step boundary the coordinator
// gathers it (and checkpoints it), places the shards on the other ps task
// and goes on from exactly that state: nothing is lost, the job does all
// its steps, and the leaving task exits with the signal's status.
TEST(PsTasks, APsTaskAskedToStopHasItsShardsMovedAndNothingIsLost) {
  const std::string checkpoints = temp_dir("ps-term-ckpt");
  const std::string job = std::string(kMlpJob) + "epochs = 2\nsteps = 1800\nbatch = 32\nmode = \"async\"\n" +
                          "checkpoint_every = 100000\ncheckpoint_dir = \"" + checkpoints + "\"\n";
  Cluster c("ps-term", job, 1, {"--ps-tasks", "2"});
  auto ps = start_two_ps_tasks(c);
  ASSERT_TRUE(wait_for_step(*c.coordinator, 120, 180s)) << all_logs(c, ps);
  ps[1]->signal(SIGTERM);
  EXPECT_EQ(ps[1]->wait_for(20s), 128 + SIGTERM) << all_logs(c, ps);
  ASSERT_EQ(c.wait_all(300s), (std::vector<int>{0, 0})) << all_logs(c, ps);
  EXPECT_EQ(ps[0]->wait_for(15s), 0) << all_logs(c, ps);
  const std::string out = c.coordinator->output();
  EXPECT_NE(out.find("leaves at the next step boundary (stopped by signal " + std::to_string(SIGTERM) + ")"),
            std::string::npos)
      << out;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m, std::regex(R"(the parameter-server shards moved at step (\d+): .*nothing lost)")))
      << out;
  const long long moved = std::stoll(m[1]);
  EXPECT_GE(moved, 120) << out;
  EXPECT_LT(moved, 1800) << out;
  EXPECT_EQ(out.find("rolled back"), std::string::npos) << out;
  // The gathered state was checkpointed at that step.
  EXPECT_TRUE(std::filesystem::exists(checkpoint::Directory(checkpoints, 0).path_for_step(moved))) << out;
  const Accounting a = accounting(out);
  EXPECT_EQ(a.steps, 1800) << out;
  EXPECT_EQ(a.pushed, a.applied) << out;
  EXPECT_EQ(a.pushed, 1800 - moved) << out;
  EXPECT_NE(ps[1]->output().find("asking the coordinator to move this task's shards"), std::string::npos)
      << ps[1]->output();
  EXPECT_NE(ps[1]->output().find("left the job: its shards moved"), std::string::npos) << ps[1]->output();
  // It learned (async runs of this job without the fault end at 0.80 to
  // 0.85: the order of the pushes varies).
  EXPECT_GE(a.accuracy, 0.75) << out;
}

// ps tasks coming and going on one running job, without a checkpoint
// directory: a ps task that joins after the start stands by; when the one
// hosting the shard is killed, the spare takes it and the job rolls back to
// its start (the only consistent state it has); `troupe ctl drain` of that
// task, the last one, moves its state out and training pauses until a new
// ps task joins, which takes the shard with the state gathered at the drain
// (nothing lost there). Then Ctrl-C stops the job and every process ends.
TEST(PsTasks, ASpareTakesOverALostPsTaskAndWithNoneLeftTrainingWaitsForANewOne) {
  const int control_port = troupe::testing::free_loopback_port();
  Cluster c("ps-spare", std::string(kMlpJob) + "epochs = 50\nbatch = 32\nmode = \"async\"\n", 1,
            {"--ps-tasks", "1", "--control", "127.0.0.1:" + std::to_string(control_port)});
  std::vector<std::unique_ptr<Process>> ps;
  ps.push_back(start_ps_task(c, 0));
  ASSERT_TRUE(wait_for_step(*c.coordinator, 20, 180s)) << all_logs(c, ps);
  ps.push_back(start_ps_task(c, 1));
  ASSERT_TRUE(wait_for_text(*ps[1], "standing by", 30s)) << all_logs(c, ps);
  EXPECT_TRUE(wait_for_text(*c.coordinator, "joined: a spare", 10s)) << all_logs(c, ps);

  ps[0]->signal(SIGKILL);
  ASSERT_TRUE(wait_for_text(*c.coordinator, "rolled back to step 0 (the job's start", 30s)) << all_logs(c, ps);
  EXPECT_TRUE(wait_for_text(*ps[1], "placed anew: hosting shard(s) 0", 10s)) << all_logs(c, ps);

  // The last ps task drained: 200, it leaves at a step boundary, and
  // training pauses without a ps task.
  const std::string index = ps_node_index(*ps[1]);
  ASSERT_FALSE(index.empty()) << ps[1]->output();
  Process drain({TROUPE_BINARY, "ctl", "--at", "127.0.0.1:" + std::to_string(control_port), "drain", index},
                c.dir + "/drain-ps.log");
  EXPECT_EQ(drain.wait_for(30s), 0) << drain.output();
  EXPECT_NE(drain.output().find("leaves at the next step boundary: its shards move"), std::string::npos)
      << drain.output();
  EXPECT_EQ(ps[1]->wait_for(30s), 0) << all_logs(c, ps);
  ASSERT_TRUE(wait_for_text(*c.coordinator, "training pauses: no ps task is left", 30s)) << all_logs(c, ps);
  const auto paused = troupe::testing::http_get(control_port, "/status");
  EXPECT_NE(paused.body.find("paused: no ps task is left"), std::string::npos) << paused.body;

  ps.push_back(start_ps_task(c, 2));
  ASSERT_TRUE(wait_for_text(*c.coordinator, "training goes on: the shards are placed on a ps task again", 60s))
      << all_logs(c, ps);
  EXPECT_TRUE(wait_for_text(*c.coordinator, "the parameter-server shards moved at step", 10s)) << all_logs(c, ps);
  EXPECT_TRUE(wait_for_text(*ps[2], "hosting shard(s) 0", 10s)) << all_logs(c, ps);
  // Training goes on there: the step advances.
  std::smatch m;
  std::string moved_log = c.coordinator->output();
  ASSERT_TRUE(std::regex_search(moved_log, m, std::regex(R"(the parameter-server shards moved at step (\d+))")));
  const long long moved = std::stoll(m[1]);
  bool advanced = false;
  for (int i = 0; i < 300 && !advanced; ++i) {
    const auto r = troupe::testing::http_get(control_port, "/status");
    std::smatch s;
    if (std::regex_search(r.body, s, std::regex(R"("step":(\d+))")) && std::stoll(s[1]) > moved + 20) advanced = true;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(advanced) << all_logs(c, ps);
  // /metrics counts both placements by what they restored.
  const auto metrics = troupe::testing::http_get(control_port, "/metrics");
  EXPECT_EQ(series_sum(metrics.body, R"(troupe_ps_placements_total\{restored="rollback"\})"), 1) << metrics.body;
  EXPECT_EQ(series_sum(metrics.body, R"(troupe_ps_placements_total\{restored="gathered"\})"), 1) << metrics.body;

  c.coordinator->signal(SIGINT);
  EXPECT_NE(c.coordinator->wait_for(30s), -1) << all_logs(c, ps);
  EXPECT_NE(c.workers[0]->wait_for(15s), -1) << all_logs(c, ps);
  EXPECT_NE(ps[2]->wait_for(15s), -1) << all_logs(c, ps);
}

// Coordinator loss: a ps task, like a worker, does not exit; it keeps
// trying to join the same address (--rejoin-timeout), and a coordinator
// restarted there with --resume places the shards on it again, scatters the
// newest checkpoint's state to them and finishes the job, without the ps
// task or the worker being restarted.
TEST(PsTasks, APsTaskRejoinsACoordinatorRestartedWithResume) {
  const std::string dir = temp_dir("ps-rejoin");
  const std::string job = write_file(dir, "job.toml",
                                     std::string(kMlpJob) + "epochs = 1\nsteps = 600\nbatch = 32\nmode = \"async\"\n" +
                                         "checkpoint_every = 40\ncheckpoint_dir = \"" + dir + "/ckpt\"\n");
  const std::string address = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
  auto coordinator_args = [&](bool resume) {
    std::vector<std::string> a{TROUPE_BINARY, "node", "--listen",       address, "--job",       job,
                               "--min-nodes", "2",    "--ps-tasks",     "1",     "--devices",   "cpu:0",
                               "--timeout",   "30",   "--wait-timeout", "60",    "--log-every", "20"};
    if (resume) a.push_back("--resume");
    return a;
  };
  auto first = std::make_unique<Process>(coordinator_args(false), dir + "/coordinator1.log");
  Process worker({TROUPE_BINARY, "node", "--join", address, "--devices", "cpu:0", "--timeout", "30"},
                 dir + "/worker.log");
  Process ps({TROUPE_BINARY, "node", "--ps", "--join", address, "--timeout", "30"}, dir + "/ps.log");
  ASSERT_TRUE(first->wait_for_output("(step 80)", 120s)) << first->output() << ps.output();
  first->signal(SIGKILL);
  ASSERT_EQ(first->wait_for(10s), 128 + SIGKILL);
  ASSERT_TRUE(ps.wait_for_output("rejoining " + address, 10s)) << ps.output();
  EXPECT_TRUE(ps.running()) << "the ps task exited after losing its coordinator:\n" << ps.output();
  std::this_thread::sleep_for(1s);
  Process second(coordinator_args(true), dir + "/coordinator2.log");
  const int coordinator_status = second.wait_for(180s);
  const int worker_status = worker.wait_for(30s);
  const int ps_status = ps.wait_for(30s);
  const std::string logs = "--- first coordinator:\n" + first->output() + "--- restarted coordinator:\n" +
                           second.output() + "--- worker:\n" + worker.output() + "--- ps task:\n" + ps.output();
  EXPECT_EQ(coordinator_status, 0) << logs;
  EXPECT_EQ(worker_status, 0) << logs;
  EXPECT_EQ(ps_status, 0) << logs;
  EXPECT_NE(second.output().find("resumed from"), std::string::npos) << logs;
  EXPECT_NE(second.output().find("starting with 2 node(s), 2 replica(s) and 1 ps task(s)"), std::string::npos) << logs;
  const Accounting a = accounting(second.output());
  EXPECT_EQ(a.steps, 600) << logs;
  EXPECT_EQ(a.pushed, a.applied) << logs;
  EXPECT_NE(ps.output().find("the job is done"), std::string::npos) << logs;
}

// Weight decay on ps tasks applies where it does on one host: to the
// tensors of rank >= 2, not to biases or BatchNorm's gamma and beta. The
// coordinator sends each ps task its shards' part of the mask, so one
// replica pushing to a ps task trains as `troupe train --mode async` on
// one device, and not as --decay-all (which decays gamma from 1 down).
TEST(PsTasks, WeightDecayOnAPsTaskSparesBiasesAndBatchNormAsOnOneHost) {
  const std::string dir = temp_dir("ps-decay");
  const std::string spec = write_file(dir, "bn.spec",
                                      "name bn_cnn\ninput 1 28 28\nconv2d filters=4 kernel=3 bias=false\nbatchnorm\n"
                                      "relu\nmaxpool2d pool=2\nflatten\ndense units=10\n");
  const std::string settings = "steps = 40\nbatch = 32\nlr = 0.05\nmode = \"async\"\n";
  const std::string cluster_ckpt = dir + "/cluster", local_ckpt = dir + "/local", all_ckpt = dir + "/all";
  {
    Cluster c("ps-decay-job",
              "model = \"" + spec + "\"\ndata = \"fashion-mnist\"\nseed = 5\n" + settings + "checkpoint_dir = \"" +
                  cluster_ckpt + "\"\n[optimizer]\nname = \"sgd\"\nweight_decay = 0.05\n",
              0, {"--ps-tasks", "1"}, {}, 1);
    std::vector<std::unique_ptr<Process>> ps;
    ps.push_back(start_ps_task(c, 0));
    ASSERT_EQ(c.wait_all(120s), (std::vector<int>{0})) << all_logs(c, ps);
    EXPECT_EQ(ps[0]->wait_for(10s), 0) << all_logs(c, ps);
    EXPECT_EQ(ps[0]->output().find("applies to every parameter"), std::string::npos) << all_logs(c, ps);
  }
  const std::string common = std::string(TROUPE_BINARY) + " train --model " + spec +
                             " --devices cpu:0 --mode async --seed 5 --steps 40 --batch 32 --lr 0.05 --optimizer sgd "
                             "--weight-decay 0.05 --log-every 0 --checkpoint-dir ";
  ASSERT_EQ(std::system((common + local_ckpt + " > " + dir + "/local.log 2>&1").c_str()), 0);
  ASSERT_EQ(std::system((common + all_ckpt + " --decay-all > " + dir + "/all.log 2>&1").c_str()), 0);
  auto parameters = [](const std::string& folder) {
    auto latest = checkpoint::Directory(folder, 0).latest();
    return latest ? checkpoint::read(*latest).parameters : std::vector<float>{};
  };
  const std::vector<float> cluster = parameters(cluster_ckpt), local = parameters(local_ckpt),
                           all = parameters(all_ckpt);
  ASSERT_FALSE(cluster.empty());
  ASSERT_EQ(cluster.size(), local.size());
  const double masked = rel_diff(cluster, local), unmasked = rel_diff(cluster, all);
  std::printf("ps task against one host: %.3g; against --decay-all: %.3g\n", masked, unmasked);
  EXPECT_LT(masked, 1e-6);
  EXPECT_GT(unmasked, 100 * masked + 1e-6);
}

// A coordinator told to wait for ps tasks that never come stops at
// --wait-timeout with the reason; so does a job whose last ps task is lost
// and none joins within --wait-timeout (with no checkpoint written then:
// the shards' state is lost, and the newest checkpoint is the one before),
// which then resumes on 2 new ps tasks (2 shards from a checkpoint that 1
// wrote) and does exactly the rest.
TEST(PsTasks, WithoutAPsTaskTheJobStopsAtTheWaitTimeoutAndTheNewestCheckpointResumesOnOtherPsTasks) {
  {
    Cluster c("ps-missing", std::string(kMlpJob) + "steps = 20\nbatch = 32\nmode = \"async\"\n", 0,
              {"--ps-tasks", "1", "--wait-timeout", "3"}, {}, 1);
    EXPECT_EQ(c.coordinator->wait_for(30s), 1) << c.logs();
    EXPECT_NE(c.coordinator->output().find("only 0 of 1 ps tasks (--ps-tasks) had joined after 3 s"), std::string::npos)
        << c.logs();
  }
  const std::string checkpoints = temp_dir("ps-gone-ckpt");
  const std::string job = std::string(kMlpJob) + "epochs = 1\nsteps = 500\nbatch = 32\nmode = \"async\"\n" +
                          "checkpoint_every = 50\ncheckpoint_dir = \"" + checkpoints + "\"\n";
  std::uint64_t resumed_at = 0;
  {
    // 10 s, not 3: the wait also bounds the start, where the worker loads
    // Fashion-MNIST; on a loaded CI machine that once took over 3 s.
    Cluster c("ps-gone", job, 1, {"--ps-tasks", "1", "--wait-timeout", "10"});
    std::vector<std::unique_ptr<Process>> ps;
    ps.push_back(start_ps_task(c, 0));
    ASSERT_TRUE(wait_for_step(*c.coordinator, 120, 180s)) << all_logs(c, ps);
    ps[0]->signal(SIGKILL);
    EXPECT_EQ(c.coordinator->wait_for(40s), 1) << all_logs(c, ps);
    EXPECT_EQ(c.workers[0]->wait_for(15s), 1) << all_logs(c, ps);
    const std::string out = c.coordinator->output();
    EXPECT_NE(out.find("no ps task is left to host the parameter-server shards"), std::string::npos) << out;
    EXPECT_NE(out.find("for 10 s (--wait-timeout): the job stops"), std::string::npos) << out;
    EXPECT_NE(out.find("no checkpoint before stopping"), std::string::npos) << out;
    auto latest = checkpoint::Directory(checkpoints, 0).latest();
    ASSERT_TRUE(latest.has_value()) << out;
    resumed_at = checkpoint::read(*latest).position.global_step;
    EXPECT_GE(resumed_at, 100u) << out;
    EXPECT_LT(resumed_at, 500u) << out;
  }
  expect_resume_does_the_rest("ps-gone-resume", job, 500, resumed_at);
}

}  // namespace
}  // namespace troupe
