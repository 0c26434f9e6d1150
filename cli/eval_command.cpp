#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/commands.hpp"
#include "models/checkpoint/checkpoint.hpp"
#include "models/data/load.hpp"

namespace troupe::cli {

void add_eval_command(CLI::App& app, EvalOptions& o) {
  auto* cmd =
      app.add_subcommand("eval", "Evaluate a saved model on a dataset's test split, without any training set-up");
  cmd->add_option("--checkpoint", o.checkpoint,
                  "Checkpoint file (.troupe), or a --checkpoint-dir: its newest checkpoint")
      ->required();
  cmd->add_option("--data", o.data, "Dataset name or path")->default_str("fashion-mnist");
  add_data_options(*cmd, o.data_flags);
  cmd->add_option("--device", o.device, "Device: cpu:N or cuda:N")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads for the kernels")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Examples per evaluation batch")->capture_default_str();
}

std::string checkpoint_file(const std::string& given) {
  std::error_code ec;
  if (!std::filesystem::is_directory(given, ec)) return given;  // a file, or read() says what is wrong
  const checkpoint::Directory dir = checkpoint::Directory::existing(given);
  const std::optional<std::string> newest = dir.latest();
  if (!newest)
    throw checkpoint::CheckpointError(
        given, "checkpoint directory " + given + ": no complete checkpoint (ckpt-<step>.troupe) in it");
  std::fprintf(stderr, "checkpoint: %s (the newest in %s)\n", newest->c_str(), given.c_str());
  return *newest;
}

SavedModelOnData load_saved_model(const std::string& given, const std::string& data, const DataFlags& flags,
                                  const kernels::Device& device) {
  SavedModelOnData out;
  data::LoadOptions load_options;
  apply_data_options(flags, load_options);
  out.splits = data::load_dataset(data, load_options);
  out.checkpoint = checkpoint_file(given);
  const std::string& checkpoint = out.checkpoint;
  out.state = checkpoint::read(checkpoint);
  out.model = models::load_model(out.state, checkpoint, device);
  const data::Dataset& d = out.examples();
  models::check_model_input(out.model->spec(), d);
  // The data read as the model was trained: its outputs are the classes,
  // or the targets, of this data (a regression model's one output read as
  // one class would score nonsense without a word).
  const std::int64_t outputs = out.model->output_shape().numel();
  const bool classes = d.task == data::Task::classification;
  const std::int64_t wanted = classes ? d.num_classes : d.label_shape().numel();
  // (A file without the highest class has fewer classes than the model.)
  if (classes ? outputs < wanted : outputs != wanted)
    throw UsageError("checkpoint " + checkpoint + ": model " + out.state.model.name + " gives " +
                     std::to_string(outputs) + " output(s), but " + d.name + " read for " +
                     (classes ? "classification has " + std::to_string(wanted) + " classes"
                              : "regression has " + std::to_string(wanted) + " target(s)") +
                     (classes && outputs == 1 ? ": a regression model? give --task regress, as training did" : "") +
                     (!classes ? ": a classifier? leave out --task regress" : ""));
  return out;
}

int run_eval(EvalOptions& o) {
  if (o.data.empty()) o.data = "fashion-mnist";
  if (o.batch < 1) throw UsageError("--batch must be at least 1");
  use_threads(o.threads);
  const kernels::Device device = kernels::Device::parse(o.device);
  const SavedModelOnData saved = load_saved_model(o.checkpoint, o.data, o.data_flags, device);
  const checkpoint::State& state = saved.state;
  models::Model* model = saved.model.get();
  const data::Dataset& test = saved.examples();
  models::EpochResult r = models::evaluate_model(*model, test, o.batch);
  char figures[128];
  if (r.regression)
    std::snprintf(figures, sizeof figures, "mse %.4f  mae %.4f", r.test_loss, r.test_mae);
  else
    std::snprintf(figures, sizeof figures, "accuracy %.4f  top-5 %.4f  loss %.4f", r.test_accuracy, r.test_top5,
                  r.test_loss);
  std::printf("%s on %s/%s (%lld examples, step %llu): %s\n", state.model.name.c_str(), test.name.c_str(),
              test.split.c_str(), static_cast<long long>(r.test_examples),
              static_cast<unsigned long long>(state.position.global_step), figures);
  return 0;
}

}  // namespace troupe::cli
