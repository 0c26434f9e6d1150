// A `troupe node` cluster on loopback for the multi-process tests: a
// coordinator and workers, each one CPU device, as separate processes.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/cluster/process.hpp"
#include "tests/support/ports.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;
using testing::Process;

std::string temp_dir(const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / ("troupe-node-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// Waits until the coordinator logged a step of epoch 1 at or beyond `step`
// (async logs whichever global steps its --log-every mark falls between,
// so not necessarily `step` itself).
inline bool wait_for_step(const Process& p, int step, std::chrono::milliseconds limit) {
  const std::regex line(R"(epoch 1 step (\d+)/)");
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string out = p.output();
    for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it)
      if (std::stoi((*it)[1]) >= step) return true;
    if (out.find("epoch 2 step") != std::string::npos) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// Waits until `p` has logged `text` (true), or `limit` passed.
inline bool wait_for_text(const Process& p, const std::string& text, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (p.output().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// "modes: ... | S synchronous steps, P gradients pushed, A applied by the server"
struct Accounting {
  long long sync = -1, pushed = -1, applied = -1, steps = -1;
  double accuracy = -1;
};
inline Accounting accounting(const std::string& out) {
  Accounting a;
  std::smatch m;
  if (std::regex_search(out, m, std::regex(R"((\d+) synchronous steps, (\d+) gradients pushed, (\d+) applied)"))) {
    a.sync = std::stoll(m[1]);
    a.pushed = std::stoll(m[2]);
    a.applied = std::stoll(m[3]);
  }
  if (std::regex_search(out, m, std::regex(R"(test accuracy ([0-9.]+) .*\((\d+) steps)"))) {
    a.accuracy = std::stod(m[1]);
    a.steps = std::stoll(m[2]);
  }
  return a;
}

// A coordinator and workers, each one CPU device, on loopback.
struct Cluster {
  std::string dir, address, job;
  std::unique_ptr<Process> coordinator;
  std::vector<std::unique_ptr<Process>> workers;

  Cluster(const std::string& name, const std::string& job_text, int workers_count,
          std::vector<std::string> coordinator_args = {}, std::vector<std::string> env = {}, int min_nodes = 0)
      : dir(temp_dir(name)), address("127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port())) {
    job = write_file(dir, "job.toml", job_text);
    std::vector<std::string> args{
        TROUPE_BINARY, "node",  "--listen",    address,
        "--job",       job,     "--min-nodes", std::to_string(min_nodes ? min_nodes : workers_count + 1),
        "--devices",   "cpu:0", "--log-every", "20",
        "--timeout",   "30"};
    // A test's own --wait-timeout replaces the default (an option given twice is refused).
    if (std::find(coordinator_args.begin(), coordinator_args.end(), "--wait-timeout") == coordinator_args.end())
      coordinator_args.insert(coordinator_args.end(), {"--wait-timeout", "120"});
    for (auto& a : coordinator_args) args.push_back(a);
    coordinator = std::make_unique<Process>(args, dir + "/coordinator.log", env);
    for (int w = 0; w < workers_count; ++w) add_worker(env);
  }
  Process& add_worker(std::vector<std::string> env = {}, std::vector<std::string> extra = {}) {
    // --rejoin-timeout 0: these tests look at how nodes end; rejoining a
    // restarted coordinator has its own test (NodeResume).
    std::vector<std::string> args{TROUPE_BINARY, "node", "--join",           address, "--devices", "cpu:0",
                                  "--timeout",   "30",   "--rejoin-timeout", "0"};
    for (auto& a : extra) args.push_back(a);
    workers.push_back(
        std::make_unique<Process>(args, dir + "/worker" + std::to_string(workers.size() + 1) + ".log", env));
    return *workers.back();
  }
  // Every process's exit status, in order coordinator, workers.
  std::vector<int> wait_all(std::chrono::milliseconds limit) {
    std::vector<int> out{coordinator->wait_for(limit)};
    for (auto& w : workers) out.push_back(w->wait_for(10s));
    return out;
  }
  std::string logs() const {
    std::string out = "--- coordinator:\n" + coordinator->output();
    for (std::size_t w = 0; w < workers.size(); ++w)
      out += "--- worker " + std::to_string(w + 1) + ":\n" + workers[w]->output();
    return out;
  }
};

}  // namespace
}  // namespace troupe
