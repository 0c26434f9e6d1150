// Model: a graph of layers (a Sequential chain, or branches that merges
// join; models/spec.hpp) whose parameters live in ONE flat buffer and whose
// gradients live in another (DESIGN.md). Each layer's
// weights are views of a slice; slices start on 16-float (64-byte)
// boundaries so vector loops and BLAS see aligned rows, and the few padding
// elements stay zero in both buffers, so optimizers and all-reduces can treat
// the buffers as plain vectors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.hpp"
#include "models/layer.hpp"
#include "models/spec.hpp"

namespace troupe::models {

class Model {
 public:
  Model(const ModelSpec& spec, Device device);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Glorot / He / uniform initialisation by layer, from one seed; the same
  // seed gives the same parameters on every device and backend.
  void initialize(std::uint64_t seed);
  // Seeds the randomness of the next forward pass (dropout masks).
  void set_step_seed(std::uint64_t seed);

  // The matmuls' and convolutions' precision in forward and backward
  // (--precision bf16: kernels::ops::MatmulPrecision): bf16 rounds their
  // inputs to bfloat16
  // and sums in fp32; parameters, gradients, activations, LayerNorm,
  // softmax and the loss stay fp32. fp32 by default.
  void set_precision(kernels::ops::MatmulPrecision p) { precision_ = p; }
  kernels::ops::MatmulPrecision precision() const { return precision_; }

  // x: [batch, ...input]; returns the logits (or predictions) [batch, ...].
  const Tensor& forward(const Tensor& x, bool training);
  // Backward from d loss / d output; fills gradients().
  void backward(const Tensor& doutput);

  // Synchronized BatchNorm (layer.hpp's ReplicaReducer): whether any layer
  // reduces across replicas; hands every layer the step's reducer (null:
  // none); and, for a replica with no examples in a step, makes the
  // reductions its forward and backward pass would, in their order.
  bool reduces_across_replicas() const;
  void set_reducer(ReplicaReducer* reducer);
  void join_reductions();

  const Tensor& parameters() const { return params_; }
  // What the model keeps that is not trained (BatchNorm's running
  // statistics), in one flat buffer laid out like the parameters; empty
  // (numel 0) when no layer keeps any.
  const Tensor& state() const { return state_; }
  std::int64_t state_count() const { return state_.numel(); }
  const Tensor& gradients() const { return grads_; }
  std::int64_t parameter_count() const { return params_.numel(); }
  // Where each layer with parameters lies in the flat buffer, in order:
  // {offset, count}, the count without the padding after it (how a
  // sharded parameter server places layers, actors/ps/partition.hpp).
  std::vector<std::pair<std::int64_t, std::int64_t>> layer_ranges() const;
  // Where the parameter tensors of rank >= 2 lie (dense and conv kernels,
  // embedding tables; not biases, not BatchNorm's gamma and beta): the
  // ranges weight decay applies to by default (models/optimizer.hpp), as
  // {offset, count} in buffer order, adjacent ones merged.
  std::vector<std::pair<std::int64_t, std::int64_t>> decayed_ranges() const;
  const ModelSpec& spec() const { return spec_; }
  const Shape& input_shape() const { return spec_.input; }
  const Shape& output_shape() const { return output_; }
  Device device() const { return device_; }
  // A Keras-like table: layer, output shape, parameter count.
  std::string summary() const;

  // One node of the graph as built, for what reads a whole model rather
  // than running it (the ONNX export, models/export/onnx.hpp): without it,
  // a reader would have to redo the flat buffers' layout.
  struct NodeView {
    const Layer& layer;
    const std::string& name;         // its label; empty: none
    const std::vector<int>& inputs;  // earlier nodes; -1: the model's input
    const Shape& output;             // per example
    Tensor params, state;            // views of the flat buffers, in parameters() / state() order; numel 0: none
  };
  std::size_t node_count() const { return layers_.size(); }
  NodeView node(std::size_t i) const;

 private:
  struct Entry {
    std::unique_ptr<Layer> layer;
    Merge* merge = nullptr;   // the layer, when it joins several inputs
    std::string name;         // its label in the graph; empty: none
    std::vector<int> inputs;  // earlier entries; -1: the model's input
    Shape output;
    std::int64_t offset = 0, count = 0;
    std::int64_t state_offset = 0, state_count = 0;
    // Backward: whether d loss / d output is needed (this layer or one
    // before it has parameters), and the sum of what its consumers hand
    // back when there are several (an output used twice).
    bool needs_grad = false;
    std::size_t consumers = 0;
    Tensor grad_sum;
    // tied_output: the entry of the embedding whose table it uses, and its
    // own gradient of that table (added into the embedding's); -1: none.
    int tie = -1;
    Tensor tied_grad;
  };
  ModelSpec spec_;
  Device device_;
  kernels::ops::MatmulPrecision precision_ = kernels::ops::MatmulPrecision::fp32;
  std::vector<Entry> layers_;
  Shape output_;
  Tensor params_, grads_, state_;
  // Per step: each entry's output, and the gradient its consumers handed
  // back so far (null: none yet).
  std::vector<const Tensor*> outputs_, grads_in_;
  std::vector<const Tensor*> merge_inputs_;
};

}  // namespace troupe::models
