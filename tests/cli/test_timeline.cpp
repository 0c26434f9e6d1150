// --timeline: a Chrome trace-event file of every replica's steps,
// read back with nlohmann-json as Perfetto would read it, from real runs of
// the troupe binary; and the recorder itself (util/timeline.hpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/cluster/process.hpp"
#include "tests/support/ports.hpp"
#include "util/timeline.hpp"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using troupe::actors::Timeline;
using troupe::testing::Process;

std::string scratch(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("troupe_timeline_" + std::to_string(::getpid())) / name;
  fs::create_directories(p.parent_path());
  fs::remove(p);
  return p.string();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);  // throws on anything Perfetto would refuse as JSON
}

// Runs `troupe ARGS`, returns its output; the exit status must be 0.
std::string train(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv{TROUPE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p(argv, log);
  EXPECT_EQ(p.wait_for(240s), 0) << p.output();
  return p.output();
}

struct Span {
  std::string name;
  double ts, dur;
};

// Spans by (track, step), in the order of their start.
std::map<std::pair<int, std::int64_t>, std::vector<Span>> spans_of(const nlohmann::json& trace) {
  std::map<std::pair<int, std::int64_t>, std::vector<Span>> out;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    out[{e.at("tid").get<int>(), e.at("args").at("step").get<std::int64_t>()}].push_back(
        Span{e.at("name").get<std::string>(), e.at("ts").get<double>(), e.at("dur").get<double>()});
  }
  for (auto& [key, spans] : out)
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.ts < b.ts; });
  return out;
}

std::vector<std::string> names(const std::vector<Span>& spans) {
  std::vector<std::string> out;
  for (const auto& s : spans) out.push_back(s.name);
  return out;
}

TEST(Timeline, SyncStepsOfEveryReplicaInTheWindowInTheirOrder) {
  const std::string file = scratch("sync.json");
  const std::string out = train({"train", "--model", "mlp", "--devices", "cpu:0,cpu:1", "--steps", "40", "--timeline",
                                 file, "--timeline-steps", "5:24"},
                                scratch("sync.log"));
  EXPECT_NE(out.find("timeline: " + file + " (steps 5 to 24"), std::string::npos) << out;
  const nlohmann::json trace = read_json(file);
  const auto spans = spans_of(trace);
  std::set<int> tracks;
  for (const auto& [key, s] : spans) {
    tracks.insert(key.first);
    EXPECT_GE(key.second, 5);
    EXPECT_LE(key.second, 24);
    // One step of one replica: its phases in order, none overlapping the next.
    EXPECT_EQ(names(s), (std::vector<std::string>{"data wait", "forward", "backward", "all-reduce", "optimizer"}))
        << "replica " << key.first << ", step " << key.second;
    for (std::size_t i = 0; i + 1 < s.size(); ++i) EXPECT_LE(s[i].ts + s[i].dur, s[i + 1].ts + 1.0) << s[i].name;
    for (const auto& x : s) EXPECT_GE(x.dur, 0.0);
  }
  EXPECT_EQ(tracks, (std::set<int>{0, 1}));
  EXPECT_EQ(spans.size(), 2u * 20u);  // 2 replicas x steps 5..24
  // Named tracks and process, and the evaluation at the end as an instant.
  std::set<std::string> thread_names;
  bool evaluation = false;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      thread_names.insert(e.at("args").at("name").get<std::string>());
    if (e.at("ph") == "i" && e.at("name") == "evaluation") {
      evaluation = true;
      EXPECT_NE(e.at("args").at("what").get<std::string>().find("test accuracy"), std::string::npos) << e;
    }
  }
  EXPECT_TRUE(thread_names.count("replica 0 (cpu:0)")) << trace.dump();
  EXPECT_TRUE(thread_names.count("replica 1 (cpu:1)"));
  EXPECT_TRUE(evaluation);
}

TEST(Timeline, AsyncStepsPushAndPullAndAModeSwitchIsAnInstant) {
  const std::string file = scratch("async.json");
  train({"train", "--model", "mlp", "--devices", "cpu:0,cpu:1", "--steps", "60", "--mode", "sync", "--switch",
         "20:async", "--timeline", file, "--timeline-steps", "1:60"},
        scratch("async.log"));
  const nlohmann::json trace = read_json(file);
  std::map<std::string, int> count;
  std::string switched;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "X") ++count[e.at("name").get<std::string>()];
    if (e.at("ph") == "i" && e.at("name") == "mode switch") switched = e.at("args").at("what").get<std::string>();
  }
  EXPECT_EQ(switched, "sync -> async");
  EXPECT_GT(count["push"], 0);
  EXPECT_EQ(count["push"], count["pull"]);
  EXPECT_GT(count["all-reduce"], 0);
  // Every replica waited for its grant at the switch's boundary at least once.
  EXPECT_GT(count["grant wait"], 0) << trace.dump().substr(0, 2000);
}

// A coordinator and a worker, each with its own file: scripts/timeline.py
// merges them into one trace with both nodes' replicas on the same clock,
// and draws a window of it.
TEST(Timeline, TwoNodesFilesMergeIntoOneTraceAndDrawAsAPicture) {
  const std::string job = scratch("job.toml");
  std::ofstream(job) << "model = \"mlp\"\ndata = \"fashion-mnist\"\nseed = 5\nbatch = 32\nepochs = 1\nsteps = 40\n";
  const std::string at = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
  const std::string c = scratch("c.json"), w = scratch("w.json"), both = scratch("both.json");
  Process coordinator({TROUPE_BINARY, "node", "--listen", at, "--job", job, "--min-nodes", "2", "--devices", "cpu:0",
                       "--timeline", c, "--timeline-steps", "5:10"},
                      scratch("c.log"));
  Process worker({TROUPE_BINARY, "node", "--join", at, "--devices", "cpu:0", "--timeline", w, "--timeline-steps",
                  "5:10", "--rejoin-timeout", "0"},
                 scratch("w.log"));
  ASSERT_EQ(coordinator.wait_for(180s), 0) << coordinator.output();
  ASSERT_EQ(worker.wait_for(60s), 0) << worker.output();
  Process merge({"/usr/bin/python3", TROUPE_SOURCE_DIR "/scripts/timeline.py", "merge", both, c, w},
                scratch("merge.log"));
  ASSERT_EQ(merge.wait_for(60s), 0) << merge.output();
  const nlohmann::json trace = read_json(both);
  std::set<std::string> processes;
  std::map<int, std::set<std::int64_t>> steps_by_pid;
  std::map<std::int64_t, std::vector<double>> allreduce_end_by_step;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name")
      processes.insert(e.at("args").at("name").get<std::string>());
    if (e.at("ph") != "X") continue;
    steps_by_pid[e.at("pid").get<int>()].insert(e.at("args").at("step").get<std::int64_t>());
    if (e.at("name") == "all-reduce")
      allreduce_end_by_step[e.at("args").at("step").get<std::int64_t>()].push_back(e.at("ts").get<double>() +
                                                                                   e.at("dur").get<double>());
  }
  EXPECT_EQ(processes, (std::set<std::string>{"coordinator", "worker " + at}));
  ASSERT_EQ(steps_by_pid.size(), 2u);
  for (const auto& [pid, steps] : steps_by_pid) EXPECT_EQ(steps, (std::set<std::int64_t>{5, 6, 7, 8, 9, 10})) << pid;
  // One clock: a step's all-reduce ends on both nodes at about the same
  // moment (it completes when the last gradient arrives); the margin allows
  // for a loaded machine descheduling a process, while files on clocks of
  // their own (a steady clock per process) would differ by far more.
  for (const auto& [step, ends] : allreduce_end_by_step) {
    ASSERT_EQ(ends.size(), 2u) << step;
    EXPECT_LT(std::abs(ends[0] - ends[1]), 250'000.0) << "step " << step;  // microseconds
  }
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot is not installed: no picture";
  const std::string png = scratch("both.png");
  Process plot({"/usr/bin/python3", TROUPE_SOURCE_DIR "/scripts/timeline.py", "plot", both, png, "--steps", "6:8"},
               scratch("plot.log"));
  ASSERT_EQ(plot.wait_for(60s), 0) << plot.output();
  EXPECT_GT(fs::file_size(png), 2000u);
  EXPECT_NE(plot.output().find("2 replica(s), steps 6 to 8"), std::string::npos) << plot.output();
  EXPECT_NE(plot.output().find("all-reduce"), std::string::npos) << plot.output();
}

TEST(Timeline, BadStepWindowsAreUsageErrors) {
  for (const char* steps : {"5", "0:10", "10:5", "a:b", "3:"}) {
    Process p({TROUPE_BINARY, "train", "--model", "mlp", "--devices", "cpu:0,cpu:1", "--steps", "5", "--timeline",
               scratch("bad.json"), "--timeline-steps", steps},
              scratch("bad.log"));
    EXPECT_EQ(p.wait_for(60s), 2) << steps << ": " << p.output();
    EXPECT_NE(p.output().find("--timeline-steps"), std::string::npos) << p.output();
    EXPECT_FALSE(fs::exists(scratch("bad.json")));
  }
}

TEST(Timeline, TheRecorderKeepsItsWindowAndWritesAtomically) {
  const std::string file = scratch("unit.json");
  {
    std::ofstream(file) << "an older file";
    Timeline t(file, "unit", 3, 4);
    const auto now = Timeline::Clock::now();
    for (int step = 1; step <= 6; ++step) t.span(0, "forward", now, now + 1ms, step, 0);
    t.instant("checkpoint", 4, "ck-4.troupe");
    t.name_track(0, "replica 0 (cpu:0)");
    // Until write() the old file is untouched.
    std::ifstream in(file);
    std::string old((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(old, "an older file");
    t.write();
  }
  const nlohmann::json trace = read_json(file);
  int spans = 0;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") {
      ++spans;
      EXPECT_NEAR(e.at("dur").get<double>(), 1000.0, 1.0);
    }
  EXPECT_EQ(spans, 2);  // steps 3 and 4
  EXPECT_EQ(trace.at("otherData").at("steps"), "3:4");
  for (const auto& entry : fs::directory_iterator(fs::path(file).parent_path()))
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  EXPECT_THROW(Timeline(file, "unit", 5, 4), std::invalid_argument);
  EXPECT_THROW(Timeline::parse_steps("7"), std::invalid_argument);
  EXPECT_EQ(Timeline::parse_steps("100:200"), (std::pair<std::int64_t, std::int64_t>{100, 200}));
  EXPECT_THROW(Timeline("/no/such/dir/t.json", "unit").write(), std::runtime_error);
  // "{pid}": a file per process under a shared command line.
  const std::string pattern = scratch("t-{pid}.json");
  const std::string expected = scratch("t-" + std::to_string(::getpid()) + ".json");
  EXPECT_EQ(Timeline(pattern, "unit").path(), expected);
  EXPECT_TRUE(fs::exists(expected));  // written when it went out of scope
}

}  // namespace
