#include "models/model_builder.hpp"

#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace troupe::models {

ModelBuilder::ModelBuilder(std::string name, Shape input, DType input_dtype)
    : name_(std::move(name)), input_(std::move(input)), input_dtype_(input_dtype) {
  if (input_.rank() == 0) throw std::invalid_argument("ModelBuilder '" + name_ + "': the input needs a shape");
}

ModelBuilder::Output ModelBuilder::push(const std::string& line, const std::vector<Output>& xs,
                                        const std::string& label) {
  const std::string where =
      "ModelBuilder '" + name_ + "', layer " + std::to_string(lines_.size() + 1) + " '" + line + "'";
  Line l;
  try {
    l.body = normalised_layer_line(line);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + ": " + e.what());
  }
  std::istringstream words(l.body);
  words >> l.kind;
  for (const Output& x : xs) {
    if (x.node < -1 || x.node >= static_cast<int>(lines_.size()))
      throw std::invalid_argument(where + ": its input is no output of this builder");
    l.inputs.push_back(x.node);
  }
  if (!label.empty()) {
    for (const auto& other : lines_)
      if (other.label == label) throw std::invalid_argument(where + ": label '" + label + "' is used twice");
    l.label = label;
  }
  lines_.push_back(std::move(l));
  return Output{static_cast<int>(lines_.size()) - 1};
}

ModelBuilder::Output ModelBuilder::layer(const std::string& line, Output x, const std::string& label) {
  return push(line, {x}, label);
}

ModelBuilder::Output ModelBuilder::merge(const std::string& line, const std::vector<Output>& xs,
                                         const std::string& label) {
  return push(line, xs, label);
}

ModelBuilder::Output ModelBuilder::dense(Output x, std::int64_t units) {
  return layer("dense units=" + std::to_string(units), x);
}

ModelBuilder::Output ModelBuilder::conv2d(Output x, std::int64_t filters, std::int64_t kernel, std::int64_t stride,
                                          const std::string& padding) {
  return layer("conv2d filters=" + std::to_string(filters) + " kernel=" + std::to_string(kernel) +
                   " stride=" + std::to_string(stride) + " padding=" + padding,
               x);
}

ModelBuilder::Output ModelBuilder::maxpool2d(Output x, std::int64_t pool) {
  return layer("maxpool2d pool=" + std::to_string(pool), x);
}

ModelBuilder::Output ModelBuilder::relu(Output x) { return layer("relu", x); }
ModelBuilder::Output ModelBuilder::flatten(Output x) { return layer("flatten", x); }

ModelBuilder::Output ModelBuilder::dropout(Output x, float rate) {
  return layer("dropout rate=" + std::to_string(rate), x);
}

ModelBuilder::Output ModelBuilder::embedding(Output x, std::int64_t vocab, std::int64_t dim, bool channels_last) {
  return layer("embedding vocab=" + std::to_string(vocab) + " dim=" + std::to_string(dim) +
                   (channels_last ? " layout=channels_last" : ""),
               x);
}

ModelBuilder::Output ModelBuilder::positional_embedding(Output x) { return layer("positional_embedding", x); }

ModelBuilder::Output ModelBuilder::layernorm(Output x, float epsilon) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(epsilon));
  return layer(std::string("layernorm epsilon=") + text, x);
}

ModelBuilder::Output ModelBuilder::attention(Output x, std::int64_t heads) {
  return layer("attention heads=" + std::to_string(heads), x);
}

ModelBuilder::Output ModelBuilder::gelu(Output x) { return layer("gelu", x); }
ModelBuilder::Output ModelBuilder::tied_output(Output x) { return layer("tied_output", x); }

ModelBuilder::Output ModelBuilder::add(const std::vector<Output>& xs) { return merge("add", xs); }

std::string ModelBuilder::text() const {
  // A line takes the line before unless it says otherwise (from=); the
  // lines it names need labels: the user's, or KIND_N.
  std::vector<bool> in_order(lines_.size());
  std::set<int> named;
  for (std::size_t i = 0; i < lines_.size(); ++i) {
    in_order[i] = lines_[i].inputs.size() == 1 && lines_[i].inputs[0] == static_cast<int>(i) - 1;
    if (!in_order[i])
      for (int k : lines_[i].inputs)
        if (k >= 0) named.insert(k);
  }
  std::vector<std::string> labels(lines_.size());
  std::set<std::string> taken;
  for (const auto& l : lines_)
    if (!l.label.empty()) taken.insert(l.label);
  std::map<std::string, int> counts;
  for (std::size_t i = 0; i < lines_.size(); ++i) {
    labels[i] = lines_[i].label;
    if (labels[i].empty() && named.count(static_cast<int>(i))) {
      do {
        labels[i] = lines_[i].kind + "_" + std::to_string(++counts[lines_[i].kind]);
      } while (taken.count(labels[i]));
      taken.insert(labels[i]);
    }
  }
  std::string out = "name " + name_ + "\ninput";
  if (input_dtype_ == DType::i32) out += " ids";
  for (auto d : input_.dims()) out += " " + std::to_string(d);
  out += "\n";
  for (std::size_t i = 0; i < lines_.size(); ++i) {
    if (!labels[i].empty()) out += labels[i] + ": ";
    out += lines_[i].body;
    if (!in_order[i]) {
      out += " from=";
      for (std::size_t j = 0; j < lines_[i].inputs.size(); ++j) {
        const int k = lines_[i].inputs[j];
        out += (j ? "," : "") + (k < 0 ? std::string("input") : labels[static_cast<std::size_t>(k)]);
      }
    }
    out += "\n";
  }
  return out;
}

ModelSpec ModelBuilder::spec() const {
  if (lines_.empty()) throw std::invalid_argument("ModelBuilder '" + name_ + "' has no layers");
  return ModelSpec::parse(text(), "ModelBuilder '" + name_ + "'");
}

}  // namespace troupe::models
