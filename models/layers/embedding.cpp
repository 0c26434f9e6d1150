#include <stdexcept>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

Embedding::Embedding(std::int64_t vocab, std::int64_t dim) : vocab_(vocab), dim_(dim) {
  if (vocab <= 0 || dim <= 0)
    throw std::invalid_argument("embedding: vocab and dim must be positive, got " + std::to_string(vocab) + " and " +
                                std::to_string(dim));
}

std::string Embedding::spec() const {
  return "embedding vocab=" + std::to_string(vocab_) + " dim=" + std::to_string(dim_);
}

Shape Embedding::build(const Shape& input, const Device& device) {
  if (input.rank() != 1) throw std::invalid_argument("embedding: expects token ids [length], got " + input.str());
  length_ = input[0];
  device_ = device;
  return Shape{dim_, length_};
}

std::vector<ParameterInfo> Embedding::parameters() const { return {{"table", Shape{vocab_, dim_}}}; }

void Embedding::bind(const Tensor& params, const Tensor& grads) {
  table_ = params.slice(0, {vocab_, dim_});
  dtable_ = grads.slice(0, {vocab_, dim_});
}

void Embedding::initialize(std::uint64_t seed) { ops::init_uniform(table_, -0.05f, 0.05f, seed); }

const Tensor& Embedding::forward(const Tensor& x, bool) {
  if (x.dtype() != DType::i32) throw std::invalid_argument("embedding: token ids must be i32, got " + x.describe());
  ids_ = x;
  // Gather rows [batch, length, dim], then make them channels-first for Conv1D.
  Tensor& rows = ensure(rows_, x.size(0), Shape{length_, dim_}, device_);
  ops::embedding_forward(x, table_, rows);
  Tensor& y = ensure(y_, x.size(0), Shape{dim_, length_}, device_);
  ops::transpose_last2(rows, y);
  return y;
}

const Tensor& Embedding::backward(const Tensor& dy, bool need_dx) {
  if (need_dx)
    throw std::logic_error("embedding: token ids have no gradient; an embedding must be a model's first layer");
  Tensor& drows = ensure(drows_, dy.size(0), Shape{length_, dim_}, device_);
  ops::transpose_last2(dy, drows);
  ops::embedding_backward(ids_, drows, dtable_);
  return dx_;
}

}  // namespace troupe::models
