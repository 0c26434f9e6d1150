#include "cli/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace troupe::cli {

namespace {

std::string human_rate(double per_s) {
  char buf[32];
  if (per_s >= 1000)
    std::snprintf(buf, sizeof buf, "%.1fk", per_s / 1000);
  else
    std::snprintf(buf, sizeof buf, "%.0f", per_s);
  return buf;
}

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

// A CSV cell: a number, or nothing where it was not measured (NaN).
std::string cell(double value) {
  if (std::isnan(value)) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  return buf;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

}  // namespace

std::string test_figures(const models::EpochResult& r, std::int64_t tokens) {
  char text[128];
  if (!r.has_test())
    return "no test data";
  else if (tokens > 0)
    std::snprintf(text, sizeof text, "test loss %.4f perplexity %.3f accuracy %.4f", r.test_loss, std::exp(r.test_loss),
                  r.test_accuracy);
  else if (r.regression)
    std::snprintf(text, sizeof text, "test mse %.4f mae %.4f", r.test_loss, r.test_mae);
  else
    std::snprintf(text, sizeof text, "test loss %.4f accuracy %.4f top-5 %.4f", r.test_loss, r.test_accuracy,
                  r.test_top5);
  return text;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + path + ": cannot create " + tmp);
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw std::runtime_error("cannot write " + path + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": rename failed");
  }
}

Report::Report(std::int64_t epochs, std::int64_t log_every, const std::string& metrics_path)
    : epochs_(epochs), log_every_(log_every), tty_(::isatty(STDERR_FILENO) == 1) {
  if (!metrics_path.empty()) {
    metrics_ = std::make_unique<std::ofstream>(metrics_path, std::ios::trunc);
    if (!*metrics_) throw std::runtime_error("--metrics " + metrics_path + ": cannot create the file");
    jsonl_ = metrics_path.size() > 6 && metrics_path.substr(metrics_path.size() - 6) == ".jsonl";
    if (!jsonl_)
      *metrics_ << "kind,epoch,step,loss,accuracy,samples_per_s,lr,test_loss,test_accuracy,test_top5,test_mae,seconds,"
                   "world\n";
  }
}

double Report::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Report::rate_text(double samples_per_s) const {
  if (tokens_ > 0) return human_rate(samples_per_s * static_cast<double>(tokens_)) + " tokens/s";
  return human_rate(samples_per_s) + " samples/s";
}

void Report::metrics_row(const char* kind, std::int64_t epoch, std::int64_t step, double loss, double accuracy,
                         double samples_per_s, float lr, const models::EpochResult* eval) {
  if (!metrics_) return;
  if (jsonl_) {
    *metrics_ << metrics_json_line(kind, epoch, step, loss, accuracy, samples_per_s, lr, eval, seconds(), world_)
              << "\n";
  } else {
    // An empty cell where a figure was not measured (NaN), as a spreadsheet
    // or pandas reads a missing value.
    char rate[32] = "";
    if (!std::isnan(samples_per_s)) std::snprintf(rate, sizeof rate, "%.1f", samples_per_s);
    const std::string head = std::string(kind) + "," + std::to_string(epoch) + "," + std::to_string(step) + "," +
                             cell(loss) + "," + cell(accuracy) + "," + rate + "," + cell(double(lr));
    std::string test = ",,,,";
    if (eval)
      test = "," + cell(eval->test_loss) + "," + cell(eval->test_accuracy) + "," + cell(eval->test_top5) + "," +
             cell(eval->test_mae);
    *metrics_ << head << test << "," << seconds_text(seconds()) << "," << (world_ > 0 ? std::to_string(world_) : "")
              << "\n";
  }
  metrics_->flush();
}

models::Callbacks Report::callbacks() {
  models::Callbacks cb;
  cb.on_train_begin = [this](const models::Model& model, const data::Splits& splits) {
    tokens_ = splits.train.window;
    std::fprintf(stderr, "data: %s\n      %s\n", splits.train.describe().c_str(), splits.test.describe().c_str());
    std::fprintf(stderr, "%s", model.summary().c_str());
  };
  cb.on_epoch_begin = [this](std::int64_t epoch, std::int64_t steps, float lr) {
    epoch_ = epoch;
    steps_in_epoch_ = steps;
    lr_ = lr;
    loss_avg_ = 0;
    epoch_start_ = std::chrono::steady_clock::now();
  };
  // A new membership view: the epoch's batches follow the world size.
  cb.on_view_change = [this](std::int64_t step, int, int world, std::int64_t steps_in_epoch) {
    steps_in_epoch_ = steps_in_epoch;
    world_ = world;
    metrics_row("view", epoch_, step, std::nan(""), std::nan(""), std::nan(""), lr_, nullptr);
  };
  // Every evaluation (mid-epoch ones from eval_every, and epoch ends).
  cb.on_evaluate = [this](const models::EpochResult& r) {
    metrics_row("eval", r.epoch, r.step, r.train_loss, r.train_accuracy, std::nan(""), r.lr, &r);
  };
  cb.on_step_end = [this](const models::StepEnd& e) {
    const std::int64_t step = e.step, in_epoch = e.step_in_epoch;
    const double rate = e.samples_per_s;
    loss_avg_ = e.loss;  // the epoch's mean so far (Callbacks::on_step_end), as Keras' bar
    const bool log_now = log_every_ > 0 && step % log_every_ == 0;
    if (log_now) metrics_row("step", epoch_, step, e.loss, e.accuracy, rate, e.lr, nullptr);
    if (tty_) {
      if (in_epoch % 10 != 0 && in_epoch != steps_in_epoch_) return;  // redraw at most every 10 steps
      const int width = 30;
      const int filled = static_cast<int>(width * in_epoch / std::max<std::int64_t>(steps_in_epoch_, 1));
      std::string bar(filled, '=');
      if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
      const double eta = elapsed / double(in_epoch) * double(steps_in_epoch_ - in_epoch);
      bar_open_ = true;
      std::fprintf(stderr, "\repoch %lld/%lld [%s] %lld/%lld  %s  loss %.4f  ETA %s ",
                   static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_), bar.c_str(),
                   static_cast<long long>(in_epoch), static_cast<long long>(steps_in_epoch_), rate_text(rate).c_str(),
                   loss_avg_, clock_text(eta).c_str());
    } else if (log_now) {
      std::fprintf(stderr, "epoch %lld step %lld/%lld  loss %.4f  %s\n", static_cast<long long>(epoch_ + 1),
                   static_cast<long long>(in_epoch), static_cast<long long>(steps_in_epoch_), loss_avg_,
                   rate_text(rate).c_str());
    }
  };
  cb.on_epoch_end = [this](const models::EpochResult& r) {
    close_bar();
    // Keras' epoch line: steps, time per step, the epoch's mean loss and
    // accuracy (the same figures the bar ended on), then the evaluation.
    char train_accuracy[32] = "";
    if (!std::isnan(r.train_accuracy))
      std::snprintf(train_accuracy, sizeof train_accuracy, " accuracy %.4f", r.train_accuracy);
    const std::int64_t steps = std::max<std::int64_t>(steps_in_epoch_, 1);
    std::fprintf(stderr, "epoch %lld/%lld: %lld/%lld steps, %.1f s, %.0f ms/step | loss %.4f%s | %s | lr %.3g | %s\n",
                 static_cast<long long>(r.epoch + 1), static_cast<long long>(epochs_),
                 static_cast<long long>(steps_in_epoch_), static_cast<long long>(steps_in_epoch_), r.seconds,
                 1000.0 * r.seconds / double(steps), r.train_loss, train_accuracy, test_figures(r, tokens_).c_str(),
                 double(r.lr), rate_text(r.samples_per_s).c_str());
    metrics_row("epoch", r.epoch, r.step, r.train_loss, r.train_accuracy, r.samples_per_s, r.lr, &r);
  };
  // A switch prints a line of its own (mid-epoch ones too).
  cb.on_mode_switch = [this](std::int64_t step, const std::string& mode) {
    close_bar();
    std::fprintf(stderr, "step %lld: mode %s from here\n", static_cast<long long>(step), mode.c_str());
  };
  cb.on_checkpoint = [this](const std::string& path, std::int64_t step) {
    close_bar();
    std::fprintf(stderr, "checkpoint: %s (step %lld)\n", path.c_str(), static_cast<long long>(step));
  };
  return cb;
}

void Report::close_bar() {
  if (bar_open_) std::fprintf(stderr, "\n");
  bar_open_ = false;
}

void Report::write_summary(const std::string& path, const models::TrainResult& r, const models::TrainConfig& c) const {
  write_file_atomically(path, summary_json(r, c, models::peak_memory_mib(), tokens_));
}

// Both written with nlohmann-json: strings (model names, data paths) are
// escaped, bytes that are not UTF-8 replaced, and a non-finite number (a
// diverged loss) becomes null.
std::string metrics_json_line(const char* kind, std::int64_t epoch, std::int64_t step, double loss, double accuracy,
                              double samples_per_s, float lr, const models::EpochResult* eval, double seconds,
                              int world) {
  nlohmann::ordered_json row;
  row["kind"] = kind;
  row["epoch"] = epoch;
  row["step"] = step;
  row["loss"] = loss;
  row["accuracy"] = accuracy;
  row["samples_per_s"] = samples_per_s;
  row["lr"] = double(lr);
  if (eval) {
    row["test_loss"] = eval->test_loss;
    row["test_accuracy"] = eval->test_accuracy;
    row["test_top5"] = eval->test_top5;
    row["test_mae"] = eval->test_mae;
  }
  row["seconds"] = seconds;
  if (world > 0)
    row["world"] = world;
  else
    row["world"] = nullptr;
  return row.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string summary_json(const models::TrainResult& r, const models::TrainConfig& c, double peak_memory_mib,
                         std::int64_t tokens) {
  nlohmann::ordered_json summary;
  summary["model"] = c.model;
  summary["data"] = c.data;
  summary["epochs"] = r.epochs.size();
  summary["steps"] = r.steps;
  summary["batch"] = c.batch;
  // null where not measured (nlohmann-json writes NaN as null): every test
  // figure without test data, accuracy and top-5 in regression, where
  // test_loss is the mean squared error.
  summary["task"] = r.final.regression ? "regression" : "classification";
  summary["test_examples"] = r.final.test_examples;
  summary["test_accuracy"] = r.final.test_accuracy;
  summary["test_top5"] = r.final.test_top5;
  summary["test_loss"] = r.final.test_loss;
  summary["test_mae"] = r.final.test_mae;
  summary["samples_per_s"] = r.samples_per_s;
  // A language model's text: tokens (bytes) a second over the training
  // steps, and the test loss as a perplexity.
  const double nan = std::nan("");
  summary["context"] = tokens > 0 ? nlohmann::ordered_json(tokens) : nlohmann::ordered_json(nullptr);
  summary["tokens_per_s"] = tokens > 0 ? r.samples_per_s * static_cast<double>(tokens) : nan;
  summary["perplexity"] = tokens > 0 && r.final.has_test() ? std::exp(r.final.test_loss) : nan;
  // fp16's dynamic loss scale: the one device's trainer reports it (null in
  // fp32 and bf16, and from a job's replicas, which keep it among their
  // optimizer state).
  const bool fp16 = c.precision == "fp16" && r.loss_scale > 0;
  summary["precision"] = c.precision;
  summary["loss_scale"] = fp16 ? r.loss_scale : nan;
  summary["skipped_steps"] = fp16 ? nlohmann::ordered_json(r.skipped_steps) : nlohmann::ordered_json(nullptr);
  summary["wall_s"] = r.wall_seconds;
  summary["peak_memory_mib"] = peak_memory_mib;
  summary["stopped_early"] = r.stopped_early;
  summary["resumed_from"] = r.resumed_from;
  return summary.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace troupe::cli
