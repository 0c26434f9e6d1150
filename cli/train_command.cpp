#include <atomic>
#include <csignal>
#include <cstdio>

#include "cli/commands.hpp"
#include "cli/report.hpp"
#include "kernels/registry.hpp"

namespace troupe::cli {

namespace {
std::atomic<int> stop_signal{0};
extern "C" void on_stop_signal(int signal) { stop_signal.store(signal); }
}  // namespace

void use_threads(int threads) {
  if (threads < 1) throw UsageError("--threads must be at least 1, got " + std::to_string(threads));
  kernels::Registry::instance().for_device(kernels::Device::cpu()).set_threads(threads);
}

void add_train_command(CLI::App& app, TrainOptions& o) {
  auto* cmd = app.add_subcommand("train", "Train a model on one device");
  auto& c = o.config;
  cmd->add_option("--model", c.model, "Zoo model (linreg, mlp, cnn, textcnn) or a model spec file")
      ->capture_default_str();
  cmd->add_option("--data", c.data,
                  "Dataset: fashion-mnist, linreg, wordnet, a .csv file or an IDX directory")
      ->capture_default_str();
  cmd->add_option("--epochs", c.epochs, "Epochs to train")->capture_default_str();
  cmd->add_option("--batch", c.batch, "Examples per step")->capture_default_str();
  cmd->add_option("--steps", c.max_steps, "Stop after this many steps in all (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--optimizer", c.optimizer.name, "sgd, adam or nadam")
      ->check(CLI::IsMember(models::optimizer_names()))
      ->capture_default_str();
  cmd->add_option("--lr", c.lr, "Learning rate")->capture_default_str();
  cmd->add_option("--schedule", c.schedule,
                  "Learning-rate schedule: constant, piecewise:EPOCH=LR,..., piecewise-steps:STEP=LR,..., "
                  "exponential:RATE/STEPS[/staircase], cosine:STEPS[/FINAL_FRACTION]")
      ->capture_default_str();
  cmd->add_option("--warmup", c.warmup_steps, "Linear learning-rate warm-up over this many steps")
      ->capture_default_str();
  cmd->add_option("--momentum", c.optimizer.momentum, "SGD momentum")->capture_default_str();
  cmd->add_flag("--nesterov", c.optimizer.nesterov, "SGD with Nesterov momentum");
  cmd->add_option("--weight-decay", c.optimizer.weight_decay, "L2 weight decay")->capture_default_str();
  cmd->add_option("--seed", c.seed, "Seed for initialisation, shuffling and dropout")->capture_default_str();
  cmd->add_option("--device", o.device, "Device: cpu:N or cuda:N")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads for the kernels")->capture_default_str();
  cmd->add_option("--checkpoint-dir", c.checkpoint_dir, "Write checkpoints here (checked before training)");
  cmd->add_option("--checkpoint-every", c.checkpoint_every, "Also checkpoint every N steps")
      ->capture_default_str();
  cmd->add_option("--keep", c.keep_last, "Checkpoints to keep (0: all)")->capture_default_str();
  cmd->add_flag("--resume", c.resume, "Resume from the newest checkpoint in --checkpoint-dir");
  cmd->add_option("--metrics", o.metrics, "Write metrics rows here (CSV, or JSON lines for *.jsonl)");
  cmd->add_option("--log-every", o.log_every, "Steps between log lines and metrics rows")->capture_default_str();
  cmd->add_option("--summary-json", o.summary_json, "Write the final figures here as JSON");
}

int run_train(TrainOptions& o) {
  o.config.device = kernels::Device::parse(o.device);
  use_threads(o.threads);
  if (o.log_every < 0) throw UsageError("--log-every must be >= 0");
  Report report(o.config.epochs, o.log_every, o.metrics);
  models::Trainer trainer(o.config);  // every configuration error surfaces here

  // SIGINT / SIGTERM: stop at the next step boundary, checkpoint if
  // configured, and exit cleanly.
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  models::Callbacks cb = report.callbacks();
  cb.should_stop = [] { return stop_signal.load() != 0; };

  if (!trainer.config().resume || trainer.global_step() == 0) {
    if (trainer.config().resume) std::fprintf(stderr, "resume: no checkpoint in %s yet; starting fresh\n",
                                              trainer.config().checkpoint_dir.c_str());
  } else {
    std::fprintf(stderr, "resume: step %lld\n", static_cast<long long>(trainer.global_step()));
  }
  models::TrainResult result = trainer.run(cb);
  if (result.stopped_early)
    std::fprintf(stderr, "stopped by signal %d after step %lld\n", stop_signal.load(),
                 static_cast<long long>(result.steps));
  std::printf("test accuracy %.4f  top-5 %.4f  loss %.4f  (%lld steps, %.0f samples/s, %.1f s, peak memory %.0f MiB)\n",
              result.final.test_accuracy, result.final.test_top5, result.final.test_loss,
              static_cast<long long>(result.steps), result.samples_per_s, result.wall_seconds,
              models::peak_memory_mib());
  if (!o.summary_json.empty()) report.write_summary(o.summary_json, result, trainer.config());
  return 0;
}

}  // namespace troupe::cli
