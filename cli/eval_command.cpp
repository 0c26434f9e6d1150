#include <cstdio>

#include "cli/commands.hpp"
#include "models/checkpoint/checkpoint.hpp"
#include "models/data/load.hpp"

namespace troupe::cli {

void add_eval_command(CLI::App& app, EvalOptions& o) {
  auto* cmd =
      app.add_subcommand("eval", "Evaluate a saved model on a dataset's test split, without any training set-up");
  cmd->add_option("--checkpoint", o.checkpoint, "Checkpoint file (.troupe)")->required();
  cmd->add_option("--data", o.data, "Dataset name or path")->default_str("fashion-mnist");
  add_image_options(*cmd, o.images);
  cmd->add_option("--device", o.device, "Device: cpu:N or cuda:N")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads for the kernels")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Examples per evaluation batch")->capture_default_str();
}

SavedModelOnData load_saved_model(const std::string& checkpoint, const std::string& data, const ImageFlags& images,
                                  const kernels::Device& device) {
  SavedModelOnData out;
  data::LoadOptions load_options;
  apply_image_options(images, load_options);
  out.splits = data::load_dataset(data, load_options);
  out.state = checkpoint::read(checkpoint);
  out.model = models::load_model(out.state, checkpoint, device);
  models::check_model_input(out.model->spec(), out.examples());
  return out;
}

int run_eval(EvalOptions& o) {
  if (o.data.empty()) o.data = "fashion-mnist";
  if (o.batch < 1) throw UsageError("--batch must be at least 1");
  use_threads(o.threads);
  const kernels::Device device = kernels::Device::parse(o.device);
  const SavedModelOnData saved = load_saved_model(o.checkpoint, o.data, o.images, device);
  const checkpoint::State& state = saved.state;
  models::Model* model = saved.model.get();
  const data::Dataset& test = saved.examples();
  models::EpochResult r = models::evaluate_model(*model, test, o.batch);
  std::printf("%s on %s/%s (%lld examples, step %llu): accuracy %.4f  top-5 %.4f  loss %.4f\n",
              state.model.name.c_str(), test.name.c_str(), test.split.c_str(), static_cast<long long>(r.test_examples),
              static_cast<unsigned long long>(state.position.global_step), r.test_accuracy, r.test_top5, r.test_loss);
  return 0;
}

}  // namespace troupe::cli
