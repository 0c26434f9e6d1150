#include "models/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace troupe::models {

namespace {

const char* forms =
    "constant, piecewise:EPOCH=LR[,EPOCH=LR...], piecewise-steps:STEP=LR[,...], "
    "exponential:RATE/STEPS[/staircase], cosine:STEPS[/FINAL_FRACTION], warmup-cosine:TOTAL_STEPS[/FINAL_FRACTION]";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  return out;
}

double number(const std::string& text, const std::string& spec) {
  try {
    std::size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {}
  throw std::invalid_argument("learning-rate schedule '" + spec + "': '" + text +
                              "' is not a number; valid forms: " + forms);
}

// Step and epoch counts are int64; a double at or past 2^63 cannot be
// converted to one (undefined behaviour: fuzz/job_file found
// "cosine:1e37"), so it is refused first.
constexpr double kCountLimit = 9223372036854775808.0;  // 2^63

// "cosine" or "warmup-cosine", and what follows its colon.
bool cosine_kind(const std::string& spec, std::string& args) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  args = colon == std::string::npos ? "" : spec.substr(colon + 1);
  return kind == "cosine" || kind == "warmup-cosine";
}

}  // namespace

bool schedule_ends_with_training(const std::string& spec) {
  std::string args;
  return cosine_kind(spec, args) && (args.empty() || args.front() == '/');
}

std::string schedule_with_length(const std::string& spec, std::int64_t total_steps) {
  if (!schedule_ends_with_training(spec)) return spec;
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string fraction = colon == std::string::npos ? "" : spec.substr(colon + 1);
  return kind + ":" + std::to_string(total_steps) + fraction;
}

LrSchedule::LrSchedule(const std::string& spec, float base_lr, std::int64_t warmup_steps)
    : spec_(spec), base_lr_(base_lr), warmup_(warmup_steps) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("learning-rate schedule '" + spec + "': " + why + "; valid forms: " + forms);
  };
  if (!(base_lr > 0.0f) || !std::isfinite(base_lr)) fail("the learning rate must be positive");
  if (warmup_steps < 0) fail("warm-up steps must be >= 0");
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string args = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "constant" && args.empty()) {
    kind_ = Kind::constant;
  } else if ((kind == "piecewise" || kind == "piecewise-steps") && !args.empty()) {
    kind_ = kind == "piecewise" ? Kind::piecewise_epochs : Kind::piecewise_steps;
    for (const auto& item : split(args, ',')) {
      auto eq = item.find('=');
      if (eq == std::string::npos) fail("'" + item + "' is not BOUNDARY=LR");
      double b = number(item.substr(0, eq), spec), lr = number(item.substr(eq + 1), spec);
      if (b < 0 || b != std::floor(b)) fail("boundary '" + item.substr(0, eq) + "' must be a whole number >= 0");
      if (b >= kCountLimit) fail("boundary '" + item.substr(0, eq) + "' is too large (at most 2^63 - 1)");
      if (lr <= 0) fail("learning rate '" + item.substr(eq + 1) + "' must be positive");
      if (!(lr < 0x1.ffffffp+127))  // FLT_MAX + half an ulp: rounds to infinity as a float
        fail("learning rate '" + item.substr(eq + 1) + "' is beyond a 32-bit float");
      if (!boundaries_.empty() && b <= boundaries_.back().first) fail("boundaries must increase");
      boundaries_.emplace_back(static_cast<std::int64_t>(b), static_cast<float>(lr));
    }
  } else if (kind == "exponential" && !args.empty()) {
    kind_ = Kind::exponential;
    auto parts = split(args, '/');
    if (parts.size() < 2 || parts.size() > 3) fail("expected RATE/STEPS[/staircase]");
    rate_ = number(parts[0], spec);
    double p = number(parts[1], spec);
    if (rate_ <= 0 || p < 1) fail("rate must be > 0 and steps >= 1");
    if (p >= kCountLimit) fail("steps '" + parts[1] + "' is too large (at most 2^63 - 1)");
    period_ = static_cast<std::int64_t>(p);
    if (parts.size() == 3) {
      if (parts[2] != "staircase") fail("'" + parts[2] + "' is not 'staircase'");
      staircase_ = true;
    }
  } else if (schedule_ends_with_training(spec)) {
    fail(
        "its length in steps is left to the training, which only troupe train and the C++ API know here (a "
        "cluster job's steps per epoch follow its views): give it, e.g. " +
        kind + ":" + "10000" + (args.empty() ? "" : args));
  } else if ((kind == "cosine" || kind == "warmup-cosine") && !args.empty()) {
    kind_ = kind == "cosine" ? Kind::cosine : Kind::warmup_cosine;
    auto parts = split(args, '/');
    if (parts.size() > 2) fail("expected STEPS[/FINAL_FRACTION]");
    double p = number(parts[0], spec);
    if (p < 1) fail("steps must be >= 1");
    if (p >= kCountLimit) fail("steps '" + parts[0] + "' is too large (at most 2^63 - 1)");
    period_ = static_cast<std::int64_t>(p);
    if (parts.size() == 2) alpha_ = number(parts[1], spec);
    if (alpha_ < 0 || alpha_ > 1) fail("the final fraction must be in [0, 1]");
    if (kind_ == Kind::warmup_cosine && warmup_ > period_)
      fail("the warm-up (" + std::to_string(warmup_) + " steps) must not be longer than the training (" +
           std::to_string(period_) + " steps)");
  } else {
    fail("unknown form");
  }
}

float LrSchedule::at(std::int64_t step, std::int64_t epoch) const {
  double lr = base_lr_;
  switch (kind_) {
    case Kind::constant:
      break;
    case Kind::piecewise_epochs:
    case Kind::piecewise_steps: {
      const std::int64_t t = kind_ == Kind::piecewise_epochs ? epoch : step;
      for (const auto& [boundary, value] : boundaries_)
        if (t >= boundary) lr = value;
      break;
    }
    case Kind::exponential: {
      double e = double(step) / double(period_);
      if (staircase_) e = std::floor(e);
      lr = base_lr_ * std::pow(rate_, e);
      break;
    }
    case Kind::cosine: {
      const double pi = 3.14159265358979323846;
      double progress = double(std::min(step, period_)) / double(period_);
      lr = base_lr_ * ((1.0 - alpha_) * 0.5 * (1.0 + std::cos(pi * progress)) + alpha_);
      break;
    }
    case Kind::warmup_cosine: {
      // As the anchors' lr_at(): the cosine starts at the peak where the
      // warm-up ends and reaches alpha * peak at the last step.
      if (step < warmup_) return static_cast<float>(double(base_lr_) * double(step + 1) / double(warmup_));
      const double pi = 3.14159265358979323846;
      const double span = double(std::max<std::int64_t>(1, period_ - warmup_));
      const double progress = std::min(1.0, double(step - warmup_) / span);
      const double low = alpha_ * double(base_lr_);
      return static_cast<float>(low + 0.5 * (double(base_lr_) - low) * (1.0 + std::cos(pi * progress)));
    }
  }
  if (warmup_ > 0) lr *= std::min(1.0, double(step + 1) / double(warmup_));
  return static_cast<float>(lr);
}

}  // namespace troupe::models
