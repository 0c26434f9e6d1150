// Resume as a user meets it: `troupe train` on two CPU devices, stopped with
// Ctrl-C (SIGINT) in the middle of an epoch and resumed with --resume, ends
// where an uninterrupted run ends: the same step count and, in sync, the
// same parameters bit for bit. The progress never restarts at step 0 and
// never counts negative steps; a finished job resumed trains nothing.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>

#include "models/checkpoint/checkpoint.hpp"

namespace {

namespace fs = std::filesystem;

std::string temp(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("troupe_resume_cli_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

int run(const std::string& args, const std::string& log) {
  const std::string cmd = std::string(TROUPE_BINARY " ") + args + " > '" + log + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const std::string kJob = "train --devices cpu:0,cpu:1 --model mlp --epochs 1 --batch 64 --log-every 10 --seed 3";

// The newest checkpoint's parameters.
std::vector<float> final_parameters(const std::string& dir, std::uint64_t* step) {
  troupe::checkpoint::Directory d(dir, 0);
  auto path = d.latest();
  EXPECT_TRUE(path.has_value());
  if (!path) return {};
  auto s = troupe::checkpoint::read(*path);
  *step = s.position.global_step;
  return s.parameters;
}

TEST(ResumeCli, CtrlCMidEpochThenResumeEqualsAnUninterruptedRun) {
  const std::string dir = temp("sigint");
  const std::string log1 = dir + "/first.log";
  // Start in the background and interrupt once it has logged step 100.
  const std::string start = std::string("sh -c '") + TROUPE_BINARY + " " + kJob + " --checkpoint-dir " + dir +
                            "/ckpt > " + log1 + " 2>&1 & echo $!'";
  FILE* p = popen(start.c_str(), "r");
  ASSERT_NE(p, nullptr);
  long pid = 0;
  ASSERT_EQ(std::fscanf(p, "%ld", &pid), 1);
  pclose(p);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool interrupted = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (slurp(log1).find("step 100/") != std::string::npos) {
      ::kill(static_cast<pid_t>(pid), SIGINT);
      interrupted = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(interrupted) << slurp(log1);
  while (::kill(static_cast<pid_t>(pid), 0) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(::kill(static_cast<pid_t>(pid), 0), 0) << "troupe did not stop after SIGINT";
  const std::string first = slurp(log1);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first, m, std::regex("checkpoint: \\S+ \\(step (\\d+)\\)"))) << first;
  const int stopped_at = std::stoi(m[1]);
  ASSERT_GT(stopped_at, 0);
  ASSERT_LT(stopped_at, 468) << "the run was not stopped in the middle of the epoch";

  const std::string log2 = dir + "/second.log";
  ASSERT_EQ(run(kJob + " --checkpoint-dir " + dir + "/ckpt --resume --summary-json " + dir + "/s.json", log2), 0)
      << slurp(log2);
  const std::string second = slurp(log2);
  EXPECT_EQ(second.find("step -"), std::string::npos) << second;
  EXPECT_EQ(second.find("step 10/468"), std::string::npos) << "the progress restarted at 0:\n" << second;
  EXPECT_NE(slurp(dir + "/s.json").find("\"steps\": 468"), std::string::npos) << slurp(dir + "/s.json");

  const std::string log3 = dir + "/whole.log";
  ASSERT_EQ(run(kJob + " --checkpoint-dir " + dir + "/whole", log3), 0) << slurp(log3);
  std::uint64_t resumed_step = 0, whole_step = 0;
  const std::vector<float> resumed = final_parameters(dir + "/ckpt", &resumed_step);
  const std::vector<float> whole = final_parameters(dir + "/whole", &whole_step);
  EXPECT_EQ(resumed_step, 468u);
  EXPECT_EQ(whole_step, 468u);
  EXPECT_TRUE(resumed == whole) << "resumed parameters differ from an uninterrupted run";

  // Resuming the finished job trains nothing and says so.
  const std::string log4 = dir + "/again.log";
  EXPECT_EQ(run(kJob + " --checkpoint-dir " + dir + "/ckpt --resume", log4), 0) << slurp(log4);
  EXPECT_NE(slurp(log4).find("nothing to train"), std::string::npos) << slurp(log4);
  EXPECT_EQ(slurp(log4).find("epoch 2/1"), std::string::npos) << slurp(log4);
}

TEST(ResumeCli, ResumeWithoutACheckpointIsRefused) {
  const std::string dir = temp("none");
  const std::string log = dir + "/log";
  EXPECT_EQ(run(kJob + " --steps 5 --checkpoint-dir " + dir + "/ckpt --resume", log), 2) << slurp(log);
  EXPECT_NE(slurp(log).find("--resume-or-start"), std::string::npos) << slurp(log);
  EXPECT_EQ(run(kJob + " --steps 5 --checkpoint-dir " + dir + "/ckpt --resume --resume-or-start", log), 0)
      << slurp(log);
}

TEST(ResumeCli, ADivergedRunFailsAndNeverScoresAsAccurate) {
  const std::string dir = temp("nan");
  const std::string log = dir + "/log";
  const int status =
      run("train --devices cpu:0,cpu:1 --model mlp --steps 50 --optimizer sgd --lr 1e6 --checkpoint-dir " + dir +
              "/ckpt --summary-json " + dir + "/s.json",
          log);
  const std::string out = slurp(log);
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("not finite"), std::string::npos) << out;
  EXPECT_EQ(out.find("test accuracy 1.0000"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir + "/s.json")) << "a diverged run wrote a summary";
  // The single-device trainer too.
  const int single = run("train --devices cpu:0 --model mlp --steps 50 --optimizer sgd --lr 1e6", log);
  EXPECT_EQ(single, 1) << slurp(log);
  EXPECT_NE(slurp(log).find("not finite"), std::string::npos) << slurp(log);
}

// Every metrics line a diverging run writes parses as JSON (step rows carry
// no accuracy, and the loss may be huge or non-finite: null, never nan).
TEST(ResumeCli, ADivergedRunsMetricsLinesAllParse) {
  const std::string dir = temp("nan-jsonl");
  const std::string log = dir + "/log";
  const int status =
      run("train --devices cpu:0,cpu:1 --model mlp --steps 50 --optimizer sgd --lr 1e6 --log-every 1 "
          "--metrics " +
              dir + "/m.jsonl",
          log);
  EXPECT_EQ(status, 1) << slurp(log);
  EXPECT_NE(slurp(log).find("not finite"), std::string::npos) << slurp(log);
  std::ifstream in(dir + "/m.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    nlohmann::json row;
    ASSERT_NO_THROW(row = nlohmann::json::parse(line)) << "line " << lines << ": " << line;
    EXPECT_EQ(row["kind"], "step") << line;
    // The epoch's training accuracy so far (a step row carries it now), or
    // null where it is not a number.
    EXPECT_TRUE(row["accuracy"].is_null() ||
                (row["accuracy"].is_number() && row["accuracy"] >= 0.0 && row["accuracy"] <= 1.0))
        << line;
    EXPECT_TRUE(row["loss"].is_null() || row["loss"].is_number()) << line;
  }
  EXPECT_GE(lines, 1) << "no metrics line before the run stopped: " << slurp(log);
}

}  // namespace
