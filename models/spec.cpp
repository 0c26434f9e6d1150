#include "models/spec.hpp"

#include <cstdio>
#include <map>
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

const char* known_layers = "dense, conv2d, conv1d, maxpool2d, maxpool1d, embedding, flatten, relu, dropout";

std::unique_ptr<Layer> make_layer(const std::string& line) {
  auto w = words(line);
  const std::string& kind = w.at(0);
  Options o(kind, w);
  std::unique_ptr<Layer> layer;
  if (kind == "dense") {
    layer = std::make_unique<Dense>(o.take_int("units"));
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
    layer = std::make_unique<Conv2D>(filters, kh, kw, o.take_int("stride", "1"),
                                     Padding::parse(o.take("padding", "valid")));
  } else if (kind == "conv1d") {
    std::int64_t filters = o.take_int("filters");
    std::int64_t kernel = o.take_int("kernel");
    layer = std::make_unique<Conv1D>(filters, kernel, o.take_int("stride", "1"),
                                     Padding::parse(o.take("padding", "valid")));
  } else if (kind == "maxpool2d" || kind == "maxpool1d") {
    std::int64_t pool = o.take_int("pool", "2");
    std::int64_t stride = o.take_int("stride", std::to_string(pool));
    if (kind == "maxpool2d")
      layer = std::make_unique<MaxPool2D>(pool, stride);
    else
      layer = std::make_unique<MaxPool1D>(pool, stride);
  } else if (kind == "embedding") {
    std::int64_t vocab = o.take_int("vocab");
    layer = std::make_unique<Embedding>(vocab, o.take_int("dim"));
  } else if (kind == "flatten") {
    layer = std::make_unique<Flatten>();
  } else if (kind == "relu") {
    layer = std::make_unique<ReLU>();
  } else if (kind == "dropout") {
    layer = std::make_unique<Dropout>(parse_float(o.take("rate"), "dropout rate"));
  } else {
    throw std::invalid_argument("unknown layer '" + kind + "'; known: " + known_layers);
  }
  o.done();
  return layer;
}

}  // namespace

ModelSpec ModelSpec::parse(const std::string& text, const std::string& source) {
  ModelSpec spec;
  bool have_input = false;
  std::istringstream in(text);
  int line_no = 0;
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
      if (w[0] == "name") {
        if (w.size() != 2) throw std::invalid_argument("name takes one word");
        spec.name = w[1];
      } else if (w[0] == "input") {
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
      } else {
        auto layer = make_layer(line);  // validates the line now, with its line number
        spec.layers.push_back(layer->spec());
      }
    } catch (const ParseError&) {
      throw;
    } catch (const std::exception& e) {
      throw ParseError(source, line_no, e.what());
    }
  }
  if (!have_input) throw ParseError(source, line_no, "no 'input' line (e.g. 'input 1 28 28')");
  if (spec.layers.empty()) throw ParseError(source, line_no, "no layers");
  return spec;
}

std::string ModelSpec::text() const {
  std::string out = "name " + name + "\ninput";
  if (input_dtype == DType::i32) out += " ids";
  for (auto d : input.dims()) out += " " + std::to_string(d);
  out += "\n";
  for (const auto& l : layers) out += l + "\n";
  return out;
}

std::vector<std::unique_ptr<Layer>> ModelSpec::make_layers() const {
  std::vector<std::unique_ptr<Layer>> out;
  for (const auto& l : layers) out.push_back(make_layer(l));
  return out;
}

std::vector<std::string> zoo_names() { return {"linreg", "mlp", "cnn", "textcnn"}; }

ModelSpec zoo_spec(const std::string& name, const DataShape& data) {
  auto need_classes = [&]() {
    if (data.classes <= 0)
      throw std::invalid_argument("model '" + name + "' classifies, but the data has no class labels");
    return std::to_string(data.classes);
  };
  auto shape_text = [&]() {
    std::string s;
    for (auto d : data.input.dims()) s += " " + std::to_string(d);
    return s;
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
      throw std::invalid_argument("model 'cnn' needs image data [channels, height, width], got " + data.input.str());
    text += "input" + shape_text() +
            "\nconv2d filters=32 kernel=3\nrelu\nmaxpool2d pool=2\nflatten\n"
            "dense units=64\nrelu\ndense units=" +
            need_classes() + "\n";
  } else if (name == "textcnn") {
    // The seed's Reuters model: Embedding(V, 7), Conv1D(64, 5) ReLU, MaxPool1D(2),
    // Conv1D(32, 3) ReLU, MaxPool1D(2), Flatten, Dense(C).
    if (data.input_dtype != DType::i32 || data.vocab <= 0)
      throw std::invalid_argument("model 'textcnn' needs token-id data (e.g. --data wordnet)");
    text += "input ids" + shape_text() + "\nembedding vocab=" + std::to_string(data.vocab) +
            " dim=7\nconv1d filters=64 kernel=5\nrelu\nmaxpool1d pool=2\n"
            "conv1d filters=32 kernel=3\nrelu\nmaxpool1d pool=2\nflatten\ndense units=" +
            need_classes() + "\n";
  } else {
    std::string known;
    for (const auto& n : zoo_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown model '" + name + "'; known: " + known + ", or a path to a model spec file");
  }
  return ModelSpec::parse(text, "zoo:" + name);
}

ModelSpec resolve_model(const std::string& name_or_path, const DataShape& data) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".spec");
  if (!is_path) return zoo_spec(name_or_path, data);
  return ModelSpec::parse(util::read_config_file(name_or_path, "model spec"), name_or_path);
}

}  // namespace troupe::models
