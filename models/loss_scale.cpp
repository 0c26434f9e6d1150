#include "models/loss_scale.hpp"

#include <cmath>

#include "kernels/ops.hpp"
#include "models/step.hpp"

namespace troupe::models {

bool LossScale::unscale(const kernels::Tensor& grads, std::int64_t step, int replica) {
  if (!enabled_) return true;
  // One reduction decides: a sum is finite only when every element is.
  if (!std::isfinite(kernels::ops::sum(grads))) {
    if (scale_ <= 1.0)
      throw NonFiniteError("the gradient is not finite at step " + std::to_string(step) +
                           (replica >= 0 ? " of replica " + std::to_string(replica) : "") +
                           " with the fp16 loss scale already down to " + std::to_string(scale_) +
                           ": training diverged (try a lower --lr, a warm-up, or --precision bf16)");
    scale_ *= kBackoff;
    good_steps_ = 0;
    ++skipped_;
    return false;
  }
  kernels::ops::scale(grads, static_cast<float>(1.0 / scale_));
  if (++good_steps_ >= kGrowthInterval) {
    scale_ *= kGrowth;
    good_steps_ = 0;
  }
  return true;
}

std::vector<std::pair<std::string, double>> LossScale::scalars() const {
  if (!enabled_) return {};
  return {{"loss_scale", scale_},
          {"loss_scale_good_steps", static_cast<double>(good_steps_)},
          {"loss_scale_skipped", static_cast<double>(skipped_)}};
}

bool LossScale::set(const std::string& name, double value) {
  if (name == "loss_scale")
    scale_ = value;
  else if (name == "loss_scale_good_steps")
    good_steps_ = static_cast<std::int64_t>(value);
  else if (name == "loss_scale_skipped")
    skipped_ = static_cast<std::int64_t>(value);
  else
    return false;
  return true;
}

}  // namespace troupe::models
