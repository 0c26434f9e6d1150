#include "models/step.hpp"

#include <cmath>

#include "kernels/math/random.hpp"
#include "kernels/ops.hpp"

namespace troupe::models {

std::uint64_t step_seed(std::uint64_t seed, int rank, std::int64_t step) {
  return kernels::math::random_bits(seed ^ (0x9e37ULL * static_cast<std::uint64_t>(rank + 1)),
                                    static_cast<std::uint64_t>(step));
}

Tensor& output_gradient_buffer(Tensor& dout, const Tensor& output) {
  if (!dout.defined() || dout.raw() == nullptr || dout.shape() != output.shape() || dout.device() != output.device())
    dout = Tensor::empty(output.shape(), kernels::DType::f32, output.device());
  return dout;
}

StepResult forward_backward(Model& model, Loss& loss, const Tensor& x, const Tensor& y, float grad_scale, Tensor& dout,
                            StepTimes* times) {
  using Clock = std::chrono::steady_clock;
  if (times) times->forward = Clock::now();
  const Tensor& out = model.forward(x, /*training=*/true);
  const double loss_sum = loss.sum(out, y, output_gradient_buffer(dout, out), grad_scale);
  if (times) times->backward = Clock::now();
  model.backward(dout);
  if (times) times->end = Clock::now();
  return {loss_sum, &out};
}

namespace {
std::string at(std::int64_t step, int replica) {
  return "at step " + std::to_string(step) + (replica >= 0 ? " of replica " + std::to_string(replica) : "");
}
constexpr const char* kAdvice = ": training diverged (try a lower --lr or a warm-up)";
}  // namespace

void check_loss_finite(double loss_sum, std::int64_t step, int replica) {
  if (!std::isfinite(loss_sum))
    throw NonFiniteError("the training loss is not finite (" + std::to_string(loss_sum) + ") " + at(step, replica) +
                         kAdvice);
}

void check_gradient_finite(const Tensor& gradient, std::int64_t step, int replica) {
  if (!std::isfinite(kernels::ops::sum(gradient)))
    throw NonFiniteError("the gradient is not finite " + at(step, replica) + kAdvice);
}

}  // namespace troupe::models
