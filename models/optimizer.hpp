// Optimizers over a model's flat buffers: one fused kernel call per step for
// the whole model (kernels/ops.hpp), whatever the number of layers.
//
//   sgd    PyTorch's SGD: momentum, Nesterov, L2 weight decay
//   adam   Adam with bias correction (Kingma & Ba), epsilon 1e-8 as PyTorch
//          (the benchmark anchor; Keras uses 1e-7: --epsilon 1e-7), L2
//          weight decay added to the gradient (torch.optim.Adam)
//   adamw  torch.optim.AdamW: Adam with decoupled weight decay,
//          p -= lr * weight_decay * p beside the Adam step
//   nadam  Keras' Nadam (Dozat 2016, with its momentum schedule)
//
// Weight decay applies by tensor rank by default: to the parameter tensors
// of rank >= 2 (dense and conv kernels, embeddings), not to biases or
// BatchNorm's gamma and beta, as PyTorch recipes group them (p.dim() > 1).
// The caller passes where those tensors lie in the flat buffer
// (Model::decayed_ranges(), or a shard's part of it: slice_ranges);
// decay_all (optimizer text "decay=all") decays every element instead.
//
// The learning rate is passed to every step; schedules live in schedule.hpp.
// clip_norm is carried here so that it travels with the optimizer (job
// files, checkpoints' text), but Optimizer::step never clips: whoever holds
// the whole gradient calls clip_gradient_norm before the step (after the
// all-reduce in sync mode; on the pushing replica in async and ssp, so a
// sharded server needs no global norm).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/tensor.hpp"
#include "models/loss_scale.hpp"

namespace troupe::models {

using kernels::Tensor;

struct OptimizerConfig {
  std::string name = "adam";
  float momentum = 0.0f;                                // sgd
  bool nesterov = false;                                // sgd
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // adam, adamw, nadam
  float weight_decay = 0.0f;
  // false (the default): decay only the ranges passed to make_optimizer
  // (rank >= 2 tensors); true: every element, as before rank-based decay.
  bool decay_all = false;
  // Global gradient-norm clip (clip_gradient_norm); 0: none.
  float clip_norm = 0.0f;

  // "KEY=VALUE ..." form stored in checkpoints, e.g. "adam beta1=0.9 ...
  // weight_decay=0 decay=rank clip_norm=0"; parse reads every key text()
  // writes (a key left out keeps its default).
  std::string text() const;
  static OptimizerConfig parse(const std::string& text);
};

std::vector<std::string> optimizer_names();  // sgd, adam, adamw, nadam

// Ranges {offset, count} of a flat buffer, in order, not overlapping.
using FlatRanges = std::vector<std::pair<std::int64_t, std::int64_t>>;

// The part of `ranges` inside [offset, offset + count), shifted so that
// `offset` becomes 0: a shard's or a slice's view of a model's ranges.
FlatRanges slice_ranges(const FlatRanges& ranges, std::int64_t offset, std::int64_t count);

// Scales `grads` by min(1, max_norm / (||grads||_2 + 1e-6)), as
// torch.nn.utils.clip_grad_norm_, and returns ||grads||_2 before scaling.
// max_norm <= 0: nothing is done and 0 is returned (no reduction, which on
// a GPU would wait for the device). A norm that is not finite is returned
// and the gradient left as it is (the finite checks report it).
double clip_gradient_norm(const Tensor& grads, float max_norm);

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
  // (and the loss scale's, when it is on).
  virtual std::vector<std::pair<std::string, double>> scalars() const;
  virtual void set_scalar(const std::string& name, double value);

  // fp16's dynamic loss scale (loss_scale.hpp), off unless enabled: its
  // state travels with the optimizer's, as in Keras's LossScaleOptimizer.
  LossScale& loss_scale() { return loss_scale_; }
  const LossScale& loss_scale() const { return loss_scale_; }

  // The buffer as the fused updates run over it: consecutive pieces, each
  // decayed or not, covering every element (one piece, decayed, with
  // decay_all or no weight decay).
  struct Piece {
    std::int64_t offset = 0, count = 0;
    bool decayed = true;
  };
  const std::vector<Piece>& pieces() const { return pieces_; }

 protected:
  Optimizer(OptimizerConfig config, const Tensor& params, const FlatRanges& decayed);
  OptimizerConfig config_;
  std::int64_t steps_ = 0;
  std::vector<Piece> pieces_;
  LossScale loss_scale_;
};

// Throws std::invalid_argument listing the known names for an unknown one.
// State buffers are allocated like `params` (zeros). `decayed`: the ranges
// of `params` that weight decay applies to (Model::decayed_ranges(), or
// slice_ranges of it for a part of the buffer); ignored with decay_all or
// no weight decay. Throws std::invalid_argument for ranges that are
// unordered, overlap or leave `params`.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const Tensor& params,
                                          const FlatRanges& decayed);

}  // namespace troupe::models
