// `troupe predict`: the model's outputs for the first N test examples, as
// JSON (docs/USER-GUIDE.md, "Predictions"): the reference an exported
// model is checked against, and a way to take a model's logits elsewhere.
//
//   {"format": "troupe-predictions", "version": 1, "model": "cnn",
//    "checkpoint": "...", "step": 5, "data": "fashion-mnist/test",
//    "task": "classification", "examples": 2, "shape": [2, 10],
//    "classes": ["T-shirt/top", ...], "labels": [9, 2],
//    "outputs": [[...10 logits...], [...]]}
//
// Outputs are float32 written with 9 significant digits, which read back
// as the same float32. --inputs writes the examples' features as the
// model took them (.npy, f32 or i32 token ids), for a runtime to feed.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/report.hpp"
#include "models/checkpoint/checkpoint.hpp"
#include "models/data/load.hpp"

namespace troupe::cli {

namespace {

// A float32 as the JSON number of its shortest 9-digit form (nlohmann
// writes a double's 17 digits otherwise: 0.100000001490116 for 0.1f).
double nine_digits(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(v));
  return std::strtod(text, nullptr);
}

// NumPy's .npy format, version 1.0: magic, header length, a Python dict
// literal padded with spaces to a multiple of 64 bytes, then the elements
// in C order, little-endian.
std::string npy(const kernels::Tensor& t) {
  std::string shape;
  for (auto d : t.shape().dims()) shape += std::to_string(d) + ", ";
  if (t.rank() > 1) shape.resize(shape.size() - 2);
  std::string header = std::string("{'descr': '") + (t.dtype() == kernels::DType::i32 ? "<i4" : "<f4") +
                       "', 'fortran_order': False, 'shape': (" + shape + "), }";
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(t.raw()), t.bytes());
  return out;
}

}  // namespace

void add_predict_command(CLI::App& app, PredictOptions& o) {
  auto* cmd = app.add_subcommand(
      "predict", "Write a saved model's outputs (logits) for the first N examples of a dataset's test split, as JSON");
  cmd->add_option("--checkpoint", o.checkpoint,
                  "Checkpoint file (.troupe), or a --checkpoint-dir: its newest checkpoint")
      ->required();
  cmd->add_option("--data", o.data, "Dataset name or path")->default_str("fashion-mnist");
  add_data_options(*cmd, o.data_flags);
  cmd->add_option("--limit", o.limit, "The first N test examples (0: all)")->capture_default_str();
  cmd->add_option("--output", o.output, "The JSON file to write (shape, class names, labels, outputs)")->required();
  cmd->add_option("--inputs", o.inputs, "Also write the examples' features here, as NumPy .npy (f32, or i32 ids)");
  cmd->add_option("--device", o.device, "Device: cpu:N or cuda:N")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads for the kernels")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Examples per forward pass")->capture_default_str();
}

int run_predict(PredictOptions& o) {
  if (o.data.empty()) o.data = "fashion-mnist";
  if (o.batch < 1) throw UsageError("--batch must be at least 1");
  if (o.limit < 0) throw UsageError("--limit must be 0 (all) or more");
  prepare_output_path("--output", o.output);
  prepare_output_path("--inputs", o.inputs);
  use_threads(o.threads);
  const kernels::Device device = kernels::Device::parse(o.device);
  const SavedModelOnData saved = load_saved_model(o.checkpoint, o.data, o.data_flags, device);
  const checkpoint::State& state = saved.state;
  models::Model* model = saved.model.get();
  const data::Dataset& test = saved.examples();
  const std::int64_t n = o.limit > 0 ? std::min(o.limit, test.size()) : test.size();

  const bool classification = test.task == data::Task::classification;
  const std::int64_t per_example = model->output_shape().numel();
  nlohmann::json outputs = nlohmann::json::array(), labels = nlohmann::json::array();
  kernels::Tensor x_all = test.make_feature_batch(std::max<std::int64_t>(n, 1));
  kernels::Tensor y_all = test.make_label_batch(std::max<std::int64_t>(n, 1));
  std::vector<std::int64_t> indices;
  for (std::int64_t i = 0; i < n; ++i) indices.push_back(test.tile(i));  // a text's windows in order, T bytes apart
  if (n > 0) test.gather(indices, x_all, y_all);
  kernels::Tensor staging;
  for (std::int64_t start = 0; start < n; start += o.batch) {
    const std::int64_t b = std::min(o.batch, n - start);
    const std::int64_t row = test.feature_shape().numel();
    const kernels::Tensor xb = x_all.slice(start * row, models::batched(b, test.feature_shape()));
    const kernels::Tensor& out = model->forward(models::on_device(xb, staging, device), /*training=*/false);
    const std::vector<float> values = out.to_vector();
    for (std::int64_t e = 0; e < b; ++e) {
      nlohmann::json example = nlohmann::json::array();
      for (std::int64_t k = 0; k < per_example; ++k) {
        const float v = values[static_cast<std::size_t>(e * per_example + k)];
        // JSON has no NaN or infinity: a diverged model's outputs are null.
        example.push_back(std::isfinite(v) ? nlohmann::json(nine_digits(v)) : nlohmann::json());
      }
      outputs.push_back(std::move(example));
    }
  }
  if (classification && test.label_shape().numel() == 1) {
    for (auto id : y_all.to_int_vector()) labels.push_back(id);
  } else if (classification) {
    // A label per position (a text's next bytes): one array per example.
    const std::vector<std::int32_t> ids = y_all.to_int_vector();
    const std::int64_t per = test.label_shape().numel();
    for (std::int64_t e = 0; e < n; ++e)
      labels.push_back(std::vector<std::int32_t>(ids.begin() + e * per, ids.begin() + (e + 1) * per));
  } else {
    const std::vector<float> targets = y_all.to_vector();
    const std::int64_t per = test.label_shape().numel();
    for (std::int64_t e = 0; e < n; ++e) {
      nlohmann::json t = nlohmann::json::array();
      for (std::int64_t k = 0; k < per; ++k) t.push_back(nine_digits(targets[static_cast<std::size_t>(e * per + k)]));
      labels.push_back(std::move(t));
    }
  }
  if (static_cast<std::int64_t>(labels.size()) > n) labels.erase(labels.begin() + n, labels.end());

  nlohmann::json shape = nlohmann::json::array({n});
  for (auto d : model->output_shape().dims()) shape.push_back(d);
  nlohmann::json classes = nlohmann::json::array();
  if (classification) {
    for (int c = 0; c < test.num_classes; ++c)
      classes.push_back(c < static_cast<int>(test.class_names.size()) ? test.class_names[static_cast<std::size_t>(c)]
                                                                      : std::to_string(c));
  }
  nlohmann::ordered_json doc = {
      {"format", "troupe-predictions"},
      {"version", 1},
      {"model", state.model.name},
      {"checkpoint", saved.checkpoint},
      {"step", state.position.global_step},
      {"data", test.name + "/" + test.split},
      {"task", classification ? "classification" : "regression"},
      {"examples", n},
      {"shape", shape},
      {"classes", classes},
      {"labels", labels},
      {"outputs", outputs},
  };
  // An example's outputs (or targets) one a line: a file a person can read
  // and diff.
  std::string text = "{\n";
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    text += "  " + nlohmann::ordered_json(it.key()).dump() + ": ";
    if (it.key() == "outputs" || (it.key() == "labels" && !classification)) {
      text += "[";
      for (std::size_t k = 0; k < it->size(); ++k) text += (k ? ",\n    " : "\n    ") + (*it)[k].dump();
      text += it->empty() ? "]" : "\n  ]";
    } else {
      text += it->dump();
    }
    text += std::next(it) == doc.end() ? "\n" : ",\n";
  }
  text += "}\n";
  if (!o.inputs.empty()) write_file_atomically(o.inputs, npy(x_all.slice(0, models::batched(n, test.feature_shape()))));
  write_file_atomically(o.output, text);
  std::printf("%s on %s/%s: outputs %s of %lld examples -> %s\n", state.model.name.c_str(), test.name.c_str(),
              test.split.c_str(), shape.dump().c_str(), static_cast<long long>(n), o.output.c_str());
  return 0;
}

}  // namespace troupe::cli
