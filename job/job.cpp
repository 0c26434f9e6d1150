#include "job/job.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <thread>

#include "actors/coordinator/resume.hpp"
#include "actors/data_loader.hpp"
#include "actors/device.hpp"
#include "actors/ps/parameter_server.hpp"
#include "job/collective_choice.hpp"
#include "job/job_run.hpp"
#include "job/replica.hpp"
#include "kernels/registry.hpp"
#include "models/warm_up.hpp"
#include "net/collective/nccl.hpp"
#include "net/control/address.hpp"

namespace troupe::actors {

// How long a control request (a mode switch, a checkpoint: answered at the
// next step boundary) may wait for the coordinator's answer.
constexpr int kControlAnswerSeconds = 10;

std::vector<kernels::Device> default_devices() {
  return default_devices_for(kernels::cuda_device_count(), std::thread::hardware_concurrency());
}

std::vector<kernels::Device> parse_devices(const std::string& text) {
  std::vector<kernels::Device> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    kernels::Device d = kernels::Device::parse(item);
    // A GPU named again is another logical replica on it (the local backend
    // sums them on the GPU); CPU devices are logical already: name cpu:0,cpu:1.
    if (d.is_cpu())
      for (const auto& seen : out)
        if (seen == d)
          throw std::invalid_argument("--devices names " + d.str() +
                                      " twice; CPU replicas are numbered (cpu:0,cpu:1), only a GPU may be repeated "
                                      "(cuda:0,cuda:0: two logical replicas on one GPU)");
    out.push_back(d);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Job::Job(JobConfig config) : config_(std::move(config)) {
  auto& t = config_.train;
  if (config_.devices.empty()) config_.devices = default_devices();
  if (t.epochs < 1) throw std::invalid_argument("--epochs must be at least 1");
  if (t.batch < 1) throw std::invalid_argument("--batch must be at least 1");
  if (config_.prefetch < 1) throw std::invalid_argument("--prefetch must be at least 1");
  if (config_.threads_per_device < 1) throw std::invalid_argument("--threads-per-device must be at least 1");
  // Which backend reduces the replicas (collective_choice.hpp); refuses
  // mixed CPU and GPU devices, whatever this machine has.
  collective_choice_ = choose_collective(config_.devices, net::nccl_built());
  int cpu_devices = 0;
  for (const auto& d : config_.devices) {
    cpu_devices += d.is_cpu();
    if (d.is_cuda() && d.index >= kernels::cuda_device_count())
      throw std::invalid_argument("--devices: " + d.str() + " requested, but this machine has " +
                                  std::to_string(kernels::cuda_device_count()) + " CUDA device(s)");
  }
  // A program linked without troupe_backends (the object library whose
  // static initialiser registers the fast kernels) would fall back to the
  // reference kernels, which are orders of magnitude slower: a cnn epoch
  // takes hours and fit() looks hung. Say so at once instead; the reference
  // kernels stay available on purpose through TROUPE_CPU_BACKEND=ref.
  const char* cpu_choice = std::getenv("TROUPE_CPU_BACKEND");
  const auto registered = kernels::Registry::instance().names();
  const bool have_cpu = std::find(registered.begin(), registered.end(), "cpu") != registered.end();
  for (const auto& d : config_.devices) {
    try {
      kernels::Registry::instance().for_device(d);
    } catch (const std::exception& e) {
      throw std::runtime_error("no compute backend for " + d.str() + " (" + e.what() +
                               "); a program using troupe must link troupe_backends, the object library that "
                               "registers them");
    }
    if (d.is_cpu() && !have_cpu && !(cpu_choice && *cpu_choice))
      throw std::runtime_error("no fast CPU backend is registered for " + d.str() +
                               ": link troupe_backends (the object library that registers the cpu and cuda "
                               "kernels) into the program, or set TROUPE_CPU_BACKEND=ref to train on the slow "
                               "reference kernels deliberately");
  }
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores > 0 && unsigned(cpu_devices * config_.threads_per_device) > cores)
    std::fprintf(stderr,
                 "warning: %d CPU device(s) x %d thread(s) on a machine with %u cores; "
                 "they will compete for the cores\n",
                 cpu_devices, config_.threads_per_device, cores);
  data_ = data::load_dataset(t.data, t.data_options);
  spec_ = models::training_model(t, data_.train);  // names the model and the data, before any step
  data::Augmentation::parse(t.augment).check_images(data_.train.feature_shape(), data_.train.features.dtype());
  if (models::parse_precision(t.precision) == kernels::ops::MatmulPrecision::fp16) {
    // The loss scale is decided on the all-reduced gradient, which only sync
    // has; an async worker's own scale is not built (models/loss_scale.hpp).
    bool async_somewhere = config_.mode.kind != actors::Mode::Kind::sync;
    for (const auto& sw : config_.switches) async_somewhere |= sw.mode.kind != actors::Mode::Kind::sync;
    if (async_somewhere)
      throw std::invalid_argument(
          "--precision fp16 trains in sync mode only (its dynamic loss scale is decided on the all-reduced "
          "gradient); for async or ssp use --precision bf16, which needs no loss scaling");
  }
  {
    models::Model probe(spec_, kernels::Device::cpu());  // validates the spec against the data
    parameter_count_ = probe.parameter_count();
    decayed_ = probe.decayed_ranges();
    state_count_ = probe.state_count();
    // The parameter server's shards (async, ssp): whole layers round-robin,
    // big ones split. Shards that would own nothing are not run.
    std::vector<ps::Range> layers;
    for (const auto& [offset, count] : probe.layer_ranges()) layers.push_back({offset, count});
    const ps::Partition all = ps::Partition::make(parameter_count_, layers, config_.ps_shards, config_.ps_split_above);
    partition_ = std::make_shared<const ps::Partition>(all.without_empty_shards());
    if (partition_->shards() < config_.ps_shards)
      std::fprintf(stderr,
                   "note: ps_shards = %d, but model %s has parts for %d (layers of at most %lld floats stay "
                   "whole); running %d\n",
                   config_.ps_shards, spec_.name.c_str(), partition_->shards(),
                   static_cast<long long>(config_.ps_split_above), partition_->shards());
  }
  models::make_optimizer(t.optimizer, Tensor::zeros({1}), {});  // validates the optimizer name
  data::PlanOptions plan{data_.train.size(), t.batch, t.shuffle, t.seed, t.drop_remainder};
  batches_per_epoch_ = data::batches_per_epoch(plan, {0, static_cast<int>(config_.devices.size())});
  if (batches_per_epoch_ < 1)
    throw std::invalid_argument("dataset " + t.data + " has " + std::to_string(data_.train.size()) +
                                " training examples, fewer than one global batch of " +
                                std::to_string(t.batch * static_cast<std::int64_t>(config_.devices.size())));
  // Warm-up epochs and a cosine to the end become steps of this job's
  // epochs (what the checkpoints and a cluster's job text then carry), in
  // global steps of the mode the job starts in: a synchronous step is one
  // global batch, but in async and ssp every replica's push is a global
  // step: an epoch has each replica's batches times the replicas (it had
  // one replica's, on two, and a cosine over 5 epochs reached 0 in the
  // third). A cluster's world is known once its nodes joined: n / batch,
  // which that product approaches whatever the world. A switch later
  // trains on at that rate.
  const auto world = static_cast<std::int64_t>(config_.devices.size());
  const std::int64_t schedule_steps_per_epoch = !config_.mode.uses_server() ? batches_per_epoch_
                                                : config_.cluster           ? data::batches_per_epoch(plan, {0, 1})
                                                                            : batches_per_epoch_ * world;
  models::resolve_training_length(t, schedule_steps_per_epoch);
  models::LrSchedule(t.schedule, t.lr, t.warmup_steps);  // validates the schedule
  if (t.resume && t.checkpoint_dir.empty()) throw std::invalid_argument("--resume needs --checkpoint-dir");
  if (!t.checkpoint_dir.empty()) checkpoints_ = std::make_shared<checkpoint::Directory>(t.checkpoint_dir, t.keep_last);
}

Job::~Job() = default;

// The job on a thread of its own, so that its actor system's shutdown has a
// deadline (run_with_bounded_shutdown, job/replica.hpp).
JobResult Job::run(const models::Callbacks& callbacks) {
  JobResult result;
  run_with_bounded_shutdown([&](ActorSystemSlot& slot) { result = run_here(callbacks, slot); });
  return result;
}

JobResult Job::run_here(const models::Callbacks& callbacks, ActorSystemSlot& slot) {
  const auto& t = config_.train;
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    starting_ = true;
  }
  // Every way out of run() (a result, an error before training, a finished
  // job) answers the control requests still waiting.
  struct CloseControl {
    Job* job;
    ~CloseControl() { job->close_control("the job has finished"); }
  } close_control_on_exit{this};

  // Resume: the newest checkpoint that verifies (older ones when the
  // newest is damaged), its state, position and every replica's clock.
  std::optional<checkpoint::State> resumed;
  std::string resumed_path;
  if (t.resume && checkpoints_) {
    if (auto found = models::find_resume_checkpoint(*checkpoints_, t.resume_or_start)) {
      models::check_resumable(found->state, found->path, spec_, parameter_count_, t.optimizer.name, t.seed);
      if (static_cast<std::int64_t>(found->state.model_state.size()) != state_count_)
        throw checkpoint::CheckpointError(found->path, "holds " + std::to_string(found->state.model_state.size()) +
                                                           " values of model state (running statistics), but model '" +
                                                           spec_.name + "' keeps " + std::to_string(state_count_));
      resumed = std::move(found->state);
      resumed_path = found->path;
    }
  }
  Position start;
  if (resumed) {
    start.global_step = static_cast<std::int64_t>(resumed->position.global_step);
    start.epoch = static_cast<std::int64_t>(resumed->position.epoch);
    if (models::training_finished(t, start.epoch, start.global_step)) {
      // Nothing to train: say so instead of running a negative step count.
      JobResult done;
      done.already_finished = true;
      done.steps = start.global_step;
      done.resumed_from = resumed_path;
      return done;
    }
  }

  // Destroyed after run_here returns, on this thread, with a deadline.
  caf::actor_system& system = slot.create([&](caf::actor_system_config& cfg) {
    configure_actor_system(cfg);
    if (config_.cluster) config_.cluster->configure(cfg);
  });
  // The run's actors and state (job_run.hpp); gone before the system.
  JobRun run(*this, callbacks, system, std::move(resumed), std::move(resumed_path), start);
  return run.run();
}

// From now on a control request goes straight to the front; those that
// came while the job started go now, in their order.
void Job::open_control(caf::actor_system& system, const coordinator_actor_t& coordinator, const caf::actor& listener) {
  control_front_t front =
      spawn_control_front(system, coordinator, listener, std::chrono::seconds(kControlAnswerSeconds));
  std::lock_guard<std::mutex> lock(control_mutex_);
  running_ = true;
  control_front_ = front;
  for (auto& r : control_requests_) caf::anon_send(front, r);
  control_requests_.clear();
}

void Job::close_control(const std::string& why) {
  std::deque<ControlRequestPtr> pending;
  control_front_t front;
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    starting_ = running_ = false;
    pending.swap(control_requests_);
    std::swap(front, control_front_);
  }
  for (auto& r : pending) r->answer(ControlReply{409, why});
  // The front answers the requests it still holds as it exits.
  if (front) caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
}

ControlReply Job::ask(ControlRequest::Kind kind, const std::string& argument, ControlReply fallback, Wait wait) {
  auto request = std::make_shared<ControlRequest>(kind, argument, wait);
  std::future<ControlReply> reply = request->reply();
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    if (!running_ && starting_ && kind == ControlRequest::Kind::status)
      return ControlReply{200, "{\"state\":\"starting\"}"};
    if (!running_ && !starting_) return fallback;
    // Under the lock, so that the front cannot exit in between
    // (close_control takes it first).
    if (running_)
      caf::anon_send(control_front_, request);
    else
      control_requests_.push_back(request);
  }
  // The front (or close_control) holds it now: should the front exit before
  // it reads the request, the request dies unanswered, and the broken
  // promise ends this wait at once.
  request.reset();
  // A switch or a checkpoint waits for the next step boundary, for at most
  // kControlAnswerSeconds (the front then answers 504 itself; this wait is
  // a last resort).
  if (reply.wait_for(std::chrono::seconds(kControlAnswerSeconds + 5)) != std::future_status::ready) return fallback;
  try {
    return reply.get();
  } catch (const std::future_error&) {  // dropped unanswered: the job ended meanwhile
    return fallback;
  }
}

std::string Job::status() {
  ControlReply r = ask(ControlRequest::Kind::status, "", ControlReply{503, "{\"state\":\"not running\"}"});
  return r.message;
}

ControlReply Job::request_mode(const std::string& mode, Wait wait) {
  return ask(ControlRequest::Kind::mode, mode,
             ControlReply{409, "the job is not running, or the switch is still pending"}, wait);
}

ControlReply Job::request_checkpoint(Wait wait) {
  return ask(ControlRequest::Kind::checkpoint, "",
             ControlReply{409, "the job is not running, or the checkpoint is still pending"}, wait);
}

ControlReply Job::request_drain(const std::string& node) {
  return ask(ControlRequest::Kind::drain, node, ControlReply{409, "the job is not running"});
}

ControlReply Job::request_stop(Wait wait) {
  return ask(ControlRequest::Kind::stop, "", ControlReply{409, "the job is not running, or the stop is still pending"},
             wait);
}

}  // namespace troupe::actors
