// actors/job_metrics: what GET /metrics reports. Fed by hand, its text is
// checked line by line against what the series mean; fed by a real job on
// two replicas (sync, then async), its counts match the job's own
// accounting: one step-time observation per report, one all-reduce per
// synchronous step and replica, one push latency and one staleness per
// applied push.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "actors/job_metrics.hpp"
#include "job/job.hpp"

namespace troupe::actors {
namespace {

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "text was:\n" << (haystack)
#define EXPECT_LACKS(haystack, needle) \
  EXPECT_EQ(std::string(haystack).find(needle), std::string::npos) << "text was:\n" << (haystack)

StepReport report(std::uint32_t view, int rank, std::int64_t clock, double step_s, double wait_s, bool pushed) {
  StepReport r;
  r.view = view;
  r.rank = rank;
  r.clock = clock;
  r.examples = 32;
  r.step_seconds = step_s;
  r.wait_seconds = wait_s;
  r.pushed = pushed;
  return r;
}

// The value of the sample whose line starts with `series ` ("" when absent).
std::string sample(const std::string& text, const std::string& series) {
  const std::string head = series + " ";
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (line.rfind(head, 0) == 0) return line.substr(head.size());
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

TEST(JobMetrics, OneHostSeriesFromTheCallbacksAndTheReports) {
  JobMetrics m(Mode::parse("sync"), 2);
  std::string text = m.prometheus_text();
  // Before the first step only what is known is written.
  EXPECT_LACKS(text, "troupe_step ");
  EXPECT_LACKS(text, "troupe_test_accuracy");
  EXPECT_EQ(sample(text, "troupe_mode{mode=\"sync\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_mode{mode=\"async\"}"), "0");
  EXPECT_EQ(sample(text, "troupe_nodes"), "1");
  EXPECT_EQ(sample(text, "troupe_replicas"), "2");
  EXPECT_EQ(sample(text, "troupe_step_seconds_count"), "0");  // one host: no node label
  EXPECT_EQ(sample(text, "troupe_push_staleness_bucket{le=\"+Inf\"}"), "0");
  EXPECT_LACKS(text, "node=");
  EXPECT_LACKS(text, "troupe_node_info");

  models::Callbacks cb;
  int chained = 0;
  cb.on_step_end = [&](const models::StepEnd&) { ++chained; };
  m.watch(cb);
  cb.on_epoch_begin(1, 100, 0.1f);
  models::StepEnd e;
  e.step = 140;
  e.step_in_epoch = 40;
  e.loss = 0.5;
  e.samples_per_s = 2500.0;
  cb.on_step_end(e);
  EXPECT_EQ(chained, 1) << "watch() replaced the callback it should chain onto";
  models::EpochResult eval;
  eval.test_accuracy = 0.8125;
  eval.test_loss = 0.25;
  cb.on_evaluate(eval);
  cb.on_mode_switch(140, "ssp:3");
  m.record_step(report(0, 0, 139, 0.003, 0.0004, false));  // sync: an all-reduce
  m.record_step(report(0, 1, 140, 0.012, 0.002, true));    // async: a push
  m.record_push_staleness(0, 1, 1);
  text = m.prometheus_text();
  EXPECT_EQ(sample(text, "troupe_step"), "140");
  EXPECT_EQ(sample(text, "troupe_epoch"), "1");
  EXPECT_EQ(sample(text, "troupe_loss"), "0.5");
  EXPECT_EQ(sample(text, "troupe_samples_per_second"), "2500");
  EXPECT_EQ(sample(text, "troupe_test_accuracy"), "0.8125");
  EXPECT_EQ(sample(text, "troupe_test_loss"), "0.25");
  EXPECT_EQ(sample(text, "troupe_mode{mode=\"sync\"}"), "0");
  EXPECT_EQ(sample(text, "troupe_mode{mode=\"ssp\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_ssp_bound"), "3");
  EXPECT_EQ(sample(text, "troupe_examples_total"), "64");
  EXPECT_EQ(sample(text, "troupe_step_seconds_bucket{le=\"0.0025\"}"), "0");
  EXPECT_EQ(sample(text, "troupe_step_seconds_bucket{le=\"0.005\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_step_seconds_bucket{le=\"0.025\"}"), "2");
  EXPECT_EQ(sample(text, "troupe_step_seconds_sum"), "0.015");
  EXPECT_EQ(sample(text, "troupe_allreduce_seconds_bucket{le=\"0.0005\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_allreduce_seconds_count"), "1");
  EXPECT_EQ(sample(text, "troupe_push_seconds_bucket{le=\"0.001\"}"), "0");
  EXPECT_EQ(sample(text, "troupe_push_seconds_bucket{le=\"0.0025\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_push_staleness_bucket{le=\"0\"}"), "0");
  EXPECT_EQ(sample(text, "troupe_push_staleness_bucket{le=\"1\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_push_staleness_count"), "1");
}

TEST(JobMetrics, ClusterSeriesCarryTheNodeOfEachRankInTheCurrentView) {
  JobMetrics m(Mode::parse("async"), 1, /*cluster=*/true);
  // Before the nodes have joined: no view yet.
  EXPECT_EQ(sample(m.prometheus_text(), "troupe_nodes"), "0");
  EXPECT_EQ(sample(m.prometheus_text(), "troupe_replicas"), "0");
  EXPECT_LACKS(m.prometheus_text(), "troupe_step_seconds_count");
  models::Callbacks cb;
  m.watch(cb);
  NodeInfo coordinator{0, "coordinator", "127.0.0.1:7001", 0, 1, {"cpu:0"}};
  NodeInfo worker{3, "worker/\"b\"", "127.0.0.1:7002", 1, 2, {"cpu:0", "cpu:1"}};
  m.set_nodes(5, {coordinator, worker});
  cb.on_view_change(100, 5, 3, 600);
  m.record_step(report(5, 0, 101, 0.01, 0.001, true));
  m.record_step(report(5, 1, 104, 0.01, 0.001, true));
  m.record_step(report(5, 2, 102, 0.01, 0.001, true));
  m.record_step(report(4, 2, 999, 0.01, 0.001, true));  // an ended view: left out
  m.record_push_staleness(5, 2, 4);
  m.record_push_staleness(4, 0, 9);  // an ended view: left out
  const std::string text = m.prometheus_text();
  EXPECT_EQ(sample(text, "troupe_nodes"), "2");
  EXPECT_EQ(sample(text, "troupe_replicas"), "3");
  EXPECT_EQ(sample(text, "troupe_view"), "5");
  EXPECT_EQ(sample(text, "troupe_node_info{node=\"3\",name=\"worker/\\\"b\\\"\",address=\"127.0.0.1:7002\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_node_replicas{node=\"3\"}"), "2");
  EXPECT_EQ(sample(text, "troupe_node_step{node=\"0\"}"), "101");
  EXPECT_EQ(sample(text, "troupe_node_step{node=\"3\"}"), "102");  // its slowest replica
  EXPECT_EQ(sample(text, "troupe_step_seconds_count{node=\"0\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_step_seconds_count{node=\"3\"}"), "2");
  EXPECT_EQ(sample(text, "troupe_examples_total{node=\"3\"}"), "64");
  EXPECT_EQ(sample(text, "troupe_push_staleness_count{node=\"3\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_push_staleness_count{node=\"0\"}"), "0");
  EXPECT_LACKS(text, "troupe_step_seconds_count ");  // no unlabelled series on a cluster

  // The worker leaves: its gauges go, its cumulative series stay.
  m.set_nodes(6, {coordinator});
  const std::string after = m.prometheus_text();
  EXPECT_EQ(sample(after, "troupe_nodes"), "1");
  EXPECT_EQ(sample(after, "troupe_replicas"), "1");
  EXPECT_LACKS(after, "troupe_node_info{node=\"3\"");
  EXPECT_EQ(sample(after, "troupe_step_seconds_count{node=\"3\"}"), "2");
}

// Shards on ps tasks: the staleness comes with the step reports (shard 0's
// answer to the pusher), and only then; before staleness_from_reports() a
// report's staleness is left to the shards' own record_push_staleness, so
// that no push is counted twice.
TEST(JobMetrics, StalenessFromReportsOnlyWhenTheShardsRunElsewhere) {
  JobMetrics m(Mode::parse("async"), 2, /*cluster=*/true);
  NodeInfo coordinator{0, "coordinator", "127.0.0.1:7001", 0, 1, {"cpu:0"}};
  NodeInfo worker{1, "worker/b", "127.0.0.1:7002", 1, 1, {"cpu:0"}};
  m.set_nodes(1, {coordinator, worker});
  StepReport r = report(1, 1, 5, 0.01, 0.001, true);
  r.staleness = 3;
  m.record_step(r);  // the shards are in this process: they record it
  EXPECT_EQ(sample(m.prometheus_text(), "troupe_push_staleness_count{node=\"1\"}"), "0");
  m.staleness_from_reports();
  m.record_step(r);
  r.staleness = -1;  // not measured (an in-process push)
  m.record_step(r);
  StepReport sync = report(1, 0, 6, 0.01, 0.001, false);
  sync.staleness = 7;  // an all-reduce step has none, whatever it says
  m.record_step(sync);
  const std::string text = m.prometheus_text();
  EXPECT_EQ(sample(text, "troupe_push_staleness_count{node=\"1\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_push_staleness_sum{node=\"1\"}"), "3");
  EXPECT_EQ(sample(text, "troupe_push_staleness_count{node=\"0\"}"), "0");
  EXPECT_EQ(sample(text, "troupe_push_seconds_count{node=\"1\"}"), "3");
}

// Shards on ps tasks placed anew while the job runs: counted by what the
// placement restored, and only in a job whose shards run on ps tasks.
TEST(JobMetrics, ShardPlacementsAreCountedByWhatTheyRestored) {
  JobMetrics m(Mode::parse("async"), 2, /*cluster=*/true);
  EXPECT_LACKS(m.prometheus_text(), "troupe_ps_placements_total");
  m.staleness_from_reports();
  std::string text = m.prometheus_text();
  EXPECT_CONTAINS(text, "# TYPE troupe_ps_placements_total counter");
  EXPECT_EQ(sample(text, "troupe_ps_placements_total{restored=\"rollback\"}"), "0");
  EXPECT_EQ(sample(text, "troupe_ps_placements_total{restored=\"gathered\"}"), "0");
  m.record_shards_placed(JobMetrics::Restored::rollback);
  m.record_shards_placed(JobMetrics::Restored::rollback);
  m.record_shards_placed(JobMetrics::Restored::gathered);
  m.record_shards_placed(JobMetrics::Restored::none);
  text = m.prometheus_text();
  EXPECT_EQ(sample(text, "troupe_ps_placements_total{restored=\"rollback\"}"), "2");
  EXPECT_EQ(sample(text, "troupe_ps_placements_total{restored=\"gathered\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_ps_placements_total{restored=\"none\"}"), "1");
}

// A real job: sync for 40 steps, then async, on two replicas.
TEST(JobMetrics, ARealJobsCountsMatchItsAccounting) {
  JobConfig c;
  c.train.model = "mlp";
  c.train.data = "fashion-mnist";
  c.train.epochs = 1;
  c.train.batch = 32;
  c.train.max_steps = 120;
  c.train.seed = 3;
  c.devices = {kernels::Device::cpu(0), kernels::Device::cpu(1)};
  c.mode = Mode::parse("sync");
  c.switches = parse_switch_schedule("40:async");
  c.timeout = std::chrono::milliseconds(30000);
  c.metrics = std::make_shared<JobMetrics>(c.mode, 2);
  models::Callbacks cb;
  c.metrics->watch(cb);
  Job job(c);
  const JobResult r = job.run(cb);
  ASSERT_EQ(r.error, "");
  ASSERT_EQ(r.steps, 120);
  const std::string text = c.metrics->prometheus_text();
  EXPECT_EQ(sample(text, "troupe_step"), "120");
  EXPECT_EQ(sample(text, "troupe_mode{mode=\"async\"}"), "1");
  EXPECT_EQ(sample(text, "troupe_replicas"), "2");
  EXPECT_EQ(std::stoll(sample(text, "troupe_allreduce_seconds_count")), 2 * r.sync_steps);
  EXPECT_EQ(std::stoll(sample(text, "troupe_push_seconds_count")), r.pushes);
  EXPECT_EQ(std::stoll(sample(text, "troupe_push_staleness_count")), r.server.applied);
  EXPECT_EQ(std::stoll(sample(text, "troupe_step_seconds_count")), 2 * r.sync_steps + r.pushes);
  // Every step took some time, and the all-reduces only part of it.
  EXPECT_GT(std::stod(sample(text, "troupe_step_seconds_sum")), 0.0);
  EXPECT_LT(std::stod(sample(text, "troupe_allreduce_seconds_sum")),
            std::stod(sample(text, "troupe_step_seconds_sum")));
  // With two replicas a push's staleness is the other replica's pushes
  // applied since this one last pulled: each push is counted by at most one
  // later push (the other replica's next), so the sum is at most the pushes,
  // and it is not 0 while both push.
  const double staleness = std::stod(sample(text, "troupe_push_staleness_sum"));
  EXPECT_LE(staleness, static_cast<double>(r.pushes));
  EXPECT_GE(staleness, 1.0);
}

}  // namespace
}  // namespace troupe::actors
