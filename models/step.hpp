// One training step's compute on one replica: the step seed, forward,
// loss, backward and the finite checks. Every driver calls these (as
// llm.c's drivers all call one gpt2_forward / gpt2_backward): the
// single-device Trainer (trainer.cpp), the device actor
// (actors/device.cpp: sync, async, ssp) and the custom training loop
// (api/custom_loop.cpp, where the user's step function calls forward and
// compute_average_loss and this file does the rest). What the drivers do
// with the gradient afterwards differs (applied, all-reduced, pushed); how
// it is made does not, so one replica of a job, the Trainer and a custom
// loop of one replica take the same steps, with the same dropout masks,
// and fail with the same message.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/tensor.hpp"
#include "models/loss.hpp"
#include "models/model.hpp"

namespace troupe::models {

using kernels::Tensor;

// The seed of replica `rank`'s step `step` (the steps it completed before
// this one): what the layers draw their masks from (dropout). The Trainer
// is rank 0. Distinct for every replica, so R replicas of batch B do not
// all drop the same units.
std::uint64_t step_seed(std::uint64_t seed, int rank, std::int64_t step);

// The loss's output-gradient buffer, (re)allocated for `output`'s shape on
// its device when it has another shape (the last, partial batch) or none.
Tensor& output_gradient_buffer(Tensor& dout, const Tensor& output);

// When each part of a step began and ended, for the timeline.
struct StepTimes {
  std::chrono::steady_clock::time_point forward, backward, end;
};

struct StepResult {
  double loss_sum = 0;             // the batch's loss sum (unscaled)
  const Tensor* output = nullptr;  // the model's output: valid until its next forward
};

// Forward (training) of `x`, the loss against `y` with its gradient scaled
// by `grad_scale` into `dout` (1 / global batch in sync: the replicas'
// gradients are then summed; 1 / batch alone), and backward, which writes
// the parameters' gradients into model.gradients(). x and y are on the
// model's device; the step seed is set before (step_seed).
StepResult forward_backward(Model& model, Loss& loss, const Tensor& x, const Tensor& y, float grad_scale, Tensor& dout,
                            StepTimes* times = nullptr);

// A diverged step must not be applied: the state before it is the last
// finite one. `step` is the step that diverged (1-based: the replica's
// clock after it), `replica` its rank or -1 for a single device. The
// message names what diverged, where, and what to try.
struct NonFiniteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void check_loss_finite(double loss_sum, std::int64_t step, int replica = -1);
void check_gradient_finite(const Tensor& gradient, std::int64_t step, int replica = -1);

}  // namespace troupe::models
