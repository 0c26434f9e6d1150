// A zoo model's training recipe: the settings `troupe train --model NAME`
// trains with unless the user gives them, so that `--model resnet` with no
// other flag is the run of its anchor (../shared/anchors/torch_resnet.py),
// as Keras applications and torchvision's reference scripts pair a network
// with the recipe it was measured with. Models without one keep
// TrainConfig's defaults (Adam 1e-3, batch 64: the other anchors' recipe).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "models/trainer.hpp"

namespace troupe::models {

struct Recipe {
  std::optional<std::int64_t> batch;  // per replica
  std::optional<std::string> optimizer;
  std::optional<float> lr, momentum, weight_decay, beta2, clip_norm;
  std::optional<bool> nesterov;
  std::optional<std::string> schedule;  // may end with the training (models/schedule.hpp)
  std::optional<double> warmup_epochs;
  std::optional<std::int64_t> warmup_steps;

  bool empty() const;
  // One line for the log and --help, e.g. "sgd nesterov momentum 0.9, lr 0.1, ...".
  std::string describe() const;
};

// The recipe of a zoo model (empty for those without one, and for spec files).
Recipe zoo_recipe(const std::string& model);

// Fills the settings of config.model's recipe that the user did not give.
// `given(key)` says whether they gave a setting, by its job-file key:
// batch, optimizer, lr, momentum, nesterov, weight_decay, beta2, clip_norm,
// schedule, warmup (--warmup or --warmup-epochs). A user who picks another
// optimizer owns its settings: then lr, momentum, nesterov, weight_decay and
// beta2 are not taken
// from the recipe either. Returns the settings applied, as describe() does
// (empty when none).
std::string apply_recipe(TrainConfig& config, const std::function<bool(const std::string& key)>& given);

}  // namespace troupe::models
