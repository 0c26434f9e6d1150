// GET /metrics of a real `troupe train` job, read as a scraper reads it:
// the Content-Type of the text format 0.0.4, every line a comment or
// `name{labels} value`, every histogram cumulative and ending in +Inf equal
// to its _count (tests/support/exposition.hpp, a reader written apart from
// the writer), and the values those of the job. Also the usage errors of
// --metrics-token-file.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/cluster/process.hpp"
#include "tests/support/exposition.hpp"
#include "tests/support/http.hpp"
#include "tests/support/ports.hpp"

namespace {

using namespace std::chrono_literals;
using troupe::testing::Exposition;
using troupe::testing::Process;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "text was:\n" << (haystack)

std::string temp_dir(const std::string& name) {
  const auto p =
      std::filesystem::path(::testing::TempDir()) / ("troupe_metrics_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

double value_of(const Exposition& e, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
  const auto found = e.find(name, labels);
  return found.size() == 1 ? found[0].value : -1;
}

TEST(MetricsEndpoint, EveryLineOfALiveResponseParsesAndEveryHistogramIsCumulative) {
  const std::string dir = temp_dir("live");
  const int port = troupe::testing::free_loopback_port();
  const std::string at = "127.0.0.1:" + std::to_string(port);
  // Two replicas, sync for 150 steps and then async: every histogram gets
  // observations. 20 epochs is far more than the test waits for; it stops the job.
  Process job({TROUPE_BINARY, "train", "--model", "mlp", "--devices", "cpu:0,cpu:1", "--batch", "32", "--epochs", "20",
               "--switch", "150:async", "--control", at},
              dir + "/job.log");
  ASSERT_TRUE(job.started());

  // Until the job has pushed gradients (it loads its data first), or 60 s.
  troupe::testing::HttpResponse r;
  Exposition e;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline && job.running()) {
    r = troupe::testing::http_get(port, "/metrics");
    if (r.status == 200) {
      e = troupe::testing::parse_exposition(r.body);
      if (value_of(e, "troupe_push_seconds_count") > 0) break;
    }
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(r.status, 200) << "no /metrics answer within 60 s:\n" << r.raw << "\n--- job:\n" << job.output();
  ASSERT_GT(value_of(e, "troupe_push_seconds_count"), 0) << r.body << "\n--- job:\n" << job.output();

  EXPECT_EQ(r.headers["content-type"].rfind("text/plain; version=0.0.4", 0), 0u) << r.raw.substr(0, 300);
  for (const auto& problem : e.problems) ADD_FAILURE() << problem;
  EXPECT_TRUE(e.problems.empty()) << r.body;

  // Every series the user guide lists for a job on one host, with its type.
  for (const auto& [name, type] : std::map<std::string, std::string>{{"troupe_step", "gauge"},
                                                                     {"troupe_epoch", "gauge"},
                                                                     {"troupe_samples_per_second", "gauge"},
                                                                     {"troupe_loss", "gauge"},
                                                                     {"troupe_mode", "gauge"},
                                                                     {"troupe_nodes", "gauge"},
                                                                     {"troupe_replicas", "gauge"},
                                                                     {"troupe_examples_total", "counter"},
                                                                     {"troupe_step_seconds", "histogram"},
                                                                     {"troupe_allreduce_seconds", "histogram"},
                                                                     {"troupe_push_seconds", "histogram"},
                                                                     {"troupe_push_staleness", "histogram"}})
    EXPECT_EQ(e.types[name], type) << name << " in\n" << r.body;

  EXPECT_GT(value_of(e, "troupe_step"), 150);
  EXPECT_EQ(value_of(e, "troupe_replicas"), 2);
  EXPECT_EQ(value_of(e, "troupe_nodes"), 1);
  EXPECT_EQ(value_of(e, "troupe_mode", {{"mode", "async"}}), 1);
  EXPECT_EQ(value_of(e, "troupe_mode", {{"mode", "sync"}}), 0);
  EXPECT_GT(value_of(e, "troupe_samples_per_second"), 0);
  EXPECT_GT(value_of(e, "troupe_loss"), 0);
  // 150 synchronous steps on two replicas: 300 all-reduces.
  EXPECT_EQ(value_of(e, "troupe_allreduce_seconds_count"), 300);
  EXPECT_GT(value_of(e, "troupe_step_seconds_sum"), 0);
  EXPECT_EQ(e.find("troupe_step_seconds_bucket").back().labels.at("le"), "+Inf");
  EXPECT_EQ(r.body.find("node=\""), std::string::npos) << "one host: no node label\n" << r.body;

  // troupe ctl metrics prints the same text; then the job stops through the endpoint.
  const std::string ctl = std::string(TROUPE_BINARY) + " ctl --at " + at;
  EXPECT_EQ(std::system((ctl + " metrics > " + dir + "/ctl.out 2>&1").c_str()), 0);
  std::ifstream ctl_out(dir + "/ctl.out");
  const std::string ctl_text((std::istreambuf_iterator<char>(ctl_out)), {});
  EXPECT_EQ(troupe::testing::parse_exposition(ctl_text).problems.size(), 0u) << ctl_text;
  EXPECT_CONTAINS(ctl_text, "# TYPE troupe_push_staleness histogram");
  EXPECT_EQ(std::system((ctl + " stop > /dev/null 2>&1").c_str()), 0);
  EXPECT_EQ(job.wait_for(20s), 0) << job.output();
}

// The reader above would pass anything if its checks never fired: each
// kind of broken text is caught.
TEST(MetricsEndpoint, TheTestsReaderCatchesEveryProblemItChecks) {
  const std::string head = "# HELP h H.\n# TYPE h histogram\n";
  const std::map<std::string, std::string> broken{
      {head + "h_bucket{le=\"1\"} 3\nh_bucket{le=\"2\"} 2\nh_bucket{le=\"+Inf\"} 3\nh_sum 1\nh_count 3\n",
       "not cumulative"},
      {head + "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",
       "does not ascend"},
      {head + "h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", "do not end with le=\"+Inf\""},
      {head + "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n", "the +Inf bucket is not _count"},
      {head + "h_bucket{le=\"+Inf\"} 2\nh_count 2\n", "no _sum"},
      {"# TYPE g gauge\ng 1,5\n", "is not a number"},
      {"g 1\n", "no family with a TYPE"},
      {"# TYPE g gauge\ng{a=\"x\\ty\"} 1\n", "malformed name or labels"},
      {"# TYPE g gauge\ng{a=\"x\"\n", "malformed name or labels"},
      {"# TYPE g gauge\n# TYPE g counter\ng 1\n", "a second TYPE"},
      {"# TYPE g gauge\ng 1\n# HELP g late\n", "after the family's samples"},
      {"# TYPE g gauge\ng 1", "does not end with a newline"},
      {"# TYPE g gauge\n g 1\n", "neither a comment nor a sample"},
  };
  for (const auto& [text, why] : broken) {
    const Exposition e = troupe::testing::parse_exposition(text);
    std::string all;
    for (const auto& p : e.problems) all += p + "\n";
    EXPECT_CONTAINS(all, why) << "for the text:\n" << text;
  }
  const Exposition good =
      troupe::testing::parse_exposition(head +
                                        "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum NaN\nh_count 2\n# TYPE g "
                                        "gauge\ng{a=\"q\\\"\\\\\\n\"} -Inf\n");
  EXPECT_TRUE(good.problems.empty()) << good.problems.front();
  EXPECT_EQ(good.find("g").at(0).labels.at("a"), "q\"\\\n");
}

TEST(MetricsEndpoint, AMetricsTokenNeedsTheEndpointAndASecret) {
  const std::string dir = temp_dir("token");
  const std::string token = dir + "/token";
  std::ofstream(token) << "0123456789abcdef0123456789abcdef\n";
  ::chmod(token.c_str(), 0600);
  const std::string port = std::to_string(troupe::testing::free_loopback_port());
  const auto run = [&](const std::string& args) {
    Process p({"/bin/sh", "-c", "exec env -u TROUPE_SECRET " + std::string(TROUPE_BINARY) + " " + args},
              dir + "/out.log");
    const int status = p.wait_for(60s);
    return std::make_pair(status, p.output());
  };
  auto [status, out] = run("train --model mlp --steps 1 --metrics-token-file " + token);
  EXPECT_EQ(status, 2) << out;
  EXPECT_CONTAINS(
      out,
      "troupe: --metrics-token-file is the credential of GET /metrics on the control endpoint: give --control too");
  std::tie(status, out) =
      run("train --model mlp --steps 1 --control 127.0.0.1:" + port + " --metrics-token-file " + token);
  EXPECT_EQ(status, 2) << out;
  EXPECT_CONTAINS(out, "without a cluster secret the control endpoint asks no credential at all");
  std::tie(status, out) = run("node --join 127.0.0.1:" + port + " --metrics-token-file " + token);
  EXPECT_EQ(status, 2) << out;
  EXPECT_CONTAINS(out, "--metrics-token-file");
  EXPECT_CONTAINS(out, "belong to the coordinator (--listen)");
  // A token file that is too short is refused before any data is loaded.
  std::ofstream(dir + "/short") << "abc\n";
  std::ofstream(dir + "/secret") << "correct horse battery staple\n";
  ::chmod((dir + "/secret").c_str(), 0600);
  std::tie(status, out) = run("train --model mlp --steps 1 --control 127.0.0.1:" + port + " --secret-file " + dir +
                              "/secret --metrics-token-file " + dir + "/short");
  EXPECT_EQ(status, 2) << out;
  EXPECT_CONTAINS(out, "a token needs at least 16");
  EXPECT_EQ(out.find("devices:"), std::string::npos) << "the job was set up before the token was read:\n" << out;
}

}  // namespace
