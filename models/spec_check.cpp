// check_model_input (models/spec.hpp): a model against its data, before
// training.
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/data/dataset.hpp"
#include "models/layers/layers.hpp"
#include "models/spec.hpp"

namespace troupe::models {

namespace {

std::string examples(DType dtype, const Shape& shape) {
  return std::string(kernels::to_string(dtype)) + (dtype == DType::i32 ? " token ids" : " features") + " of shape " +
         shape.str();
}

// The spec line that reads this data: "input ids 300", "input 1 28 28".
std::string input_line(DType dtype, const Shape& shape) {
  std::string line = dtype == DType::i32 ? "input ids" : "input";
  for (auto d : shape.dims()) line += " " + std::to_string(d);
  return line;
}

}  // namespace

const ModelSpec& check_model_input(const ModelSpec& spec, const data::Dataset& dataset) {
  const DType dtype = dataset.features.dtype();
  const Shape shape = dataset.feature_shape();
  if (spec.input_dtype == dtype && spec.input == shape) return spec;
  std::string fix;
  if (dtype == DType::i32 && spec.input_dtype != DType::i32)
    fix = "use textcnn, or a spec file whose input line is '" + input_line(dtype, shape) + "' and an embedding";
  else if (dtype != DType::i32 && spec.input_dtype == DType::i32)
    fix = "use mlp (or cnn for images), or a spec file whose input line is '" + input_line(dtype, shape) + "'";
  else
    fix = "the model's input line must be '" + input_line(dtype, shape) + "'";
  throw std::invalid_argument("model " + spec.name + " takes " + examples(spec.input_dtype, spec.input) +
                              ", but dataset " + dataset.name + " gives " + examples(dtype, shape) + ": " + fix);
}

ModelSpec with_vocabulary(const ModelSpec& spec, const data::Dataset& train) {
  if (train.window <= 0) return spec;
  std::string bytes;
  for (const auto& token : train.vocabulary) bytes += token;
  if (spec.vocabulary == bytes) return spec;
  if (!spec.vocabulary.empty())
    throw std::invalid_argument("model " + spec.name + " was made for a vocabulary of " +
                                std::to_string(spec.vocabulary.size()) + " bytes, but " + train.name + " has " +
                                std::to_string(bytes.size()) +
                                " other ones: its token ids would mean other bytes (train it anew on this text)");
  ModelSpec out = spec;
  out.vocabulary = bytes;
  return out;
}

ModelSpec standardize_first(const ModelSpec& spec, const data::Dataset& train) {
  const kernels::Tensor& x = train.features;
  if (x.dtype() != DType::f32)
    throw std::invalid_argument("standardize: dataset " + train.name +
                                " gives token ids; only float features can be "
                                "standardized");
  if (train.size() == 0 || x.rank() < 2)
    throw std::invalid_argument("standardize: dataset " + train.name +
                                " has no training examples to take the "
                                "means and deviations from");
  if (!spec.layers.empty() && spec.layers.front().rfind("standardized: standardize ", 0) == 0)
    throw std::invalid_argument("standardize: model " + spec.name + " already starts with a standardize layer");
  const std::int64_t n = x.size(0), channels = x.size(1), positions = x.numel() / (n * channels);
  const float* values = x.f32();
  std::vector<float> mean(static_cast<std::size_t>(channels)), deviation(static_cast<std::size_t>(channels));
  for (std::int64_t c = 0; c < channels; ++c) {
    // Two passes in double: the mean, then the squares about it.
    double sum = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t p = 0; p < positions; ++p) sum += values[(i * channels + c) * positions + p];
    const double count = double(n) * double(positions), m = sum / count;
    double squares = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t p = 0; p < positions; ++p) {
        const double d = values[(i * channels + c) * positions + p] - m;
        squares += d * d;
      }
    const auto s = static_cast<float>(std::sqrt(squares / count));
    mean[static_cast<std::size_t>(c)] = static_cast<float>(m);
    // A constant column, or one too narrow for float32's squares: left as it is.
    deviation[static_cast<std::size_t>(c)] = s * s > 0.0f ? s : 1.0f;
  }
  const std::string label = "standardized";
  ModelSpec out = spec;
  // The lines that named the model's input now name the standardized one.
  for (std::string& line : out.layers) {
    std::istringstream words(line);
    std::string rewritten;
    for (std::string w; words >> w;) {
      if (w.rfind(label + ":", 0) == 0)
        throw std::invalid_argument("standardize: model " + spec.name + " has a layer labelled '" + label +
                                    "', the label the standardize layer takes");
      if (w.rfind("from=", 0) == 0) {
        std::string list = w.substr(5), renamed;
        std::size_t at = 0;
        for (;;) {
          const auto comma = list.find(',', at);
          std::string item = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
          renamed += (renamed.empty() ? "" : ",") + (item == "input" ? label : item);
          if (comma == std::string::npos) break;
          at = comma + 1;
        }
        w = "from=" + renamed;
      }
      rewritten += (rewritten.empty() ? "" : " ") + w;
    }
    line = rewritten;
  }
  const Standardize layer(mean, deviation);
  out.layers.insert(out.layers.begin(), label + ": " + layer.spec());
  // Through the text, so that the result is what a checkpoint's text parses to.
  return ModelSpec::parse(out.text(), "model " + spec.name + " (standardized)");
}

}  // namespace troupe::models
