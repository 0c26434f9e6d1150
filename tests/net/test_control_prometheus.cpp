// net/control/prometheus: the text exposition format 0.0.4, checked against
// text written by hand from the format's description (not produced by the
// code under test), and every kind of bad input refused with its name.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "net/control/prometheus.hpp"

namespace troupe::net::prometheus {
namespace {

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "text was:\n" << (haystack)

TEST(PrometheusText, GaugesCountersAndAHistogramAsWrittenByHand) {
  Family step{"troupe_step", "The global step.", Type::gauge, {{{}, 1200}}, {}};
  Family mode{"troupe_mode", "1 for the update mode the job is in, 0 for the others.", Type::gauge, {}, {}};
  mode.values = {{{{"mode", "sync"}}, 0}, {{{"mode", "async"}}, 1}, {{{"mode", "ssp"}}, 0}};
  Family examples{"troupe_node_examples_total", "Examples trained.", Type::counter, {}, {}};
  examples.values = {{{{"node", "0"}}, 640}, {{{"node", "1"}}, 608}};
  Family seconds{"troupe_step_seconds", "Wall time of one step.", Type::histogram, {}, {}};
  Histogram h({0.005, 0.01, 0.025});
  for (double v : {0.004, 0.005, 0.007, 0.02, 0.5}) h.observe(v);  // 0.005 is in le="0.005": bounds are inclusive
  seconds.histograms = {{{{"node", "1"}}, h}};
  const std::string expected =
      "# HELP troupe_step The global step.\n"
      "# TYPE troupe_step gauge\n"
      "troupe_step 1200\n"
      "# HELP troupe_mode 1 for the update mode the job is in, 0 for the others.\n"
      "# TYPE troupe_mode gauge\n"
      "troupe_mode{mode=\"sync\"} 0\n"
      "troupe_mode{mode=\"async\"} 1\n"
      "troupe_mode{mode=\"ssp\"} 0\n"
      "# HELP troupe_node_examples_total Examples trained.\n"
      "# TYPE troupe_node_examples_total counter\n"
      "troupe_node_examples_total{node=\"0\"} 640\n"
      "troupe_node_examples_total{node=\"1\"} 608\n"
      "# HELP troupe_step_seconds Wall time of one step.\n"
      "# TYPE troupe_step_seconds histogram\n"
      "troupe_step_seconds_bucket{node=\"1\",le=\"0.005\"} 2\n"
      "troupe_step_seconds_bucket{node=\"1\",le=\"0.01\"} 3\n"
      "troupe_step_seconds_bucket{node=\"1\",le=\"0.025\"} 4\n"
      "troupe_step_seconds_bucket{node=\"1\",le=\"+Inf\"} 5\n"
      "troupe_step_seconds_sum{node=\"1\"} 0.536\n"
      "troupe_step_seconds_count{node=\"1\"} 5\n";
  EXPECT_EQ(exposition({step, mode, examples, seconds}), expected);
}

TEST(PrometheusText, AHistogramWithoutLabelsAndWithoutObservations) {
  Family f{"troupe_push_staleness", "Staleness.", Type::histogram, {}, {{{}, Histogram({0, 1, 2})}}};
  EXPECT_EQ(exposition({f}),
            "# HELP troupe_push_staleness Staleness.\n"
            "# TYPE troupe_push_staleness histogram\n"
            "troupe_push_staleness_bucket{le=\"0\"} 0\n"
            "troupe_push_staleness_bucket{le=\"1\"} 0\n"
            "troupe_push_staleness_bucket{le=\"2\"} 0\n"
            "troupe_push_staleness_bucket{le=\"+Inf\"} 0\n"
            "troupe_push_staleness_sum 0\n"
            "troupe_push_staleness_count 0\n");
}

TEST(PrometheusText, ValuesAreGoParseFloatNumbersWithNaNAndInfinitiesSpelledOut) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(1200), "1200");
  EXPECT_EQ(format_value(-3), "-3");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(0.1), "0.1");  // the shortest text that reads back, not 0.10000000000000001
  EXPECT_EQ(format_value(1e-7), "1e-07");
  EXPECT_EQ(format_value(0.0001), "0.0001");    // %g style, not the shorter "1e-04"
  EXPECT_EQ(format_value(1000000), "1000000");  // a count in full, not "1e+06"
  EXPECT_EQ(format_value(41035.72060539273), "41035.72060539273");
  EXPECT_EQ(format_value(2.5e20), "2.5e+20");
  EXPECT_EQ(format_value(123456789012.0), "123456789012");
  EXPECT_EQ(std::stod(format_value(0.1 + 0.2)), 0.1 + 0.2);  // exact round trip
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");

  Family loss{"troupe_loss", "Loss.", Type::gauge, {{{}, std::nan("")}}, {}};
  EXPECT_EQ(exposition({loss}), "# HELP troupe_loss Loss.\n# TYPE troupe_loss gauge\ntroupe_loss NaN\n");
}

TEST(PrometheusText, LabelValuesAndHelpAreEscaped) {
  EXPECT_EQ(escape_label_value("worker/host-b:7000"), "worker/host-b:7000");
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_help("line one\nback\\slash \"quoted\""), "line one\\nback\\\\slash \"quoted\"");
  Family info{"troupe_node_info", "Each node.\nOne sample per node.", Type::gauge, {}, {}};
  info.values = {{{{"node", "1"}, {"name", "worker/\"odd\"\\name\n"}}, 1}};
  EXPECT_EQ(exposition({info}),
            "# HELP troupe_node_info Each node.\\nOne sample per node.\n"
            "# TYPE troupe_node_info gauge\n"
            "troupe_node_info{node=\"1\",name=\"worker/\\\"odd\\\"\\\\name\\n\"} 1\n");
}

TEST(PrometheusText, AFamilyWithNoSamplesIsLeftOut) {
  Family empty{"troupe_push_seconds", "Push latency.", Type::histogram, {}, {}};
  Family step{"troupe_step", "Step.", Type::gauge, {{{}, 3}}, {}};
  EXPECT_EQ(exposition({empty, step}), "# HELP troupe_step Step.\n# TYPE troupe_step gauge\ntroupe_step 3\n");
  EXPECT_EQ(exposition({}), "");
}

TEST(PrometheusText, NaNObservationsCountInPlusInfOnly) {
  Histogram h({1, 2});
  h.observe(std::nan(""));
  h.observe(1.5);
  EXPECT_EQ(h.counts, (std::vector<std::uint64_t>{0, 1, 1}));
  EXPECT_EQ(h.count, 2u);
  EXPECT_TRUE(std::isnan(h.sum));
  Family f{"x_seconds", "X.", Type::histogram, {}, {{{}, h}}};
  EXPECT_CONTAINS(exposition({f}),
                  "x_seconds_bucket{le=\"2\"} 1\nx_seconds_bucket{le=\"+Inf\"} 2\nx_seconds_sum NaN\n");
}

TEST(PrometheusText, BadNamesAndInconsistentSamplesAreRefusedWithTheirNames) {
  auto refused = [](const Family& f, const std::string& why) {
    try {
      exposition({f});
      ADD_FAILURE() << "accepted " << f.name;
    } catch (const std::invalid_argument& e) {
      EXPECT_CONTAINS(e.what(), why);
    }
  };
  refused(Family{"troupe-step", "", Type::gauge, {{{}, 1}}, {}}, "'troupe-step' is not a valid Prometheus metric name");
  refused(Family{"1step", "", Type::gauge, {{{}, 1}}, {}}, "'1step'");
  refused(Family{"", "", Type::gauge, {{{}, 1}}, {}}, "'' is not a valid");
  refused(Family{"s", "", Type::gauge, {{{{"node name", "1"}}, 1}}, {}}, "label name 'node name'");
  refused(Family{"s", "", Type::gauge, {{{{"__name__", "x"}}, 1}}, {}}, "label name '__name__'");
  refused(Family{"s", "", Type::gauge, {{{{"a:b", "x"}}, 1}}, {}}, "label name 'a:b'");
  refused(Family{"s", "", Type::gauge, {{{{"a", "1"}, {"a", "2"}}, 1}}, {}}, "label 'a' given twice");
  refused(Family{"s", "", Type::gauge, {{{{"node", "1"}}, 1}, {{{"node", "1"}}, 2}}, {}},
          "two samples with the labels {node=\"1\"}");
  refused(Family{"s", "", Type::gauge, {{{}, 1}, {{}, 2}}, {}}, "two samples with the labels {}");
  refused(Family{"h", "", Type::histogram, {}, {{{{"le", "1"}}, Histogram({1})}}}, "'le' is reserved");
  refused(Family{"h", "", Type::histogram, {{{}, 1}}, {}}, "is a histogram but has samples of another type");
  refused(Family{"g", "", Type::gauge, {}, {{{}, Histogram({1})}}}, "is a gauge but has samples of another type");
  Histogram broken({1});
  broken.count = 3;  // counts add up to 0
  refused(Family{"h", "", Type::histogram, {}, {{{}, broken}}}, "add up to 0, not its count 3");
  Family twice{"s", "", Type::gauge, {{{}, 1}}, {}};
  EXPECT_THROW(exposition({twice, twice}), std::invalid_argument);
  // Colons are allowed in metric names (recording rules use them).
  EXPECT_NO_THROW(exposition({Family{"job:troupe_step:rate1m", "", Type::gauge, {{{}, 1}}, {}}}));

  EXPECT_THROW(Histogram({1, 1}), std::invalid_argument);
  EXPECT_THROW(Histogram({2, 1}), std::invalid_argument);
  EXPECT_THROW(Histogram({1, std::numeric_limits<double>::infinity()}), std::invalid_argument);
  EXPECT_THROW(Histogram({std::nan("")}), std::invalid_argument);
}

}  // namespace
}  // namespace troupe::net::prometheus
