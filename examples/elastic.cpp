// elastic: a cluster job whose membership changes while it trains, the way
// Horovod Elastic and torchft users script it: `troupe node` processes on
// localhost, one node joining at one step and another killed (kill -9) at a
// later one; the survivors never stop. Fashion-MNIST, synchronous all-reduce
// by default.
//
// What it shows:
//   - a coordinator started with --start-nodes 2 --min-nodes 1: training
//     starts with 2 nodes and goes on while at least 1 is there;
//   - `troupe node --join` at any time: the node enters at the next step
//     boundary with the job's parameters, optimizer state, step and data
//     position (view 1: 3 replicas);
//   - kill -9 of a worker: the coordinator logs the loss within a second; a
//     survivor whose all-reduce of the step in flight failed while another's
//     completed takes that one's state, and training goes on in the new
//     view (view 2: 2 replicas); no process restarts, no --resume;
//   - in sync every example of an epoch is still used exactly once (the rest
//     of the epoch is split among each new view), and the coordinator checks
//     at the end that the replicas hold the same bits;
//   - test accuracy (an evaluation every --eval-every steps) and world size
//     against time: DIR/elastic.png (gnuplot), from the coordinator's
//     --metrics CSV ("eval" and "view" rows carry `seconds` and `world`).
//
// How to run (from the build directory's parent):
//   build/examples/elastic                        # mlp, 3 epochs: about a minute on 2 busy cores
//   build/examples/elastic --short                # one epoch: seconds
//   build/examples/elastic --mode async --join-at 300 --kill-at 900 --dir runs/elastic
// The same by hand, in three terminals (the example prints these lines):
//   troupe node --listen 127.0.0.1:7000 --job job.toml --start-nodes 2 --min-nodes 1 --metrics m.csv
//   troupe node --join 127.0.0.1:7000          # at the start
//   troupe node --join 127.0.0.1:7000          # later: joins the running job
// then kill -9 one of the workers.
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "args.hpp"
#include "launch.hpp"
#include "plot.hpp"

namespace {

namespace fs = std::filesystem;

struct Row {
  std::string kind;
  long long step = 0;
  double test_accuracy = NAN, seconds = 0;
  int world = 0;
};

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

// The coordinator's --metrics CSV (columns by name from its header). A
// row being written (no newline yet) is left for the next read.
std::vector<Row> read_metrics(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::vector<Row> rows;
  std::istringstream lines(text);
  std::string line, header;
  if (!std::getline(lines, header)) return rows;
  const std::vector<std::string> names = split_csv(header);
  auto column = [&](const std::string& name) {
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return static_cast<int>(i);
    return -1;
  };
  const int kind = column("kind"), step = column("step"), acc = column("test_accuracy"), sec = column("seconds"),
            world = column("world");
  if (kind < 0 || step < 0 || acc < 0 || sec < 0 || world < 0)
    throw std::runtime_error(path + ": the metrics header lacks kind, step, test_accuracy, seconds or world");
  std::size_t consumed = header.size() + 1;
  while (std::getline(lines, line)) {
    consumed += line.size() + 1;
    if (consumed > text.size()) break;  // the last line has no newline yet
    const std::vector<std::string> cells = split_csv(line);
    if (static_cast<int>(cells.size()) < static_cast<int>(names.size())) continue;
    Row r;
    r.kind = cells[kind];
    r.step = std::atoll(cells[step].c_str());
    r.test_accuracy = cells[acc].empty() ? NAN : std::atof(cells[acc].c_str());
    r.seconds = std::atof(cells[sec].c_str());
    r.world = cells[world].empty() ? 0 : std::atoi(cells[world].c_str());
    rows.push_back(r);
  }
  return rows;
}

long long last_step(const std::vector<Row>& rows) { return rows.empty() ? 0 : rows.back().step; }

int current_world(const std::vector<Row>& rows) {
  int w = 0;
  for (const auto& r : rows)
    if (r.kind == "view") w = r.world;
  return w;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.flush()) throw std::runtime_error("writing " + path + " failed");
}

std::string default_troupe() {
  // Installed (cmake --install): this program is PREFIX/libexec/troupe/examples/elastic,
  // the binary of the same install PREFIX/bin/troupe.
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = self.parent_path() / ".." / ".." / ".." / "bin" / "troupe";
    if (self.parent_path().filename() == "examples" && self.parent_path().parent_path().filename() == "troupe" &&
        fs::exists(installed, ec))
      return installed.lexically_normal().string();
  }
#ifdef TROUPE_BINARY
  if (fs::exists(TROUPE_BINARY)) return TROUPE_BINARY;  // the build tree's
#endif
  return "troupe";  // from PATH
}

}  // namespace

int main(int argc, char** argv) {
  examples::Args args(argc, argv,
                      "elastic: a node joins a running job and another is killed later; the survivors go on. "
                      "Plots test accuracy and world size against time");
  args.option("--troupe", default_troupe(), "the troupe executable the nodes run");
  args.option("--mode", "sync", "sync, async or ssp:N");
  args.option("--model", "mlp", "zoo model (mlp, cnn)");
  args.option("--epochs", "3", "epochs");
  args.option("--batch", "32", "examples per replica and step");
  args.option("--eval-every", "100", "global steps between evaluations on the test split (the plot's points)");
  args.option("--join-at", "200", "global step after which the third node joins");
  args.option("--kill-at", "900", "global step after which the first worker is killed (kill -9)");
  args.option("--dir", "runs/elastic", "output directory (job file, logs, metrics.csv, elastic.png)");
  args.option("--seed", "0", "seed of initialisation and shuffling");
  args.option("--deadline", "900", "seconds to wait for the job before killing every node");
  args.flag("--short", "one epoch, join at step 60, kill at step 250: seconds");
  args.parse();
  const bool short_run = args.has("--short");
  if (short_run && (args.has("--epochs") || args.has("--join-at") || args.has("--kill-at")))
    args.fail("--short chooses the epochs and the join and kill steps itself; drop --epochs / --join-at / --kill-at");
  const std::string troupe = args.str("--troupe"), mode = args.str("--mode"), model = args.str("--model"),
                    dir = args.str("--dir");
  const long long epochs = short_run ? 1 : args.integer("--epochs", 1, 1000);
  const long long batch = args.integer("--batch", 1, 65536);
  const long long eval_every = short_run ? 50 : args.integer("--eval-every", 1, 1LL << 40);
  const long long join_at = short_run ? 60 : args.integer("--join-at", 1, 1LL << 40);
  const long long kill_at = short_run ? 250 : args.integer("--kill-at", 1, 1LL << 40);
  const long long seed = args.integer("--seed", 0, 1LL << 62);
  const long long deadline = args.integer("--deadline", 1, 86400);
  if (kill_at <= join_at) args.fail("--kill-at must come after --join-at");
  if (troupe.find('/') != std::string::npos && !fs::exists(troupe)) args.fail("--troupe " + troupe + ": no such file");

  try {
    fs::create_directories(dir);
    const std::string job = dir + "/job.toml", metrics = dir + "/metrics.csv";
    write_text(job, "model = \"" + model + "\"\ndata = \"fashion-mnist\"\nmode = \"" + mode +
                        "\"\nepochs = " + std::to_string(epochs) + "\nbatch = " + std::to_string(batch) +
                        "\nseed = " + std::to_string(seed) + "\neval_every = " + std::to_string(eval_every) + "\n");
    std::unique_ptr<examples::Child> coordinator, first, second;
    bool killed = false, ended = false;
    double join_time = -1, kill_time = -1;
    // On a fresh port again (at most 3 times) when another process took the
    // one picked before the coordinator could bind it (examples::lost_a_port).
    for (int attempt = 1;; ++attempt) {
      const int port = examples::free_port();
      if (port <= 0) throw std::runtime_error("no free port on 127.0.0.1");
      const std::string at = "127.0.0.1:" + std::to_string(port);
      std::printf("elastic: %s in %s; the nodes (each one CPU device):\n", model.c_str(), mode.c_str());
      const std::vector<std::string> coordinator_args{
          troupe,        "node", "--listen",  at,      "--job",     job,     "--start-nodes", "2",
          "--min-nodes", "1",    "--devices", "cpu:0", "--metrics", metrics, "--log-every",   "10"};
      const std::vector<std::string> worker_args{troupe,      "node",  "--join",           at,
                                                 "--devices", "cpu:0", "--rejoin-timeout", "0"};
      auto show = [](const std::vector<std::string>& a) {
        std::string line = " ";
        for (const auto& w : a) line += " " + w;
        std::printf("%s\n", line.c_str());
      };
      show(coordinator_args);
      show(worker_args);
      std::fflush(stdout);
      fs::remove(metrics);
      second.reset();
      killed = false;
      coordinator = std::make_unique<examples::Child>(coordinator_args, "", dir + "/coordinator.log", troupe);
      first = std::make_unique<examples::Child>(worker_args, "", dir + "/worker-1.log", troupe);
      const auto start = std::chrono::steady_clock::now();
      const auto give_up = start + std::chrono::seconds(deadline);
      auto now_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
      // The schedule: a join once the job passed --join-at, a kill -9 once it
      // passed --kill-at in the view the joiner is in.
      while (!coordinator->done()) {
        if (std::chrono::steady_clock::now() > give_up) break;
        const std::vector<Row> rows = read_metrics(metrics);
        const long long step = last_step(rows);
        if (!second && step >= join_at) {
          std::printf("step %lld: a third node joins\n", step);
          std::fflush(stdout);
          join_time = now_s();
          second = std::make_unique<examples::Child>(worker_args, "", dir + "/worker-2.log", troupe);
        } else if (second && !killed && step >= kill_at && current_world(rows) == 3) {
          std::printf("step %lld: kill -9 of worker 1 (pid %d)\n", step, static_cast<int>(first->pid));
          std::fflush(stdout);
          ::kill(first->pid, SIGKILL);
          kill_time = now_s();
          killed = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (attempt < 3 && coordinator->done() && coordinator->status != 0 &&
          examples::lost_a_port({coordinator.get()})) {
        first->kill_now();  // it would wait for a coordinator that is not there
        if (second) second->kill_now();
        std::printf(
            "another process took port %d before the coordinator bound it; again on a fresh port "
            "(attempt %d of 3)\n",
            port, attempt + 1);
        continue;
      }
      std::vector<examples::Child*> everyone{coordinator.get(), first.get()};
      if (second) everyone.push_back(second.get());
      ended = examples::wait_all(everyone, std::chrono::seconds(30));
      break;
    }
    examples::print_prefixed("coordinator| ", coordinator->output());
    if (!ended || coordinator->status != 0) {
      std::fprintf(stderr, "elastic: the coordinator %s (logs in %s)\n",
                   ended ? ("exited with status " + std::to_string(coordinator->status)).c_str()
                         : "did not end within --deadline",
                   dir.c_str());
      return 1;
    }
    if (!second || !killed) {
      std::fprintf(stderr,
                   "elastic: the job ended before step %lld (join) or %lld (kill): lower --join-at / --kill-at\n",
                   join_at, kill_at);
      return 1;
    }

    // The plot's data: test accuracy at each evaluation and the world size
    // at each view, against the coordinator's wall time.
    const std::vector<Row> rows = read_metrics(metrics);
    std::ostringstream acc, world, table;
    int views = 0, last_world = 0;
    std::string worlds;
    for (const auto& r : rows) {
      if (r.kind == "eval" && !std::isnan(r.test_accuracy))
        acc << r.seconds << ' ' << r.test_accuracy << ' ' << r.step << '\n';
      if (r.kind == "view") {
        if (views > 0) world << r.seconds << ' ' << last_world << '\n';  // a step, not a slope
        world << r.seconds << ' ' << r.world << '\n';
        worlds += (worlds.empty() ? "" : " -> ") + std::to_string(r.world);
        last_world = r.world;
        ++views;
        table << "  " << r.seconds << " s, step " << r.step << ": " << r.world << " replica(s)\n";
      }
    }
    if (!rows.empty()) world << rows.back().seconds << ' ' << last_world << '\n';
    write_text(dir + "/accuracy.dat", acc.str());
    write_text(dir + "/world.dat", world.str());
    const std::string png = dir + "/elastic.png", script = dir + "/elastic.gp";
    std::ostringstream gp;
    char title[200];
    std::snprintf(title, sizeof title, "troupe elastic (%s, %s): a node joins at %.1f s, one is killed at %.1f s",
                  model.c_str(), mode.c_str(), join_time, kill_time);
    gp << "set terminal pngcairo size 900,500\nset output '" << png << "'\n"
       << "set title '" << title << "'\n"
       << "set xlabel 'seconds'\nset ylabel 'test accuracy'\nset y2label 'replicas'\n"
       << "set y2range [0:4]\nset y2tics 1\nset ytics nomirror\nset key bottom right\nset grid\n"
       << "plot '" << dir << "/accuracy.dat' using 1:2 with linespoints title 'test accuracy', '" << dir
       << "/world.dat' using 1:2 axes x1y2 with lines linewidth 2 title 'world size'\n";
    write_text(script, gp.str());
    std::printf("\nviews (world size %s):\n%s", worlds.c_str(), table.str().c_str());
    double final_accuracy = NAN;
    for (const auto& r : rows)
      if (r.kind == "eval") final_accuracy = r.test_accuracy;
    std::printf("final test accuracy %.4f\n", final_accuracy);
    switch (examples::render_plot(script)) {
      case examples::Plot::drawn:
        std::printf("plot: %s\n", png.c_str());
        break;
      case examples::Plot::no_gnuplot:
        std::printf("gnuplot is not installed: no plot (install gnuplot-nox, then run `gnuplot %s`)\n", script.c_str());
        break;
      case examples::Plot::failed:
        throw std::runtime_error("gnuplot failed on " + script);
    }
    std::printf("second worker exited %d, the killed one %d\n", second->status, first->status);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic: %s\n", e.what());
    return 1;
  }
}
