#include "models/layer.hpp"

#include <stdexcept>

namespace troupe::models {

std::int64_t Layer::parameter_count() const {
  // Each shape is at most Shape::kMaxElements; so must their sum be, so
  // that the flat buffer's size, a shape too, cannot overflow.
  std::int64_t n = 0;
  for (const auto& p : parameters()) {
    n += p.shape.numel();
    if (n > Shape::kMaxElements)
      throw std::invalid_argument("more than 2^56 parameters in one layer (the most a tensor may have)");
  }
  return n;
}

std::int64_t Layer::state_count() const {
  std::int64_t n = 0;
  for (const auto& p : state()) n += p.shape.numel();
  return n;
}

Shape Merge::build(const Shape&, const Device&) {
  throw std::logic_error(spec() + ": a merge is built with build_merge (it takes several inputs)");
}
const Tensor& Merge::forward(const Tensor&, bool) {
  throw std::logic_error(spec() + ": a merge runs with forward_merge (it takes several inputs)");
}
const Tensor& Merge::backward(const Tensor&, bool) {
  throw std::logic_error(spec() + ": a merge runs with backward_merge (it takes several inputs)");
}

Shape batched(std::int64_t batch, const Shape& shape) {
  std::vector<std::int64_t> dims{batch};
  dims.insert(dims.end(), shape.dims().begin(), shape.dims().end());
  return Shape(dims);
}

Tensor& Layer::ensure(Tensor& buffer, std::int64_t batch, const Shape& shape, const Device& device, DType dtype) {
  Shape want = batched(batch, shape);
  if (!buffer.defined() || buffer.raw() == nullptr || buffer.shape() != want || buffer.device() != device ||
      buffer.dtype() != dtype)
    buffer = Tensor::empty(want, dtype, device);
  return buffer;
}

}  // namespace troupe::models
