// The Prometheus text exposition format, version 0.0.4: what GET /metrics
// answers (Content-Type kContentType). Written here, not with Debian 12's
// prometheus-cpp (1.0.1): net/control/README.md says why ("/metrics: the
// format, and why not prometheus-cpp").
//
//   # HELP troupe_step The global step: updates applied to the model.
//   # TYPE troupe_step gauge
//   troupe_step 1200
//   # HELP troupe_step_seconds Wall time of one training step on a replica.
//   # TYPE troupe_step_seconds histogram
//   troupe_step_seconds_bucket{node="1",le="0.005"} 3
//   troupe_step_seconds_bucket{node="1",le="0.01"} 17
//   troupe_step_seconds_bucket{node="1",le="+Inf"} 20
//   troupe_step_seconds_sum{node="1"} 0.1612
//   troupe_step_seconds_count{node="1"} 20
//
// Rules it follows (https://prometheus.io/docs/instrumenting/exposition_formats/):
// one `# HELP` and one `# TYPE` line per family, before its samples; help
// text escapes `\` and newline, label values also `"`; values are Go
// ParseFloat numbers, with NaN, +Inf and -Inf spelled so; a histogram's
// buckets are cumulative, ascending in `le`, end with le="+Inf" equal to
// `_count`, and are followed by `_sum` and `_count`. No timestamps: the
// server stamps a sample with its scrape time.
//
//   prometheus::Family f{"troupe_step", "The global step.", prometheus::Type::gauge};
//   f.values.push_back({{}, 1200});
//   std::string text = prometheus::exposition({f});
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace troupe::net::prometheus {

constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// Label name -> value, written in this order. "le" is reserved for
// histogram buckets.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A histogram with fixed upper bounds. counts[i] holds the observations in
// (bounds[i-1], bounds[i]]; the last entry those above every bound. They are
// made cumulative when written. A NaN observation counts only in +Inf and
// makes the sum NaN, as Prometheus' own client libraries do.
struct Histogram {
  Histogram() = default;
  // Finite, strictly increasing bounds (std::invalid_argument otherwise).
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  std::vector<double> bounds;
  std::vector<std::uint64_t> counts;  // bounds.size() + 1
  double sum = 0;
  std::uint64_t count = 0;
};

enum class Type { gauge, counter, histogram };

// One metric family: its samples differ by their labels. A gauge or counter
// family uses `values`, a histogram family `histograms`.
struct Family {
  std::string name, help;
  Type type = Type::gauge;
  std::vector<std::pair<Labels, double>> values;
  std::vector<std::pair<Labels, Histogram>> histograms;
};

// The text of every family with at least one sample, in order. Throws
// std::invalid_argument for a metric or label name Prometheus would refuse
// (a bug in the caller, named in the message), or a family whose samples do
// not match its type.
std::string exposition(const std::vector<Family>& families);

// The pieces, for tests: a value as Prometheus parses it ("1200", "0.25",
// "1e-07", "NaN", "+Inf", "-Inf"; the shortest text that reads back to the
// same double), a label value between its quotes, and help text.
std::string format_value(double value);
std::string escape_label_value(const std::string& value);
std::string escape_help(const std::string& help);

}  // namespace troupe::net::prometheus
