#include <stdexcept>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"

namespace troupe::models {

namespace ops = kernels::ops;

Embedding::Embedding(std::int64_t vocab, std::int64_t dim, bool channels_last, float init_std)
    : vocab_(vocab), dim_(dim), channels_last_(channels_last), init_std_(init_std) {
  if (!(init_std >= 0.0f)) throw std::invalid_argument("embedding: the init's deviation must be positive");
  if (vocab <= 0 || dim <= 0)
    throw std::invalid_argument("embedding: vocab and dim must be positive, got " + std::to_string(vocab) + " and " +
                                std::to_string(dim));
}

std::string Embedding::spec() const {
  // The layout only when it is not the default: every text CNN's spec (and
  // so its checkpoints) stays as it was.
  return "embedding vocab=" + std::to_string(vocab_) + " dim=" + std::to_string(dim_) +
         (channels_last_ ? " layout=channels_last" : "") +
         (init_std_ > 0 ? " init=" + normal_init_text(init_std_) : "");
}

Shape Embedding::build(const Shape& input, const Device& device) {
  if (input.rank() != 1) throw std::invalid_argument("embedding: expects token ids [length], got " + input.str());
  length_ = input[0];
  device_ = device;
  return channels_last_ ? Shape{length_, dim_} : Shape{dim_, length_};
}

std::vector<ParameterInfo> Embedding::parameters() const { return {{"table", Shape{vocab_, dim_}}}; }

void Embedding::bind(const Tensor& params, const Tensor& grads) {
  table_ = params.slice(0, {vocab_, dim_});
  dtable_ = grads.slice(0, {vocab_, dim_});
}

void Embedding::initialize(std::uint64_t seed) {
  if (init_std_ > 0)
    ops::init_normal(table_, 0.0f, init_std_, seed);
  else
    ops::init_uniform(table_, -0.05f, 0.05f, seed);
}

const Tensor& Embedding::forward(const Tensor& x, bool) {
  if (x.dtype() != DType::i32) throw std::invalid_argument("embedding: token ids must be i32, got " + x.describe());
  ids_ = x;
  // Gather rows [batch, length, dim], then make them channels-first for Conv1D.
  Tensor& rows = ensure(rows_, x.size(0), Shape{length_, dim_}, device_);
  ops::embedding_forward(x, table_, rows);
  if (channels_last_) return rows;
  Tensor& y = ensure(y_, x.size(0), Shape{dim_, length_}, device_);
  ops::transpose_last2(rows, y);
  return y;
}

const Tensor& Embedding::backward(const Tensor& dy, bool need_dx) {
  if (need_dx)
    throw std::logic_error("embedding: token ids have no gradient; an embedding must be a model's first layer");
  if (channels_last_) {
    ops::embedding_backward(ids_, dy, dtable_);
    return dx_;
  }
  Tensor& drows = ensure(drows_, dy.size(0), Shape{length_, dim_}, device_);
  ops::transpose_last2(dy, drows);
  ops::embedding_backward(ids_, drows, dtable_);
  return dx_;
}

// ---- PositionalEmbedding ----

Shape PositionalEmbedding::build(const Shape& input, const Device& device) {
  if (input.rank() != 2)
    throw std::invalid_argument("positional_embedding: expects a sequence [length, dim], got " + input.str() +
                                " (an embedding with layout=channels_last gives one)");
  shape_ = input;
  device_ = device;
  return input;
}

std::vector<ParameterInfo> PositionalEmbedding::parameters() const { return {{"table", shape_}}; }

void PositionalEmbedding::bind(const Tensor& params, const Tensor& grads) {
  table_ = params.slice(0, shape_);
  dtable_ = grads.slice(0, shape_);
}

void PositionalEmbedding::initialize(std::uint64_t seed) { ops::init_normal(table_, 0.0f, 0.02f, seed); }

// Every example's [length * dim] values are a row, and the table the bias
// added to each: bias_add and bias_grad do the broadcast and its sum.
const Tensor& PositionalEmbedding::forward(const Tensor& x, bool) {
  Tensor& y = ensure(y_, x.size(0), shape_, device_);
  y.copy_from(x);
  const std::int64_t n = shape_.numel();
  ops::bias_add(y.reshape({x.size(0), n}), table_.reshape({n}));
  return y;
}

const Tensor& PositionalEmbedding::backward(const Tensor& dy, bool need_dx) {
  const std::int64_t n = shape_.numel();
  ops::bias_grad(dy.reshape({dy.size(0), n}), dtable_.reshape({n}));
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), shape_, device_);
  dx.copy_from(dy);
  return dx;
}

}  // namespace troupe::models

namespace troupe::models {

Shape TiedOutput::build(const Shape& input, const Device& device) {
  if (input.rank() != 1 && input.rank() != 2)
    throw std::invalid_argument("tied_output: expects [dim] or a sequence [length, dim], got " + input.str());
  width_ = input[input.rank() - 1];
  positions_ = input.rank() == 2 ? input[0] : 1;
  input_ = input;
  device_ = device;
  if (vocab_ <= 0) throw std::invalid_argument("tied_output: needs the model's embedding (token ids in) to tie to");
  return input.rank() == 2 ? Shape{positions_, vocab_} : Shape{vocab_};
}

void TiedOutput::bind_tied(const Tensor& table, const Tensor& dtable) {
  if (table.rank() != 2 || table.size(1) != width_ || table.size(0) != vocab_)
    throw std::invalid_argument("tied_output: the embedding's table " + table.shape().str() + " is not [" +
                                std::to_string(vocab_) + ", " + std::to_string(width_) + "]");
  table_ = table;
  dtable_ = dtable;
}

// Every position is a row of one GEMM: [batch * length, dim] x E^T.
const Tensor& TiedOutput::forward(const Tensor& x, bool) {
  const std::int64_t rows = x.size(0) * positions_;
  x_ = x.reshape({rows, width_});
  Tensor& y = ensure(y_, x.size(0), input_.rank() == 2 ? Shape{positions_, vocab_} : Shape{vocab_}, device_);
  ops::gemm(x_, table_, y.reshape({rows, vocab_}), false, /*trans_b=*/true);
  return y;
}

const Tensor& TiedOutput::backward(const Tensor& dy, bool need_dx) {
  const std::int64_t rows = dy.size(0) * positions_;
  const Tensor dy2 = dy.reshape({rows, vocab_});
  ops::gemm(dy2, x_, dtable_, /*trans_a=*/true);  // [vocab, dim]
  if (!need_dx) return dx_;
  Tensor& dx = ensure(dx_, dy.size(0), input_, device_);
  ops::gemm(dy2, table_, dx.reshape({rows, width_}));
  return dx;
}

}  // namespace troupe::models
