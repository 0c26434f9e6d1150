// What `troupe train` shows and writes while it runs: a progress bar on a
// terminal (plain log lines otherwise), the per-epoch report, the --metrics
// file (CSV, or JSON lines when the name ends in .jsonl) and the
// --summary-json file.
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
  void write_summary(const std::string& path, const models::TrainResult& result,
                     const models::TrainConfig& config) const;

 private:
  void metrics_row(const char* kind, std::int64_t epoch, std::int64_t step, double loss, double accuracy,
                   double samples_per_s, float lr, const models::EpochResult* eval);

  std::int64_t epochs_, log_every_;
  bool tty_;
  std::unique_ptr<std::ofstream> metrics_;
  bool jsonl_ = false;
  std::int64_t epoch_ = 0, steps_in_epoch_ = 0;
  float lr_ = 0;
  double loss_avg_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
};

// One --metrics JSON line (no newline) and the --summary-json text. Strings
// are escaped and non-finite numbers written as null, so both always parse.
// `eval` adds test_loss, test_accuracy and test_top5 (an epoch row).
std::string metrics_json_line(const char* kind, std::int64_t epoch, std::int64_t step, double loss,
                              double accuracy, double samples_per_s, float lr, const models::EpochResult* eval);
std::string summary_json(const models::TrainResult& result, const models::TrainConfig& config,
                         double peak_memory_mib);

// Writes `text` to `path` atomically (temporary file, then rename).
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace troupe::cli
