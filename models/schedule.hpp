// Learning-rate schedules, as text so they fit a command line, a job file and
// a checkpoint:
//
//   constant                     lr
//   piecewise:3=1e-4,7=1e-5      lr until epoch 3 (0-based), then 1e-4, from epoch 7 1e-5
//                                (the seed tutorial's decay; boundaries in epochs)
//   piecewise-steps:1000=1e-4    the same with boundaries in global steps
//   exponential:0.96/1000        lr * 0.96^(step / 1000)
//   exponential:0.96/1000/staircase   ... with floor(step / 1000)
//   cosine:10000                 lr * (0.5 (1 + cos(pi min(step, 10000) / 10000)))
//   cosine:10000/0.1             ... decaying to 0.1 lr rather than 0
//   warmup-cosine:10000/0.1      linear warm-up to lr over the W warm-up steps,
//                                lr (step + 1) / W, then cosine from lr at step
//                                W to 0.1 lr at step 10000 (the end of training):
//                                a lr + (1 - a) lr 0.5 (1 + cos(pi (step - W) / max(1, 10000 - W))),
//                                and a lr after it; the PyTorch anchors' lr_at()
//
// Optional linear warm-up over the first N steps multiplies any of the
// others by min(1, (step + 1) / N); warmup-cosine starts its cosine where
// the warm-up ends instead.
//
// `cosine` and `warmup-cosine` may leave out their step count (with or
// without the final fraction: `warmup-cosine`, `warmup-cosine:/0.1`): they
// then end with the training, at the step resolve_training_length()
// (models/trainer.hpp) finds from the epochs, the steps of an epoch and
// --steps, once the data is loaded. LrSchedule itself needs the count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::models {

// Whether `spec` leaves its length to the training (see above).
bool schedule_ends_with_training(const std::string& spec);

// `spec` with the training's last step as its length (unchanged when it
// names its own, or is not a cosine).
std::string schedule_with_length(const std::string& spec, std::int64_t total_steps);

class LrSchedule {
 public:
  // Throws std::invalid_argument naming the spec and the valid forms.
  LrSchedule(const std::string& spec, float base_lr, std::int64_t warmup_steps = 0);

  // The learning rate for a global step (0-based) taken during `epoch` (0-based).
  float at(std::int64_t step, std::int64_t epoch) const;

  const std::string& spec() const { return spec_; }
  float base_lr() const { return base_lr_; }
  std::int64_t warmup_steps() const { return warmup_; }

 private:
  enum class Kind { constant, piecewise_epochs, piecewise_steps, exponential, cosine, warmup_cosine };
  std::string spec_;
  float base_lr_;
  std::int64_t warmup_;
  Kind kind_ = Kind::constant;
  std::vector<std::pair<std::int64_t, float>> boundaries_;
  double rate_ = 1.0, alpha_ = 0.0;
  std::int64_t period_ = 1;
  bool staircase_ = false;
};

}  // namespace troupe::models
