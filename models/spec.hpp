// Model specs: the text form of a model graph.
//
// A spec is what a user writes to define a model outside the zoo, what the
// zoo itself is written in, and what a checkpoint stores so that a model can
// be rebuilt without the user naming it. One item per line; `#` starts a
// comment. A chain of layers (Keras Sequential) is just its lines:
//
//   name my_cnn
//   input 1 28 28              # per-example shape; "input ids 300" for token ids
//   conv2d filters=32 kernel=3 # kernel=3 or kernel=3x5; stride=1; padding=valid|same|N
//   relu
//   maxpool2d pool=2           # stride defaults to pool
//   flatten
//   dense units=64
//   dropout rate=0.5
//   dense units=10
//
// A graph (Keras functional): a line may carry a label ("NAME: layer ...")
// and name its inputs with from=A,B (labels of earlier lines; `input` is
// the model's input); without from= a layer takes the line before. Merges
// (add) join branches. A block is a group of lines defined once, with
// parameters ($NAME in its lines; NAME=DEFAULT for an optional one), and
// used like a layer; inside it `in` is the block's input and its labels
// are its own (they show as USE/LABEL, USE being the use's label or the
// block's name and count: basic2/y):
//
//   block basic filters
//     conv2d filters=$filters kernel=3 padding=same
//     relu
//     y: conv2d filters=$filters kernel=3 padding=same
//     add from=in,y
//     relu
//   end
//   conv2d filters=16 kernel=3 padding=same
//   basic filters=16
//   b: basic filters=16
//
// A byte-level language model carries its tokens: `vocabulary hex=0a20..`
// (token id i is the i-th byte; models/data/text_corpus.hpp), written by
// training on text:FILE or kjv.
//
// The model's output is its last line; every other layer's output must be
// used. Layers: dense, conv2d (bias=false for one before a batchnorm),
// conv1d, maxpool2d, maxpool1d, avgpool2d, globalavgpool2d, embedding
// (vocab=, dim=, layout=channels_first|channels_last), positional_embedding
// ([length, dim] + a learned table), attention (heads=: multi-head causal
// self-attention over [length, width]), tied_output (logits from the
// embedding's table, transposed: GPT-2's weight tying), flatten, relu, sigmoid, tanh, gelu, softmax, dropout,
// batchnorm (momentum=, epsilon=, sync=true: statistics of every
// replica's batch in a synchronous step), layernorm (epsilon=: over the
// last dimension), standardize (mean=A,B,.. std=C,D,..:
// fixed constants per channel; train --standardize writes one first), and
// the merges add and concat. Unknown layers, blocks,
// labels or options, missing values and bad numbers (a kernel, stride,
// pool or padding above 2^31 - 1, say) are errors naming the source and
// line (and the block's line). What only the built model can see (a layer
// that does not fit its inputs, a shape of more than 2^56 elements, token
// ids without an embedding first, a model larger than the host's memory)
// is an error of Model's constructor naming the model and the layer
// (models/model.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/layer.hpp"

namespace troupe::data {
struct Dataset;
}

namespace troupe::models {

// A block: lines defined once and used like a layer, with arguments.
struct BlockDef {
  struct Param {
    std::string name;
    std::string fallback;  // empty: the use must give it
  };
  std::string name;
  std::vector<Param> params;
  std::vector<std::string> lines;  // as written (one space between words), $NAME not yet replaced
  bool has_param(const std::string& name) const;
};

// One layer of the graph a spec describes, blocks expanded.
struct GraphNode {
  std::string name;  // its label, after the block uses around it ("b/y"); empty: it has none
  std::unique_ptr<Layer> layer;
  std::vector<int> inputs;  // nodes before it; -1 is the model's input
};

struct ModelSpec {
  std::string name = "model";
  Shape input;                     // per example
  DType input_dtype = DType::f32;  // i32 for token ids
  // A byte-level language model's tokens (models/data/text_corpus.hpp):
  // token id i is the byte vocabulary[i]. The line `vocabulary hex=0a2021..`
  // (two hex digits a byte, in id order); empty: none. Kept with the model
  // so that a checkpoint can encode a prompt and decode a sample.
  std::string vocabulary;
  std::vector<BlockDef> blocks;
  // One normalised line each: a layer or a block's use, with its label and
  // from= ("y: conv2d filters=16 kernel=3 stride=1 padding=same from=x").
  std::vector<std::string> layers;

  // Parses spec text; `source` names it in errors ("model.spec", "zoo:cnn").
  static ModelSpec parse(const std::string& text, const std::string& source);
  // Normalised text; parse(text()) gives an equal spec. A chain's text is
  // what it always was, so older checkpoints' specs read the same.
  std::string text() const;
  // The graph, in an order where every node's inputs come before it; the
  // last node gives the model's output.
  std::vector<GraphNode> make_graph() const;
  // No labels, no from=, no blocks: a Sequential stack.
  bool is_chain() const;
  const BlockDef* find_block(const std::string& name) const;
};

// One layer line ("conv2d filters=16 kernel=3") in its normalised form
// ("conv2d filters=16 kernel=3 stride=1 padding=valid"); throws
// std::invalid_argument for an unknown layer or option.
std::string normalised_layer_line(const std::string& line);

// Specs are equal when their normalised texts are.
bool operator==(const ModelSpec& a, const ModelSpec& b);

// What a zoo model needs to know about its data.
struct DataShape {
  Shape input;  // per example
  DType input_dtype = DType::f32;
  std::int64_t classes = 0;  // 0 for regression
  std::int64_t outputs = 1;  // regression targets per example
  std::int64_t vocab = 0;    // token-id data
};

// The sizes of a zoo transformer (gpt): blocks, heads, width (C). The
// context (T) is the data's window (--context); the defaults are nanoGPT's
// CPU run of shakespeare_char and ../shared/anchors/torch_gpt.py's.
struct ZooSizes {
  std::int64_t layers = 4;
  std::int64_t heads = 4;
  std::int64_t width = 128;
};

// The model zoo: linreg, mlp, wide, cnn, vgg, resnet, textcnn, gpt. Throws std::invalid_argument
// listing the known names for any other.
ModelSpec zoo_spec(const std::string& name, const DataShape& data, const ZooSizes& sizes = {});
std::vector<std::string> zoo_names();

// A zoo name, or a path to a spec file (anything containing '/' or ending
// in ".spec"): errors name the file.
ModelSpec resolve_model(const std::string& name_or_path, const DataShape& data, const ZooSizes& sizes = {});

// `spec` with the byte vocabulary of `train` when it is a language model's
// text (Dataset::window) and the spec has none; a spec whose vocabulary is
// another one (a checkpoint of a model trained on another text) is an
// std::invalid_argument naming both, since its token ids would mean other
// bytes. Other data: `spec` as it is.
ModelSpec with_vocabulary(const ModelSpec& spec, const data::Dataset& train);

// The vocabulary's `hex=` text, and back (std::invalid_argument for odd
// lengths, non-hex digits or a byte twice).
std::string vocabulary_hex(const std::string& bytes);
std::string parse_vocabulary_hex(const std::string& hex);

// Returns `spec` when its input line (dtype and per-example shape) is what
// `dataset` gives. Otherwise throws std::invalid_argument naming both and
// what would fit ("model mlp takes f32 features of shape [300], but dataset
// wordnet gives i32 token ids of shape [300]: use textcnn, ..."), where
// training would fail at step 1 with "input i32 must be f32". The Trainer
// and the actor Job call it before any step (spec_check.cpp).
const ModelSpec& check_model_input(const ModelSpec& spec, const data::Dataset& dataset);

// `spec` with a first layer that standardizes its input by the mean and the
// (population) deviation of each channel of `train`'s features (each
// feature of a table, each colour of an image), as sklearn's StandardScaler
// and Keras' Normalization.adapt: "standardized: standardize mean=.. std=..",
// which every line that took the model's input now takes. A channel whose
// deviation is 0 (a constant column) keeps a deviation of 1. Throws
// std::invalid_argument for token ids, an empty split, or a spec that
// already starts with a standardize layer.
ModelSpec standardize_first(const ModelSpec& spec, const data::Dataset& train);

}  // namespace troupe::models
