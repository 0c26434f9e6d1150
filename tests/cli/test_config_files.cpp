// Configuration files given to the troupe binary (the job file, a model spec
// file, the cluster spec, the secret file), run as a user runs it: a real
// process, real files. Bad files get a one-line error naming the file (and
// line and key) and exit 2, at once: never a crash, an unbounded read, or a
// silently different job.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>

#include "tests/support/ports.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Result {
  int status;
  std::string output;
  double seconds;
};

// `timeout` bounds a regression that would read forever or wait for peers.
Result troupe(const std::string& args, const std::string& env = "", int limit_s = 60) {
  const std::string cmd = env + " timeout -s KILL " + std::to_string(limit_s) + " " TROUPE_BINARY " " + args + " 2>&1";
  const auto start = Clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out, seconds};
}

std::string temp(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("troupe_config_files_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// A coordinator that trains alone (--min-nodes 1) on the generated linreg
// data: seconds, no dataset package needed.
std::string coordinator(const std::string& job, const std::string& extra = "") {
  return "node --listen 127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port()) + " --job " + job +
         " --min-nodes 1 --devices cpu:0 --timeout 20 --wait-timeout 20 " + extra;
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "output was:\n" << (haystack)

// Devices and directories used to be read without limit (4 GB in 9 s for
// /dev/zero) or, for a directory, taken as an empty job.
TEST(ConfigFiles, JobFileMustBeABoundedRegularFile) {
  const std::string dir = temp("job_kinds");
  for (const std::string& path : {std::string("/dev/zero"), std::string("/dev/urandom"), dir}) {
    const Result r = troupe(coordinator(path), "", 20);
    EXPECT_EQ(r.status, 2) << path << ":\n" << r.output;
    EXPECT_CONTAINS(r.output, "job file '" + path + "' is a ");
    EXPECT_CONTAINS(r.output, "expected a regular file of at most 1 MiB");
    EXPECT_LT(r.seconds, 5) << path;
  }
  const std::string big = write(dir, "big.toml", std::string(3 << 20, '#'));
  const Result r = troupe(coordinator(big), "", 20);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "job file '" + big + "' holds 3145728 bytes, more than the limit of 1 MiB");
  fs::remove_all(dir);
}

TEST(ConfigFiles, ModelSpecPathMustBeABoundedRegularFile) {
  const Result r = troupe("train --model /dev/zero --data linreg --devices cpu:0 --steps 1", "", 20);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "model spec '/dev/zero' is a character device; expected a regular file of at most 1 MiB");
  EXPECT_LT(r.seconds, 5);
}

TEST(ConfigFiles, ClusterAndSecretFilesMustBeBoundedRegularFiles) {
  Result r = troupe("node --cluster /dev/urandom", "", 20);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "cluster spec '/dev/urandom' is a character device");
  EXPECT_LT(r.seconds, 5);

  const std::string dir = temp("secret");
  const std::string job = write(dir, "job.toml", "model = \"linreg\"\ndata = \"linreg\"\nsteps = 1\n");
  r = troupe(coordinator(job, "--secret-file /dev/zero"), "", 20);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "secret file '/dev/zero' is a character device; expected a regular file of at most 64 KiB");
  EXPECT_LT(r.seconds, 5);
  fs::remove_all(dir);
}

// 100,000 levels of JSON used to overflow the parser's stack (SIGSEGV).
TEST(ConfigFiles, DeeplyNestedClusterSpecIsAnErrorNotACrash) {
  // Opening brackets only: one environment string holds at most 128 KiB.
  const std::string deep(100000, '[');
  Result r = troupe("node", "TROUPE_CLUSTER='" + deep + "'", 20);
  EXPECT_EQ(r.status, 2) << r.output.substr(0, 2000);
  EXPECT_CONTAINS(r.output, "TROUPE_CLUSTER: malformed JSON at line 1: nested more than 32 levels deep");

  const std::string dir = temp("deep");
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  const std::string spec = write(dir, "cluster.json", objects + "1" + std::string(100000, '}'));
  r = troupe("node --cluster " + spec, "", 20);
  EXPECT_EQ(r.status, 2) << r.output.substr(0, 2000);
  EXPECT_CONTAINS(r.output, "cluster spec " + spec + ": malformed JSON at line 1: nested more than 32 levels deep");
  fs::remove_all(dir);
}

// Above 2^64 - 1 a seed used to be taken as 2^64 - 1: a different job.
// An integer literal beyond TOML's int64 is a syntax error, with a column.
TEST(ConfigFiles, SeedOutOfRangeNamesFileLineAndKey) {
  const std::string dir = temp("seed");
  const std::pair<const char*, const char*> cases[] = {
      {"99999999999999999999", ":2:28: key 'seed': 99999999999999999999 is out of range"},
      {"18446744073709551615", ":2:28: key 'seed': 18446744073709551615 is beyond TOML's integers"},
      {"\"18446744073709551616\"", ":2: key 'seed': \"18446744073709551616\" is out of range"},
      {"-1", ":2: key 'seed': -1 is out of range"},
      {"1.5", ":2: key 'seed': expected a non-negative integer"}};
  for (const auto& [seed, expected] : cases) {
    const std::string job = write(dir, "job.toml", std::string("model = \"linreg\"\nseed = ") + seed + "\n");
    const Result r = troupe(coordinator(job), "", 20);
    EXPECT_EQ(r.status, 2) << seed << ":\n" << r.output;
    EXPECT_CONTAINS(r.output, job + expected);
  }
  // 2^64 - 1, as --seed takes it, as a string: the job trains.
  const std::string job = write(dir, "job.toml",
                                "model = \"linreg\"\ndata = \"linreg\"\nsteps = 1\n"
                                "seed = \"18446744073709551615\"\n");
  const Result r = troupe(coordinator(job), "", 60);
  EXPECT_EQ(r.status, 0) << r.output;
  fs::remove_all(dir);
}

// "The job file takes what troupe train takes on its command line": as
// --optimizer sgd --momentum 0.9, so optimizer = "sgd" and momentum = 0.9.
// The flat keys and the [optimizer] table train the same job (the same final
// loss, bit for bit), which differs from the default optimizer's.
TEST(ConfigFiles, FlatOptimizerKeysTrainAsTheTable) {
  const std::string dir = temp("flat");
  const std::string common = "model = \"linreg\"\ndata = \"linreg\"\nsteps = 30\nlr = 0.05\nseed = 3\n";
  const std::string flat = write(dir, "flat.toml", common + "optimizer = \"sgd\"\nmomentum = 0.9\n");
  const std::string table = write(dir, "table.toml", common + "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\n");
  const std::string plain = write(dir, "plain.toml", common);
  auto final_loss = [&](const std::string& job, const std::string& name) {
    const Result r = troupe(coordinator(job, "--summary-json " + dir + "/" + name + ".json"), "", 60);
    EXPECT_EQ(r.status, 0) << job << ":\n" << r.output;
    std::ifstream in(dir + "/" + name + ".json");
    const std::string json((std::istreambuf_iterator<char>(in)), {});
    std::smatch m;
    EXPECT_TRUE(std::regex_search(json, m, std::regex("\"test_loss\": ([-0-9.e+naif]+)"))) << json;
    return m.size() > 1 ? m[1].str() : std::string("(none)");
  };
  const std::string flat_loss = final_loss(flat, "flat");
  EXPECT_EQ(flat_loss, final_loss(table, "table"));
  EXPECT_NE(flat_loss, final_loss(plain, "plain"));

  const std::string both = write(dir, "both.toml", common + "optimizer = \"adam\"\n\n[optimizer]\nname = \"sgd\"\n");
  Result r = troupe(coordinator(both), "", 20);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output,
                  both + ":8: key 'optimizer' (line 6) and table [optimizer] (line 8) both name the optimizer");
  const std::string twice = write(dir, "twice.toml", common + "momentum = 0.9\n[optimizer]\nmomentum = 0.5\n");
  r = troupe(coordinator(twice), "", 20);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, twice + ":8: key 'optimizer.momentum': sets what key 'momentum' on line 6 already set");
  fs::remove_all(dir);
}

}  // namespace
