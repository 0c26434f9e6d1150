#include "models/spec.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "models/layers/layers.hpp"
#include "util/config_file.hpp"

namespace troupe::models {

namespace {

struct ParseError : std::invalid_argument {
  ParseError(const std::string& source, int line, const std::string& what)
      : std::invalid_argument(source + ":" + std::to_string(line) + ": " + what) {}
};

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::int64_t parse_int(const std::string& text, const std::string& what) {
  try {
    std::size_t used = 0;
    long long v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {}
  throw std::invalid_argument(what + " '" + text + "' is not an integer");
}

float parse_float(const std::string& text, const std::string& what) {
  try {
    std::size_t used = 0;
    float v = std::stof(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {}
  throw std::invalid_argument(what + " '" + text + "' is not a number");
}

// "1.5,-2,3e-4": a comma-separated list of numbers (standardize's mean= and std=).
std::vector<float> parse_float_list(const std::string& text, const std::string& what) {
  std::vector<float> out;
  std::size_t start = 0;
  for (;;) {
    const auto comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(parse_float(item, what + " value " + std::to_string(out.size() + 1)));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// Options of one layer line: key=value pairs, each used at most once.
class Options {
 public:
  Options(const std::string& layer, const std::vector<std::string>& w) : layer_(layer) {
    for (std::size_t i = 1; i < w.size(); ++i) {
      auto eq = w[i].find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == w[i].size())
        throw std::invalid_argument(layer + ": option '" + w[i] + "' is not key=value");
      if (!values_.emplace(w[i].substr(0, eq), w[i].substr(eq + 1)).second)
        throw std::invalid_argument(layer + ": option '" + w[i].substr(0, eq) + "' given twice");
    }
  }
  std::string take(const std::string& key, const std::string& fallback = "") {
    auto it = values_.find(key);
    if (it == values_.end()) {
      if (fallback.empty()) throw std::invalid_argument(layer_ + ": missing " + key + "=");
      return fallback;
    }
    std::string v = it->second;
    values_.erase(it);
    return v;
  }
  std::int64_t take_int(const std::string& key, const std::string& fallback = "") {
    return parse_int(take(key, fallback), layer_ + " " + key);
  }
  void done() const {
    if (!values_.empty()) throw std::invalid_argument(layer_ + ": unknown option '" + values_.begin()->first + "'");
  }

 private:
  std::string layer_;
  std::map<std::string, std::string> values_;
};

const char* known_layers =
    "dense, conv2d, conv1d, maxpool2d, maxpool1d, avgpool2d, globalavgpool2d, embedding, positional_embedding, "
    "attention, tied_output, flatten, relu, sigmoid, tanh, gelu, softmax, dropout, batchnorm, layernorm, standardize, "
    "add, concat";

bool is_layer_kind(const std::string& kind) {
  for (const char* k : {"dense",           "conv2d",      "conv1d",
                        "maxpool2d",       "maxpool1d",   "avgpool2d",
                        "globalavgpool2d", "embedding",   "positional_embedding",
                        "attention",       "flatten",     "relu",
                        "sigmoid",         "tanh",        "gelu",
                        "softmax",         "dropout",     "batchnorm",
                        "layernorm",       "standardize", "add",
                        "concat",          "tied_output"})
    if (kind == k) return true;
  return false;
}

// init=normal:STD (a kernel or table N(0, STD), GPT's), or the layer's
// default (returned as 0).
float parse_normal_init(const std::string& text, const std::string& layer, const std::string& fallback) {
  if (text == fallback) return 0.0f;
  const std::string prefix = "normal:";
  if (text.compare(0, prefix.size(), prefix) == 0) {
    const float deviation = parse_float(text.substr(prefix.size()), layer + " init deviation");
    if (deviation > 0.0f && std::isfinite(deviation)) return deviation;
  }
  throw std::invalid_argument(layer + " init '" + text + "': expected " + fallback +
                              " or normal:STD (a positive deviation, e.g. normal:0.02)");
}

std::unique_ptr<Layer> make_layer(const std::string& line) {
  auto w = words(line);
  const std::string& kind = w.at(0);
  Options o(kind, w);
  std::unique_ptr<Layer> layer;
  if (kind == "dense") {
    const std::int64_t units = o.take_int("units");
    layer =
        std::make_unique<Dense>(units, parse_normal_init(o.take("init", "glorot_uniform"), "dense", "glorot_uniform"));
  } else if (kind == "conv2d") {
    std::int64_t filters = o.take_int("filters");
    std::string k = o.take("kernel");
    std::int64_t kh, kw;
    if (auto x = k.find('x'); x != std::string::npos) {
      kh = parse_int(k.substr(0, x), "conv2d kernel");
      kw = parse_int(k.substr(x + 1), "conv2d kernel");
    } else {
      kh = kw = parse_int(k, "conv2d kernel");
    }
    const std::int64_t stride = o.take_int("stride", "1");
    const Padding padding = Padding::parse(o.take("padding", "valid"));
    const std::string bias = o.take("bias", "true");
    if (bias != "true" && bias != "false")
      throw std::invalid_argument("conv2d bias '" + bias + "': expected true or false");
    const Conv2D::Init init = Conv2D::parse_init(o.take("init", "glorot_uniform"));
    layer = std::make_unique<Conv2D>(filters, kh, kw, stride, padding, bias == "true", init);
  } else if (kind == "conv1d") {
    std::int64_t filters = o.take_int("filters");
    std::int64_t kernel = o.take_int("kernel");
    layer = std::make_unique<Conv1D>(filters, kernel, o.take_int("stride", "1"),
                                     Padding::parse(o.take("padding", "valid")));
  } else if (kind == "maxpool2d" || kind == "maxpool1d" || kind == "avgpool2d") {
    std::int64_t pool = o.take_int("pool", "2");
    std::int64_t stride = o.take_int("stride", std::to_string(pool));
    if (kind == "maxpool2d")
      layer = std::make_unique<MaxPool2D>(pool, stride);
    else if (kind == "avgpool2d")
      layer = std::make_unique<AvgPool2D>(pool, stride);
    else
      layer = std::make_unique<MaxPool1D>(pool, stride);
  } else if (kind == "globalavgpool2d") {
    layer = std::make_unique<GlobalAvgPool2D>();
  } else if (kind == "sigmoid") {
    layer = std::make_unique<Activation>(Activation::Kind::sigmoid);
  } else if (kind == "tanh") {
    layer = std::make_unique<Activation>(Activation::Kind::tanh);
  } else if (kind == "gelu") {
    layer = std::make_unique<Activation>(Activation::Kind::gelu);
  } else if (kind == "softmax") {
    layer = std::make_unique<Activation>(Activation::Kind::softmax);
  } else if (kind == "batchnorm") {
    const float momentum = parse_float(o.take("momentum", "0.9"), "batchnorm momentum");
    const float epsilon = parse_float(o.take("epsilon", "1e-5"), "batchnorm epsilon");
    const std::string sync = o.take("sync", "false");
    if (sync != "true" && sync != "false")
      throw std::invalid_argument("batchnorm sync '" + sync + "': expected true or false");
    layer = std::make_unique<BatchNorm>(momentum, epsilon, sync == "true");
  } else if (kind == "layernorm") {
    layer = std::make_unique<LayerNorm>(parse_float(o.take("epsilon", "1e-5"), "layernorm epsilon"));
  } else if (kind == "standardize") {
    std::vector<float> mean = parse_float_list(o.take("mean"), "standardize mean");
    std::vector<float> deviation = parse_float_list(o.take("std"), "standardize std");
    layer = std::make_unique<Standardize>(std::move(mean), std::move(deviation));
  } else if (kind == "concat") {
    layer = std::make_unique<Concat>();
  } else if (kind == "embedding") {
    std::int64_t vocab = o.take_int("vocab");
    const std::int64_t dim = o.take_int("dim");
    const std::string layout = o.take("layout", "channels_first");
    if (layout != "channels_first" && layout != "channels_last")
      throw std::invalid_argument("embedding layout '" + layout +
                                  "': expected channels_first ([dim, length], for conv1d) or channels_last "
                                  "([length, dim])");
    layer = std::make_unique<Embedding>(vocab, dim, layout == "channels_last",
                                        parse_normal_init(o.take("init", "uniform"), "embedding", "uniform"));
  } else if (kind == "attention") {
    const std::int64_t heads = o.take_int("heads");
    const float init = parse_normal_init(o.take("init", "glorot_uniform"), "attention", "glorot_uniform");
    layer = std::make_unique<CausalSelfAttention>(
        heads, init, parse_normal_init(o.take("out_init", "glorot_uniform"), "attention", "glorot_uniform"));
  } else if (kind == "tied_output") {
    layer = std::make_unique<TiedOutput>();
  } else if (kind == "positional_embedding") {
    layer = std::make_unique<PositionalEmbedding>();
  } else if (kind == "flatten") {
    layer = std::make_unique<Flatten>();
  } else if (kind == "relu") {
    layer = std::make_unique<ReLU>();
  } else if (kind == "dropout") {
    layer = std::make_unique<Dropout>(parse_float(o.take("rate"), "dropout rate"));
  } else if (kind == "add") {
    layer = std::make_unique<Add>();
  } else {
    throw std::invalid_argument("unknown layer '" + kind + "'; known: " + known_layers);
  }
  o.done();
  return layer;
}

bool is_identifier(const std::string& w) {
  if (w.empty() || !(std::isalpha(static_cast<unsigned char>(w[0])) || w[0] == '_')) return false;
  for (char c : w)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

std::string joined(const std::vector<std::string>& w, std::size_t from = 0) {
  std::string out;
  for (std::size_t i = from; i < w.size(); ++i) out += (out.empty() ? "" : " ") + w[i];
  return out;
}

// One line of a graph: "[LABEL:] KIND option=value ... [from=A,B]".
struct GraphLine {
  std::string label;              // empty: none
  std::vector<std::string> from;  // empty: the line before
  std::vector<std::string> body;  // KIND and its options, without from=
};

GraphLine split_graph_line(const std::vector<std::string>& w) {
  GraphLine g;
  std::size_t i = 0;
  if (!w.empty() && w[0].size() > 1 && w[0].back() == ':') {
    g.label = w[0].substr(0, w[0].size() - 1);
    if (!is_identifier(g.label))
      throw std::invalid_argument("label '" + g.label +
                                  "' must be a name of letters, digits and _ (not first a digit)");
    if (g.label == "input" || g.label == "in")
      throw std::invalid_argument("label '" + g.label + "' is reserved (the model's input, a block's input)");
    i = 1;
  }
  if (i >= w.size()) throw std::invalid_argument("label '" + g.label + ":' names no layer");
  for (; i < w.size(); ++i) {
    if (w[i].rfind("from=", 0) == 0) {
      if (!g.from.empty()) throw std::invalid_argument("option 'from' given twice");
      const std::string list = w[i].substr(5);
      std::size_t start = 0;
      while (start <= list.size()) {
        const std::size_t comma = list.find(',', start);
        const std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!is_identifier(name))
          throw std::invalid_argument("from=" + list + ": '" + name + "' is not a layer's label");
        g.from.push_back(name);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else {
      g.body.push_back(w[i]);
    }
  }
  if (g.body.empty()) throw std::invalid_argument("a line with from= names no layer");
  return g;
}

std::string graph_line_text(const std::string& label, const std::string& body, const std::vector<std::string>& from) {
  std::string out = label.empty() ? body : label + ": " + body;
  if (!from.empty()) {
    out += " from=";
    for (std::size_t i = 0; i < from.size(); ++i) out += (i ? "," : "") + from[i];
  }
  return out;
}

// Replaces every $NAME in `word` by the block argument NAME.
std::string substitute(const std::string& word, const std::map<std::string, std::string>& args,
                       const std::string& block) {
  std::string out;
  for (std::size_t i = 0; i < word.size();) {
    if (word[i] != '$') {
      out += word[i++];
      continue;
    }
    std::size_t j = i + 1;
    while (j < word.size() && (std::isalnum(static_cast<unsigned char>(word[j])) || word[j] == '_')) ++j;
    const std::string name = word.substr(i + 1, j - i - 1);
    auto it = args.find(name);
    if (it == args.end()) {
      std::string known;
      for (const auto& [k, v] : args) known += (known.empty() ? "" : ", ") + k;
      throw std::invalid_argument("block " + block + " has no parameter '$" + name + "'" +
                                  (known.empty() ? " (it takes none)" : "; its parameters: " + known));
    }
    out += it->second;
    i = j;
  }
  return out;
}

// Expands a spec's lines into its graph, one top-level line at a time (so
// that parse() names the line of an error), blocks inlined.
class Expander {
 public:
  explicit Expander(const ModelSpec& spec) : spec_(spec) {}

  // One top-level line (normalised or not); `line_no` for the checks of finish().
  void top_line(const std::vector<std::string>& w, int line_no) {
    line_no_ = line_no;
    expand(w, top_, /*prefix=*/"", /*block_input=*/std::nullopt, 0);
  }

  // Every node's output must be used, but the last (the model's output).
  // Returns the graph; `where` names a line in errors ("line 7" or "layer 7").
  std::vector<GraphNode> finish(const std::function<std::string(int line_no, std::size_t node)>& where) {
    std::vector<int> uses(nodes_.size(), 0);
    for (const auto& n : nodes_)
      for (int i : n.inputs)
        if (i >= 0) ++uses[static_cast<std::size_t>(i)];
    for (std::size_t i = 0; i + 1 < nodes_.size(); ++i)
      if (uses[i] == 0)
        throw std::invalid_argument(where(lines_[i], i) + ": the output of layer " + std::to_string(i + 1) + " '" +
                                    nodes_[i].layer->spec() + "'" +
                                    (nodes_[i].name.empty() ? "" : " (" + nodes_[i].name + ")") +
                                    " is used by no other layer (only the last layer gives the model's output)");
    return std::move(nodes_);
  }

  std::size_t size() const { return nodes_.size(); }

 private:
  // Expands one line in a scope (the labels seen so far in it); returns
  // its output node. `block_input`: inside a block, the node its `in` is.
  int expand(const std::vector<std::string>& w, std::map<std::string, int>& scope, const std::string& prefix,
             std::optional<int> block_input, int depth) {
    GraphLine g = split_graph_line(w);
    if (!g.label.empty() && scope.count(g.label))
      throw std::invalid_argument("label '" + g.label + "' is used twice" +
                                  (prefix.empty() ? "" : " in block use " + prefix.substr(0, prefix.size() - 1)));
    std::vector<int> inputs;
    if (g.from.empty()) {
      inputs.push_back(scope_prev(scope, block_input));
    } else {
      for (const auto& name : g.from) {
        if (auto it = scope.find(name); it != scope.end()) {
          inputs.push_back(it->second);
        } else if (name == "in" && block_input) {
          inputs.push_back(*block_input);
        } else if (name == "input" && !block_input) {
          inputs.push_back(-1);
        } else {
          std::string known = block_input ? "in" : "input";
          for (const auto& [k, v] : scope)
            if (k != kPrevious) known += ", " + k;
          throw std::invalid_argument("from=: no layer labelled '" + name + "' before this line" +
                                      (block_input ? " in the block" : "") + " (known: " + known + ")");
        }
      }
    }
    int out = -1;
    const std::string& kind = g.body[0];
    if (const BlockDef* block = spec_.find_block(kind)) {
      if (depth > 16) throw std::invalid_argument("blocks nested more than 16 deep");
      if (inputs.size() != 1)
        throw std::invalid_argument("block " + kind + " takes one input; from= names " + std::to_string(inputs.size()));
      std::map<std::string, std::string> values;
      for (std::size_t i = 1; i < g.body.size(); ++i) {
        const auto eq = g.body[i].find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == g.body[i].size())
          throw std::invalid_argument(kind + ": argument '" + g.body[i] + "' is not name=value");
        const std::string name = g.body[i].substr(0, eq);
        if (!block->has_param(name)) {
          std::string known;
          for (const auto& p : block->params) known += (known.empty() ? "" : ", ") + p.name;
          throw std::invalid_argument("block " + kind + " has no parameter '" + name + "'" +
                                      (known.empty() ? " (it takes none)" : "; its parameters: " + known));
        }
        if (!values.emplace(name, g.body[i].substr(eq + 1)).second)
          throw std::invalid_argument(kind + ": argument '" + name + "' given twice");
      }
      for (const auto& p : block->params)
        if (!values.count(p.name)) {
          if (p.fallback.empty()) throw std::invalid_argument("block " + kind + ": missing " + p.name + "=");
          values[p.name] = p.fallback;
        }
      // Its labels are its own: prefixed by the use's label, or by the
      // block's name and its use count ("basic3/y").
      const std::string use = g.label.empty() ? kind + std::to_string(++uses_[kind]) : g.label;
      std::map<std::string, int> inner;
      inner[kPrevious] = inputs[0];
      for (std::size_t i = 0; i < block->lines.size(); ++i) {
        try {
          std::vector<std::string> bw = words(block->lines[i]);
          for (auto& word : bw) word = substitute(word, values, kind);
          out = expand(bw, inner, prefix + use + "/", inputs[0], depth + 1);
        } catch (const std::invalid_argument& e) {
          throw std::invalid_argument("block " + kind + ", its line " + std::to_string(i + 1) + " '" + block->lines[i] +
                                      "': " + e.what());
        }
      }
      if (out < 0) throw std::invalid_argument("block " + kind + " has no lines");
    } else {
      if (!is_layer_kind(kind)) {
        std::string blocks;
        for (const auto& b : spec_.blocks) blocks += (blocks.empty() ? "" : ", ") + b.name;
        throw std::invalid_argument("unknown layer '" + kind + "'; known: " + known_layers +
                                    (blocks.empty() ? "" : "; blocks defined above: " + blocks));
      }
      GraphNode node;
      node.layer = make_layer(joined(g.body));
      const bool merge = dynamic_cast<const Merge*>(node.layer.get()) != nullptr;
      if (merge && inputs.size() < 2)
        throw std::invalid_argument(kind + " joins two or more layers: name them with from=A,B");
      if (!merge && inputs.size() != 1)
        throw std::invalid_argument(kind + " takes one input; from= names " + std::to_string(inputs.size()));
      node.name = g.label.empty() ? "" : prefix + g.label;
      node.inputs = inputs;
      nodes_.push_back(std::move(node));
      lines_.push_back(line_no_);
      out = static_cast<int>(nodes_.size()) - 1;
    }
    if (!g.label.empty()) scope[g.label] = out;
    scope[kPrevious] = out;
    return out;
  }

  int scope_prev(const std::map<std::string, int>& scope, std::optional<int> block_input) const {
    if (auto it = scope.find(kPrevious); it != scope.end()) return it->second;
    return block_input ? *block_input : -1;
  }

  // The line before, in a scope (not a valid label, so it cannot clash).
  static constexpr const char* kPrevious = "$previous";
  const ModelSpec& spec_;
  std::vector<GraphNode> nodes_;
  std::vector<int> lines_;  // by node: the top-level line it comes from
  std::map<std::string, int> top_;
  std::map<std::string, int> uses_;  // by block: its uses so far
  int line_no_ = 0;
};

}  // namespace

const BlockDef* ModelSpec::find_block(const std::string& name) const {
  for (const auto& b : blocks)
    if (b.name == name) return &b;
  return nullptr;
}

bool BlockDef::has_param(const std::string& p) const {
  for (const auto& q : params)
    if (q.name == p) return true;
  return false;
}

ModelSpec ModelSpec::parse(const std::string& text, const std::string& source) {
  ModelSpec spec;
  bool have_input = false;
  std::istringstream in(text);
  int line_no = 0;
  BlockDef* open_block = nullptr;
  int block_line = 0;
  std::unique_ptr<Expander> graph;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    // A spec is text: a NUL or other control byte (a corrupt file, or a
    // checkpoint's spec altered) would end up in the model's name, in error
    // messages cut short at the NUL, and in logs.
    for (std::size_t i = 0; i < line.size(); ++i) {
      const auto u = static_cast<unsigned char>(line[i]);
      if ((u < 0x20 && u != '\t' && u != '\r') || u == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", u);
        throw ParseError(source, line_no,
                         std::string("a control character (byte ") + hex + ") at column " + std::to_string(i + 1));
      }
    }
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    auto w = words(line);
    if (w.empty()) continue;
    try {
      if (open_block) {
        // A block's lines are kept as written (one space between words):
        // they are checked where the block is used, with its arguments.
        if (w[0] == "end") {
          if (w.size() != 1) throw std::invalid_argument("'end' takes nothing after it");
          if (open_block->lines.empty()) throw std::invalid_argument("block " + open_block->name + " has no lines");
          open_block = nullptr;
        } else if (w[0] == "block" || w[0] == "name" || w[0] == "input" || w[0] == "vocabulary") {
          throw std::invalid_argument("'" + w[0] + "' inside block " + open_block->name + " (opened at line " +
                                      std::to_string(block_line) + "; close it with 'end')");
        } else {
          split_graph_line(w);  // the label and from= are well formed
          open_block->lines.push_back(joined(w));
        }
      } else if (w[0] == "name") {
        if (w.size() != 2) throw std::invalid_argument("name takes one word");
        spec.name = w[1];
      } else if (w[0] == "input") {
        if (graph && graph->size() > 0) throw std::invalid_argument("'input' after the first layer");
        std::vector<std::int64_t> dims;
        std::size_t first = 1;
        if (w.size() > 1 && w[1] == "ids") {
          spec.input_dtype = DType::i32;
          first = 2;
        }
        for (std::size_t i = first; i < w.size(); ++i) {
          dims.push_back(parse_int(w[i], "input dimension"));
          if (dims.back() <= 0) throw std::invalid_argument("input dimensions must be positive");
        }
        if (dims.empty()) throw std::invalid_argument("input needs a shape, e.g. 'input 1 28 28'");
        spec.input = Shape(dims);
        have_input = true;
      } else if (w[0] == "vocabulary") {
        if (w.size() != 2 || w[1].compare(0, 4, "hex=") != 0)
          throw std::invalid_argument("vocabulary takes hex=BYTES (two hex digits a byte, in token-id order)");
        if (!spec.vocabulary.empty()) throw std::invalid_argument("a second vocabulary line");
        spec.vocabulary = parse_vocabulary_hex(w[1].substr(4));
        if (spec.vocabulary.size() < 2) throw std::invalid_argument("a vocabulary needs at least 2 bytes");
      } else if (w[0] == "block") {
        // block NAME PARAM[=DEFAULT] ...
        if (w.size() < 2) throw std::invalid_argument("block needs a name: 'block NAME [PARAM[=DEFAULT] ...]'");
        BlockDef b;
        b.name = w[1];
        if (!is_identifier(b.name)) throw std::invalid_argument("block name '" + b.name + "' is not a name");
        if (is_layer_kind(b.name) || spec.find_block(b.name) || b.name == "block" || b.name == "end")
          throw std::invalid_argument("block " + b.name + " is defined already (or is a layer's name)");
        for (std::size_t i = 2; i < w.size(); ++i) {
          BlockDef::Param p;
          const auto eq = w[i].find('=');
          p.name = w[i].substr(0, eq);
          if (eq != std::string::npos) {
            p.fallback = w[i].substr(eq + 1);
            if (p.fallback.empty()) throw std::invalid_argument("block " + b.name + ": '" + w[i] + "' has no default");
          }
          if (!is_identifier(p.name))
            throw std::invalid_argument("block " + b.name + ": parameter '" + p.name + "' is not a name");
          if (b.has_param(p.name)) throw std::invalid_argument("block " + b.name + ": parameter " + p.name + " twice");
          b.params.push_back(p);
        }
        spec.blocks.push_back(std::move(b));
        open_block = &spec.blocks.back();
        block_line = line_no;
      } else if (w[0] == "end") {
        throw std::invalid_argument("'end' without a block");
      } else {
        // A layer, or a block's use: checked now, with its line number, by
        // expanding it into the graph so far.
        if (!graph) graph = std::make_unique<Expander>(spec);
        graph->top_line(w, line_no);
        GraphLine g = split_graph_line(w);
        std::string body;
        if (const BlockDef* b = spec.find_block(g.body[0])) {
          // Every argument, in the block's order, defaults included.
          std::map<std::string, std::string> given;
          for (std::size_t i = 1; i < g.body.size(); ++i) {
            const auto eq = g.body[i].find('=');
            given[g.body[i].substr(0, eq)] = g.body[i].substr(eq + 1);
          }
          body = b->name;
          for (const auto& p : b->params)
            body += " " + p.name + "=" + (given.count(p.name) ? given[p.name] : p.fallback);
        } else {
          body = make_layer(joined(g.body))->spec();
        }
        spec.layers.push_back(graph_line_text(g.label, body, g.from));
      }
    } catch (const ParseError&) {
      throw;
    } catch (const std::exception& e) {
      throw ParseError(source, line_no, e.what());
    }
  }
  if (open_block)
    throw ParseError(source, line_no,
                     "block " + open_block->name + " (line " + std::to_string(block_line) + ") has no 'end'");
  if (!have_input) throw ParseError(source, line_no, "no 'input' line (e.g. 'input 1 28 28')");
  if (spec.layers.empty()) throw ParseError(source, line_no, "no layers");
  graph->finish([&](int l, std::size_t) { return source + ":" + std::to_string(l); });
  return spec;
}

std::string ModelSpec::text() const {
  std::string out = "name " + name + "\ninput";
  if (input_dtype == DType::i32) out += " ids";
  for (auto d : input.dims()) out += " " + std::to_string(d);
  out += "\n";
  if (!vocabulary.empty()) out += "vocabulary hex=" + vocabulary_hex(vocabulary) + "\n";
  for (const auto& b : blocks) {
    out += "block " + b.name;
    for (const auto& p : b.params) out += " " + p.name + (p.fallback.empty() ? "" : "=" + p.fallback);
    out += "\n";
    for (const auto& l : b.lines) out += "  " + l + "\n";
    out += "end\n";
  }
  for (const auto& l : layers) out += l + "\n";
  return out;
}

bool ModelSpec::is_chain() const {
  if (!blocks.empty()) return false;
  for (const auto& l : layers)
    if (l.find(':') != std::string::npos || l.find(" from=") != std::string::npos) return false;
  return true;
}

std::vector<GraphNode> ModelSpec::make_graph() const {
  Expander graph(*this);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    try {
      graph.top_line(words(layers[i]), static_cast<int>(i + 1));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("model '" + name + "', line " + std::to_string(i + 1) + " '" + layers[i] +
                                  "': " + e.what());
    }
  }
  return graph.finish([&](int l, std::size_t) { return "model '" + name + "', line " + std::to_string(l); });
}

bool operator==(const ModelSpec& a, const ModelSpec& b) { return a.text() == b.text(); }

std::string normalised_layer_line(const std::string& line) {
  if (words(line).empty()) throw std::invalid_argument("an empty layer line");
  const std::string kind = words(line)[0];
  if (!is_layer_kind(kind)) throw std::invalid_argument("unknown layer '" + kind + "'; known: " + known_layers);
  return make_layer(line)->spec();
}

std::vector<std::string> zoo_names() { return {"linreg", "mlp", "wide", "cnn", "vgg", "resnet", "textcnn", "gpt"}; }

std::string vocabulary_hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    out += digits[u >> 4];
    out += digits[u & 15];
  }
  return out;
}

std::string parse_vocabulary_hex(const std::string& hex) {
  auto digit = [&](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::invalid_argument(std::string("vocabulary hex: '") + c + "' is not a hex digit");
  };
  if (hex.size() % 2 != 0) throw std::invalid_argument("vocabulary hex: an odd number of digits");
  std::string out;
  bool seen[256] = {};
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int b = digit(hex[i]) * 16 + digit(hex[i + 1]);
    if (seen[b]) throw std::invalid_argument("vocabulary hex: byte " + hex.substr(i, 2) + " twice");
    seen[b] = true;
    out += static_cast<char>(b);
  }
  return out;
}

namespace {
// The resnet anchor's network (anchors/torch_resnet.py): a stem, three
// stages of two basic blocks (16, 32, 64 filters; the first block of
// stages 2 and 3 halves the resolution, with a 1x1 projection shortcut),
// global average pooling and a Dense head; 174,970 parameters on 28x28x1.
// Convolutions have no bias (the BatchNorm after each has its beta) and
// start He-normal over their fan-out, as the anchor's.
const char* kResnetBody = R"(block basic filters
  conv2d filters=$filters kernel=3 padding=same bias=false init=he_normal_fan_out
  batchnorm
  relu
  conv2d filters=$filters kernel=3 padding=same bias=false init=he_normal_fan_out
  y: batchnorm
  add from=in,y
  relu
end
block down filters
  conv2d filters=$filters kernel=3 stride=2 padding=same bias=false init=he_normal_fan_out
  batchnorm
  relu
  conv2d filters=$filters kernel=3 padding=same bias=false init=he_normal_fan_out
  y: batchnorm
  conv2d filters=$filters kernel=1 stride=2 bias=false init=he_normal_fan_out from=in
  s: batchnorm
  add from=y,s
  relu
end
conv2d filters=16 kernel=3 padding=same bias=false init=he_normal_fan_out
batchnorm
relu
basic filters=16
basic filters=16
down filters=32
basic filters=32
down filters=64
basic filters=64
globalavgpool2d
)";
}  // namespace

ModelSpec zoo_spec(const std::string& name, const DataShape& data, const ZooSizes& sizes) {
  // The head: one output per class, or per regression target (Keras'
  // Dense(1) head on a regression table: the same network, another loss).
  auto need_classes = [&]() {
    if (data.classes > 0) return std::to_string(data.classes);
    if (data.outputs > 0) return std::to_string(data.outputs);
    throw std::invalid_argument("model '" + name + "' needs class labels or regression targets");
  };
  auto shape_text = [&]() {
    std::string s;
    for (auto d : data.input.dims()) s += " " + std::to_string(d);
    return s;
  };
  // Features of one row (a CSV file's columns) into a convolutional model,
  // often the default cnn: say which zoo model takes them.
  auto not_images = [&]() -> std::string {
    return data.input.rank() == 1 ? " (features of one row, as a .csv file's: --model mlp, or a model spec)" : "";
  };
  std::string text = "name " + name + "\n";
  if (name == "linreg") {
    // The seeds' parameter-server example: y = w.x + b.
    text += "input" + shape_text() + "\nflatten\ndense units=" + std::to_string(data.outputs) + "\n";
  } else if (name == "mlp") {
    text += "input" + shape_text() +
            "\nflatten\ndense units=256\nrelu\ndense units=128\nrelu\ndense units=" + need_classes() + "\n";
  } else if (name == "cnn") {
    // The seed's Keras MNIST model: Conv2D(32, 3) ReLU, MaxPool 2, Flatten, Dense(64) ReLU, Dense(10).
    if (data.input.rank() != 3)
      throw std::invalid_argument("model 'cnn' needs image data [channels, height, width], got " + data.input.str() +
                                  not_images());
    text += "input" + shape_text() +
            "\nconv2d filters=32 kernel=3\nrelu\nmaxpool2d pool=2\nflatten\n"
            "dense units=64\nrelu\ndense units=" +
            need_classes() + "\n";
  } else if (name == "wide") {
    // The sync-path benchmark's MLP (anchors/torch_anchor.py "wide"): 5.8 M
    // parameters, 23 MB of gradients a step.
    text += "input" + shape_text() +
            "\nflatten\ndense units=2048\nrelu\ndense units=2048\nrelu\ndense units=" + need_classes() + "\n";
  } else if (name == "vgg" || name == "resnet") {
    if (data.input.rank() != 3)
      throw std::invalid_argument("model '" + name + "' needs image data [channels, height, width], got " +
                                  data.input.str() + not_images());
    if (name == "vgg")
      // The VGG-style stack of anchors/torch_anchor.py ("vgg"): 3x3 "same"
      // convolutions 64, 64, pool, 128, pool, Dense 256, Dense classes.
      text += "input" + shape_text() +
              "\nconv2d filters=64 kernel=3 padding=same\nrelu\nconv2d filters=64 kernel=3 padding=same\nrelu\n"
              "maxpool2d pool=2\nconv2d filters=128 kernel=3 padding=same\nrelu\nmaxpool2d pool=2\nflatten\n"
              "dense units=256\nrelu\ndense units=" +
              need_classes() + "\n";
    else
      text += "input" + shape_text() + "\n" + kResnetBody + "dense units=" + need_classes() + "\n";
  } else if (name == "textcnn") {
    // The seed's Reuters model: Embedding(V, 7), Conv1D(64, 5) ReLU, MaxPool1D(2),
    // Conv1D(32, 3) ReLU, MaxPool1D(2), Flatten, Dense(C).
    if (data.input_dtype != DType::i32 || data.vocab <= 0)
      throw std::invalid_argument("model 'textcnn' needs token-id data (e.g. --data wordnet)");
    text += "input ids" + shape_text() + "\nembedding vocab=" + std::to_string(data.vocab) +
            " dim=7\nconv1d filters=64 kernel=5\nrelu\nmaxpool1d pool=2\n"
            "conv1d filters=32 kernel=3\nrelu\nmaxpool1d pool=2\nflatten\ndense units=" +
            need_classes() + "\n";
  } else if (name == "gpt") {
    // anchors/torch_gpt.py (nanoGPT's shape): token and position embeddings,
    // L pre-norm blocks x + attn(ln(x)), x + mlp(ln(x)) with a 4C GELU MLP,
    // a final LayerNorm and the output tied to the token embedding; every
    // kernel and table N(0, 0.02), the projections into the residual stream
    // N(0, 0.02 / sqrt(2L)), biases 0. 810,880 parameters at L=4 H=4 C=128
    // T=64 on the KJV's 73 bytes.
    if (data.input_dtype != DType::i32 || data.vocab <= 0 || data.input.rank() != 1)
      throw std::invalid_argument("model 'gpt' needs a text's token ids (--data kjv or --data text:FILE)");
    if (sizes.layers < 1 || sizes.heads < 1 || sizes.width < 1 || sizes.width % sizes.heads != 0)
      throw std::invalid_argument("model 'gpt': --layers " + std::to_string(sizes.layers) + " --heads " +
                                  std::to_string(sizes.heads) + " --width " + std::to_string(sizes.width) +
                                  ": each must be >= 1 and the width a multiple of the heads");
    const std::string c = std::to_string(sizes.width);
    char out_init[48];
    std::snprintf(out_init, sizeof out_init, "normal:%g", 0.02 / std::sqrt(2.0 * static_cast<double>(sizes.layers)));
    text += "input ids" + shape_text() + "\n";
    text +=
        "block transformer heads width hidden out\n"
        "  layernorm\n"
        "  a: attention heads=$heads init=normal:0.02 out_init=$out\n"
        "  x: add from=in,a\n"
        "  layernorm\n"
        "  dense units=$hidden init=normal:0.02\n"
        "  gelu\n"
        "  m: dense units=$width init=$out\n"
        "  add from=x,m\n"
        "end\n";
    text += "embedding vocab=" + std::to_string(data.vocab) + " dim=" + c + " layout=channels_last init=normal:0.02\n";
    text += "positional_embedding\n";
    for (std::int64_t l = 0; l < sizes.layers; ++l)
      text += "transformer heads=" + std::to_string(sizes.heads) + " width=" + c +
              " hidden=" + std::to_string(4 * sizes.width) + " out=" + out_init + "\n";
    text += "layernorm\ntied_output\n";
  } else {
    std::string known;
    for (const auto& n : zoo_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown model '" + name + "'; known: " + known + ", or a path to a model spec file");
  }
  return ModelSpec::parse(text, "zoo:" + name);
}

ModelSpec resolve_model(const std::string& name_or_path, const DataShape& data, const ZooSizes& sizes) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".spec");
  if (!is_path) return zoo_spec(name_or_path, data, sizes);
  return ModelSpec::parse(util::read_config_file(name_or_path, "model spec"), name_or_path);
}

}  // namespace troupe::models
