#include "models/loss.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/ops.hpp"

namespace troupe::models {

namespace ops = kernels::ops;
using kernels::DType;
using kernels::Shape;

Loss::Loss(LossKind kind, float label_smoothing) : kind_(kind), label_smoothing_(label_smoothing) {
  if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f))
    throw std::invalid_argument("label smoothing " + std::to_string(label_smoothing) + " must be in [0, 1]");
}

Loss Loss::parse(const std::string& name) {
  if (name == "sparse_categorical_crossentropy" || name == "xent")
    return Loss(LossKind::sparse_categorical_crossentropy);
  if (name == "mse" || name == "mean_squared_error") return Loss(LossKind::mean_squared_error);
  throw std::invalid_argument("unknown loss '" + name + "'; known: sparse_categorical_crossentropy (xent), mse");
}

std::string Loss::name() const {
  return kind_ == LossKind::sparse_categorical_crossentropy ? "sparse_categorical_crossentropy" : "mse";
}

namespace {
Tensor& per_row(Tensor& buffer, std::int64_t n, const kernels::Device& device) {
  if (!buffer.defined() || buffer.raw() == nullptr || buffer.numel() != n || buffer.device() != device)
    buffer = Tensor::empty(Shape{n}, DType::f32, device);
  return buffer;
}
}  // namespace

double Loss::sum(const Tensor& output, const Tensor& target, const Tensor& doutput, float grad_scale) {
  if (kind_ == LossKind::sparse_categorical_crossentropy && output.rank() == 3) {
    // A sequence's logits [b, t, classes] with a label at every position
    // [b, t]: each position is a row of the cross-entropy, and an
    // example's loss is the mean over its positions (nats per token), so
    // the positions' gradients take grad_scale / t.
    const std::int64_t b = output.size(0), t = output.size(1), c = output.size(2);
    if (target.numel() != b * t)
      throw std::invalid_argument("loss: logits " + output.describe() + " need a label at every position, got " +
                                  target.describe());
    Tensor& rows = per_row(per_example_, b * t, output.device());
    const Tensor d = doutput.raw() != nullptr ? doutput.reshape({b * t, c}) : doutput;
    ops::softmax_xent(output.reshape({b * t, c}), target.reshape({b * t}), rows, d, grad_scale / static_cast<float>(t),
                      label_smoothing_);
    return ops::sum(rows) / static_cast<double>(t);
  }
  Tensor& rows = per_row(per_example_, output.size(0), output.device());
  if (kind_ == LossKind::sparse_categorical_crossentropy)
    ops::softmax_xent(output, target, rows, doutput, grad_scale, label_smoothing_);
  else
    ops::mse(output, target.reshape(output.shape()), rows, doutput, grad_scale);
  return ops::sum(rows);
}

void Metrics::add(const Tensor& output, const Tensor& target, double loss_sum, bool classification) {
  const std::int64_t n = output.size(0);
  examples_ += n;
  loss_sum_ += loss_sum;
  if (n == 0) return;
  if (!classification) {
    // The predictions are few (a target or a handful per example): summed
    // on the host, in double, whatever the device.
    const std::vector<float> predicted = output.to_vector(), wanted = target.to_vector();
    if (predicted.size() != wanted.size())
      throw std::invalid_argument("Metrics: " + std::to_string(predicted.size()) + " predictions for " +
                                  std::to_string(wanted.size()) + " targets");
    for (std::size_t i = 0; i < predicted.size(); ++i)
      abs_error_sum_ += std::fabs(double(predicted[i]) - double(wanted[i]));
    targets_ += static_cast<std::int64_t>(predicted.size());
    return;
  }
  // A sequence's logits [n, t, classes]: every position is scored.
  const std::int64_t positions = output.rank() == 3 ? n * output.size(1) : n;
  const Tensor logits = output.rank() == 3 ? output.reshape({positions, output.size(2)}) : output;
  const Tensor labels = output.rank() == 3 ? target.reshape({positions}) : target;
  positions_ += positions;
  Tensor& correct = per_row(correct_, positions, output.device());
  ops::topk_correct(logits, labels, correct, 1);
  top1_ += static_cast<std::int64_t>(ops::sum(correct) + 0.5);
  ops::topk_correct(logits, labels, correct, std::min<std::int64_t>(5, logits.size(1)));
  top5_ += static_cast<std::int64_t>(ops::sum(correct) + 0.5);
}

}  // namespace troupe::models
