// ModelBuilder: a model graph in C++, the way Keras' functional API writes
// one. Every call adds a layer and returns its output, which later calls
// take as their input; an output may be taken more than once (a residual
// connection), and add() joins outputs. A reusable block is a plain C++
// function of the builder and an output:
//
//   using troupe::models::ModelBuilder;
//   ModelBuilder::Output basic(ModelBuilder& m, ModelBuilder::Output x, std::int64_t filters) {
//     auto y = m.relu(m.conv2d(x, filters, 3, 1, "same"));
//     y = m.conv2d(y, filters, 3, 1, "same");
//     return m.relu(m.add({x, y}));
//   }
//   ModelBuilder m("tiny_resnet", {1, 28, 28});
//   auto x = m.conv2d(m.input(), 16, 3, 1, "same");
//   x = basic(m, basic(m, x, 16), 16);
//   m.dense(m.flatten(x), 10);
//   ModelSpec spec = m.spec();  // the spec text (models/spec.hpp), parsed
//
// spec() writes the graph as spec text, labelling the layers that a later
// line takes out of order, and parses it: what a checkpoint stores re-parses
// to the same graph, and the errors are the spec's own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/spec.hpp"

namespace troupe::models {

class ModelBuilder {
 public:
  // A layer's output (or the model's input), to hand to later layers.
  struct Output {
    int node = -1;  // -1: the model's input
  };

  ModelBuilder(std::string name, Shape input, DType input_dtype = DType::f32);

  Output input() const { return Output{-1}; }
  // Any one layer line of the spec format ("conv2d filters=16 kernel=3
  // padding=same"), checked now; `label` names it in the text and in the
  // model's summary (empty: a name of its kind and number where one is
  // needed, conv2d_3). Throws std::invalid_argument for a bad line, an
  // output of another builder, or a label used twice.
  Output layer(const std::string& line, Output x, const std::string& label = "");
  // A merge ("add") of two or more outputs.
  Output merge(const std::string& line, const std::vector<Output>& xs, const std::string& label = "");

  Output dense(Output x, std::int64_t units);
  Output conv2d(Output x, std::int64_t filters, std::int64_t kernel, std::int64_t stride = 1,
                const std::string& padding = "valid");
  Output maxpool2d(Output x, std::int64_t pool = 2);
  Output relu(Output x);
  Output flatten(Output x);
  Output dropout(Output x, float rate);
  // A transformer's layers (models/layers/layers.hpp): token ids into
  // [length, dim] (channels_last) or [dim, length]; a learned position
  // table added; layer normalisation of the last dimension; multi-head
  // causal self-attention.
  Output embedding(Output x, std::int64_t vocab, std::int64_t dim, bool channels_last = true);
  Output positional_embedding(Output x);
  Output layernorm(Output x, float epsilon = 1e-5f);
  Output attention(Output x, std::int64_t heads);
  Output gelu(Output x);
  // Logits over the vocabulary from the model's embedding table (tied_output).
  Output tied_output(Output x);
  Output add(const std::vector<Output>& xs);

  // The graph so far as a spec; its last layer gives the model's output.
  // Throws as ModelSpec::parse does (an output nothing takes, say).
  ModelSpec spec() const;
  std::string text() const;

 private:
  struct Line {
    std::string kind, body, label;
    std::vector<int> inputs;
  };
  Output push(const std::string& line, const std::vector<Output>& xs, const std::string& label);
  std::string name_;
  Shape input_;
  DType input_dtype_;
  std::vector<Line> lines_;
};

}  // namespace troupe::models
