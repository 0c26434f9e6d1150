// The ONNX export in-process (models/export/onnx.hpp): every layer kind the
// spec format knows has an export, which ONNX's own C++ checker (Debian's
// libonnx) accepts, with the operators and attributes that give troupe's
// semantics. That the exported numbers equal troupe's is the scripts' part
// (tests/CMakeLists.txt, "The ONNX export": onnxruntime, PyTorch).
#include <gtest/gtest.h>
#include <onnx/checker.h>  // defines: onnx::checker::check_model (libonnx)
#include <onnx/onnx_pb.h>  // defines: onnx::ModelProto

#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/export/onnx.hpp"
#include "models/model.hpp"
#include "models/spec.hpp"

namespace {

using troupe::models::Model;
using troupe::models::ModelSpec;

// The layer kinds the spec parser knows, from its own error's list, so a
// new kind fails here until the export (and the table below) has it.
std::vector<std::string> known_layer_kinds() {
  try {
    troupe::models::normalised_layer_line("no_such_layer");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    std::stringstream list(what.substr(what.find("known: ") + 7));
    std::vector<std::string> kinds;
    for (std::string kind; std::getline(list, kind, ',');) kinds.push_back(kind.substr(kind.find_first_not_of(' ')));
    return kinds;
  }
  return {};
}

// A small model around one layer kind, and the ONNX operator it must become.
struct Case {
  std::string kind, spec, op;
};
const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"dense", "input 6\ndense units=3", "Gemm"},
      {"conv2d", "input 2 7 7\nconv2d filters=3 kernel=3x5 stride=2 padding=1 bias=false\nflatten", "Conv"},
      {"conv1d", "input 2 9\nconv1d filters=3 kernel=3 padding=same\nflatten", "Conv"},
      {"maxpool2d", "input 2 7 7\nmaxpool2d pool=3 stride=2\nflatten", "MaxPool"},
      {"maxpool1d", "input 2 9\nmaxpool1d pool=2\nflatten", "MaxPool"},
      {"avgpool2d", "input 2 7 7\navgpool2d pool=2\nflatten", "AveragePool"},
      {"globalavgpool2d", "input 2 7 7\nglobalavgpool2d", "GlobalAveragePool"},
      {"embedding", "input ids 9\nembedding vocab=20 dim=4\nflatten", "Gather"},
      {"positional_embedding",
       "input ids 6\nembedding vocab=20 dim=4 layout=channels_last\npositional_embedding\ndense units=3\nflatten",
       "Add"},
      {"attention", "input ids 6\nembedding vocab=20 dim=8 layout=channels_last\nattention heads=2\nflatten",
       "Softmax"},
      {"tied_output",
       "input ids 6\nembedding vocab=20 dim=4 layout=channels_last init=normal:0.5\npositional_embedding\ntied_output\n"
       "flatten",
       "Transpose"},
      {"flatten", "input 2 3 3\nflatten", "Flatten"},
      {"relu", "input 6\nrelu", "Relu"},
      {"sigmoid", "input 6\nsigmoid", "Sigmoid"},
      {"tanh", "input 6\ntanh", "Tanh"},
      {"gelu", "input 6\ngelu", "Erf"},
      {"softmax", "input 2 5\nsoftmax\nflatten", "Softmax"},
      {"dropout", "input 6\ndropout rate=0.5", "Identity"},
      {"batchnorm", "input 3 4 4\nbatchnorm momentum=0.8 epsilon=0.001\nflatten", "BatchNormalization"},
      {"layernorm", "input 3 5\nlayernorm epsilon=0.001\nflatten", "LayerNormalization"},
      {"standardize", "input 2 3 3\nstandardize mean=0.5,-1 std=2,0.25\nflatten", "Div"},
      {"add", "input 6\na: relu\nb: tanh from=input\nadd from=a,b,input", "Add"},
      {"concat", "input 2 4\na: relu\nb: tanh from=input\nconcat from=a,b,input\nflatten", "Concat"},
  };
  return all;
}

onnx::ModelProto exported(const std::string& spec_text) {
  const ModelSpec spec = ModelSpec::parse("name t\n" + spec_text + "\n", "test");
  Model model(spec, troupe::models::Device::cpu());
  model.initialize(7);
  onnx::ModelProto proto;
  EXPECT_TRUE(proto.ParseFromString(troupe::models::to_onnx(model, {"0.0", {"a", "b"}})));
  return proto;
}

const onnx::NodeProto* find_op(const onnx::ModelProto& m, const std::string& op) {
  for (const auto& n : m.graph().node())
    if (n.op_type() == op) return &n;
  return nullptr;
}

const onnx::AttributeProto* attribute(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

TEST(OnnxExport, EveryLayerKindTheSpecKnowsIsExportedAndPassesOnnxsChecker) {
  const std::vector<std::string> kinds = known_layer_kinds();
  ASSERT_GE(kinds.size(), 19u);
  for (const std::string& kind : kinds) {
    const Case* c = nullptr;
    for (const Case& each : cases())
      if (each.kind == kind) c = &each;
    ASSERT_NE(c, nullptr) << "layer '" << kind
                          << "' is new: give it an ONNX export (models/export/onnx.cpp) and a case here";
    SCOPED_TRACE(c->spec);
    const onnx::ModelProto m = exported(c->spec);
    EXPECT_NO_THROW(onnx::checker::check_model(m));
    EXPECT_NE(find_op(m, c->op), nullptr) << kind << " has no " << c->op;
    EXPECT_EQ(m.opset_import(0).version(), troupe::models::kOnnxOpset);
    ASSERT_EQ(m.graph().input_size(), 1);
    EXPECT_EQ(m.graph().input(0).name(), "input");
    EXPECT_EQ(m.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
    // Token ids in, for the cases that start with an embedding.
    EXPECT_EQ(m.graph().input(0).type().tensor_type().elem_type(),
              c->spec.rfind("input ids", 0) == 0 ? onnx::TensorProto::INT32 : onnx::TensorProto::FLOAT);
    EXPECT_EQ(m.graph().output(0).name(), "output");
    // Every value is produced once (ONNX's graphs are in SSA form).
    std::set<std::string> produced;
    for (const auto& n : m.graph().node())
      for (const auto& out : n.output()) EXPECT_TRUE(produced.insert(out).second) << out << " twice";
  }
}

const Case& case_of(const std::string& kind) {
  for (const Case& c : cases())
    if (c.kind == kind) return c;
  throw std::logic_error("no export case of " + kind);
}

// The attributes that carry troupe's semantics.
TEST(OnnxExport, ConvolutionPaddingStridesAndBatchNormEpsilonAreTroupes) {
  const onnx::ModelProto conv = exported(case_of("conv2d").spec);
  const onnx::NodeProto* c = find_op(conv, "Conv");
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->input_size(), 2);  // bias=false: no bias input
  EXPECT_EQ(std::vector<std::int64_t>(attribute(*c, "kernel_shape")->ints().begin(),
                                      attribute(*c, "kernel_shape")->ints().end()),
            (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(std::vector<std::int64_t>(attribute(*c, "pads")->ints().begin(), attribute(*c, "pads")->ints().end()),
            (std::vector<std::int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(attribute(*c, "strides")->ints(0), 2);
  const onnx::ModelProto conv1d = exported(case_of("conv1d").spec);
  const onnx::NodeProto* same = find_op(conv1d, "Conv");
  ASSERT_NE(same, nullptr);
  EXPECT_EQ(attribute(*same, "pads")->ints_size(), 2);
  EXPECT_EQ(attribute(*same, "pads")->ints(0), 1);  // kernel 3, "same": one zero each side

  const onnx::ModelProto bn = exported(case_of("batchnorm").spec);
  const onnx::NodeProto* b = find_op(bn, "BatchNormalization");
  ASSERT_NE(b, nullptr);
  EXPECT_FLOAT_EQ(attribute(*b, "epsilon")->f(), 0.001f);
  // gamma, beta, then the running mean (0) and variance (1) of the state.
  ASSERT_EQ(b->input_size(), 5);
  EXPECT_EQ(b->input(3), "batchnorm_1.running_mean");
  EXPECT_EQ(b->input(4), "batchnorm_1.running_var");

  const onnx::ModelProto emb = exported(case_of("embedding").spec);
  const onnx::NodeProto* t = find_op(emb, "Transpose");
  ASSERT_NE(t, nullptr) << "the embedding's rows must become channels-first";
  EXPECT_EQ(attribute(*t, "perm")->ints(1), 2);
}

// (x - mean) / std per channel: constants [c, 1, 1] broadcast over an
// image's positions, with the spec's values.
TEST(OnnxExport, StandardizeIsASubAndADivByConstantsPerChannel) {
  const onnx::ModelProto m = exported("input 2 3 3\nstandardize mean=0.5,-1 std=2,0.25\nflatten");
  const onnx::NodeProto* sub = find_op(m, "Sub");
  const onnx::NodeProto* div = find_op(m, "Div");
  ASSERT_NE(sub, nullptr);
  ASSERT_NE(div, nullptr);
  EXPECT_EQ(sub->input(0), "input");
  EXPECT_EQ(div->input(0), sub->output(0));
  const onnx::TensorProto* mean = nullptr;
  const onnx::TensorProto* deviation = nullptr;
  for (const auto& t : m.graph().initializer()) {
    if (t.name() == sub->input(1)) mean = &t;
    if (t.name() == div->input(1)) deviation = &t;
  }
  ASSERT_NE(mean, nullptr);
  ASSERT_NE(deviation, nullptr);
  EXPECT_EQ(std::vector<std::int64_t>(mean->dims().begin(), mean->dims().end()), (std::vector<std::int64_t>{2, 1, 1}));
  float values[2];
  ASSERT_EQ(deviation->raw_data().size(), sizeof values);
  std::memcpy(values, deviation->raw_data().data(), sizeof values);
  EXPECT_EQ(values[0], 2.0f);
  EXPECT_EQ(values[1], 0.25f);
  EXPECT_NO_THROW(onnx::checker::check_model(m));
}

TEST(OnnxExport, LabelsNameTheNodesAndALabelCalledOutputDoesNotClash) {
  const onnx::ModelProto m = exported("input 6\noutput: relu\nconv2d_1: tanh\ndense units=2");
  std::vector<std::string> names;
  for (const auto& n : m.graph().node()) names.push_back(n.name());
  EXPECT_EQ(names, (std::vector<std::string>{"relu_1", "conv2d_1", "dense_1"}));
  EXPECT_EQ(m.graph().node(2).output(0), "output");
  EXPECT_NO_THROW(onnx::checker::check_model(m));
  bool classes = false;
  for (const auto& p : m.metadata_props()) classes = classes || (p.key() == "troupe.classes" && p.value() == "a\nb\n");
  EXPECT_TRUE(classes);
}

}  // namespace
