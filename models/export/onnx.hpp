// The ONNX export of a model: the graph as ONNX operators, its parameters
// and BatchNorm's running statistics as initializers, with inference
// semantics (dropout is the identity, BatchNorm uses the running
// statistics), so that another runtime gives the logits troupe's
// evaluation gives.
//
//   auto model = troupe::models::load_model(state, path, Device::cpu());
//   std::string bytes = troupe::models::to_onnx(*model, {});
//
// The file (docs/USER-GUIDE.md, "Export to ONNX"):
//   input   "input": f32 [batch, ...the spec's input shape] (channels
//           first), or i32 token ids [batch, length] for an embedding;
//           the batch dimension is dynamic ("batch")
//   output  "output": f32 [batch, ...the model's output shape], the logits
//   nodes   one or a few per layer, named after the layer: its label, or
//           its kind and number ("conv2d_3"); initializers "NAME.kernel",
//           "NAME.bias", "NAME.gamma", "NAME.beta", "NAME.running_mean",
//           "NAME.running_var", "NAME.table", troupe's layouts unchanged
//           (Dense kernels [in, out] into Gemm, conv kernels [filters,
//           channels, kernel...])
//   opset   17 (ai.onnx), IR version 8: what Debian's onnx 1.12 checks
//
// Built with Debian's libonnx-dev (its protobuf types only); the header
// shows none of them, so a caller needs neither protobuf nor onnx headers.
#pragma once

#include <string>
#include <vector>

#include "models/model.hpp"

namespace troupe::models {

struct OnnxOptions {
  std::string producer_version;          // the model's producer_version ("0.1.0")
  std::vector<std::string> class_names;  // optional: kept as the metadata "troupe.classes" (one per line)
};

// The opset the export targets.
constexpr int kOnnxOpset = 17;

// The serialized ModelProto. Throws std::invalid_argument naming the layer
// (its number, line and label) for a layer the export does not know.
std::string to_onnx(const Model& model, const OnnxOptions& options);

}  // namespace troupe::models
