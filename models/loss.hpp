// Losses and metrics over a batch.
#pragma once

#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe::models {

using kernels::Tensor;

enum class LossKind { sparse_categorical_crossentropy, mean_squared_error };

class Loss {
 public:
  // label_smoothing e in [0, 1] (cross-entropy only; mse ignores it): the
  // target is (1 - e) onehot + e / classes, as PyTorch's
  // CrossEntropyLoss(label_smoothing=e). Throws std::invalid_argument
  // outside [0, 1].
  explicit Loss(LossKind kind, float label_smoothing = 0.0f);
  // "sparse_categorical_crossentropy" (alias "xent") or "mse"; anything else
  // throws std::invalid_argument listing both.
  static Loss parse(const std::string& name);
  LossKind kind() const { return kind_; }
  float label_smoothing() const { return label_smoothing_; }
  std::string name() const;

  // Sum over the batch of each example's loss. When `doutput` is defined it
  // receives grad_scale * d(sum)/d(output): pass 1 / global batch size to
  // get the gradient of the mean loss over the global batch (replicas then
  // sum their gradients; see DESIGN.md's sync step).
  // output: logits [b, classes] with labels i32 [b]; logits at every
  // position of a sequence [b, t, classes] with labels i32 [b, t], where an
  // example's loss is the mean over its positions (nats per token); or
  // predictions [b, d] with targets f32 [b, d]. With label smoothing the sum is of the
  // smoothed loss (what training minimises); evaluations use a Loss
  // without it.
  double sum(const Tensor& output, const Tensor& target, const Tensor& doutput, float grad_scale);

 private:
  LossKind kind_;
  float label_smoothing_ = 0.0f;
  Tensor per_example_;
};

// Counts over batches: examples, loss sum, top-1 and top-5 correct
// (classification), absolute errors (regression).
class Metrics {
 public:
  // Adds a batch of logits (classification: accuracy and top-5) or
  // predictions (regression: the loss and the absolute errors) with the
  // batch's loss sum.
  void add(const Tensor& output, const Tensor& target, double loss_sum, bool classification);
  void reset() { *this = Metrics(); }

  std::int64_t examples() const { return examples_; }
  double mean_loss() const { return examples_ ? loss_sum_ / double(examples_) : 0.0; }
  // Over the positions scored: the examples, or every position of a
  // sequence's (tokens).
  double accuracy() const { return positions_ ? double(top1_) / double(positions_) : 0.0; }
  double top5_accuracy() const { return positions_ ? double(top5_) / double(positions_) : 0.0; }
  std::int64_t top1_correct() const { return top1_; }
  std::int64_t positions() const { return positions_; }
  // Regression: the mean over every target value of |prediction - target|
  // (Keras' mean_absolute_error); 0 before any.
  double mean_absolute_error() const { return targets_ ? abs_error_sum_ / double(targets_) : 0.0; }

 private:
  std::int64_t examples_ = 0, positions_ = 0;
  double loss_sum_ = 0.0;
  double abs_error_sum_ = 0.0;
  std::int64_t targets_ = 0;
  std::int64_t top1_ = 0, top5_ = 0;
  Tensor correct_;
};

}  // namespace troupe::models
