#include "models/export/onnx.hpp"

#include <onnx/onnx_pb.h>  // defines: onnx::ModelProto and the other protobuf types (Debian libonnx-dev)

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/layers/layers.hpp"

namespace troupe::models {

namespace {

// A layer's normalised spec line ("conv2d filters=16 kernel=3 stride=1
// padding=same"): its kind and options. Layer::spec() is the one
// description every layer gives of itself, and it is complete (parsing it
// gives an identical layer), so the export reads it rather than each
// layer's private fields.
struct LayerLine {
  std::string kind;
  std::map<std::string, std::string> options;

  explicit LayerLine(const std::string& line) {
    std::size_t at = 0;
    while (at < line.size()) {
      const std::size_t end = std::min(line.find(' ', at), line.size());
      const std::string word = line.substr(at, end - at);
      at = end + 1;
      if (word.empty()) continue;
      if (kind.empty()) {
        kind = word;
        continue;
      }
      const std::size_t eq = word.find('=');
      if (eq != std::string::npos) options[word.substr(0, eq)] = word.substr(eq + 1);
    }
  }
  std::string get(const std::string& key, const std::string& fallback) const {
    auto it = options.find(key);
    return it == options.end() ? fallback : it->second;
  }
  std::int64_t integer(const std::string& key, const std::string& fallback) const {
    return std::stoll(get(key, fallback));
  }
};

class GraphWriter {
 public:
  explicit GraphWriter(onnx::GraphProto& graph) : graph_(graph) {}

  onnx::NodeProto& node(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                        const std::string& output) {
    onnx::NodeProto* n = graph_.add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& in : inputs) n->add_input(in);
    n->add_output(output);
    return *n;
  }

  static void ints(onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& values) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto v : values) a->add_ints(v);
  }
  static void integer(onnx::NodeProto& n, const std::string& name, std::int64_t value) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }
  static void real(onnx::NodeProto& n, const std::string& name, float value) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }

  // An f32 initializer; the bytes are the host's floats, little-endian on
  // every host troupe builds for (x86-64, aarch64), which raw_data requires.
  std::string initializer(const std::string& name, const Shape& shape, const float* values) {
    onnx::TensorProto* t = graph_.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : shape.dims()) t->add_dims(d);
    t->set_raw_data(
        std::string(reinterpret_cast<const char*>(values), static_cast<std::size_t>(shape.numel()) * sizeof(float)));
    return name;
  }
  std::string scalar(const std::string& name, float value) {
    return initializer(name, Shape(std::vector<std::int64_t>{}), &value);
  }
  // An int64 vector (a Reshape's shape, Gather's indices).
  std::string int64s(const std::string& name, const std::vector<std::int64_t>& values) {
    onnx::TensorProto* t = graph_.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<std::int64_t>(values.size()));
    for (auto v : values) t->add_int64_data(v);
    return name;
  }

 private:
  onnx::GraphProto& graph_;
};

void set_type(onnx::ValueInfoProto& v, const std::string& name, int elem_type, const Shape& per_example) {
  v.set_name(name);
  onnx::TypeProto_Tensor* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  onnx::TensorShapeProto* s = t->mutable_shape();
  s->add_dim()->set_dim_param("batch");
  for (auto d : per_example.dims()) s->add_dim()->set_dim_value(d);
}

const char* kSupported =
    "dense, conv2d, conv1d, maxpool2d, maxpool1d, avgpool2d, globalavgpool2d, embedding, positional_embedding, "
    "attention, tied_output, flatten, relu, sigmoid, tanh, gelu, softmax, dropout, batchnorm, layernorm, standardize, "
    "add, concat";

}  // namespace

std::string to_onnx(const Model& model, const OnnxOptions& options) {
  onnx::ModelProto proto;
  proto.set_ir_version(8);  // the IR of opsets 15 to 17
  proto.set_producer_name("troupe");
  proto.set_producer_version(options.producer_version);
  proto.set_model_version(1);
  proto.set_doc_string("troupe model '" + model.spec().name + "'; its spec:\n" + model.spec().text());
  onnx::OperatorSetIdProto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  auto meta = [&](const std::string& key, const std::string& value) {
    onnx::StringStringEntryProto* p = proto.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  };
  meta("troupe.spec", model.spec().text());
  // A byte-level language model's tokens: token id i is the i-th byte.
  if (!model.spec().vocabulary.empty()) meta("troupe.vocabulary", vocabulary_hex(model.spec().vocabulary));
  if (!options.class_names.empty()) {
    std::string classes;
    for (const auto& c : options.class_names) classes += c + "\n";
    meta("troupe.classes", classes);
  }

  onnx::GraphProto& graph = *proto.mutable_graph();
  graph.set_name(model.spec().name);
  GraphWriter w(graph);
  const bool ids = model.spec().input_dtype == DType::i32;
  set_type(*graph.add_input(), "input", ids ? onnx::TensorProto::INT32 : onnx::TensorProto::FLOAT, model.input_shape());
  set_type(*graph.add_output(), "output", onnx::TensorProto::FLOAT, model.output_shape());

  const std::size_t count = model.node_count();
  std::vector<std::string> values(count);  // each layer's output value
  std::map<std::string, int> kinds_seen;
  std::set<std::string> names{"input", "output"};
  std::string embedding_table;  // the initializer tied_output reads
  for (std::size_t i = 0; i < count; ++i) {
    const Model::NodeView v = model.node(i);
    const LayerLine line(v.layer.spec());
    // Labels are unique in a spec, but one may read like another layer's
    // kind and number, or like "output": ONNX values need unique names.
    std::string name = !v.name.empty() ? v.name : line.kind + "_" + std::to_string(++kinds_seen[line.kind]);
    while (!names.insert(name).second) name = line.kind + "_" + std::to_string(++kinds_seen[line.kind]);
    auto fail = [&](const std::string& why) {
      return std::invalid_argument("ONNX export of model '" + model.spec().name + "', layer " + std::to_string(i + 1) +
                                   " '" + v.layer.spec() + "'" + (v.name.empty() ? "" : " (" + v.name + ")") + ": " +
                                   why);
    };
    std::vector<std::string> in;
    for (int k : v.inputs) in.push_back(k < 0 ? std::string("input") : values[static_cast<std::size_t>(k)]);
    const std::string out = i + 1 == count ? std::string("output") : name;
    values[i] = out;
    // The layer's parameters (and state), in parameters() order, as
    // initializers named after the layer.
    std::vector<std::string> weights;
    {
      const std::vector<float> host = v.params.to_vector();
      std::int64_t at = 0;
      for (const ParameterInfo& p : v.layer.parameters()) {
        weights.push_back(w.initializer(name + "." + p.name, p.shape, host.data() + at));
        at += p.shape.numel();
      }
      const std::vector<float> state = v.state.to_vector();
      at = 0;
      for (const ParameterInfo& p : v.layer.state()) {
        weights.push_back(w.initializer(name + "." + p.name, p.shape, state.data() + at));
        at += p.shape.numel();
      }
    }
    const std::string& kind = line.kind;
    if (kind == "dense") {
      const auto* dense = dynamic_cast<const Dense*>(&v.layer);
      if (!dense) throw fail("not a Dense layer");
      if (dense->positions() == 1) {
        // troupe's y = x W + b with W [in, out]: Gemm without transposes.
        w.node("Gemm", name, {in[0], weights.at(0), weights.at(1)}, out);
      } else {
        // Every position of [n, length, in]: MatMul broadcasts W over the
        // batch and the positions (Gemm takes 2-D inputs only), then the bias.
        w.node("MatMul", name + "/matmul", {in[0], weights.at(0)}, name + "/product");
        w.node("Add", name, {name + "/product", weights.at(1)}, out);
      }
    } else if (kind == "conv2d" || kind == "conv1d") {
      const std::string text = line.get("kernel", "1");
      const std::size_t x = text.find('x');
      std::vector<std::int64_t> kernel;
      if (kind == "conv1d")
        kernel = {std::stoll(text)};
      else if (x == std::string::npos)
        kernel = {std::stoll(text), std::stoll(text)};
      else
        kernel = {std::stoll(text.substr(0, x)), std::stoll(text.substr(x + 1))};
      const Padding padding = Padding::parse(line.get("padding", "valid"));
      const std::int64_t stride = line.integer("stride", "1");
      std::vector<std::int64_t> pads;
      for (auto k : kernel) pads.push_back(padding.for_kernel(k));
      pads.insert(pads.end(), pads.begin(), pads.end());  // ONNX: all the begins, then the ends; troupe pads both alike
      std::vector<std::string> args{in[0], weights.at(0)};
      if (weights.size() > 1) args.push_back(weights[1]);  // conv2d bias=false has none
      auto& n = w.node("Conv", name, args, out);
      GraphWriter::ints(n, "kernel_shape", kernel);
      GraphWriter::ints(n, "strides", std::vector<std::int64_t>(kernel.size(), stride));
      GraphWriter::ints(n, "pads", pads);
      GraphWriter::ints(n, "dilations", std::vector<std::int64_t>(kernel.size(), 1));
      GraphWriter::integer(n, "group", 1);
    } else if (kind == "maxpool2d" || kind == "maxpool1d" || kind == "avgpool2d") {
      // Every window inside the input (no padding), the output rounded
      // down: ONNX's defaults (ceil_mode 0, pads 0).
      const std::int64_t pool = line.integer("pool", "2");
      const std::int64_t stride = line.integer("stride", std::to_string(pool));
      const std::size_t dims = kind == "maxpool1d" ? 1 : 2;
      auto& n = w.node(kind == "avgpool2d" ? "AveragePool" : "MaxPool", name, {in[0]}, out);
      GraphWriter::ints(n, "kernel_shape", std::vector<std::int64_t>(dims, pool));
      GraphWriter::ints(n, "strides", std::vector<std::int64_t>(dims, stride));
    } else if (kind == "globalavgpool2d") {
      // [n, c, h, w] -> [n, c, 1, 1] -> troupe's [n, c].
      w.node("GlobalAveragePool", name + "/pool", {in[0]}, name + "/pooled");
      GraphWriter::integer(w.node("Flatten", name, {name + "/pooled"}, out), "axis", 1);
    } else if (kind == "embedding") {
      const auto* embedding = dynamic_cast<const Embedding*>(&v.layer);
      if (!embedding) throw fail("not an Embedding layer");
      embedding_table = weights.at(0);
      if (embedding->channels_last()) {
        w.node("Gather", name, {weights.at(0), in[0]}, out);  // rows [n, length, dim], as troupe's
      } else {
        // Rows [n, length, dim], then channels-first [n, dim, length] as
        // troupe's Embedding gives them (ready for a Conv1D).
        w.node("Gather", name + "/gather", {weights.at(0), in[0]}, name + "/rows");
        GraphWriter::ints(w.node("Transpose", name, {name + "/rows"}, out), "perm", {0, 2, 1});
      }
    } else if (kind == "attention") {
      // [n, t, c] -> q, k, v [n, heads, t, d]: the fused projection, split
      // as troupe splits it (columns part * c + head * d + e), then scores
      // with the causal mask added (-1e30 above the diagonal: exp gives
      // exactly 0, as troupe's masked keys), softmax, the weighted values,
      // the heads side by side, and the output projection.
      const auto* layer = dynamic_cast<const CausalSelfAttention*>(&v.layer);
      if (!layer) throw fail("not a CausalSelfAttention layer");
      const std::int64_t t = v.output[0], c = v.output[1], heads = layer->heads(), d = c / heads;
      const std::string p = name + "/";
      w.node("MatMul", p + "qkv_matmul", {in[0], weights.at(0)}, p + "qkv_product");
      w.node("Add", p + "qkv", {p + "qkv_product", weights.at(1)}, p + "qkv");
      w.node("Reshape", p + "split", {p + "qkv", w.int64s(p + "split_shape", {0, t, 3, heads, d})}, p + "split");
      GraphWriter::ints(w.node("Transpose", p + "heads", {p + "split"}, p + "heads"), "perm", {2, 0, 3, 1, 4});
      for (std::int64_t part = 0; part < 3; ++part) {
        const std::string which = part == 0 ? "q" : part == 1 ? "k" : "v";
        GraphWriter::integer(
            w.node("Gather", p + which, {p + "heads", w.int64s(p + which + "_index", {part})}, p + which + "_1"),
            "axis", 0);
        // Gather with a [1] index keeps a leading 1: [1, n, heads, t, d].
        w.node("Reshape", p + which + "_heads", {p + which + "_1", w.int64s(p + which + "_shape", {-1, heads, t, d})},
               p + which + "_heads");
      }
      GraphWriter::ints(w.node("Transpose", p + "k_t", {p + "k_heads"}, p + "k_t"), "perm", {0, 1, 3, 2});
      w.node("MatMul", p + "qk", {p + "q_heads", p + "k_t"}, p + "qk");
      w.node("Mul", p + "scores", {p + "qk", w.scalar(p + "scale", 1.0f / std::sqrt(static_cast<float>(d)))},
             p + "scores");
      std::vector<float> mask(static_cast<std::size_t>(t * t), 0.0f);
      for (std::int64_t query = 0; query < t; ++query)
        for (std::int64_t key = query + 1; key < t; ++key) mask[static_cast<std::size_t>(query * t + key)] = -1e30f;
      w.node("Add", p + "masked", {p + "scores", w.initializer(p + "mask", Shape{t, t}, mask.data())}, p + "masked");
      GraphWriter::integer(w.node("Softmax", p + "probs", {p + "masked"}, p + "probs"), "axis", -1);
      w.node("MatMul", p + "weighted", {p + "probs", p + "v_heads"}, p + "weighted");
      GraphWriter::ints(w.node("Transpose", p + "by_position", {p + "weighted"}, p + "by_position"), "perm",
                        {0, 2, 1, 3});
      w.node("Reshape", p + "merged", {p + "by_position", w.int64s(p + "merged_shape", {0, t, c})}, p + "merged");
      w.node("MatMul", p + "out_matmul", {p + "merged", weights.at(2)}, p + "out_product");
      w.node("Add", name, {p + "out_product", weights.at(3)}, out);
    } else if (kind == "tied_output") {
      // x E^T with the embedding's own initializer: the tie survives.
      if (embedding_table.empty()) throw fail("no embedding before it to tie to");
      GraphWriter::ints(w.node("Transpose", name + "/table_t", {embedding_table}, name + "/table_t"), "perm", {1, 0});
      w.node("MatMul", name, {in[0], name + "/table_t"}, out);
    } else if (kind == "positional_embedding") {
      // x + table: the table [length, dim] broadcasts over the batch.
      w.node("Add", name, {in[0], weights.at(0)}, out);
    } else if (kind == "flatten") {
      // Row-major, as troupe's Flatten (a view of the same elements).
      GraphWriter::integer(w.node("Flatten", name, {in[0]}, out), "axis", 1);
    } else if (kind == "relu") {
      w.node("Relu", name, {in[0]}, out);
    } else if (kind == "sigmoid") {
      w.node("Sigmoid", name, {in[0]}, out);
    } else if (kind == "tanh") {
      w.node("Tanh", name, {in[0]}, out);
    } else if (kind == "softmax") {
      // Over the last dimension, as troupe's (opset 13's Softmax takes one axis).
      GraphWriter::integer(w.node("Softmax", name, {in[0]}, out), "axis", -1);
    } else if (kind == "gelu") {
      // Exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): ONNX's Gelu
      // operator is opset 20, past what Debian's onnx 1.12 checks.
      const std::string sqrt2 = w.scalar(name + ".sqrt2", std::sqrt(2.0f));
      const std::string one = w.scalar(name + ".one", 1.0f), half = w.scalar(name + ".half", 0.5f);
      w.node("Div", name + "/scaled", {in[0], sqrt2}, name + "/scaled");
      w.node("Erf", name + "/erf", {name + "/scaled"}, name + "/erf");
      w.node("Add", name + "/one_plus", {name + "/erf", one}, name + "/one_plus");
      w.node("Mul", name + "/times_x", {in[0], name + "/one_plus"}, name + "/times_x");
      w.node("Mul", name, {name + "/times_x", half}, out);
    } else if (kind == "dropout") {
      w.node("Identity", name, {in[0]}, out);  // inference: no mask, no scaling (inverted dropout)
    } else if (kind == "batchnorm") {
      // Inference: the running statistics from the model's state, troupe's
      // epsilon. ONNX's momentum only matters in training mode; it is
      // written in ONNX's convention, which is troupe's (Keras').
      auto& n =
          w.node("BatchNormalization", name, {in[0], weights.at(0), weights.at(1), weights.at(2), weights.at(3)}, out);
      GraphWriter::real(n, "epsilon", std::stof(line.get("epsilon", "1e-5")));
      GraphWriter::real(n, "momentum", std::stof(line.get("momentum", "0.9")));
    } else if (kind == "layernorm") {
      // ONNX's LayerNormalization (opset 17) over the last axis, with
      // troupe's epsilon: the same formula, the biased variance.
      auto& n = w.node("LayerNormalization", name, {in[0], weights.at(0), weights.at(1)}, out);
      GraphWriter::integer(n, "axis", -1);
      GraphWriter::real(n, "epsilon", std::stof(line.get("epsilon", "1e-5")));
    } else if (kind == "standardize") {
      // (x - mean) / std per channel: constants of shape [c, 1, ...] that
      // broadcast over the batch and the positions of each channel.
      const auto* layer = dynamic_cast<const Standardize*>(&v.layer);
      if (!layer) throw fail("not a Standardize layer");
      std::vector<std::int64_t> dims(v.output.dims().size(), 1);
      dims.at(0) = static_cast<std::int64_t>(layer->mean().size());
      const std::string mean = w.initializer(name + ".mean", Shape(dims), layer->mean().data());
      const std::string deviation = w.initializer(name + ".std", Shape(dims), layer->deviation().data());
      w.node("Sub", name + "/centred", {in[0], mean}, name + "/centred");
      w.node("Div", name, {name + "/centred", deviation}, out);
    } else if (kind == "add") {
      // Left to right, as troupe sums: (x1 + x2) + x3.
      std::string sum = in.at(0);
      for (std::size_t k = 1; k < in.size(); ++k) {
        const std::string to = k + 1 == in.size() ? out : name + "/sum" + std::to_string(k);
        w.node("Add", k + 1 == in.size() ? name : to, {sum, in[k]}, to);
        sum = to;
      }
    } else if (kind == "concat") {
      // Along the channels, the first per-example dimension.
      GraphWriter::integer(w.node("Concat", name, in, out), "axis", 1);
    } else {
      throw fail("the ONNX export does not know layer '" + kind + "' (it knows " + kSupported + ")");
    }
  }
  std::string bytes;
  if (!proto.SerializeToString(&bytes))
    throw std::runtime_error("ONNX export of model '" + model.spec().name + "': protobuf could not serialize it");
  return bytes;
}

}  // namespace troupe::models
