// The troupe subcommands: each adds its options to the CLI11 app and runs
// from the parsed options.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "cluster/node.hpp"
#include "job/job.hpp"
#include "models/checkpoint/checkpoint.hpp"
#include "models/data/load.hpp"
#include "models/generate.hpp"
#include "models/model.hpp"
#include "models/trainer.hpp"
#include "net/cluster/cluster_spec.hpp"

namespace troupe::cli {

// A bad combination of options found after parsing (exit status 2).
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// How the data is read (cli/data_options.cpp), shared by train, eval and
// predict: eval and predict must load the data as training did, or the
// model's input shape or the test split differ.
struct DataFlags {
  std::string task = "classify";  // a .csv file's: classify or regress
  std::string label_column;       // a .csv file's label column: a name or a number from 1; empty: the last
  double test_fraction = 0;       // a .csv file or images:DIR: the held-out fraction
  std::string test_data;          // a second file whose examples are the test split
  std::string size;               // images: "HxW"; empty: the first image's size
  std::string color = "auto";
  std::int64_t context = 64;  // kjv, text:FILE: the window T (a language model's context)
};
void add_data_options(CLI::App& command, DataFlags& flags);
// Into `options` (csv, images, test_data); throws UsageError on a
// malformed size, or a test fraction with test data.
void apply_data_options(const DataFlags& flags, data::LoadOptions& options);

struct TrainOptions {
  models::TrainConfig config;
  std::string devices;  // empty: all GPUs, else 2 CPU devices (actors::default_devices)
  std::string mode = "sync";
  std::string switches;            // "500:async,1500:sync"
  std::string control;             // HOST:PORT of the HTTP control endpoint; empty: none
  std::string secret_file;         // signs control requests (else TROUPE_SECRET; neither: loopback only)
  std::string metrics_token_file;  // a bearer token GET /metrics accepts (Prometheus' credentials_file)
  int prefetch = 2;
  int threads = 1;                                                // per device
  int ps_shards = 1;                                              // parameter-server shards (async, ssp)
  std::int64_t ps_split_above = actors::ps::default_split_above;  // floats: bigger layers are split
  std::string metrics;
  std::string summary_json;
  std::string tensorboard;               // --tensorboard DIR: TensorBoard event files (models/tensorboard.hpp)
  std::string timeline;                  // --timeline FILE: a Chrome trace of every replica's steps (util/timeline.hpp)
  std::string timeline_steps = "1:500";  // --timeline-steps A:B: the steps it records
  std::int64_t log_every = 100;
  DataFlags data_flags;
  // Whether the command line gave a setting, by its job-file key (for the
  // zoo models' recipes, models/recipe.hpp); set by add_train_command.
  std::function<bool(const std::string& key)> given = [](const std::string&) { return false; };
};
void add_train_command(CLI::App& app, TrainOptions& options);
int run_train(TrainOptions& options);
// An output file's flag and path (--metrics, --summary-json, --timeline):
// creates its folder and checks that a file can be created there, before
// any data is loaded; throws std::runtime_error naming the flag otherwise.
void prepare_output_path(const char* flag, const std::string& path);
// Runs a job on the actor runtime (one host, or a cluster's coordinator)
// with train's reporting options (metrics, log, summary, control endpoint).
int run_actor_job(const actors::JobConfig& job, const TrainOptions& reporting);

struct NodeOptions {
  actors::NodeOptions node;
  std::string cluster;  // --cluster FILE; without it and --listen / --join, a launcher's environment
  std::string
      coordinator;        // --coordinator HOST:PORT: completes a launcher's environment (net/cluster/launcher_env.hpp)
  int port = 0;           // --port: the coordinator's port under a launcher (else TROUPE_PORT)
  net::ClusterFlags tf1;  // --ps_hosts --worker_hosts --job_name --task_index (TF1's spelling)
  bool ps = false;        // --ps: --job_name ps (a ps task: hosts parameter-server shards)
  std::string devices;
  TrainOptions reporting;  // --control, --metrics, --log-every, --summary-json
};
void add_node_command(CLI::App& app, NodeOptions& options);
int run_node(NodeOptions& options);

struct EvalOptions {
  std::string checkpoint;
  std::string data;  // default: the dataset named at training time is not recorded, so fashion-mnist
  std::string device = "cpu:0";
  int threads = 1;
  std::int64_t batch = 1000;
  DataFlags data_flags;
};
void add_eval_command(CLI::App& app, EvalOptions& options);

// What eval and predict start from: the data (loaded first, so that an
// unknown name is a usage error before the checkpoint is read), the
// checkpoint's model on `device`, and the split they read: the test split,
// or the training split when the data has none.
struct SavedModelOnData {
  data::Splits splits;
  std::string checkpoint;  // the file read (checkpoint_file)
  checkpoint::State state;
  std::unique_ptr<models::Model> model;
  const data::Dataset& examples() const { return splits.test.size() > 0 ? splits.test : splits.train; }
};
// What --checkpoint names for eval, predict and export: a checkpoint file
// as it is, or a job's --checkpoint-dir, whose newest complete checkpoint
// it reads (TF's tf.train.latest_checkpoint), saying which on stderr.
// Throws checkpoint::CheckpointError for a folder with no checkpoint.
std::string checkpoint_file(const std::string& given);
SavedModelOnData load_saved_model(const std::string& checkpoint, const std::string& data, const DataFlags& flags,
                                  const kernels::Device& device);
int run_eval(EvalOptions& options);

struct PredictOptions {
  std::string checkpoint;
  std::string data;        // default: fashion-mnist, as eval
  std::int64_t limit = 0;  // the first N examples of the test split; 0: all
  std::string output;      // the JSON file (docs/USER-GUIDE.md, "Predictions")
  std::string inputs;      // optional: the examples' features as .npy, as the model took them
  std::string device = "cpu:0";
  int threads = 1;
  std::int64_t batch = 1000;
  DataFlags data_flags;
};
void add_predict_command(CLI::App& app, PredictOptions& options);
int run_predict(PredictOptions& options);

struct ExportOptions {
  std::string checkpoint;
  std::string format = "onnx";
  std::string output;
  std::string data;  // optional: a dataset whose class names the file records
};
void add_export_command(CLI::App& app, ExportOptions& options);
int run_export(ExportOptions& options);

struct CtlOptions {
  std::string at;           // HOST:PORT of the job's control endpoint
  std::string action;       // status, metrics, mode, checkpoint, stop or drain
  std::string mode;         // for mode: sync, async, ssp:N
  std::string node;         // for drain: a node's index or name
  double timeout_s = 5;     // connect (retried while nothing listens yet) and answer together
  std::string secret_file;  // the job's cluster secret, to sign requests (else TROUPE_SECRET)
};
void add_ctl_command(CLI::App& app, CtlOptions& options);
int run_ctl(CtlOptions& options);

// troupe generate: a sample from a language model's checkpoint (models/generate.hpp).
struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  models::SampleOptions sample;
  std::string device = "cpu:0";
  int threads = 1;
};
void add_generate_command(CLI::App& app, GenerateOptions& options);
int run_generate(GenerateOptions& options);

// `troupe --version`: "troupe X.Y.Z" on the first line, then how this binary
// was built (type, compiler, CUDA, NCCL, CAF), one fact a line; no final newline.
std::string version_text();

// Applies --threads to this process's CPU kernels.
void use_threads(int threads);

}  // namespace troupe::cli
