// check_model_input (models/spec.hpp): a model against its data, before
// training.
#include <stdexcept>
#include <string>

#include "models/data/dataset.hpp"
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

}  // namespace troupe::models
