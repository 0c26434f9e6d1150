// Model specs: the text form of a Sequential model.
//
// A spec is what a user writes to define a model outside the zoo, what the
// zoo itself is written in, and what a checkpoint stores so that a model can
// be rebuilt without the user naming it. One item per line; `#` starts a
// comment:
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
// Layers: dense, conv2d, conv1d, maxpool2d, maxpool1d, embedding (vocab=,
// dim=), flatten, relu, dropout. Unknown layers or options, missing values
// and bad numbers (a kernel, stride, pool or padding above 2^31 - 1, say)
// are errors naming the source and line. What only the built model can see
// (a layer that does not fit the one before, a shape of more than 2^56
// elements, token ids without an embedding first, a model larger than the
// host's memory) is an error of Model's constructor naming the model and
// the layer (models/model.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/layer.hpp"

namespace troupe::data {
struct Dataset;
}

namespace troupe::models {

struct ModelSpec {
  std::string name = "model";
  Shape input;                      // per example
  DType input_dtype = DType::f32;   // i32 for token ids
  std::vector<std::string> layers;  // one normalised layer line each

  // Parses spec text; `source` names it in errors ("model.spec", "zoo:cnn").
  static ModelSpec parse(const std::string& text, const std::string& source);
  // Normalised text; parse(text()) gives an equal spec.
  std::string text() const;
  std::vector<std::unique_ptr<Layer>> make_layers() const;
};

// What a zoo model needs to know about its data.
struct DataShape {
  Shape input;  // per example
  DType input_dtype = DType::f32;
  std::int64_t classes = 0;  // 0 for regression
  std::int64_t outputs = 1;  // regression targets per example
  std::int64_t vocab = 0;    // token-id data
};

// The model zoo: linreg, mlp, cnn, textcnn. Throws std::invalid_argument
// listing the known names for any other.
ModelSpec zoo_spec(const std::string& name, const DataShape& data);
std::vector<std::string> zoo_names();

// A zoo name, or a path to a spec file (anything containing '/' or ending
// in ".spec"): errors name the file.
ModelSpec resolve_model(const std::string& name_or_path, const DataShape& data);

// Returns `spec` when its input line (dtype and per-example shape) is what
// `dataset` gives. Otherwise throws std::invalid_argument naming both and
// what would fit ("model mlp takes f32 features of shape [300], but dataset
// wordnet gives i32 token ids of shape [300]: use textcnn, ..."), where
// training would fail at step 1 with "input i32 must be f32". The Trainer
// and the actor Job call it before any step (spec_check.cpp).
const ModelSpec& check_model_input(const ModelSpec& spec, const data::Dataset& dataset);

}  // namespace troupe::models
