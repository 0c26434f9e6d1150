// Optimizers over a model's flat buffers: one fused kernel call per step for
// the whole model (kernels/ops.hpp), whatever the number of layers.
//
//   sgd    PyTorch's SGD: momentum, Nesterov, L2 weight decay
//   adam   Adam with bias correction (Kingma & Ba), epsilon 1e-8 as PyTorch
//          (the benchmark anchor; Keras uses 1e-7: --epsilon 1e-7)
//   nadam  Keras' Nadam (Dozat 2016, with its momentum schedule)
//
// The learning rate is passed to every step; schedules live in schedule.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe::models {

using kernels::Tensor;

struct OptimizerConfig {
  std::string name = "adam";
  float momentum = 0.0f;                                // sgd
  bool nesterov = false;                                // sgd
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // adam, nadam
  float weight_decay = 0.0f;

  // "KEY=VALUE ..." form stored in checkpoints, e.g. "adam beta1=0.9 ...".
  std::string text() const;
  static OptimizerConfig parse(const std::string& text);
};

std::vector<std::string> optimizer_names();  // sgd, adam, nadam

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  const OptimizerConfig& config() const { return config_; }

  // One update of `params` from `grads` with learning rate `lr`.
  virtual void step(const Tensor& params, const Tensor& grads, float lr) = 0;
  std::int64_t steps() const { return steps_; }

  // State for checkpoints and for handing over between replicas and the
  // parameter server: named buffers like the parameters ("m", "v",
  // "velocity") and named scalars ("steps", "m_schedule").
  virtual std::vector<std::pair<std::string, Tensor>> buffers() const { return {}; }
  virtual std::vector<std::pair<std::string, double>> scalars() const;
  virtual void set_scalar(const std::string& name, double value);

 protected:
  explicit Optimizer(OptimizerConfig config) : config_(std::move(config)) {}
  OptimizerConfig config_;
  std::int64_t steps_ = 0;
};

// Throws std::invalid_argument listing the known names for an unknown one.
// State buffers are allocated like `params` (zeros).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const Tensor& params);

}  // namespace troupe::models
