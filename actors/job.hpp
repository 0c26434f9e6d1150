// Job: one training job on the devices of this host, run by a troupe of
// actors (the single-host runtime of DESIGN.md).
//
//   coordinator ── grants steps, runs evaluation / checkpoints / switches
//     │ grant, step_done
//   device 0 ... device W-1   (detached: each computes on its own thread)
//     │ next_batch               │ push (async, ssp)      ║ all-reduce (sync)
//   data loader 0 ... W-1      reducer (parameter server)  ║ net::Collective "local"
//
// run() blocks until the job completes, fails or is stopped. The control
// functions are thread-safe and may be called while run() is in progress
// (the HTTP control endpoint and signal handlers call them).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/coordinator.hpp"
#include "actors/mode.hpp"
#include "models/trainer.hpp"

namespace caf {
class actor_system;
}

namespace troupe::actors {

struct JobConfig {
  models::TrainConfig train;           // model, data, epochs, per-replica batch, optimizer, ...
  std::vector<kernels::Device> devices;
  Mode mode;
  std::vector<ScheduledSwitch> switches;
  int prefetch = 2;                    // batches each data loader keeps ready
  int threads_per_device = 1;
  std::chrono::milliseconds timeout{60000};  // any single wait between actors
  bool collect_replica_parameters = false;   // fill JobResult-side copies (tests)
};

// The devices troupe uses when none are named: every GPU when there are
// any, otherwise two CPU devices on a machine with at least two cores.
std::vector<kernels::Device> default_devices();
// "cpu:0,cpu:1" -> devices. Throws std::invalid_argument naming the item.
std::vector<kernels::Device> parse_devices(const std::string& text);

class Job {
 public:
  // Loads the data, builds the model once to validate it, checks the
  // checkpoint directory: configuration errors surface here.
  explicit Job(JobConfig config);
  ~Job();

  JobResult run(const models::Callbacks& callbacks = {});

  std::string status();                              // JSON
  ControlReply request_mode(const std::string& mode);
  ControlReply request_checkpoint();
  ControlReply request_stop();

  // Each replica's parameters at the end of run() (collect_replica_parameters).
  const std::vector<std::vector<float>>& replica_parameters() const { return replica_parameters_; }
  const JobConfig& config() const { return config_; }
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const models::ModelSpec& spec() const { return spec_; }

 private:
  // A control request from another thread. run()'s own thread forwards it
  // to the coordinator, so no CAF actor is ever created on a foreign thread.
  struct ControlRequest {
    enum class Kind { status, mode, checkpoint, stop } kind;
    std::string argument;
    std::promise<ControlReply> reply;
  };
  ControlReply ask(ControlRequest::Kind kind, const std::string& argument, ControlReply fallback);

  JobConfig config_;
  data::Splits data_;
  models::ModelSpec spec_;
  std::int64_t parameter_count_ = 0;
  std::int64_t batches_per_epoch_ = 0;
  std::shared_ptr<checkpoint::Directory> checkpoints_;
  std::vector<std::vector<float>> replica_parameters_;

  std::mutex control_mutex_;
  bool running_ = false;
  std::deque<std::shared_ptr<ControlRequest>> control_requests_;
};

}  // namespace troupe::actors
