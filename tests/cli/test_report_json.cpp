// cli/report: the --metrics .jsonl lines and the --summary-json text are
// JSON that parses, whatever the numbers and strings hold (NaN and infinity
// become null; quotes, backslashes, newlines and bytes that are not UTF-8 are
// escaped or replaced; nothing is cut at a buffer size).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/report.hpp"

namespace troupe::cli {
namespace {

using Json = nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(ReportJson, MetricsLineWithNonFiniteNumbersParsesWithNulls) {
  const std::string line = metrics_json_line("step", 0, 7, std::nan(""), kInf, -kInf, 0.5f, nullptr);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  const Json row = Json::parse(line);
  EXPECT_EQ(row["kind"], "step");
  EXPECT_EQ(row["step"], 7);
  EXPECT_TRUE(row["loss"].is_null()) << line;
  EXPECT_TRUE(row["accuracy"].is_null()) << line;
  EXPECT_TRUE(row["samples_per_s"].is_null()) << line;
  EXPECT_DOUBLE_EQ(row["lr"].get<double>(), 0.5);
  EXPECT_FALSE(row.contains("test_loss"));
  EXPECT_TRUE(row["world"].is_null()) << line;  // unknown
  EXPECT_DOUBLE_EQ(row["seconds"].get<double>(), 0.0);
  const Json view =
      Json::parse(metrics_json_line("view", 0, 40, std::nan(""), std::nan(""), std::nan(""), 0.5f, nullptr, 12.5, 3));
  EXPECT_EQ(view["world"], 3);
  EXPECT_DOUBLE_EQ(view["seconds"].get<double>(), 12.5);

  models::EpochResult eval;
  eval.test_loss = std::nan("");
  eval.test_accuracy = 0.25;
  eval.test_top5 = kInf;
  const Json epoch = Json::parse(metrics_json_line("epoch", 1, 9, 1.5, 0.75, 1e9, 1e-3f, &eval));
  EXPECT_TRUE(epoch["test_loss"].is_null());
  EXPECT_DOUBLE_EQ(epoch["test_accuracy"].get<double>(), 0.25);
  EXPECT_TRUE(epoch["test_top5"].is_null());
  EXPECT_DOUBLE_EQ(epoch["loss"].get<double>(), 1.5);
}

TEST(ReportJson, SummaryEscapesStringsKeepsLongOnesAndNullsNonFinite) {
  models::TrainResult r;
  r.steps = 50;
  r.final.test_loss = std::nan("");
  r.final.test_accuracy = kInf;
  r.final.test_top5 = 0.5;
  r.samples_per_s = std::nan("");
  r.wall_seconds = 1.25;
  r.resumed_from = std::string(5000, 'p') + "/ckpt \"quoted\"\nnext\\line\x01\xff";
  models::TrainConfig c;
  c.model = "mlp\"}, \"injected\": true, {\"";
  c.data = "csv:/tmp/a \"b\".csv";
  c.batch = 64;
  const std::string text = summary_json(r, c, std::nan(""));
  const Json s = Json::parse(text);
  EXPECT_EQ(s["model"], c.model);
  EXPECT_FALSE(s.contains("injected"));
  EXPECT_EQ(s["data"], c.data);
  EXPECT_EQ(s["steps"], 50);
  EXPECT_EQ(s["batch"], 64);
  EXPECT_TRUE(s["test_loss"].is_null());
  EXPECT_TRUE(s["test_accuracy"].is_null());
  EXPECT_TRUE(s["samples_per_s"].is_null());
  EXPECT_TRUE(s["peak_memory_mib"].is_null());
  EXPECT_DOUBLE_EQ(s["test_top5"].get<double>(), 0.5);
  EXPECT_EQ(s["stopped_early"], false);
  // The invalid UTF-8 byte is replaced (U+FFFD); everything else survives.
  const std::string resumed = s["resumed_from"].get<std::string>();
  EXPECT_EQ(resumed.size(), r.resumed_from.size() - 1 + 3) << "cut or altered";
  EXPECT_EQ(resumed.substr(0, 5000 + 22), r.resumed_from.substr(0, 5000 + 22));
  // Human-readable layout kept: one field per line.
  EXPECT_NE(text.find("\n  \"steps\": 50,\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace troupe::cli
