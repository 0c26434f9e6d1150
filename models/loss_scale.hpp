// Dynamic loss scaling for --precision fp16, as PyTorch's GradScaler and
// Keras's LossScaleOptimizer do it. IEEE half ends at 65504 and loses
// everything below 2^-24, where many gradients lie: the loss's gradient is
// multiplied by the scale S before backward (so the matmuls' fp16 inputs
// stay above the underflow), and the parameters' gradients are divided by S
// before they are clipped and applied. A gradient that is not finite means
// S was too large for fp16 (an overflow): that step is skipped (nothing
// applied, the optimizer's own step count unchanged; the data and the
// learning-rate schedule move on, as PyTorch's do) and S halves. After
// kGrowthInterval finite steps in a row S doubles, probing for the largest
// scale that does not overflow. This is not the "gradient is not finite"
// stop of fp32 and bf16; only an overflow with S already at 1 (no scale
// left to give) stops training, as diverged.
//
// The state (S, the finite steps since it last changed, the steps skipped)
// is the optimizer's (Optimizer::loss_scale, exported among its scalars), so
// it is checkpointed, resumed exactly and handed to every replica with the
// optimizer state; in sync every replica decides on the same all-reduced
// gradient with the same S, so they all skip the same steps.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe::models {

class LossScale {
 public:
  static constexpr double kInitial = 65536.0;  // 2^16, PyTorch's init_scale
  static constexpr double kGrowth = 2.0, kBackoff = 0.5;
  static constexpr std::int64_t kGrowthInterval = 2000;

  // Off until enabled (--precision fp16): factor() is then 1 and nothing
  // is exported.
  void enable() { enabled_ = true; }
  bool enabled() const { return enabled_; }

  // What the loss's gradient is multiplied by: S, or 1 when off.
  float factor() const { return enabled_ ? static_cast<float>(scale_) : 1.0f; }
  double scale() const { return scale_; }
  std::int64_t skipped() const { return skipped_; }

  // After backward (in sync, after the all-reduce). True: `grads` was
  // finite and is now divided by S; the step goes on. False: it overflowed,
  // the step must be skipped, S halved. Throws NonFiniteError (step.hpp)
  // naming `step` and `replica` when it overflows with S at 1 or below.
  bool unscale(const kernels::Tensor& grads, std::int64_t step, int replica = -1);

  // "loss_scale", "loss_scale_good_steps", "loss_scale_skipped" (only when
  // enabled); set() takes them back (false for other names) without
  // enabling it: an fp16 checkpoint resumed in fp32 or bf16 scales nothing.
  std::vector<std::pair<std::string, double>> scalars() const;
  bool set(const std::string& name, double value);

 private:
  bool enabled_ = false;
  double scale_ = kInitial;
  std::int64_t good_steps_ = 0, skipped_ = 0;
};

}  // namespace troupe::models
