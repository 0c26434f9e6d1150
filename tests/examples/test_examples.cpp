// Every example in examples/ as a user runs it: a real process in its short
// form, its output checked; and bad arguments, which must fail with exit
// status 2 and a one-line error naming what was wrong.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "tests/support/ports.hpp"

namespace {

namespace fs = std::filesystem;

struct Result {
  int status;
  std::string output;
};

Result run(const std::string& binary, const std::string& args) {
  const std::string cmd = binary + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

std::string temp(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("troupe_examples_" + name);
  fs::remove_all(p);
  return p.string();
}

int lines(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

// The number after `label` in `text` (e.g. "test accuracy 0.81"), or -1.
double number_after(const std::string& text, const std::string& label) {
  const std::size_t at = text.find(label);
  if (at == std::string::npos) return -1;
  return std::atof(text.c_str() + at + label.size());
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "output was:\n" << (haystack)

const char* const kExamples[] = {EXAMPLE_MIRRORED_FASHION_MNIST, EXAMPLE_CUSTOM_LOOP, EXAMPLE_TEXT_CNN,
                                 EXAMPLE_MODEL_PARALLEL, EXAMPLE_MODE_SWITCH_EXPERIMENT};

TEST(Examples, MirroredFashionMnistShort) {
  const std::string dir = temp("mirrored");
  Result r = run(EXAMPLE_MIRRORED_FASHION_MNIST, "--short --devices cpu:0,cpu:1 --dir " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "Number of devices: 2");
  EXPECT_CONTAINS(r.output, "64 per replica x 2 replicas = 128 global");
  // PrintLR: 1e-3 for epochs 1-3, 1e-4 for 4-7, 1e-5 from 8 (1-based, as the tutorial prints).
  EXPECT_CONTAINS(r.output, "Learning rate for epoch 1 is 0.001\n");
  EXPECT_CONTAINS(r.output, "Learning rate for epoch 3 is 0.001\n");
  EXPECT_CONTAINS(r.output, "Learning rate for epoch 4 is 0.0001\n");
  EXPECT_CONTAINS(r.output, "Learning rate for epoch 7 is 0.0001\n");
  EXPECT_CONTAINS(r.output, "Learning rate for epoch 8 is 1e-05\n");
  EXPECT_CONTAINS(r.output, "same accuracy after fit, from the latest checkpoint and after reloading");
  EXPECT_EQ(lines(dir + "/metrics.csv"), 1 + 8);  // header + one row per epoch
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(dir + "/training_checkpoints"))
    checkpoints += e.path().extension() == ".troupe";
  EXPECT_EQ(checkpoints, 8);  // one per epoch, all kept
  EXPECT_TRUE(fs::exists(dir + "/saved_model.troupe"));
  EXPECT_GT(number_after(r.output, "same accuracy after fit, from the latest checkpoint and after reloading: "), 0.6);
}

TEST(Examples, CustomLoopShort) {
  Result r = run(EXAMPLE_CUSTOM_LOOP, "--short --devices cpu:0,cpu:1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "batch 64 per replica, 128 global");
  EXPECT_CONTAINS(r.output, "Epoch 1, Loss: ");
  EXPECT_CONTAINS(r.output, "(30 steps)");
  EXPECT_CONTAINS(r.output, "replicas identical after training: yes (2 replicas");
  const double loss = number_after(r.output, "Epoch 1, Loss: ");
  EXPECT_GT(loss, 0.1);
  EXPECT_LT(loss, 2.3);  // below ln(10), the loss of a uniform guess
  EXPECT_GT(number_after(r.output, "Test Accuracy: "), 50.0);
}

TEST(Examples, TextCnnShort) {
  Result r = run(EXAMPLE_TEXT_CNN, "--short");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "embedding vocab=");
  EXPECT_CONTAINS(r.output, "conv1d filters=64 kernel=5");
  EXPECT_CONTAINS(r.output, "maxpool1d pool=2");
  EXPECT_CONTAINS(r.output, "devices: cpu:0, cpu:1");
  EXPECT_CONTAINS(r.output, "text_cnn: 20 steps");
  // Better than chance (1/45) after 20 steps, and top-5 is reported.
  EXPECT_GT(number_after(r.output, "; test accuracy "), 2.0 / 45.0);
  EXPECT_GT(number_after(r.output, ", top-5 "), 5.0 / 45.0);
}

TEST(Examples, ModelParallelShort) {
  Result r = run(EXAMPLE_MODEL_PARALLEL, "--short --devices cpu:0,cpu:1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "head A on cpu:0");
  EXPECT_CONTAINS(r.output, "head B on cpu:1");
  EXPECT_CONTAINS(r.output, "check 1, against one device (cpu:0)");
  EXPECT_LT(number_after(r.output, "largest gradient difference "), 1e-4);
  EXPECT_LT(number_after(r.output, "largest relative error "), 1e-2);
  EXPECT_CONTAINS(r.output, "model_parallel: 60 steps");
  EXPECT_GT(number_after(r.output, "test accuracy "), 0.6);
}

TEST(Examples, ModeSwitchExperimentShort) {
  const std::string dir = temp("modes");
  Result r = run(EXAMPLE_MODE_SWITCH_EXPERIMENT, "--short --dir " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* row : {"| sync |", "| async |", "| ssp:2 |", "| sync->async->sync |"})
    EXPECT_CONTAINS(r.output, row);
  // Back to sync at the first step boundary from step 63 on where every
  // replica has done the same number of steps (the slower one catches up
  // in async first), so the exact step depends on timing.
  EXPECT_CONTAINS(r.output, "sync@0, async@21, sync@");
  EXPECT_GE(number_after(r.output, "sync@0, async@21, sync@"), 63);
  for (const char* file : {"sync", "async", "ssp2", "sync_async_sync"}) {
    const std::string csv = dir + "/" + file + ".csv";
    std::ifstream in(csv);
    std::string header;
    std::getline(in, header);
    EXPECT_EQ(header, "run,mode,wall_s,train_s,step,examples,epoch,train_loss,test_loss,test_accuracy") << csv;
    EXPECT_GE(lines(csv), 1 + 4) << csv;  // evaluations every 8 steps and at epoch ends
  }
  EXPECT_TRUE(fs::exists(dir + "/table.md"));
  const bool gnuplot = std::system("command -v gnuplot > /dev/null 2>&1") == 0;
  if (gnuplot) {
    EXPECT_TRUE(fs::exists(dir + "/accuracy.png")) << r.output;
  } else {
    EXPECT_CONTAINS(r.output, "gnuplot is not installed");
  }
  // Each run's TensorBoard events, read by scripts/tensorboard_plot.py (its
  // own reader: TFRecord CRCs, Event protos): the last test accuracy is
  // the CSV's last one.
  if (!gnuplot) return;
  std::string runs;
  for (const char* file : {"sync", "async", "ssp2", "sync_async_sync"}) runs += " " + dir + "/tensorboard/" + file;
  Result plot =
      run("/usr/bin/python3 " TROUPE_SOURCE_DIR "/scripts/tensorboard_plot.py", dir + "/tb.png test/accuracy" + runs);
  ASSERT_EQ(plot.status, 0) << plot.output;
  EXPECT_GT(fs::file_size(dir + "/tb.png"), 2000u);
  for (const char* file : {"sync", "async", "ssp2", "sync_async_sync"}) {
    std::ifstream in(dir + "/" + file + ".csv");
    std::string line, last;
    while (std::getline(in, line))
      if (!line.empty()) last = line;
    const double csv_accuracy = std::atof(last.substr(last.rfind(',') + 1).c_str());
    EXPECT_GE(number_after(plot.output, std::string(file) + ": "), 4) << plot.output;  // "N points of ..."
    const std::string prefix = std::string(file) + ": ";
    const std::size_t at = plot.output.find(prefix);
    ASSERT_NE(at, std::string::npos) << plot.output;
    const double last_value = number_after(plot.output.substr(at), "the last ");
    EXPECT_NEAR(last_value, csv_accuracy, 1e-4) << file << "\n" << plot.output;
  }
}

TEST(Examples, MultiworkerShort) {
  // --deadline below the test's own timeout, so that a hang ends with the
  // workers' logs printed instead of a test killed without output.
  Result r = run(EXAMPLE_MULTIWORKER, "--short --deadline 200");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "total batch 64 = 32 x 2 workers");
  EXPECT_CONTAINS(r.output, "[worker 0] worker 0 (chief): 2 workers; total batch 64 = 32 x 2 workers");
  EXPECT_CONTAINS(r.output, "[worker 1] worker 1: the job is done (the chief ran it)");
  EXPECT_CONTAINS(r.output, "[worker 0] worker 0 (chief): 30 steps");
  EXPECT_GT(number_after(r.output, "test accuracy "), 0.5);
  EXPECT_CONTAINS(r.output, "multiworker: both workers finished");
}

// A node joins, another is killed: the views go 2 -> 3 -> 2 replicas, the
// coordinator exits 0 with the replicas bitwise equal, and the plot's data
// (test accuracy and world size against time) is written.
TEST(Examples, ElasticJoinThenKillAndThePlotOfAccuracyAndWorldSize) {
  const std::string dir = temp("elastic");
  Result r = run(EXAMPLE_ELASTIC, "--short --dir " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "a third node joins");
  EXPECT_CONTAINS(r.output, "kill -9 of worker 1");
  EXPECT_CONTAINS(r.output, "views (world size 2 -> 3 -> 2)");
  EXPECT_CONTAINS(r.output, "the 2 replicas agree bitwise");
  EXPECT_CONTAINS(r.output, "the survivors go on in a new view");
  EXPECT_GT(number_after(r.output, "final test accuracy "), 0.75);
  EXPECT_GE(lines(dir + "/accuracy.dat"), 4);  // an evaluation every 50 steps
  EXPECT_GE(lines(dir + "/world.dat"), 4);
  EXPECT_TRUE(fs::exists(dir + "/elastic.gp"));
  if (std::system("command -v gnuplot > /dev/null 2>&1") == 0) {
    EXPECT_GT(fs::file_size(dir + "/elastic.png"), 1000u);
  }
  // Bad schedules and arguments: exit 2 with the reason.
  r = run(EXAMPLE_ELASTIC, "--join-at 500 --kill-at 100");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "--kill-at must come after --join-at");
  r = run(EXAMPLE_ELASTIC, "--troupe /no/such/troupe");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "/no/such/troupe");
}

TEST(Examples, PsLinearRegressionKilledAndResumed) {
  const std::string dir = temp("ps");
  Result r = run(EXAMPLE_PS_LINEAR_REGRESSION, "--short --kill-and-resume --deadline 120 --dir " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "killed the chief (SIGKILL) at checkpoint step ");
  EXPECT_GT(number_after(r.output, "killed the chief (SIGKILL) at checkpoint step "), 0);
  EXPECT_CONTAINS(r.output, "chief: checkpoint at step 50: w = ");
  EXPECT_CONTAINS(r.output, "(resumed)");
  // The resumed chief starts past the checkpoint it was killed after, not at step 1.
  EXPECT_GT(number_after(r.output, "[resumed worker 0] chief: first step counted: "), 1);
  EXPECT_CONTAINS(r.output, "[resumed worker 0] chief: 400 steps");
  // TF1's cluster shape with a real ps task: it hosts the shard, the
  // workers push to it, and it is told when the job is done.
  EXPECT_CONTAINS(r.output, "\"ps\":[\"127.0.0.1:");
  EXPECT_CONTAINS(r.output, "[resumed ps 0] troupe node: hosting shard(s) 0 (16 floats) for 2 replica(s)");
  EXPECT_CONTAINS(r.output, "[resumed ps 0] ps task 0: the job is done");
  EXPECT_CONTAINS(r.output, "starting with 2 node(s), 2 replica(s) and 1 ps task(s)");
  const std::size_t at = r.output.find("ps_linear_regression: final checkpoint");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string tail = r.output.substr(at);
  EXPECT_NEAR(number_after(tail, ": w = "), 2.0, 0.1) << r.output;
  EXPECT_NEAR(number_after(tail, "b = "), 0.0, 0.1) << r.output;
}

// The ps task killed mid-run and a new one started in its place, nothing
// else restarted: the chief rolls back to its newest checkpoint, places the
// shard on the new task and finishes the job, where TF1's would stop.
TEST(Examples, PsLinearRegressionSurvivesItsPsTaskKilled) {
  const std::string dir = temp("ps-kill");
  Result r = run(EXAMPLE_PS_LINEAR_REGRESSION, "--short --kill-ps --deadline 120 --dir " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "killed ps task 0 (SIGKILL) after the chief's checkpoint at step ");
  EXPECT_CONTAINS(r.output, "---- killed ps 0 (exit status 137)");
  EXPECT_CONTAINS(r.output, "[worker 0] coordinator: rolled back to step ");
  EXPECT_GE(number_after(r.output, "[worker 0] coordinator: rolled back to step "), 50);
  EXPECT_CONTAINS(r.output, "[ps 0] troupe node: placed anew: hosting shard(s) 0 (16 floats)");
  EXPECT_CONTAINS(r.output, "[ps 0] ps task 0: the job is done");
  EXPECT_CONTAINS(r.output, "[worker 0] chief: 400 steps");
  const std::size_t at = r.output.find("ps_linear_regression: final checkpoint");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string tail = r.output.substr(at);
  EXPECT_NEAR(number_after(tail, ": w = "), 2.0, 0.1) << r.output;
  EXPECT_NEAR(number_after(tail, "b = "), 0.0, 0.1) << r.output;
}

TEST(Examples, ClusterExamplesRefuseBadArguments) {
  for (const char* example : {EXAMPLE_MULTIWORKER, EXAMPLE_PS_LINEAR_REGRESSION}) {
    Result r = run(example, "--workers 127.0.0.1,127.0.0.1:9");
    EXPECT_EQ(r.status, 2) << example << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "cluster.worker[0]");
    r = run(example, "--workers 127.0.0.1:1,127.0.0.1:2 --task 2");
    EXPECT_EQ(r.status, 2) << example << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "index");
    EXPECT_CONTAINS(r.output, "range");
    r = run(example, "--no-such-option");
    EXPECT_EQ(r.status, 2) << example << "\n" << r.output;
    r = run(example, "--help");
    EXPECT_EQ(r.status, 0) << example << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "--short");
  }
  // A port somebody holds: named, with the command that shows who.
  const troupe::testing::HeldPort held;
  ASSERT_GT(held.port, 0);
  const std::string port = std::to_string(held.port);
  for (const char* example : {EXAMPLE_MULTIWORKER, EXAMPLE_PS_LINEAR_REGRESSION}) {
    Result r = run(example, "--short --workers 127.0.0.1:" + port + ",127.0.0.1:1");
    EXPECT_EQ(r.status, 2) << example << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "port " + port + " (127.0.0.1:" + port + ") is in use");
    EXPECT_CONTAINS(r.output, "ss -ltnp 'sport = :" + port + "'");
  }
}

TEST(Examples, BadArgumentsFailWithStatus2AndAMessage) {
  for (const char* example : kExamples) {
    Result r = run(example, "--no-such-option");
    EXPECT_EQ(r.status, 2) << example << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "error: unknown argument '--no-such-option'");
    r = run(example, "--batch 0");
    EXPECT_EQ(r.status, 2) << example << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "error: --batch must be in [");
    r = run(example, "--batch lots");
    EXPECT_EQ(r.status, 2) << example << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "error: --batch must be an integer, got 'lots'");
    r = run(example, "--devices cpu:0,gpu:1");
    EXPECT_EQ(r.status, 2) << example << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "unknown device 'gpu:1'");
    r = run(example, "--seed");
    EXPECT_EQ(r.status, 2) << example << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "error: --seed needs a value");
    r = run(example, "--help");
    EXPECT_EQ(r.status, 0) << example << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "--short");
  }
  Result r = run(EXAMPLE_TEXT_CNN, "--devices cpu:0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "--devices must name exactly 2 devices, got 1");
  r = run(EXAMPLE_MODE_SWITCH_EXPERIMENT, "--model resnet");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "--model must be mlp or cnn, got 'resnet'");
  r = run(EXAMPLE_MODE_SWITCH_EXPERIMENT, "--switch-async 50 --switch-sync 40");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "--switch-sync (40) must come after --switch-async (50)");
  r = run(EXAMPLE_MIRRORED_FASHION_MNIST, "--short --epochs 3");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "--short chooses the epochs itself");
  r = run(EXAMPLE_MODEL_PARALLEL, "--devices cuda:7,cpu:0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "cuda:7 requested, but this machine has");
}

}  // namespace
