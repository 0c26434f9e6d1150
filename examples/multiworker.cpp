// multiworker: TensorFlow's "Multi-worker training with Keras" tutorial
// (tf.distribute.MultiWorkerMirroredStrategy with TF_CONFIG) on troupe, two
// worker processes on localhost ports, Fashion-MNIST.
//
// What it shows:
//   - the cluster spec in TF_CONFIG's shape, handed to each process in the
//     environment variable TROUPE_CLUSTER:
//       {"cluster":{"worker":["127.0.0.1:P0","127.0.0.1:P1"]},"task":{"type":"worker","index":I}}
//   - every process builds troupe::MultiWorkerMirroredStrategy (which reads
//     TROUPE_CLUSTER) and calls the same fit(); worker 0 is the chief (the
//     coordinator: callbacks, evaluation, checkpoints), worker 1 joins it and
//     its fit() returns a History marked `worker`;
//   - synchronous all-reduce across the processes: the total batch is the
//     per-worker batch x the number of workers (the tutorial's
//     global_batch_size = per_worker_batch_size * num_workers).
//
// How to run (from the build directory's parent):
//   build/examples/multiworker                    # launches both workers itself (free ports), prints their output
//   build/examples/multiworker --short            # 30 steps of the MLP: seconds
//   build/examples/multiworker --workers 127.0.0.1:7000,127.0.0.1:7001 --short
// or start the two processes yourself, e.g. in two terminals (the launcher
// prints these lines):
//   TROUPE_CLUSTER='{"cluster":{"worker":["127.0.0.1:7000","127.0.0.1:7001"]},"task":{"type":"worker","index":0}}'
//   build/examples/multiworker --task 0
//   TROUPE_CLUSTER='{"cluster":{"worker":["127.0.0.1:7000","127.0.0.1:7001"]},"task":{"type":"worker","index":1}}'
//   build/examples/multiworker --task 1
// (or `--workers A,B --task I` instead of TROUPE_CLUSTER). Each process uses
// one CPU device by default (--devices).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <troupe/troupe.hpp>

#include "args.hpp"
#include "launch.hpp"

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  examples::Args args(argc, argv,
                      "multiworker: MultiWorkerMirroredStrategy from a TF_CONFIG-shaped cluster spec (two worker "
                      "processes on localhost) on Fashion-MNIST");
  args.option("--workers", "", "the cluster's workers HOST:PORT,HOST:PORT (default: 2 free ports on 127.0.0.1)");
  args.option("--task", "",
              "run only this task of the cluster (its index); the spec from --workers, else TROUPE_CLUSTER");
  args.option("--devices", "cpu:0", "each worker's devices");
  args.option("--model", "cnn", "zoo model (mlp, cnn) or a model spec file");
  args.option("--epochs", "3", "epochs (the tutorial: 3)");
  args.option("--steps", "210", "global steps in all (the tutorial: 70 per epoch)");
  args.option("--batch", "32", "examples per worker device and step (total batch = this x devices x workers)");
  args.option("--seed", "0", "seed of initialisation and shuffling");
  args.option("--deadline", "300", "seconds the launcher waits for the workers before killing them");
  args.flag("--short", "30 steps of the MLP in one epoch: seconds");
  args.parse();
  const bool short_run = args.has("--short");
  if (short_run && (args.has("--epochs") || args.has("--steps") || args.has("--model")))
    args.fail("--short chooses the model, epochs and steps itself; drop --model / --epochs / --steps");
  const long long epochs = short_run ? 1 : args.integer("--epochs", 1, 1000);
  const long long steps = short_run ? 30 : args.integer("--steps", 1, 1LL << 40);
  const long long batch = args.integer("--batch", 1, 65536);
  const long long seed = args.integer("--seed", 0, 1LL << 62);
  const long long deadline = args.integer("--deadline", 1, 86400);
  const std::string model = short_run ? "mlp" : args.str("--model");
  std::vector<troupe::Device> devices;
  try {
    devices = troupe::parse_devices(args.str("--devices"));
  } catch (const std::exception& e) {
    args.fail(e.what());
  }

  // ---- one task of the cluster ------------------------------------------------
  if (args.has("--task")) {
    const long long task = args.integer("--task", 0, 1 << 20);
    troupe::ClusterOptions options;
    options.devices = devices;
    options.wait_timeout_s = static_cast<double>(deadline);
    if (!args.str("--workers").empty()) {
      options.cluster_spec_json = examples::cluster_json(split(args.str("--workers")), static_cast<int>(task));
    } else if (!std::getenv("TROUPE_CLUSTER")) {
      args.fail("--task needs the cluster: --workers HOST:PORT,HOST:PORT or the environment variable TROUPE_CLUSTER");
    }
    std::unique_ptr<troupe::MultiWorkerMirroredStrategy> strategy;
    try {
      strategy = std::make_unique<troupe::MultiWorkerMirroredStrategy>(options);
    } catch (const std::exception& e) {
      args.fail(e.what());
    }
    if (strategy->task_index() != task)
      args.fail("--task " + std::to_string(task) + " but TROUPE_CLUSTER says task index " +
                std::to_string(strategy->task_index()));
    try {
      troupe::FitConfig config;
      config.model = model;
      config.data = "fashion-mnist";
      config.epochs = epochs;
      config.max_steps = steps;
      config.batch = batch;  // per replica (device)
      config.seed = static_cast<std::uint64_t>(seed);
      config.optimizer.name = "adam";
      config.lr = 1e-3f;
      if (strategy->is_coordinator()) {
        const long long per_worker = batch * static_cast<long long>(strategy->devices().size());
        std::printf("worker %lld (chief): %d workers; total batch %lld = %lld x %d workers\n", task,
                    strategy->num_workers(), per_worker * strategy->num_workers(), per_worker, strategy->num_workers());
        std::fflush(stdout);
      }
      troupe::History h = strategy->fit(config, {std::make_shared<troupe::ProgressLogger>(10)});
      if (h.worker) {
        std::printf("worker %lld: the job is done (the chief ran it); %.1f s\n", task, h.wall_seconds);
      } else {
        std::printf("worker %lld (chief): %lld steps in %.1f s, %.0f samples/s; test loss %.4f, test accuracy %.4f\n",
                    task, static_cast<long long>(h.steps), h.wall_seconds, h.samples_per_s, h.final.test_loss,
                    h.final.test_accuracy);
      }
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }

  // ---- the launcher ---------------------------------------------------------------
  const bool pick_ports = args.str("--workers").empty();
  auto pick_workers = [&] {
    std::vector<std::string> out;
    if (!pick_ports) return split(args.str("--workers"));
    for (int i = 0; i < 2; ++i) out.push_back("127.0.0.1:" + std::to_string(examples::free_port()));
    return out;
  };
  std::vector<std::string> workers = pick_workers();
  for (std::size_t i = 0; i < workers.size(); ++i) {
    try {  // the strategy checks each task's spec as the worker will (addresses, duplicates)
      troupe::ClusterOptions o;
      o.cluster_spec_json = examples::cluster_json(workers, static_cast<int>(i));
      troupe::MultiWorkerMirroredStrategy check(o);
    } catch (const std::exception& e) {
      args.fail(e.what());
    }
    const int port = examples::port_of(workers[i]);
    if (port > 0 && examples::port_in_use(port))
      args.fail("port " + std::to_string(port) + " (" + workers[i] +
                ") is in use; see what holds it: ss -ltnp 'sport = :" + std::to_string(port) +
                "', or pick other ports with --workers");
  }
  const long long per_worker = batch * static_cast<long long>(devices.size());
  const int n = static_cast<int>(workers.size());
  std::printf("cluster: %d workers (", n);
  for (const auto& w : workers) std::printf(" %s", w.c_str());
  std::printf(" ); per-worker batch %lld (%lld x %zu devices)\n", per_worker, batch, devices.size());
  std::printf("total batch %lld = %lld x %d workers\n", per_worker * n, per_worker, n);

  const std::string dir =
      (std::filesystem::temp_directory_path() / ("troupe-multiworker-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  std::vector<std::string> forwarded;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--workers" || a == "--deadline") {
      ++i;  // the launcher's own options
      continue;
    }
    forwarded.push_back(a);
  }
  // When a worker fails, the other is stopped at once (a chief would wait
  // for a lost worker until its cluster timeout). Ports the launcher picked
  // itself can be taken by another process before a worker binds them; then
  // it tries again on fresh ones, up to 3 times.
  bool in_time = false, ok = false;
  for (int attempt = 1; attempt <= 3; ++attempt) {
    std::vector<std::unique_ptr<examples::Child>> children;
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> child_args{argv[0], "--task", std::to_string(i)};
      child_args.insert(child_args.end(), forwarded.begin(), forwarded.end());
      const std::string spec = examples::cluster_json(workers, i);
      std::string line = "TROUPE_CLUSTER='" + spec + "'";
      for (const auto& a : child_args) line += " " + a;
      std::printf("launching: %s\n", line.c_str());
      children.push_back(
          std::make_unique<examples::Child>(child_args, spec, dir + "/worker" + std::to_string(i) + ".log"));
    }
    std::vector<examples::Child*> all;
    for (auto& c : children) all.push_back(c.get());
    in_time = examples::wait_all(all, std::chrono::seconds(deadline), examples::OnFailure::stop_the_rest);
    ok = in_time;
    for (int i = 0; i < n; ++i) {
      std::printf("---- worker %d (exit status %d)%s\n", i, children[i]->status, i == 0 ? " the chief" : "");
      examples::print_prefixed("[worker " + std::to_string(i) + "] ", children[i]->output());
      ok = ok && children[i]->status == 0;
    }
    if (ok || !pick_ports || attempt == 3 || !examples::lost_a_port(all)) break;
    workers = pick_workers();
    std::printf("another process took a port the launcher had picked; again on fresh ports (attempt %d of 3)\n",
                attempt + 1);
  }
  std::filesystem::remove_all(dir);
  if (!in_time)
    std::fprintf(stderr, "error: the workers did not finish within %lld s (--deadline); killed\n", deadline);
  if (!ok) {
    std::fprintf(stderr, "error: a worker failed (see its output above)\n");
    return 1;
  }
  std::printf("multiworker: both workers finished; total batch %lld = %lld x %d workers\n", per_worker * n, per_worker,
              n);
  return 0;
}
