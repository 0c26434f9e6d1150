// mode_switch_experiment: the same job in four update modes, on the same
// devices, data order and initial parameters:
//
//   sync                   MirroredStrategy: all-reduce, one update per global batch
//   async                  ParameterServerStrategy("async"): one update per replica batch
//   ssp:2                  ParameterServerStrategy("ssp:2"): async, at most 2 steps ahead
//   sync->async->sync      MirroredStrategy with planned switches (FitConfig::switches)
//
// Each run evaluates on the whole test split every --eval-every global steps
// (FitConfig::eval_every, Callback::on_evaluate) and at epoch ends, and
// writes DIR/<run>.csv: mode, wall time since fit() began (evaluations
// included), training time (evaluations excluded), global step, examples
// trained on, epoch, last batch loss, test loss, test accuracy. Then it plots
// test accuracy against training time for all runs (DIR/accuracy.png, with
// gnuplot; without gnuplot it says so and still writes the CSVs and table)
// and TensorBoard event files of every run (DIR/tensorboard/<run>/)
// and prints a table: training time, wall time, steps and examples to reach
// the --threshold test accuracy (at the first evaluation at or above it, so
// the resolution is --eval-every steps), final accuracy, samples/s.
//
// Reading the table: a global step is one update. In sync an update uses a
// global batch (batch x replicas); in async / ssp each replica's batch is an
// update of its own, so async takes about `replicas` times as many steps per
// epoch: compare runs by time and by examples, not by steps.
//
// How to run:
//   build/examples/mode_switch_experiment                        # cnn, 3 epochs, 2 CPU devices: 10-20 min on 2 busy
//   cores build/examples/mode_switch_experiment --short                # mlp on a 4096-example subset: seconds
//   build/examples/mode_switch_experiment --model mlp --epochs 5 --eval-every 50 --dir runs/modes
// The switched run goes sync -> async at --switch-async and back to sync at
// --switch-sync (global steps; defaults: a third and two thirds of the
// run's examples). A running job can also be switched by hand, from another
// thread, with Strategy::switch_mode("async") (or `troupe ctl mode async`).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <troupe/troupe.hpp>

#include "args.hpp"
#include "plot.hpp"

namespace {

struct Point {
  std::string mode;
  double wall_s = 0, train_s = 0;
  std::int64_t step = 0, examples = 0, epoch = 0;
  double train_loss = 0, test_loss = 0, test_accuracy = 0;
};

struct Run {
  std::string name, file;      // "sync->async->sync", "sync_async_sync"
  std::string mode, switches;  // the strategy's mode and the planned switches
  std::vector<Point> points;
  troupe::History history;
};

// Examples trained on after `step` global steps: a sync step is a global
// batch, an async / ssp step one replica's batch.
std::int64_t examples_at(std::int64_t step, const std::string& mode, std::int64_t switch_async,
                         std::int64_t switch_sync, bool switched, std::int64_t batch, int replicas) {
  const std::int64_t global = batch * replicas;
  if (!switched) return step * (mode == "sync" ? global : batch);
  if (step <= switch_async) return step * global;
  if (step <= switch_sync) return switch_async * global + (step - switch_async) * batch;
  return switch_async * global + (switch_sync - switch_async) * batch + (step - switch_sync) * global;
}

std::string mode_at(std::int64_t step, const Run& run, std::int64_t switch_async, std::int64_t switch_sync) {
  if (run.switches.empty()) return run.mode;
  return step <= switch_async  ? "sync"
         : step <= switch_sync ? "async"
                               : "sync";  // an evaluation at a switch step precedes the switch
}

// Records every evaluation (and the last batch loss before it).
class Recorder : public troupe::Callback {
 public:
  Recorder(Run& run, std::int64_t switch_async, std::int64_t switch_sync, std::int64_t batch, int replicas)
      : run_(run), sa_(switch_async), ss_(switch_sync), batch_(batch), replicas_(replicas) {}
  void on_train_begin() override { t0_ = std::chrono::steady_clock::now(); }
  void on_step_end(const troupe::StepLogs& l) override { last_loss_ = l.loss; }
  void on_evaluate(const troupe::EpochResult& r) override {
    Point p;
    p.mode = mode_at(r.step, run_, sa_, ss_);
    p.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    p.train_s = r.seconds;
    p.step = r.step;
    p.examples = examples_at(r.step, run_.mode, sa_, ss_, !run_.switches.empty(), batch_, replicas_);
    p.epoch = r.epoch;
    p.train_loss = last_loss_;
    p.test_loss = r.test_loss;
    p.test_accuracy = r.test_accuracy;
    run_.points.push_back(p);
    std::fprintf(stderr, "  [%s] step %lld  %.1f s  test accuracy %.4f\n", run_.name.c_str(),
                 static_cast<long long>(p.step), p.train_s, p.test_accuracy);
  }

 private:
  Run& run_;
  std::int64_t sa_, ss_, batch_;
  int replicas_;
  double last_loss_ = 0;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

void write_csv(const Run& run, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw std::runtime_error("cannot create " + path);
  out << "run,mode,wall_s,train_s,step,examples,epoch,train_loss,test_loss,test_accuracy\n";
  for (const auto& p : run.points)
    out << run.name << ',' << p.mode << ',' << p.wall_s << ',' << p.train_s << ',' << p.step << ',' << p.examples << ','
        << p.epoch << ',' << p.train_loss << ',' << p.test_loss << ',' << p.test_accuracy << '\n';
  if (!out.flush()) throw std::runtime_error("writing " + path + " failed");
}

}  // namespace

int main(int argc, char** argv) {
  examples::Args args(argc, argv,
                      "mode_switch_experiment: one job in sync, async, ssp:2 and sync->async->sync; CSVs, an "
                      "accuracy-against-time plot and a table");
  args.option("--devices", "cpu:0,cpu:1", "devices (one kind)");
  args.option("--model", "cnn", "zoo model: mlp or cnn");
  args.option("--epochs", "3", "epochs of every run");
  args.option("--batch", "64", "examples per replica and step");
  args.option("--eval-every", "100", "global steps between evaluations on the whole test split");
  args.option("--threshold", "0.85", "the test accuracy whose time to reach the table reports");
  args.option("--switch-async", "0", "switched run: global step of sync -> async (0: a third of the examples)");
  args.option("--switch-sync", "0", "switched run: global step of async -> sync (0: two thirds of the examples)");
  args.option("--dir", "runs/mode_switch_experiment", "output directory (CSVs, accuracy.png, table.md)");
  args.option("--seed", "0", "seed of initialisation and shuffling (the same for every run)");
  args.flag("--short", "the mlp on a 4096-example subset, 2 epochs: runs in seconds");
  args.parse();
  const bool short_run = args.has("--short");
  if (short_run && (args.has("--epochs") || args.has("--model")))
    args.fail("--short chooses the model and epochs itself; drop --model / --epochs");
  long long epochs = args.integer("--epochs", 1, 1000);
  const long long batch = args.integer("--batch", 1, 65536);
  long long eval_every = args.integer("--eval-every", 1, 1LL << 40);
  const double threshold = args.real("--threshold", 0.0, 1.0);
  long long switch_async = args.integer("--switch-async", 0, 1LL << 40);
  long long switch_sync = args.integer("--switch-sync", 0, 1LL << 40);
  const long long seed = args.integer("--seed", 0, 1LL << 62);
  std::string model = args.str("--model");
  if (model != "mlp" && model != "cnn") args.fail("--model must be mlp or cnn, got '" + model + "'");
  const std::string dir = args.str("--dir");
  if (dir.empty()) args.fail("--dir must not be empty");
  std::vector<troupe::Device> devices;
  try {
    devices = troupe::parse_devices(args.str("--devices"));
  } catch (const std::exception& e) {
    args.fail(e.what());
  }
  if (devices.size() < 2) args.fail("--devices: the modes differ only with at least 2 replicas");

  try {
    std::filesystem::create_directories(dir);
    std::string data = "fashion-mnist";
    if (short_run) {
      data = troupe::write_idx_subset(troupe::load_data("fashion-mnist"), dir + "/subset", 4096, 1000);
      model = "mlp";
      epochs = 2;
      if (!args.has("--eval-every")) eval_every = 8;
    }
    const int replicas = static_cast<int>(devices.size());
    const std::int64_t train_examples = troupe::load_data(data).train.size();
    const std::int64_t sync_steps_per_epoch = train_examples / (batch * replicas);
    const std::int64_t sync_steps = sync_steps_per_epoch * epochs;
    if (sync_steps < 3) args.fail("too few steps: " + std::to_string(sync_steps) + " synchronous steps in all");
    // Defaults: sync for the first third of the examples, async (twice the
    // steps per example with 2 replicas) for the second, sync after.
    if (switch_async == 0) switch_async = sync_steps / 3;
    if (switch_sync == 0) switch_sync = switch_async + (sync_steps / 3) * replicas;
    if (switch_sync <= switch_async)
      args.fail("--switch-sync (" + std::to_string(switch_sync) + ") must come after --switch-async (" +
                std::to_string(switch_async) + ")");

    std::vector<Run> runs = {
        {"sync", "sync", "sync", "", {}, {}},
        {"async", "async", "async", "", {}, {}},
        {"ssp:2", "ssp2", "ssp:2", "", {}, {}},
        {"sync->async->sync",
         "sync_async_sync",
         "sync",
         std::to_string(switch_async) + ":async," + std::to_string(switch_sync) + ":sync",
         {},
         {}},
    };
    std::printf("mode_switch_experiment: %s on %s (%lld training examples), %lld epochs, batch %lld per replica on",
                model.c_str(), short_run ? "a Fashion-MNIST subset" : "Fashion-MNIST",
                static_cast<long long>(train_examples), epochs, batch);
    for (const auto& d : devices) std::printf(" %s", d.str().c_str());
    std::printf("; evaluation every %lld steps; switched run: %s\n", eval_every, runs[3].switches.c_str());
    std::fflush(stdout);

    for (auto& run : runs) {
      std::unique_ptr<troupe::Strategy> strategy;
      if (run.mode == "sync")
        strategy = std::make_unique<troupe::MirroredStrategy>(devices);
      else
        strategy = std::make_unique<troupe::ParameterServerStrategy>(run.mode, devices);
      troupe::FitConfig config;
      config.model = model;
      config.data = data;
      config.epochs = epochs;
      config.batch = batch;
      config.seed = static_cast<std::uint64_t>(seed);
      config.eval_every = eval_every;
      config.switches = run.switches;
      std::fprintf(stderr, "run %s%s%s\n", run.name.c_str(), run.switches.empty() ? "" : ": switches ",
                   run.switches.c_str());
      auto recorder = std::make_shared<Recorder>(run, switch_async, switch_sync, batch, replicas);
      // TensorBoard's view of the same run: DIR/tensorboard/<run>/
      // (tensorboard --logdir DIR/tensorboard; scripts/tensorboard_plot.py
      // draws it without TensorBoard).
      std::filesystem::remove_all(dir + "/tensorboard/" + run.file);  // one event file per run, this one's
      auto tensorboard = std::make_shared<troupe::TensorBoard>(dir + "/tensorboard/" + run.file, eval_every);
      run.history = strategy->fit(config, {recorder, tensorboard});
      write_csv(run, dir + "/" + run.file + ".csv");
    }

    // The table.
    std::ostringstream table;
    char line[512];
    std::snprintf(
        line, sizeof line,
        "| run | time to %.0f%% (training s) | wall s | steps | examples | final accuracy | samples/s | modes |\n",
        threshold * 100);
    table << line << "|---|---|---|---|---|---|---|---|\n";
    for (const auto& run : runs) {
      const Point* hit = nullptr;
      for (const auto& p : run.points)
        if (p.test_accuracy >= threshold) {
          hit = &p;
          break;
        }
      std::string history;
      for (const auto& h : run.history.mode_history) history += (history.empty() ? "" : ", ") + h;
      if (hit)
        std::snprintf(line, sizeof line, "| %s | %.1f | %.1f | %lld | %lld | %.4f | %.0f | %s |\n", run.name.c_str(),
                      hit->train_s, hit->wall_s, static_cast<long long>(hit->step),
                      static_cast<long long>(hit->examples), run.history.final.test_accuracy, run.history.samples_per_s,
                      history.c_str());
      else
        std::snprintf(line, sizeof line, "| %s | not reached | - | - | - | %.4f | %.0f | %s |\n", run.name.c_str(),
                      run.history.final.test_accuracy, run.history.samples_per_s, history.c_str());
      table << line;
    }
    std::printf("\n%s", table.str().c_str());
    {
      std::ofstream out(dir + "/table.md", std::ios::trunc);
      out << table.str();
    }

    // The plot.
    const std::string script = dir + "/accuracy.gp", png = dir + "/accuracy.png";
    {
      std::ofstream gp(script, std::ios::trunc);
      gp << "set terminal pngcairo size 1000,600 noenhanced\n"
         << "set output '" << png << "'\n"
         << "set datafile separator ','\n"
         << "set key bottom right\n"
         << "set grid\n"
         << "set title 'Test accuracy against training time: " << model << ", " << replicas << " replicas, batch "
         << batch << " per replica'\n"
         << "set xlabel 'training time, s (evaluations excluded)'\n"
         << "set ylabel 'test accuracy'\n"
         << "set yrange [" << (short_run ? 0.5 : 0.75) << ":*]\n"
         << "plot ";
      for (std::size_t i = 0; i < runs.size(); ++i)
        gp << (i ? ", " : "") << "'" << dir << "/" << runs[i].file << ".csv' skip 1 using 4:10 with linespoints title '"
           << runs[i].name << "'";
      gp << ", " << threshold << " with lines dashtype 2 linecolor 'gray' title '" << threshold << "'\n";
    }
    switch (examples::render_plot(script)) {
      case examples::Plot::drawn:
        std::printf("\nplot: %s\n", png.c_str());
        break;
      case examples::Plot::no_gnuplot:
        std::printf(
            "\ngnuplot is not installed: no plot (install gnuplot-nox, e.g. scripts/setup.sh, then run "
            "`gnuplot %s`). CSVs: %s/*.csv\n",
            script.c_str(), dir.c_str());
        break;
      case examples::Plot::failed:
        std::printf("\ngnuplot failed on %s: no plot; CSVs: %s/*.csv\n", script.c_str(), dir.c_str());
        break;
    }
    std::printf("CSVs: %s/{sync,async,ssp2,sync_async_sync}.csv; table: %s/table.md\n", dir.c_str(), dir.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
