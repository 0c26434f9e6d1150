// ps_linear_regression: TensorFlow 1's parameter-server example
// (tf.train.ClusterSpec with "ps" and "worker" jobs, between-graph
// replication, asynchronous SGD, a MonitoredTrainingSession whose chief
// saves checkpoints and restores them after a restart) on troupe: linear
// regression on y = 2x + noise, two worker processes and a ps task on
// localhost ports.
//
// What it shows:
//   - TF1's cluster {ps: [p], worker: [w0, w1]} as it is: worker 0 is the
//     chief (TF's is_chief = task_index == 0) and owns the job and the
//     checkpoints; both workers train (one CPU device each); the ps task
//     (troupe::serve_parameter_server, TF's server.join()) trains nothing
//     and hosts the parameter-server shards (one per ps task; --ps names
//     more), which apply the workers' pushes as they arrive;
//   - asynchronous SGD: troupe::MultiWorkerMirroredStrategy with mode "async"
//     (ClusterOptions::mode): each worker pushes its gradient to the ps
//     task(s) on the data plane, which apply it at once, without waiting for
//     the other worker;
//   - the chief checkpoints every --checkpoint-every steps (TF's
//     save_checkpoint_secs, counted in steps here) and prints w and b from
//     each checkpoint: they converge to 2 and 0 (zoo model "linreg": one
//     dense unit, parameters [w, b]; data "linreg": y = 2x + N(0, 0.33));
//   - with --kill-and-resume: the launcher kills the chief with SIGKILL
//     mid-run (after its first periodic checkpoint), the worker and the ps
//     task notice the lost coordinator and stop; then it starts the cluster
//     again (the chief with resume = true, a worker and the ps task, on
//     fresh ports) and the job continues from the chief's newest checkpoint
//     to the end (the checkpoint's state goes to the new ps task's shard);
//   - with --kill-ps: the launcher kills the ps task with SIGKILL mid-run
//     (after the chief's first periodic checkpoint) and starts a new one;
//     nothing else is restarted. The chief notices the lost ps task at once,
//     rolls the job back to its newest checkpoint (the shard's state died
//     with the task), pauses until the new ps task joins, places the shard
//     on it and goes on to the end. TF1's job would have stopped.
//
// How to run (from the build directory's parent):
//   build/examples/ps_linear_regression                     # launches chief and worker itself (free ports)
//   build/examples/ps_linear_regression --kill-and-resume   # ... kills the chief mid-run and resumes
//   build/examples/ps_linear_regression --short --kill-and-resume   # the test's form: seconds
//   build/examples/ps_linear_regression --short --kill-ps           # a ps task killed and replaced
// or one process per task (the launcher prints these lines), e.g.
//   TROUPE_CLUSTER='{"cluster":{"worker":["127.0.0.1:7000","127.0.0.1:7001"],"ps":["127.0.0.1:7002"]},
//     "task":{"type":"worker","index":0}}' build/examples/ps_linear_regression --task 0 --dir runs/ps
//   TROUPE_CLUSTER='{... "task":{"type":"worker","index":1}}' build/examples/ps_linear_regression --task 1
//   TROUPE_CLUSTER='{... "task":{"type":"ps","index":0}}' build/examples/ps_linear_regression --task 0 --job ps
// (each pair of lines is one command line; add --resume to the chief's line to continue from its checkpoints in --dir).
//
// --step-delay-ms slows the chief's bookkeeping of each step (a sleep in a
// step-end callback): linear regression steps take microseconds, and
// --kill-and-resume needs a run long enough to be killed in the middle.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <troupe/troupe.hpp>

#include "args.hpp"
#include "launch.hpp"

namespace {

// TF_CONFIG's shape with ps entries: {"cluster": {"worker": [...], "ps":
// [...]}, "task": {"type": TYPE, "index": INDEX}}.
std::string cluster_json(const std::vector<std::string>& workers, const std::vector<std::string>& ps,
                         const std::string& type, int index) {
  auto list = [](const std::vector<std::string>& xs) {
    std::string s = "[";
    for (std::size_t i = 0; i < xs.size(); ++i) s += (i ? ",\"" : "\"") + xs[i] + "\"";
    return s + "]";
  };
  return "{\"cluster\":{\"worker\":" + list(workers) + (ps.empty() ? "" : ",\"ps\":" + list(ps)) +
         "},\"task\":{\"type\":\"" + type + "\",\"index\":" + std::to_string(index) + "}}";
}

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

// w and b of a linreg model: its parameters are [kernel (1x1), bias (1)].
std::pair<float, float> w_and_b(const troupe::Model& m) {
  const std::vector<float> p = m.parameters().to_vector();
  return {p.at(0), p.at(1)};
}

// The global step in a checkpoint's name (ckpt-<12 digits>.troupe).
long long step_of(const std::string& path) {
  const std::string name = std::filesystem::path(path).stem().string();
  return name.size() > 5 ? std::atoll(name.c_str() + 5) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  examples::Args args(argc, argv,
                      "ps_linear_regression: TF1's parameter-server example (async SGD on y = 2x + noise, the chief "
                      "checkpoints, killed and resumed) on a two-process troupe cluster");
  args.option("--workers", "", "the cluster's workers HOST:PORT,HOST:PORT (default: 2 free ports on 127.0.0.1)");
  args.option("--ps", "",
              "the ps tasks HOST:PORT,... (default: 1 free port on 127.0.0.1; 'none': no ps task, "
              "the parameter server runs on the chief)");
  args.option("--task", "", "run only this task (its index); the spec from --workers and --ps, else TROUPE_CLUSTER");
  args.option("--job", "worker", "with --task: worker or ps (TF1's --job_name)");
  args.option("--dir", "runs/ps_linear_regression", "the chief's checkpoint directory");
  args.option("--steps", "3000", "global steps (gradients applied by the server)");
  args.option("--batch", "10", "examples per worker and step");
  args.option("--lr", "0.05", "SGD's learning rate");
  args.option("--checkpoint-every", "100", "steps between the chief's checkpoints");
  args.option("--step-delay-ms", "0", "the chief sleeps this long per step (see the top of the file)");
  args.option("--seed", "0", "seed of initialisation, data order and noise");
  args.option("--deadline", "300", "seconds the launcher waits for the processes before killing them");
  args.flag("--resume", "task mode, chief: continue from the newest checkpoint in --dir");
  args.flag("--kill-and-resume", "launcher: kill the chief (SIGKILL) after its first checkpoint, then resume");
  args.flag("--kill-ps",
            "launcher: kill the ps task (SIGKILL) after the chief's first checkpoint and start a new one: "
            "the job rolls back to that checkpoint and goes on");
  args.flag("--short", "400 steps, a checkpoint every 50, 10 ms per step: seconds");
  args.parse();
  const bool short_run = args.has("--short");
  if (short_run && (args.has("--steps") || args.has("--checkpoint-every") || args.has("--step-delay-ms")))
    args.fail("--short chooses --steps, --checkpoint-every and --step-delay-ms itself; drop them");
  const long long steps = short_run ? 400 : args.integer("--steps", 1, 1LL << 40);
  const long long every = short_run ? 50 : args.integer("--checkpoint-every", 1, 1LL << 40);
  const long long delay_ms = short_run ? 10 : args.integer("--step-delay-ms", 0, 10000);
  const long long batch = args.integer("--batch", 1, 65536);
  const double lr = args.real("--lr", 1e-9, 10.0);
  const long long seed = args.integer("--seed", 0, 1LL << 62);
  const long long deadline = args.integer("--deadline", 1, 86400);
  const std::string dir = args.str("--dir");
  if (dir.empty()) args.fail("--dir must not be empty");
  if (args.has("--resume") && !args.has("--task"))
    args.fail("--resume belongs to one task (--task 0); the launcher uses --kill-and-resume");

  const std::string job_name = args.str("--job");
  if (job_name != "worker" && job_name != "ps") args.fail("--job must be worker or ps, got '" + job_name + "'");
  // --ps as given: "" (the default: one free port, chosen by the launcher),
  // "none", or a list.
  auto ps_list = [&]() -> std::vector<std::string> {
    const std::string text = args.str("--ps");
    if (text.empty() || text == "none") return {};
    return split(text);
  };

  // ---- one task of the cluster -----------------------------------------------------
  if (args.has("--task")) {
    const long long task = args.integer("--task", 0, 1 << 20);
    troupe::ClusterOptions options;
    options.devices = {troupe::Device::cpu()};
    options.mode = "async";  // the parameter server on the chief applies each gradient at once
    options.wait_timeout_s = static_cast<double>(deadline);
    options.timeout_s = 20;
    if (!args.str("--workers").empty()) {
      options.cluster_spec_json =
          cluster_json(split(args.str("--workers")), ps_list(), job_name, static_cast<int>(task));
    } else if (!std::getenv("TROUPE_CLUSTER")) {
      args.fail("--task needs the cluster: --workers HOST:PORT,HOST:PORT or the environment variable TROUPE_CLUSTER");
    }
    bool ps_task = false;
    try {
      ps_task = troupe::is_ps_task(options);
    } catch (const std::exception& e) {
      args.fail(e.what());
    }
    if (ps_task) {
      // TF1's server.join(): host the shards the chief places here until
      // the job is over.
      try {
        const int status = troupe::serve_parameter_server(options);
        std::printf("ps task %lld: %s\n", task,
                    status == 0 ? "the job is done" : "the job failed or the chief was lost");
        return status;
      } catch (const std::exception& e) {
        args.fail(e.what());
      }
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
      config.model = "linreg";
      config.data = "linreg";
      config.optimizer.name = "sgd";
      config.lr = static_cast<float>(lr);
      config.batch = batch;
      config.epochs = 1000000;  // the step limit ends the job
      config.max_steps = steps;
      config.seed = static_cast<std::uint64_t>(seed);
      config.checkpoint_dir = dir;
      config.checkpoint_every = every;
      config.keep_last = 3;
      config.resume = args.has("--resume");
      auto log = std::make_shared<troupe::LambdaCallback>();
      bool first = true;
      log->step_end = [&](const troupe::StepLogs& l) {
        if (first) {
          std::printf("chief: first step counted: %lld%s\n", static_cast<long long>(l.step),
                      config.resume ? " (resumed)" : "");
          std::fflush(stdout);
          first = false;
        }
        if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      };
      log->checkpoint = [](const std::string& path, std::int64_t step) {
        const auto [w, b] = w_and_b(*troupe::load_model(path));
        std::printf("chief: checkpoint at step %lld: w = %.4f, b = %.4f\n", static_cast<long long>(step), w, b);
        std::fflush(stdout);
      };
      troupe::History h = strategy->fit(config, {log});
      if (h.worker) {
        std::printf("worker %lld: the job is done (the chief ran it); %.1f s\n", task, h.wall_seconds);
        return 0;
      }
      const auto [w, b] = w_and_b(*h.model);
      std::printf("chief: %lld steps (%lld gradients pushed) in %.1f s; final w = %.4f, b = %.4f; test loss %.4f\n",
                  static_cast<long long>(h.steps), static_cast<long long>(h.pushes), h.wall_seconds, w, b,
                  h.final.test_loss);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }

  // ---- the launcher ---------------------------------------------------------------
  auto pick_workers = [&] {
    std::vector<std::string> workers;
    if (args.str("--workers").empty()) {
      for (int i = 0; i < 2; ++i) workers.push_back("127.0.0.1:" + std::to_string(examples::free_port()));
    } else {
      workers = split(args.str("--workers"));
    }
    for (std::size_t i = 0; i < workers.size(); ++i) {
      try {
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
    return workers;
  };
  std::vector<std::string> forwarded;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--workers" || a == "--deadline" || a == "--ps") {
      ++i;
      continue;
    }
    if (a == "--kill-and-resume" || a == "--kill-ps") continue;
    forwarded.push_back(a);
  }
  const std::string logs =
      (std::filesystem::temp_directory_path() / ("troupe-ps-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(logs);
  std::filesystem::remove_all(dir);  // a fresh run: no old checkpoints to resume from by accident
  std::filesystem::create_directories(dir);

  // One task of the cluster; `resume` adds --resume to the chief.
  auto start = [&](const std::vector<std::string>& workers, const std::vector<std::string>& ps, const std::string& type,
                   std::size_t i, bool resume, const std::string& phase) {
    std::vector<std::string> a{argv[0], "--task", std::to_string(i)};
    a.insert(a.end(), forwarded.begin(), forwarded.end());
    if (type == "ps") a.insert(a.end(), {"--job", "ps"});
    if (resume && type == "worker" && i == 0) a.push_back("--resume");
    const std::string spec = cluster_json(workers, ps, type, static_cast<int>(i));
    std::string line = "TROUPE_CLUSTER='" + spec + "'";
    for (const auto& s : a) line += " " + s;
    std::printf("launching: %s\n", line.c_str());
    return std::make_unique<examples::Child>(a, spec, logs + "/" + phase + type + std::to_string(i) + ".log");
  };
  // Starts chief, worker and ps tasks (children in that order: workers,
  // then ps tasks).
  auto launch = [&](const std::vector<std::string>& workers, const std::vector<std::string>& ps, bool resume,
                    const std::string& phase) {
    std::vector<std::unique_ptr<examples::Child>> children;
    for (std::size_t i = 0; i < workers.size(); ++i) children.push_back(start(workers, ps, "worker", i, resume, phase));
    for (std::size_t i = 0; i < ps.size(); ++i) children.push_back(start(workers, ps, "ps", i, resume, phase));
    return children;
  };
  auto report = [&](std::vector<std::unique_ptr<examples::Child>>& children, const std::string& phase,
                    std::size_t workers) {
    for (std::size_t i = 0; i < children.size(); ++i) {
      const bool ps = i >= workers;
      const std::string name = ps ? "ps " + std::to_string(i - workers) : "worker " + std::to_string(i);
      std::printf("---- %s%s%s (exit status %d)\n", phase.c_str(), name.c_str(), i == 0 ? ", the chief" : "",
                  children[i]->status);
      examples::print_prefixed("[" + phase + name + "] ", children[i]->output());
    }
  };
  auto pointers = [](std::vector<std::unique_ptr<examples::Child>>& children) {
    std::vector<examples::Child*> out;
    for (auto& c : children) out.push_back(c.get());
    return out;
  };

  // The ps tasks: --ps, else one on a free port ("none": the parameter
  // server runs on the chief).
  auto pick_ps = [&]() -> std::vector<std::string> {
    if (args.str("--ps") == "none") return {};
    if (!args.str("--ps").empty()) return ps_list();
    return {"127.0.0.1:" + std::to_string(examples::free_port())};
  };
  std::vector<std::string> workers = pick_workers();
  std::vector<std::string> ps = pick_ps();
  std::string ps_text;
  for (const auto& p : ps) ps_text += (ps_text.empty() ? "" : ", ") + p;
  std::printf("cluster: chief (worker 0) %s, worker 1 %s, ps %s; async SGD, %lld steps, a checkpoint every %lld\n",
              workers[0].c_str(), workers.size() > 1 ? workers[1].c_str() : "-",
              ps.empty() ? "none (the parameter server runs on the chief)" : ps_text.c_str(), steps, every);
  if (args.has("--kill-and-resume") && args.has("--kill-ps"))
    args.fail("--kill-and-resume and --kill-ps: one at a time");
  if (args.has("--kill-ps") && ps.empty()) args.fail("--kill-ps needs a ps task (not --ps none)");
  auto children = launch(workers, ps, false, "");
  bool ok = true;
  // Waits for the chief's first periodic checkpoint (past the one written
  // at the start); false, having said why, when there is none in time.
  auto first_checkpoint = [&]() {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(deadline);
    std::optional<std::string> latest;
    while (std::chrono::steady_clock::now() < end && !children[0]->done()) {
      latest = troupe::latest_checkpoint(dir);
      if (latest && step_of(*latest) >= every) break;
      latest.reset();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (latest && !children[0]->done()) return true;
    examples::wait_all(pointers(children), std::chrono::seconds(1));
    report(children, "", workers.size());
    std::fprintf(stderr, "error: the chief %s before its first checkpoint\n",
                 children[0]->done() ? "ended" : "wrote no checkpoint in time");
    return false;
  };
  std::unique_ptr<examples::Child> killed_ps;  // --kill-ps: reported, not counted as a failure
  if (args.has("--kill-ps")) {
    if (!first_checkpoint()) return 1;
    // The ps task dies with its shard; nothing else is restarted. A new ps
    // task with the same place in the spec joins the running job.
    killed_ps = std::move(children[workers.size()]);
    killed_ps->kill_now();
    const auto latest = troupe::latest_checkpoint(dir);
    std::printf(
        "killed ps task 0 (SIGKILL) after the chief's checkpoint at step %lld; starting a new ps task: the "
        "chief rolls back to its newest checkpoint and places the shard on it\n",
        latest ? step_of(*latest) : -1LL);
    children[workers.size()] = start(workers, ps, "ps", 0, false, "new ");
  }
  if (args.has("--kill-and-resume")) {
    // Wait for the chief's first checkpoint, then kill it mid-run.
    if (!first_checkpoint()) return 1;
    children[0]->kill_now();
    std::optional<std::string> latest;
    latest = troupe::latest_checkpoint(dir);
    std::printf("killed the chief (SIGKILL) at checkpoint step %lld (%s)\n", latest ? step_of(*latest) : -1LL,
                latest ? latest->c_str() : "none");
    // The worker and the ps task lose their coordinator and stop (status 1)
    // within seconds.
    examples::wait_all(pointers(children), std::chrono::seconds(30));
    report(children, "first run: ", workers.size());
    std::printf(
        "restarting the cluster: the chief with resume = true, the worker and the ps task(s) (all rejoin, "
        "on fresh ports)\n");
    if (args.str("--workers").empty()) workers = pick_workers();  // the old ports may linger in TIME_WAIT
    if (args.str("--ps").empty()) ps = pick_ps();
    children = launch(workers, ps, true, "resumed ");
  }
  // A failed process stops the others at once: a chief whose worker died
  // would otherwise wait for it until its cluster timeout.
  const bool in_time =
      examples::wait_all(pointers(children), std::chrono::seconds(deadline), examples::OnFailure::stop_the_rest);
  if (killed_ps) {
    killed_ps->done();
    std::printf("---- killed ps 0 (exit status %d)\n", killed_ps->status);
    examples::print_prefixed("[killed ps 0] ", killed_ps->output());
  }
  report(children, args.has("--kill-and-resume") ? "resumed " : "", workers.size());
  for (auto& c : children) ok = ok && c->status == 0;
  std::filesystem::remove_all(logs);
  if (!in_time)
    std::fprintf(stderr, "error: the processes did not finish within %lld s (--deadline); killed\n", deadline);
  if (!ok || !in_time) {
    std::fprintf(stderr, "error: a process failed (see its output above)\n");
    return 1;
  }
  const auto latest = troupe::latest_checkpoint(dir);
  if (!latest) {
    std::fprintf(stderr, "error: no checkpoint in %s\n", dir.c_str());
    return 1;
  }
  const auto [w, b] = w_and_b(*troupe::load_model(*latest));
  std::printf("ps_linear_regression: final checkpoint %s: w = %.4f (target 2), b = %.4f (target 0)\n", latest->c_str(),
              w, b);
  return 0;
}
