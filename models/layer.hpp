// Layer: one node of a model graph (a Sequential chain, or a graph whose
// merges join branches), with a forward and a backward pass.
//
// Life of a layer inside a model:
//   1. build(input shape)  -> output shape and parameter count (per-example
//                             shapes: no batch dimension)
//   2. bind(params, grads) -> views of the model's ONE flat parameter buffer
//                             and ONE flat gradient buffer (DESIGN.md)
//   3. initialize(seed)    -> writes initial values into its parameter view
//   4. forward / backward, any number of times, with any batch size.
//
// A layer owns its output and input-gradient buffers and reallocates them
// only when the batch size changes, so a training step allocates nothing.
// forward() keeps what backward() needs (its input, pooling argmax, ...).
// backward() overwrites the layer's gradient view; it returns the gradient
// with respect to the layer's input only when asked (the first layer of a
// model is not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe::models {

using kernels::Device;
using kernels::DType;
using kernels::Shape;
using kernels::Tensor;

// A layer's parameter tensors inside the flat buffer, for summaries and
// checkpoints: name, shape.
struct ParameterInfo {
  std::string name;
  Shape shape;
};

// Sums small tensors across the replicas of one synchronous step, in
// place: what a synchronized BatchNorm (`batchnorm sync=true`) reduces its
// batch statistics with. As for every collective (c10d's rule), each
// replica calls sum() the same number of times per step, in the same
// order, with tensors of the same size; a replica with no examples in the
// step joins through Model::join_reductions(), so nobody waits for it.
class ReplicaReducer {
 public:
  virtual ~ReplicaReducer() = default;
  virtual void sum(const Tensor& t) = 0;
};

class Layer {
 public:
  virtual ~Layer() = default;

  // One line of the model spec format (models/spec.hpp), e.g.
  // "dense units=64"; parsing this line gives an identical layer.
  virtual std::string spec() const = 0;

  virtual Shape build(const Shape& input, const Device& device) = 0;
  virtual std::vector<ParameterInfo> parameters() const { return {}; }
  std::int64_t parameter_count() const;
  // params and grads are views of parameter_count() elements each.
  virtual void bind(const Tensor& params, const Tensor& grads) { (void)params, (void)grads; }
  // State that is not trained (BatchNorm's running statistics): kept in the
  // model's state buffer (Model::state()), beside the parameters; updated by
  // training forward passes, never by a gradient. `state` is a view of
  // state_count() elements.
  virtual std::vector<ParameterInfo> state() const { return {}; }
  std::int64_t state_count() const;
  virtual void bind_state(const Tensor& state) { (void)state; }
  // Writes the initial parameters, and the initial state (bind_state).
  virtual void initialize(std::uint64_t seed) { (void)seed; }
  // The seed of this layer's randomness (dropout) for the next forward pass.
  virtual void set_step_seed(std::uint64_t seed) { (void)seed; }

  virtual const Tensor& forward(const Tensor& x, bool training) = 0;
  virtual const Tensor& backward(const Tensor& dy, bool need_dx) = 0;

  // Whether this layer reduces across replicas in a synchronous step.
  virtual bool reduces_across_replicas() const { return false; }
  // The reducer of the current synchronous step; null (the default, and
  // outside sync steps: evaluations, async, one replica): the layer works
  // on its own batch.
  virtual void set_reducer(ReplicaReducer* reducer) { (void)reducer; }
  // A replica with no examples in a synchronous step: the reductions a
  // training forward and a backward pass would make, with nothing of its
  // own, and whatever state the others update with their results.
  virtual void join_forward() {}
  virtual void join_backward() {}

 protected:
  // (Re)allocates `buffer` to [batch, ...shape] on `device` when its shape
  // differs; returns it.
  static Tensor& ensure(Tensor& buffer, std::int64_t batch, const Shape& shape, const Device& device,
                        DType dtype = DType::f32);
};

// A layer that joins branches of a model graph (add, concat): it takes two
// or more inputs, so it is built, run and differentiated through the
// *_merge functions; the one-input interface above is not used (it throws).
class Merge : public Layer {
 public:
  Shape build(const Shape& input, const Device& device) final;
  const Tensor& forward(const Tensor& x, bool training) final;
  const Tensor& backward(const Tensor& dy, bool need_dx) final;

  // inputs: each input's per-example shape, in the order of the spec's from=.
  virtual Shape build_merge(const std::vector<Shape>& inputs, const Device& device) = 0;
  virtual const Tensor& forward_merge(const std::vector<const Tensor*>& xs, bool training) = 0;
  // d loss / d input k for every k with need[k] (the others may be null);
  // the pointers stay valid until the next backward_merge.
  virtual const std::vector<const Tensor*>& backward_merge(const Tensor& dy, const std::vector<bool>& need) = 0;
};

// [batch, ...shape]
Shape batched(std::int64_t batch, const Shape& shape);

}  // namespace troupe::models
