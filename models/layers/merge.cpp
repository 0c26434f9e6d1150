// Layers that join the branches of a model graph: Add, Concat.
#include <stdexcept>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

// ---- Add ----

Shape Add::build_merge(const std::vector<Shape>& inputs, const Device& device) {
  if (inputs.size() < 2)
    throw std::invalid_argument("add takes two or more inputs (from=A,B), got " + std::to_string(inputs.size()));
  for (std::size_t k = 1; k < inputs.size(); ++k)
    if (inputs[k] != inputs[0])
      throw std::invalid_argument("add: input " + std::to_string(k + 1) + " is " + inputs[k].str() +
                                  " but input 1 is " + inputs[0].str() + " (every input of an add has one shape)");
  shape_ = inputs[0];
  device_ = device;
  dxs_.assign(inputs.size(), nullptr);
  return shape_;
}

const Tensor& Add::forward_merge(const std::vector<const Tensor*>& xs, bool) {
  Tensor& y = ensure(y_, xs[0]->size(0), shape_, device_);
  ops::add(*xs[0], *xs[1], y);
  for (std::size_t k = 2; k < xs.size(); ++k) ops::add(y, *xs[k], y);
  return y;
}

const std::vector<const Tensor*>& Add::backward_merge(const Tensor& dy, const std::vector<bool>& need) {
  for (std::size_t k = 0; k < dxs_.size(); ++k) dxs_[k] = need[k] ? &dy : nullptr;
  return dxs_;
}

// ---- Concat ----

Shape Concat::build_merge(const std::vector<Shape>& inputs, const Device& device) {
  if (inputs.size() < 2)
    throw std::invalid_argument("concat takes two or more inputs (from=A,B), got " + std::to_string(inputs.size()));
  std::int64_t channels = 0;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const Shape& s = inputs[k];
    bool fits = s.rank() == inputs[0].rank() && s.rank() >= 1;
    for (int d = 1; fits && d < s.rank(); ++d) fits = s[d] == inputs[0][d];
    if (!fits)
      throw std::invalid_argument("concat: input " + std::to_string(k + 1) + " is " + s.str() + " but input 1 is " +
                                  inputs[0].str() + " (inputs may differ only in their channels, the first dimension)");
    channels += s[0];
  }
  std::vector<std::int64_t> dims = inputs[0].dims();
  dims[0] = channels;
  inputs_ = inputs;
  shape_ = Shape(dims);
  device_ = device;
  dx_buffers_.assign(inputs.size(), Tensor());
  dxs_.assign(inputs.size(), nullptr);
  return shape_;
}

// Example by example, input k's channels are one block of the output's:
// a 2-D copy (rows = examples) puts every input in its place.
const Tensor& Concat::forward_merge(const std::vector<const Tensor*>& xs, bool) {
  const std::int64_t n = xs[0]->size(0), out_pitch = shape_.numel();
  Tensor& y = ensure(y_, n, shape_, device_);
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const std::int64_t cols = inputs_[k].numel();
    ops::copy_2d(*xs[k], 0, cols, y, offset, out_pitch, n, cols);
    offset += cols;
  }
  return y;
}

const std::vector<const Tensor*>& Concat::backward_merge(const Tensor& dy, const std::vector<bool>& need) {
  const std::int64_t n = dy.size(0), out_pitch = shape_.numel();
  std::int64_t offset = 0;
  for (std::size_t k = 0; k < inputs_.size(); ++k) {
    const std::int64_t cols = inputs_[k].numel();
    dxs_[k] = nullptr;
    if (need[k]) {
      Tensor& dx = ensure(dx_buffers_[k], n, inputs_[k], device_);
      ops::copy_2d(dy, offset, out_pitch, dx, 0, cols, n, cols);
      dxs_[k] = &dx;
    }
    offset += cols;
  }
  return dxs_;
}

}  // namespace troupe::models
