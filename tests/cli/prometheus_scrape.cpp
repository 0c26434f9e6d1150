// A real Prometheus server (Debian's `prometheus` package) scrapes a real
// troupe cluster on loopback: a coordinator and a worker, one CPU replica
// each, with a cluster secret, so /metrics takes the bearer token of
// --metrics-token-file that Prometheus sends from `authorization:
// credentials_file:`. The test asks Prometheus' own HTTP API whether the
// target is up, whether the series have samples and what they say; a second
// scrape job without the token must be down with a 401. Skips with a message
// where the prometheus binary is not installed (scripts/setup.sh installs it).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "tests/cluster/process.hpp"
#include "tests/support/http.hpp"
#include "tests/support/ports.hpp"

namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;
using troupe::testing::Process;
using Clock = std::chrono::steady_clock;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "text was:\n" << (haystack)

// $TROUPE_PROMETHEUS, else `prometheus` on PATH; "" when there is none.
std::string find_prometheus() {
  if (const char* own = std::getenv("TROUPE_PROMETHEUS"); own && *own) return ::access(own, X_OK) == 0 ? own : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/prometheus";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string write(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
  return path;
}

// One instant query through Prometheus' HTTP API: each series' labels and
// value. Empty when the query fails or nothing matches yet.
struct Result {
  Json metric;
  double value = NAN;
};
std::vector<Result> query(int port, const std::string& promql) {
  const auto r = troupe::testing::http_get(port, "/api/v1/query?query=" + troupe::testing::url_encode(promql));
  std::vector<Result> out;
  if (r.status != 200) return out;
  const Json j = Json::parse(r.body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return out;
  for (const Json& s : j["data"]["result"]) out.push_back({s["metric"], std::stod(s["value"][1].get<std::string>())});
  return out;
}
double scalar(int port, const std::string& promql) {
  const auto r = query(port, promql);
  return r.size() == 1 ? r[0].value : NAN;
}

// The active target of scrape job `job` in /api/v1/targets (null if none yet).
Json target(int port, const std::string& job) {
  const auto r = troupe::testing::http_get(port, "/api/v1/targets");
  const Json j = Json::parse(r.body, nullptr, false);
  if (r.status != 200 || j.is_discarded()) return nullptr;
  for (const Json& t : j["data"]["activeTargets"])
    if (t["labels"].value("job", "") == job) return t;
  return nullptr;
}

TEST(PrometheusServer, ARealServerScrapesARunningClusterWithItsBearerToken) {
  const std::string prometheus = find_prometheus();
  if (prometheus.empty())
    GTEST_SKIP() << "no prometheus binary on PATH (Debian's `prometheus` package: apt-get install prometheus, as "
                    "scripts/setup.sh does; or set TROUPE_PROMETHEUS to one): the scrape test needs a real server";

  const auto dir = std::filesystem::temp_directory_path() / ("troupe-prometheus-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "tsdb");
  const std::string d = dir.string();
  const std::string secret = write(d + "/secret", "prometheus test secret " + std::to_string(::getpid()) + "\n", 0600);
  const std::string token = write(d + "/token", "metrics-token-" + std::to_string(::getpid()) + "-abcdef0123\n", 0600);
  // Sync for 300 steps, then async: every histogram gets samples. An
  // evaluation every 200 steps gives troupe_test_accuracy. 20 epochs is far
  // longer than the test runs; it stops the job itself.
  const std::string job = write(d + "/job.toml",
                                "model = \"mlp\"\ndata = \"fashion-mnist\"\nseed = 5\nepochs = 20\n"
                                "batch = 32\nmode = \"sync\"\nswitch = \"300:async\"\neval_every = 200\n");
  const int cluster_port = troupe::testing::free_loopback_port();
  const int control_port = troupe::testing::free_loopback_port();
  const int prometheus_port = troupe::testing::free_loopback_port();
  const std::string cluster = "127.0.0.1:" + std::to_string(cluster_port);
  const std::string control = "127.0.0.1:" + std::to_string(control_port);

  Process coordinator(
      {TROUPE_BINARY, "node",  "--listen",       cluster, "--job",         job,    "--min-nodes",          "2",
       "--devices",   "cpu:0", "--control",      control, "--secret-file", secret, "--metrics-token-file", token,
       "--timeout",   "30",    "--wait-timeout", "60"},
      d + "/coordinator.log");
  Process worker({TROUPE_BINARY, "node", "--join", cluster, "--devices", "cpu:0", "--secret-file", secret, "--timeout",
                  "30", "--rejoin-timeout", "0"},
                 d + "/worker.log");

  // Scraped every second on loopback: `troupe` with the token, and the same
  // endpoint without it (which must fail with 401).
  const std::string config = write(d + "/prometheus.yml",
                                   "global:\n"
                                   "  scrape_interval: 1s\n"
                                   "  scrape_timeout: 1s\n"
                                   "scrape_configs:\n"
                                   "  - job_name: troupe\n"
                                   "    authorization:\n"
                                   "      type: Bearer\n"
                                   "      credentials_file: " +
                                       token +
                                       "\n"
                                       "    static_configs:\n"
                                       "      - targets: ['" +
                                       control +
                                       "']\n"
                                       "  - job_name: troupe-no-token\n"
                                       "    static_configs:\n"
                                       "      - targets: ['" +
                                       control + "']\n");
  Process server({prometheus, "--config.file=" + config, "--storage.tsdb.path=" + d + "/tsdb",
                  "--web.listen-address=127.0.0.1:" + std::to_string(prometheus_port), "--log.level=warn"},
                 d + "/prometheus.log");
  const auto logs = [&] {
    return "--- coordinator:\n" + coordinator.output() + "--- worker:\n" + worker.output() + "--- prometheus:\n" +
           server.output();
  };

  // Every wait below shares one deadline.
  const auto deadline = Clock::now() + 60s;
  while (Clock::now() < deadline && server.running() &&
         troupe::testing::http_get(prometheus_port, "/-/ready").status != 200)
    std::this_thread::sleep_for(200ms);
  ASSERT_EQ(troupe::testing::http_get(prometheus_port, "/-/ready").status, 200) << "Prometheus is not ready\n"
                                                                                << logs();

  // Until the target is up and the cluster has pushed gradients (sync, then
  // async), as Prometheus has stored it.
  Json up = nullptr;
  while (Clock::now() < deadline && coordinator.running()) {
    up = target(prometheus_port, "troupe");
    if (!up.is_null() && up.value("health", "") == "up" &&
        scalar(prometheus_port, "sum(troupe_push_seconds_count)") > 0)
      break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_FALSE(up.is_null()) << "Prometheus lists no target of job troupe\n" << logs();
  ASSERT_EQ(up.value("health", ""), "up") << up.dump(2) << "\n" << logs();
  ASSERT_GT(scalar(prometheus_port, "sum(troupe_push_seconds_count)"), 0) << logs();

  EXPECT_EQ(scalar(prometheus_port, "up{job=\"troupe\"}"), 1);
  EXPECT_GT(scalar(prometheus_port, "troupe_step"), 300);
  EXPECT_EQ(scalar(prometheus_port, "troupe_replicas"), 2);
  EXPECT_EQ(scalar(prometheus_port, "troupe_nodes"), 2);
  EXPECT_EQ(scalar(prometheus_port, "count(troupe_node_info)"), 2);
  EXPECT_EQ(scalar(prometheus_port, "troupe_mode{mode=\"async\"}"), 1);
  const double accuracy = scalar(prometheus_port, "troupe_test_accuracy");
  EXPECT_GT(accuracy, 0.3) << "the evaluation at step 200 is far better than chance (0.1)";
  EXPECT_LE(accuracy, 1.0);
  // 300 synchronous steps on two replicas, one node each.
  EXPECT_EQ(scalar(prometheus_port, "sum(troupe_allreduce_seconds_count)"), 600);
  const auto per_node = query(prometheus_port, "troupe_step_seconds_count");
  ASSERT_EQ(per_node.size(), 2u) << logs();
  for (const Result& r : per_node) {
    EXPECT_TRUE(r.metric.contains("node")) << r.metric.dump();
    EXPECT_GT(r.value, 300) << r.metric.dump();
  }
  // Prometheus can compute with the buckets: a median step time.
  const double median = scalar(prometheus_port, "histogram_quantile(0.5, sum by (le) (troupe_step_seconds_bucket))");
  EXPECT_TRUE(std::isfinite(median) && median > 0 && median < 30) << median;
  EXPECT_GE(scalar(prometheus_port, "sum(troupe_push_staleness_count)"), 1);

  // Without the token the same endpoint refuses the scrape (once it was
  // tried: Prometheus spreads its targets' first scrapes over an interval).
  Json refused = nullptr;
  while (Clock::now() < deadline) {
    refused = target(prometheus_port, "troupe-no-token");
    if (!refused.is_null() && refused.value("health", "unknown") != "unknown") break;
    std::this_thread::sleep_for(200ms);
  }
  ASSERT_FALSE(refused.is_null()) << logs();
  EXPECT_EQ(refused.value("health", ""), "down") << refused.dump(2);
  EXPECT_CONTAINS(refused.value("lastError", ""), "401");

  // The job stops through the endpoint (signed with the secret); every process ends.
  const int stopped = std::system((std::string(TROUPE_BINARY) + " ctl --timeout 20 --at " + control +
                                   " --secret-file " + secret + " stop > " + d + "/stop.out 2>&1")
                                      .c_str());
  EXPECT_EQ(stopped, 0);
  EXPECT_EQ(coordinator.wait_for(30s), 0) << logs();
  EXPECT_EQ(worker.wait_for(15s), 0) << logs();
  server.signal(SIGTERM);
  EXPECT_EQ(server.wait_for(15s), 0) << logs();
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
