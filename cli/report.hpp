// What `troupe train` shows and writes while it runs: a progress bar on a
// terminal (plain log lines otherwise), the per-epoch report, the --metrics
// file (CSV, or JSON lines when the name ends in .jsonl) and the
// --summary-json file.
//
// --metrics rows, by `kind`: "step" every --log-every steps (the epoch's
// running loss), "epoch" at each epoch end (with its evaluation), "eval" at
// every evaluation of the actor runtime (eval_every and epoch ends: the test
// metrics as training goes), "view" when a cluster's membership changes (and
// at the start of a cluster job). Every row ends with `seconds` (wall time
// since the job started) and `world` (replicas in the current membership
// view; empty while unknown), so accuracy and world size can be plotted
// against time (examples/elastic does).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "models/trainer.hpp"

namespace troupe::cli {

class Report {
 public:
  // Throws std::runtime_error naming a metrics file that cannot be created.
  Report(std::int64_t epochs, std::int64_t log_every, const std::string& metrics_path);

  models::Callbacks callbacks();
  // The replicas of a job whose membership does not change (one host).
  void set_world(int world) { world_ = world; }
  // A language model's text (Dataset::window): the tokens of one example,
  // T. Lines then say tokens/s, the result line perplexity, and the
  // summary tokens_per_s and perplexity. 0: not text (the default).
  void set_tokens_per_example(std::int64_t tokens) { tokens_ = tokens; }
  std::int64_t tokens_per_example() const { return tokens_; }
  void write_summary(const std::string& path, const models::TrainResult& result,
                     const models::TrainConfig& config) const;
  // Ends the progress bar's line, if one is open (a job stopped by --steps
  // mid-epoch), so that what is printed next starts a line of its own.
  void close_bar();

 private:
  void metrics_row(const char* kind, std::int64_t epoch, std::int64_t step, double loss, double accuracy,
                   double samples_per_s, float lr, const models::EpochResult* eval);
  double seconds() const;

  std::int64_t epochs_, log_every_;
  bool tty_;
  bool bar_open_ = false;  // the bar was drawn and its line not ended
  std::unique_ptr<std::ofstream> metrics_;
  bool jsonl_ = false;
  std::int64_t epoch_ = 0, steps_in_epoch_ = 0;
  float lr_ = 0;
  double loss_avg_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int world_ = 0;  // replicas in the current view; 0: unknown
  std::int64_t tokens_ = 0;
  // "1.2k samples/s", or a text's "76.8k tokens/s".
  std::string rate_text(double samples_per_s) const;
};

// One --metrics JSON line (no newline) and the --summary-json text. Strings
// are escaped and non-finite numbers written as null, so both always parse.
// `eval` adds test_loss, test_accuracy, test_top5 and test_mae (an epoch
// row; null where not measured);
// `seconds` and `world` (null when 0: unknown) end every row.
std::string metrics_json_line(const char* kind, std::int64_t epoch, std::int64_t step, double loss, double accuracy,
                              double samples_per_s, float lr, const models::EpochResult* eval, double seconds = 0,
                              int world = 0);
// With tokens_per_example > 0 (a language model's text): tokens_per_s
// (training steps only) and perplexity (exp of the test loss, nats per
// token) too; null otherwise.
std::string summary_json(const models::TrainResult& result, const models::TrainConfig& config, double peak_memory_mib,
                         std::int64_t tokens_per_example = 0);

// The test part of a result line: "test loss L accuracy A top-5 T",
// "test mse M mae E" (regression), "test loss L perplexity P accuracy A"
// (a language model's text: tokens > 0), or "no test data".
std::string test_figures(const models::EpochResult& result, std::int64_t tokens = 0);

// Writes `text` to `path` atomically (temporary file, then rename).
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace troupe::cli
