#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <system_error>
#include <utility>

#include "actors/job_metrics.hpp"
#include "cli/commands.hpp"
#include "cli/report.hpp"
#include "job/job.hpp"
#include "job/job_file.hpp"
#include "kernels/registry.hpp"
#include "models/recipe.hpp"
#include "models/tensorboard.hpp"
#include "net/cluster/auth.hpp"
#include "net/control/control_auth.hpp"
#include "net/control/control_server.hpp"
#include "util/writable_folder.hpp"

namespace troupe::cli {

namespace {
std::atomic<int> stop_signal{0};
extern "C" void on_stop_signal(int signal) {
  // The second Ctrl-C does not wait for the step boundary.
  if (stop_signal.exchange(signal) != 0) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

// SIGINT / SIGTERM: stop at the next step boundary, checkpoint if
// configured, and exit 128 + the signal (exit_status below). A second
// signal ends the process at once.
void install_stop_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

// The newest checkpoint this run wrote (the actor runtime reports them from
// the coordinator's thread).
class LastCheckpoint {
 public:
  // Wraps cb.on_checkpoint to remember each checkpoint.
  void watch(models::Callbacks& cb) {
    cb.on_checkpoint = [this, report = cb.on_checkpoint](const std::string& path, std::int64_t step) {
      if (report) report(path, step);
      std::lock_guard<std::mutex> lock(mutex_);
      path_ = path;
      step_ = step;
    };
  }
  std::pair<std::string, std::int64_t> get() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {path_, step_};
  }

 private:
  mutable std::mutex mutex_;
  std::string path_;
  std::int64_t step_ = -1;
};

// The exit status of a run: 0, or after a stop by SIGINT or SIGTERM 128 +
// the signal (130, 143), as shells and schedulers expect of a process the
// signal ended, with a line that says how to go on.
int exit_status(const models::TrainResult& result, const std::string& checkpoint_dir, const LastCheckpoint& last) {
  const int signal = stop_signal.load();
  if (!result.stopped_early || signal == 0) return 0;
  const char* name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
  const auto [path, step] = last.get();
  if (!path.empty())
    std::fprintf(stderr,
                 "stopped by %s after step %lld; checkpoint %s (step %lld): resume with --resume "
                 "(checkpoint dir %s)\n",
                 name, static_cast<long long>(result.steps), path.c_str(), static_cast<long long>(step),
                 checkpoint_dir.c_str());
  else if (checkpoint_dir.empty())
    std::fprintf(stderr, "stopped by %s after step %lld; no checkpoint dir, so nothing to resume from\n", name,
                 static_cast<long long>(result.steps));
  else
    std::fprintf(stderr, "stopped by %s after step %lld; no checkpoint was written in %s\n", name,
                 static_cast<long long>(result.steps), checkpoint_dir.c_str());
  return 128 + signal;
}

void create_output_folders(const TrainOptions& o) {
  prepare_output_path("--metrics", o.metrics);
  prepare_output_path("--summary-json", o.summary_json);
  prepare_output_path("--timeline", o.timeline);
}

// --tensorboard DIR: an event file that records the job (its text, mode and
// world size) and chains onto `cb`. Null without the option.
std::unique_ptr<models::TensorBoardLog> open_tensorboard(const TrainOptions& o, const actors::JobConfig& jc,
                                                         std::int64_t world_size, models::Callbacks& cb) {
  const std::string dir = !o.tensorboard.empty() ? o.tensorboard : jc.tensorboard_dir;  // the flag wins
  if (dir.empty()) return nullptr;
  auto tb = std::make_unique<models::TensorBoardLog>(dir, o.log_every);
  tb->set_job(actors::to_job_text(jc), jc.mode.str(), world_size);
  tb->watch(cb);
  std::fprintf(stderr, "tensorboard: %s (tensorboard --logdir %s)\n", tb->path().c_str(), dir.c_str());
  return tb;
}

// CLI11 reads an unsigned option with strtoull, which turns anything above
// 2^64-1 into 2^64-1, "-1" into 2^64-1, and "010" into 8, without a word: the
// seed is decimal digits within range, or a usage error.
CLI::Validator unsigned_64_bit() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        errno = 0;
        if (digits) std::strtoull(text.c_str(), nullptr, 10);
        if (digits && errno != ERANGE) return {};
        return "'" + text + "' is not an integer from 0 to 18446744073709551615 (2^64-1)";
      },
      "");
}

void print_result(const models::TrainResult& result, std::int64_t tokens) {
  if (result.stopped_early) std::fprintf(stderr, "stopped after step %lld\n", static_cast<long long>(result.steps));
  const models::EpochResult& f = result.final;
  if (f.has_test() && !std::isfinite(f.test_loss))
    std::fprintf(stderr, "warning: the test loss is not finite: the model has diverged and its %s means nothing\n",
                 f.regression ? "error" : "accuracy");
  // No figure where nothing was measured: a 0 reads as a result.
  char test[128];
  if (!f.has_test())
    std::snprintf(test, sizeof test, "no test data (give --test-fraction or --test-data to hold some out)");
  else if (tokens > 0)
    std::snprintf(test, sizeof test, "test loss %.4f  perplexity %.3f  accuracy %.4f", f.test_loss,
                  std::exp(f.test_loss), f.test_accuracy);
  else if (f.regression)
    std::snprintf(test, sizeof test, "test mse %.4f  mae %.4f", f.test_loss, f.test_mae);
  else
    std::snprintf(test, sizeof test, "test accuracy %.4f  top-5 %.4f  loss %.4f", f.test_accuracy, f.test_top5,
                  f.test_loss);
  std::printf("%s  (%lld steps, %.0f %s, %.1f s, peak memory %.0f MiB)\n", test, static_cast<long long>(result.steps),
              result.samples_per_s * static_cast<double>(tokens > 0 ? tokens : 1),
              tokens > 0 ? "tokens/s" : "samples/s", result.wall_seconds, models::peak_memory_mib());
}

// A resumed job that had already trained everything it was asked to: say
// so, and how to train further.
void print_finished(const std::string& checkpoint, std::int64_t steps, const models::TrainConfig& c) {
  std::fprintf(stderr,
               "resume: %s is the end of a finished job (step %lld; %lld epoch(s)%s): nothing to train. "
               "Raise --epochs%s to train further.\n",
               checkpoint.c_str(), static_cast<long long>(steps), static_cast<long long>(c.epochs),
               c.max_steps > 0 ? (", --steps " + std::to_string(c.max_steps)).c_str() : "",
               c.max_steps > 0 ? " or --steps" : "");
}

// One device, synchronous, nothing to control: the plain single-replica trainer.
int run_single(TrainOptions& o, kernels::Device device) {
  o.config.device = device;
  create_output_folders(o);
  Report report(o.config.epochs, o.log_every, o.metrics);
  report.set_world(1);
  models::Trainer trainer(o.config);  // every configuration error surfaces here
  install_stop_handlers();
  models::Callbacks cb = report.callbacks();
  cb.should_stop = [] { return stop_signal.load() != 0; };
  LastCheckpoint last;
  last.watch(cb);
  actors::JobConfig job;  // for the event file's job text
  job.train = trainer.config();
  job.devices = {device};
  job.threads_per_device = o.threads;
  auto tensorboard = open_tensorboard(o, job, 1, cb);
  if (trainer.global_step() > 0)
    std::fprintf(stderr, "resume: step %lld\n", static_cast<long long>(trainer.global_step()));
  models::TrainResult result = trainer.run(cb);
  if (result.already_finished) {
    print_finished(result.resumed_from, result.steps, trainer.config());
    return 0;
  }
  report.close_bar();
  if (tensorboard) tensorboard->final_evaluation(result.final);
  print_result(result, report.tokens_per_example());
  if (!o.summary_json.empty()) report.write_summary(o.summary_json, result, trainer.config());
  return exit_status(result, trainer.config().checkpoint_dir, last);
}

// Several devices, or another mode, a switch schedule or a control endpoint:
// the actor runtime.
int run_job(TrainOptions& o, std::vector<kernels::Device> devices) {
  actors::JobConfig jc;
  jc.train = o.config;
  jc.devices = std::move(devices);
  jc.mode = actors::Mode::parse(o.mode);
  jc.switches = actors::parse_switch_schedule(o.switches);
  jc.prefetch = o.prefetch;
  jc.threads_per_device = o.threads;
  jc.ps_shards = o.ps_shards;
  jc.ps_split_above = o.ps_split_above;
  return run_actor_job(jc, o);
}

}  // namespace

// --metrics runs/x/metrics.csv creates runs/x, as --checkpoint-dir creates
// its folder; so do --summary-json and --timeline. Each is then checked
// for a file this process can create there, before any data is loaded:
// the summary and the timeline are written when the job ends (each to a
// temporary file renamed over the path), and a folder that refuses them
// must not be found out after hours of training.
void prepare_output_path(const char* flag, const std::string& path) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string folder = parent.empty() ? "." : parent.string();
  const util::FolderProblem problem = util::check_writable_folder(folder);
  using Kind = util::FolderProblem::Kind;
  if (problem.kind == Kind::not_a_folder || problem.kind == Kind::cannot_create_folder)
    throw std::runtime_error(std::string(flag) + " " + path + ": cannot create the folder " + folder + ": " +
                             problem.reason);
  if (problem)
    throw std::runtime_error(std::string(flag) + " " + path + ": cannot " +
                             (problem.kind == Kind::cannot_create_file ? "create" : "write") + " a file in " +
                             (parent.empty() ? std::string("the current folder") : folder) + ": " + problem.reason);
}

int run_actor_job(const actors::JobConfig& job_config, const TrainOptions& o) {
  create_output_folders(o);
  Report report(job_config.train.epochs, o.log_every, o.metrics);
  if (!o.metrics_token_file.empty() && o.control.empty())
    throw UsageError(
        "--metrics-token-file is the credential of GET /metrics on the control endpoint: give --control too");
  // The endpoint's credentials, read before the data is loaded so a bad
  // file is an error at once.
  net::ControlServerOptions control_options;
  if (!o.control.empty()) {
    const net::Secret secret = net::Secret::load(o.secret_file);  // ConfigFileError: exit 2
    if (secret.configured()) control_options.auth_key = secret.derive(net::kControlKeyLabel);
    if (!o.metrics_token_file.empty()) {
      if (!secret.configured())
        throw UsageError("--metrics-token-file " + o.metrics_token_file +
                         ": without a cluster secret the control endpoint asks no credential at all (it binds "
                         "loopback only), so a token would protect nothing; give the job a secret (--secret-file or "
                         "TROUPE_SECRET), or leave the token out");
      control_options.metrics_token = net::load_metrics_token(o.metrics_token_file);  // ConfigFileError: exit 2
    }
  }
  actors::JobConfig jc = job_config;
  if (!o.timeline.empty()) {
    const auto [first, last] = actors::Timeline::parse_steps(o.timeline_steps);
    jc.timeline =
        std::make_shared<actors::Timeline>(o.timeline, jc.cluster ? "coordinator" : "troupe train", first, last);
  }
  // GET /metrics: the job feeds it as it trains (only with an endpoint to serve it).
  std::shared_ptr<actors::JobMetrics> metrics;
  if (!o.control.empty()) {
    const std::size_t local = jc.devices.empty() ? actors::default_devices().size() : jc.devices.size();
    metrics = std::make_shared<actors::JobMetrics>(jc.mode, static_cast<int>(local), jc.cluster != nullptr);
    jc.metrics = metrics;
  }
  actors::Job job(jc);  // every configuration error surfaces here
  if (!job.config().train.warmup_note.empty())
    std::fprintf(stderr, "model %s: %s\n", jc.train.model.c_str(), job.config().train.warmup_note.c_str());

  std::string devices_text;
  for (const auto& d : job.config().devices) devices_text += (devices_text.empty() ? "" : ", ") + d.str();
  if (!jc.cluster)
    std::fprintf(stderr, "devices: %s | mode %s | batch %lld per replica, %lld global | %lld steps per epoch\n",
                 devices_text.c_str(), jc.mode.str().c_str(), static_cast<long long>(jc.train.batch),
                 static_cast<long long>(jc.train.batch * static_cast<std::int64_t>(job.config().devices.size())),
                 static_cast<long long>(job.batches_per_epoch()));
  else
    std::fprintf(stderr, "devices here: %s | mode %s | batch %lld per replica\n", devices_text.c_str(),
                 jc.mode.str().c_str(), static_cast<long long>(jc.train.batch));
  std::fprintf(stderr, "%s: %s\n", jc.cluster ? "collective inside this node (tcp ring between nodes)" : "collective",
               job.collective_choice().why.c_str());
  std::fprintf(stderr, "%s", models::Model(job.spec(), kernels::Device::cpu()).summary().c_str());

  std::unique_ptr<net::ControlServer> control;
  if (!o.control.empty()) {
    net::Handlers h;
    h.status = [&job] { return job.status(); };
    // A switch, a checkpoint or a stop is answered when done, or "pending"
    // before the client's wait (Troupe-Wait) ends.
    h.mode = [&job](const std::string& body) {
      auto r = job.request_mode(body, net::request_wait());
      return net::Reply{r.status, r.message};
    };
    h.checkpoint = [&job] {
      auto r = job.request_checkpoint(net::request_wait());
      return net::Reply{r.status, r.message};
    };
    h.stop = [&job] {
      auto r = job.request_stop(net::request_wait());
      return net::Reply{r.status, r.message};
    };
    h.drain = [&job](const std::string& node) {
      auto r = job.request_drain(node);
      return net::Reply{r.status, r.message};
    };
    // Read straight from the metrics the actors feed: a scrape never waits
    // for the job's thread or the coordinator.
    h.metrics = [metrics] { return metrics->prometheus_text(); };
    control = std::make_unique<net::ControlServer>(o.control, h, control_options);
    control->start();
    std::fprintf(stderr,
                 "control: http://%s (GET /status, /metrics; POST /mode, /checkpoint, /stop, /drain; troupe ctl --at "
                 "%s)\n",
                 control->address().c_str(), control->address().c_str());
  }

  install_stop_handlers();
  models::Callbacks cb = report.callbacks();
  cb.on_train_begin = nullptr;
  cb.should_stop = [] { return stop_signal.load() != 0; };
  LastCheckpoint last;
  last.watch(cb);
  if (metrics) metrics->watch(cb);
  // A cluster's world size is known once its nodes joined: the coordinator
  // reports it as view 0 when training starts (Callbacks::on_view_change).
  if (!jc.cluster) report.set_world(static_cast<int>(job.config().devices.size()));
  report.set_tokens_per_example(job.data().train.window);
  auto tensorboard =
      open_tensorboard(o, jc, jc.cluster ? 0 : static_cast<std::int64_t>(job.config().devices.size()), cb);
  actors::JobResult r = job.run(cb);
  if (control) control->stop();
  if (jc.timeline) {
    jc.timeline->write();
    std::fprintf(stderr, "timeline: %s (steps %lld to %lld; open it in ui.perfetto.dev or chrome://tracing)\n",
                 jc.timeline->path().c_str(), static_cast<long long>(jc.timeline->first_step()),
                 static_cast<long long>(jc.timeline->last_step()));
  }
  if (tensorboard) tensorboard->record_mode_history(r.mode_history);
  if (!r.error.empty()) throw std::runtime_error(r.error);
  if (tensorboard && !r.already_finished) tensorboard->final_evaluation(r.final);
  if (r.already_finished) {
    print_finished(r.resumed_from, r.steps, jc.train);
    return 0;
  }

  models::TrainResult result;
  result.epochs = r.epochs;
  result.steps = r.steps;
  result.wall_seconds = r.wall_seconds;
  result.samples_per_s = r.samples_per_s;
  result.final = r.final;
  result.stopped_early = r.stopped_early;
  std::string history;
  for (const auto& h : r.mode_history) history += (history.empty() ? "" : ", ") + h;
  // With several parameter-server shards, what each applied (each applies
  // every push: all equal).
  std::string by_shard;
  if (r.server.shard_applied.size() > 1)
    for (std::size_t i = 0; i < r.server.shard_applied.size(); ++i)
      by_shard += (i ? ", " : " (by shard: ") + std::to_string(r.server.shard_applied[i]) +
                  (i + 1 == r.server.shard_applied.size() ? ")" : "");
  // How stale the applied pushes were: updates their replica had not seen.
  std::string staleness;
  if (r.server.applied > 0) {
    char text[96];
    std::snprintf(text, sizeof text, "; staleness mean %.2f, max %lld",
                  static_cast<double>(r.server.staleness_sum) / static_cast<double>(r.server.applied),
                  static_cast<long long>(r.server.staleness_max));
    staleness = text;
  }
  // Shards on ps tasks placed anew while the job ran: the counts start at
  // the state restored then (the pushes after it, not those rolled back).
  std::string counted;
  if (!r.rollbacks.empty())
    counted = "; counted from step " + std::to_string(r.counted_from_step) +
              ", where the parameter server's state was " + "last restored (" + std::to_string(r.rollbacks.size()) +
              " placement(s) of its shards while the job ran)";
  std::fprintf(stderr, "modes: %s | %lld synchronous steps, %lld gradients pushed, %lld applied by the server%s%s%s\n",
               history.c_str(), static_cast<long long>(r.sync_steps), static_cast<long long>(r.pushes),
               static_cast<long long>(r.server.applied), by_shard.c_str(), staleness.c_str(), counted.c_str());
  report.close_bar();
  print_result(result, report.tokens_per_example());
  if (!o.summary_json.empty()) report.write_summary(o.summary_json, result, jc.train);
  return exit_status(result, jc.train.checkpoint_dir, last);
}

void use_threads(int threads) {
  if (threads < 1) throw UsageError("--threads must be at least 1, got " + std::to_string(threads));
  kernels::Registry::instance().for_device(kernels::Device::cpu()).set_threads(threads);
}

void add_train_command(CLI::App& app, TrainOptions& o) {
  auto* cmd = app.add_subcommand("train", "Train a model on the devices of this host");
  auto& c = o.config;
  cmd->add_option("--model", c.model,
                  "Zoo model (linreg, mlp, wide, cnn, vgg, resnet, textcnn, gpt) or a model spec file. resnet and "
                  "gpt train with their anchors' recipes (resnet: " +
                      models::zoo_recipe("resnet").describe() + "; gpt: " + models::zoo_recipe("gpt").describe() +
                      ") unless flags say otherwise")
      ->capture_default_str();
  cmd->add_option("--precision", c.precision,
                  "The matmuls' and convolutions' precision: fp32; bf16 (their inputs rounded to bfloat16, sums "
                  "in fp32: mixed precision as PyTorch's autocast; weights, optimizer state, gradients and "
                  "checkpoints stay fp32); or fp16 (IEEE half, with dynamic loss scaling; sync mode only; meant "
                  "for GPUs, emulated at fp32's speed on CPU devices)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->capture_default_str();
  cmd->add_option("--initial-loss-scale", c.initial_loss_scale,
                  "fp16: the first dynamic loss scale (PyTorch's init_scale); it halves on every overflow and doubles "
                  "after 2,000 finite steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--layers", c.zoo.layers, "gpt: transformer blocks (nanoGPT's n_layer)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--heads", c.zoo.heads, "gpt: attention heads (n_head); --width must be a multiple")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--width", c.zoo.width, "gpt: the residual stream's width (n_embd)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16))
      ->capture_default_str();
  cmd->add_option("--data", c.data,
                  "Dataset: fashion-mnist, linreg, wordnet, kjv (the King James Bible's bytes, for a language "
                  "model), a .csv file, images:DIR (DIR/<class>/*.png|*.jpg, or DIR/train/<class>/... and "
                  "DIR/test/<class>/...), text:FILE (a language model on FILE's bytes) or an IDX directory")
      ->capture_default_str();
  add_data_options(*cmd, o.data_flags);
  cmd->add_flag("--standardize", c.standardize,
                "Standardize the features: the model's first layer subtracts the training split's mean and divides by "
                "its deviation, per feature (per channel of images); kept in the checkpoint's model, so eval, "
                "predict and the ONNX export apply the same");
  cmd->add_option_function<std::string>(
         "--drop-remainder", [&c](const std::string& v) { c.drop_remainder = v == "true"; },
         "true: every epoch trains full global batches only, the last examples of the shuffled order left out (as "
         "the PyTorch anchors' drop_last); false: the last, partial batch trains too, its loss the mean over its "
         "examples")
      ->check(CLI::IsMember({"true", "false"}))
      ->default_str("true");
  cmd->add_option("--epochs", c.epochs, "Epochs to train")->capture_default_str();
  cmd->add_option("--batch", c.batch, "Examples per step and replica (global batch = batch x replicas)")
      ->capture_default_str();
  cmd->add_option("--steps", c.max_steps, "Stop after this many global steps (0: no limit)")->capture_default_str();
  cmd->add_option("--devices", o.devices,
                  "Devices, e.g. cpu:0,cpu:1, cuda:0,cuda:1 (NCCL) or cuda:0,cuda:0 (two logical replicas on one GPU) "
                  "(default: every GPU, else 2 CPU devices)");
  cmd->add_option("--mode", o.mode, "Update mode: sync, async or ssp:N")->capture_default_str();
  cmd->add_option("--switch", o.switches, "Mode switches while training, e.g. 500:async,1500:sync");
  cmd->add_option("--control", o.control,
                  "Serve the HTTP control endpoint at HOST:PORT (loopback only without a secret)");
  cmd->add_option("--secret-file", o.secret_file,
                  "File holding the cluster secret that control requests must be signed with (else TROUPE_SECRET)");
  cmd->add_option("--metrics-token-file", o.metrics_token_file,
                  "With a secret: a file holding a bearer token that GET /metrics accepts instead of a signed request "
                  "(a Prometheus server's authorization credentials_file)");
  cmd->add_option("--prefetch", o.prefetch, "Batches each data loader keeps ready")->capture_default_str();
  cmd->add_option("--ps-shards", o.ps_shards, "Parameter-server shards of async and ssp modes (1: the single server)")
      ->capture_default_str();
  cmd->add_option("--ps-split-above", o.ps_split_above,
                  "Layers of more floats than this are split across every parameter-server shard")
      ->capture_default_str();
  cmd->add_option("--optimizer", c.optimizer.name, "sgd, adam, adamw (decoupled weight decay) or nadam")
      ->check(CLI::IsMember(models::optimizer_names()))
      ->capture_default_str();
  cmd->add_option("--lr", c.lr, "Learning rate")->capture_default_str();
  cmd->add_option("--schedule", c.schedule,
                  "Learning-rate schedule: constant, piecewise:EPOCH=LR,..., piecewise-steps:STEP=LR,..., "
                  "exponential:RATE/STEPS[/staircase], cosine:STEPS[/FINAL_FRACTION], "
                  "warmup-cosine:TOTAL_STEPS[/FINAL_FRACTION] (linear warm-up over --warmup steps, then cosine "
                  "from the peak to FINAL_FRACTION x lr at TOTAL_STEPS)")
      ->capture_default_str();
  cmd->add_option("--warmup", c.warmup_steps,
                  "Linear learning-rate warm-up over this many steps (multiplies the schedule; with warmup-cosine "
                  "the cosine starts where it ends)")
      ->capture_default_str();
  cmd->add_option("--warmup-epochs", c.warmup_epochs,
                  "Linear learning-rate warm-up over this many epochs (as --warmup, in epochs; give one of the "
                  "two)");
  cmd->add_option("--momentum", c.optimizer.momentum, "SGD momentum")->capture_default_str();
  cmd->add_flag("--nesterov", c.optimizer.nesterov, "SGD with Nesterov momentum");
  cmd->add_option("--weight-decay", c.optimizer.weight_decay,
                  "Weight decay (L2 for sgd, adam, nadam; decoupled for adamw), on tensors of rank >= 2 only "
                  "(kernels, embeddings; not biases or batchnorm) unless --decay-all")
      ->capture_default_str();
  cmd->add_flag("--decay-all", c.optimizer.decay_all, "Apply --weight-decay to every parameter, biases included");
  cmd->add_option("--beta1", c.optimizer.beta1, "Adam/AdamW/Nadam beta1")->capture_default_str();
  cmd->add_option("--beta2", c.optimizer.beta2, "Adam/AdamW/Nadam beta2")->capture_default_str();
  cmd->add_option("--clip-norm", c.optimizer.clip_norm,
                  "Clip the global gradient L2 norm to this (0: off): the reduced gradient in sync mode, each "
                  "pushed gradient in async/ssp")
      ->capture_default_str();
  cmd->add_option("--label-smoothing", c.label_smoothing,
                  "Label smoothing of the cross-entropy (PyTorch's label_smoothing), in [0, 1]")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--augment", c.augment,
                  "Augment the training images while loading: crop:P (a random crop of the image zero-padded by P "
                  "pixels), flip (left-right, half of them), or crop:P,flip; each example's draw depends on the seed, "
                  "the epoch and its index only");
  cmd->add_option("--epsilon", c.optimizer.epsilon, "Adam/AdamW/Nadam epsilon (PyTorch's 1e-8; Keras uses 1e-7)")
      ->capture_default_str();
  cmd->add_option("--seed", c.seed, "Seed for initialisation, shuffling and dropout (0 to 2^64-1)")
      ->check(unsigned_64_bit())
      ->capture_default_str();
  cmd->add_option("--threads,--threads-per-device", o.threads, "CPU threads for each device's kernels")
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", c.checkpoint_dir, "Write checkpoints here (checked before training)");
  cmd->add_option("--checkpoint-every", c.checkpoint_every, "Also checkpoint every N steps")->capture_default_str();
  cmd->add_option("--keep", c.keep_last, "Checkpoints to keep (0: all)")->capture_default_str();
  cmd->add_flag("--resume", c.resume,
                "Resume from the newest checkpoint in --checkpoint-dir that verifies (an error when there is none)");
  cmd->add_flag("--resume-or-start", c.resume_or_start,
                "With --resume: start from step 0 when --checkpoint-dir holds no checkpoint");
  cmd->add_option("--checkpoint-minutes", c.checkpoint_minutes,
                  "With --checkpoint-dir: also checkpoint when this many minutes passed since the last (0: never)")
      ->capture_default_str();
  cmd->add_option("--metrics", o.metrics, "Write metrics rows here (CSV, or JSON lines for *.jsonl)");
  cmd->add_option("--log-every", o.log_every, "Steps between log lines and metrics rows")->capture_default_str();
  cmd->add_option("--summary-json", o.summary_json, "Write the final figures here as JSON");
  cmd->add_option("--tensorboard", o.tensorboard,
                  "Write TensorBoard event files into this folder (tensorboard --logdir DIR)");
  cmd->add_option("--timeline", o.timeline,
                  "Write a Chrome trace of every replica's steps here (data wait, forward, backward, all-reduce or "
                  "push/pull, optimizer; open it in ui.perfetto.dev)");
  cmd->add_option("--timeline-steps", o.timeline_steps, "The steps --timeline records, A:B")->capture_default_str();
  o.given = [cmd](const std::string& key) {
    if (key == "warmup") return cmd->count("--warmup") + cmd->count("--warmup-epochs") > 0;
    std::string flag = "--" + key;
    for (char& ch : flag)
      if (ch == '_') ch = '-';
    return cmd->count(flag) > 0;
  };
}

int run_train(TrainOptions& o) {
  use_threads(o.threads);
  apply_data_options(o.data_flags, o.config.data_options);
  // A zoo model with a recipe (resnet) trains with it where no flag says
  // otherwise: `troupe train --model resnet` is the anchor's run.
  if (const std::string recipe = models::apply_recipe(o.config, o.given); !recipe.empty())
    std::fprintf(stderr, "model %s: its recipe, where no flag says otherwise: %s\n", o.config.model.c_str(),
                 recipe.c_str());
  if (o.log_every < 0) throw UsageError("--log-every must be >= 0");
  if (o.ps_shards < 1) throw UsageError("--ps-shards must be at least 1, got " + std::to_string(o.ps_shards));
  if (o.ps_split_above < 1)
    throw UsageError("--ps-split-above must be at least 1 (floats), got " + std::to_string(o.ps_split_above));
  if (!o.metrics_token_file.empty() && o.control.empty())
    throw UsageError(
        "--metrics-token-file is the credential of GET /metrics on the control endpoint: give --control too");
  actors::Mode::parse(o.mode);  // usage errors before any data is loaded
  actors::parse_switch_schedule(o.switches);
  std::vector<kernels::Device> devices =
      o.devices.empty() ? actors::default_devices() : actors::parse_devices(o.devices);
  actors::Timeline::parse_steps(o.timeline_steps);  // a usage error before any data is loaded
  if (o.config.precision == "fp16") {
    for (const auto& d : devices)
      if (d.is_cpu()) {
        std::fprintf(stderr,
                     "note: --precision fp16 on %s is emulated (a GPU's fp16 numbers and loss scaling, fp32's "
                     "speed): CPUs here have no fp16 matmul; bf16 is the fast mixed precision on a CPU\n",
                     d.str().c_str());
        break;
      }
  }
  if (devices.size() == 1 && o.mode == "sync" && o.switches.empty() && o.control.empty() && o.timeline.empty())
    return run_single(o, devices[0]);
  return run_job(o, std::move(devices));
}

}  // namespace troupe::cli
