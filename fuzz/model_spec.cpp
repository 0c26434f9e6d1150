// Model specs (models/spec.hpp): the text a user writes to define a model
// (`troupe train --model FILE`), and what every checkpoint stores and
// `troupe eval` rebuilds a model from, so also bytes from a file that may
// be corrupt.
//
// Input: the spec text.
//
// Properties: ModelSpec::parse accepts or throws std::invalid_argument,
// nothing else; an accepted spec's text() parses back to the same spec;
// building its layers' shapes on a CPU device either works or throws
// std::invalid_argument (a layer that does not fit, a shape of more than
// 2^56 elements: never an overflow, UBSan); the model refuses it, naming
// the model, or builds; and a model it describes that is small (at most 2^20 parameters, 2^16 input and 2^20 output
// elements per layer) is built, initialised and run forward and backward on a batch of 2, every output and gradient
// finite, its output of the shape the layers said.
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.hpp"
#include "kernels/ops.hpp"
#include "models/model.hpp"
#include "models/spec.hpp"

using namespace troupe;
using troupe::kernels::Device;
using troupe::kernels::DType;
using troupe::kernels::Shape;
using troupe::kernels::Tensor;

namespace {

constexpr std::int64_t kMostParameters = std::int64_t{1} << 20;
constexpr std::int64_t kMostInput = std::int64_t{1} << 16;
constexpr std::int64_t kMostActivations = std::int64_t{1} << 20;

bool all_finite(const Tensor& t) {
  const float* p = t.f32();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(p[i])) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)Tensor::empty({1});  // the tensor backends first
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  models::ModelSpec spec;
  try {
    spec = models::ModelSpec::parse(text, "fuzz.spec");
  } catch (const std::invalid_argument&) {
    return 0;
  }
  // The normalised text reads back to the same spec.
  models::ModelSpec again;
  try {
    again = models::ModelSpec::parse(spec.text(), "normalised.spec");
  } catch (const std::invalid_argument& e) {
    troupe::fuzz::fail(std::string("the text of an accepted spec does not parse: ") + e.what() + "\n" + spec.text());
  }
  TROUPE_FUZZ_CHECK(again.name == spec.name && again.input == spec.input && again.input_dtype == spec.input_dtype &&
                        again.layers == spec.layers && again == spec,
                    "the text of an accepted spec parses to another spec:\n" + spec.text());

  // Shapes only (no parameters allocated): fits, or a named error.
  std::int64_t parameters = 0;
  bool small = spec.input.numel() <= kMostInput;
  try {
    std::vector<Shape> shapes;  // by node
    for (auto& node : spec.make_graph()) {
      auto shape_of = [&](int k) { return k < 0 ? spec.input : shapes[static_cast<std::size_t>(k)]; };
      Shape shape;
      if (auto* merge = dynamic_cast<models::Merge*>(node.layer.get())) {
        std::vector<Shape> inputs;
        for (int k : node.inputs) inputs.push_back(shape_of(k));
        shape = merge->build_merge(inputs, Device::cpu());
      } else {
        shape = node.layer->build(shape_of(node.inputs.at(0)), Device::cpu());
      }
      shapes.push_back(shape);
      const std::int64_t count = node.layer->parameter_count();
      TROUPE_FUZZ_CHECK(count >= 0 && count <= Shape::kMaxElements,
                        "a layer of " + std::to_string(count) + " parameters");
      parameters = std::min(parameters + count, Shape::kMaxElements + 1);
      small = small && shape.numel() <= kMostActivations;
    }
  } catch (const std::invalid_argument&) {
    return 0;
  }
  if (!small || parameters > kMostParameters) return 0;

  // A small model: built, and run forward and backward.
  // The model may still refuse what no layer alone can see (token ids
  // without an embedding first, say), naming the model.
  std::unique_ptr<models::Model> model;
  try {
    model = std::make_unique<models::Model>(spec, Device::cpu());
  } catch (const std::invalid_argument& e) {
    TROUPE_FUZZ_CHECK(std::string(e.what()).rfind("model '" + spec.name + "'", 0) == 0,
                      std::string("a refusal that does not name the model: ") + e.what());
    return 0;
  }
  model->initialize(7);
  model->set_step_seed(11);
  std::vector<std::int64_t> dims{2};
  dims.insert(dims.end(), spec.input.dims().begin(), spec.input.dims().end());
  Tensor x = spec.input_dtype == DType::i32 ? Tensor::zeros(Shape(dims), DType::i32) : Tensor::full(Shape(dims), 0.5f);
  const Tensor& y = model->forward(x, true);
  std::vector<std::int64_t> want{2};
  want.insert(want.end(), model->output_shape().dims().begin(), model->output_shape().dims().end());
  TROUPE_FUZZ_CHECK(y.shape() == Shape(want),
                    "the output is " + y.shape().str() + ", the layers said " + Shape(want).str());
  TROUPE_FUZZ_CHECK(all_finite(y), "a non-finite output from a freshly initialised model");
  model->backward(Tensor::full(y.shape(), 1.0f));
  TROUPE_FUZZ_CHECK(all_finite(model->gradients()), "a non-finite gradient from a freshly initialised model");
  return 0;
}
