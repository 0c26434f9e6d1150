// `troupe export`: a checkpoint's model in a format other runtimes load.
// Today ONNX (models/export/onnx.hpp; docs/USER-GUIDE.md, "Export to ONNX").
#include <cstdio>
#include <string>

#include "cli/commands.hpp"
#include "cli/report.hpp"
#include "kernels/config.hpp"  // defines: TROUPE_VERSION
#include "models/checkpoint/checkpoint.hpp"
#include "models/data/load.hpp"
#include "models/export/onnx.hpp"

namespace troupe::cli {

void add_export_command(CLI::App& app, ExportOptions& o) {
  auto* cmd = app.add_subcommand("export",
                                 "Write a saved model as an ONNX file (inference: BatchNorm's running "
                                 "statistics, no dropout)");
  cmd->add_option("--checkpoint", o.checkpoint,
                  "Checkpoint file (.troupe), or a --checkpoint-dir: its newest checkpoint")
      ->required();
  cmd->add_option("--format", o.format, "The file's format: onnx (opset 17)")->capture_default_str();
  cmd->add_option("--output", o.output, "The file to write (model.onnx)")->required();
  cmd->add_option("--data", o.data,
                  "A dataset whose class names the file records (metadata troupe.classes); default: none");
}

int run_export(ExportOptions& o) {
  if (o.format != "onnx") throw UsageError("--format '" + o.format + "': the one format troupe exports is onnx");
  prepare_output_path("--output", o.output);
  models::OnnxOptions options;
  options.producer_version = TROUPE_VERSION;
  if (!o.data.empty()) {
    data::Splits splits = data::load_dataset(o.data);
    options.class_names = splits.train.class_names;
  }
  const std::string checkpoint = checkpoint_file(o.checkpoint);
  checkpoint::State state = checkpoint::read(checkpoint);
  auto model = models::load_model(state, checkpoint, kernels::Device::cpu());
  std::string bytes;
  try {
    bytes = models::to_onnx(*model, options);
  } catch (const std::invalid_argument& e) {
    // Not a usage error: the checkpoint holds a model the export cannot write.
    throw std::runtime_error(checkpoint + ": " + e.what());
  }
  write_file_atomically(o.output, bytes);
  const std::string input = "[batch, " + model->input_shape().str().substr(1);
  const std::string output = "[batch, " + model->output_shape().str().substr(1);
  std::printf("%s (step %llu): ONNX opset %d, input \"input\" %s %s, output \"output\" f32 %s -> %s (%zu bytes)\n",
              state.model.name.c_str(), static_cast<unsigned long long>(state.position.global_step), models::kOnnxOpset,
              model->spec().input_dtype == kernels::DType::i32 ? "i32" : "f32", input.c_str(), output.c_str(),
              o.output.c_str(), bytes.size());
  return 0;
}

}  // namespace troupe::cli
