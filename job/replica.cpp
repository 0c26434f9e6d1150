// One replica (a data loader and the device actor it feeds), spawned the
// same way by a job and by a worker node; and the actor system a job runs
// in, whose shutdown has a deadline (job/replica.hpp).
#include "job/replica.hpp"

#include <caf/all.hpp>

#include <atomic>
#include <cstdio>
#include <exception>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "actors/data_loader.hpp"
#include "actors/device.hpp"
#include "models/warm_up.hpp"

namespace troupe::actors {

namespace {
std::atomic<int> abandoned_systems{0};
}  // namespace

ReplicaActors spawn_replica(caf::actor_system& system, const ReplicaPlan& plan) {
  const auto& t = plan.train;
  LoaderConfig lc;
  lc.dataset = plan.train_data;
  lc.plan = data::plan_options(*plan.train_data, t.batch, t.shuffle, t.seed, t.drop_remainder);
  lc.shard = {plan.rank, plan.world};
  lc.start = plan.start;
  lc.prefetch = plan.prefetch;
  lc.augment = data::Augmentation::parse(t.augment);
  ReplicaActors out;
  out.loader = system.spawn<caf::detached>(data_loader, lc);
  DeviceConfig dc;
  dc.rank = plan.rank;
  dc.device = plan.device;
  dc.precision = models::parse_precision(t.precision);
  dc.initial_loss_scale = t.initial_loss_scale;
  dc.spec = plan.spec;
  dc.optimizer = t.optimizer;
  dc.label_smoothing = t.label_smoothing;
  dc.schedule = plan.schedule;
  dc.seed = t.seed;
  dc.threads = plan.threads;
  dc.sync_grad_scale = 1.0f / static_cast<float>(t.batch * plan.world);
  dc.sync_batch = t.batch * plan.world;
  dc.collective = plan.collective;
  dc.test = plan.test_data;
  dc.regression = plan.train_data && plan.train_data->task == data::Task::regression;
  dc.eval_batch = t.eval_batch;
  dc.timeout = plan.timeout;
  dc.elastic = plan.elastic;
  dc.view = plan.view;
  dc.loader = out.loader;
  dc.shards = plan.shards;
  dc.shard_cores = plan.shard_cores;
  dc.partition = plan.partition;
  dc.push_routes = plan.push_routes;
  dc.timeline = plan.timeline;
  dc.track = plan.track;
  if (plan.timeline)
    plan.timeline->name_track(plan.track, "replica " + std::to_string(plan.track) + " (" + plan.device.str() + ")");
  // Before the coordinator starts its clock (the job spawns it after every
  // replica): a GPU's libraries load here, not in the first timed step.
  models::warm_up_device(dc.spec, dc.device, t.batch, t.eval_batch, dc.regression);
  out.device = system.spawn<caf::detached>(device_actor, dc);
  return out;
}

caf::actor_system& ActorSystemSlot::create(const std::function<void(caf::actor_system_config&)>& configure) {
  if (!system_) {
    config_ = std::make_unique<caf::actor_system_config>();
    configure(*config_);
    system_ = std::make_unique<caf::actor_system>(*config_);
  }
  return *system_;
}

std::size_t ActorSystemSlot::running_actors() const { return system_ ? system_->registry().running() : 0; }

void ActorSystemSlot::reset() {
  system_.reset();
  config_.reset();
}

void run_with_bounded_shutdown(const std::function<void(ActorSystemSlot&)>& body, std::chrono::milliseconds limit) {
  auto outcome = std::make_shared<std::promise<void>>();
  auto shut_down = std::make_shared<std::promise<void>>();
  // Actors not yet ended when the shutdown began: which of CAF's two waits
  // a stuck shutdown is in (for them, or for a finished actor's thread).
  auto still_running = std::make_shared<std::atomic<std::size_t>>(0);
  std::future<void> returned = outcome->get_future();
  std::future<void> ended = shut_down->get_future();
  std::thread runner([&body, outcome, shut_down, still_running]() {
    ActorSystemSlot slot;
    try {
      body(slot);
      outcome->set_value();
    } catch (...) {
      outcome->set_exception(std::current_exception());
    }
    still_running->store(slot.running_actors());
    slot.reset();  // ~actor_system, on the thread that made it
    shut_down->set_value();
  });
  // `body` is not touched after `returned` is ready: the caller's frame
  // may go once it is.
  std::exception_ptr error;
  try {
    returned.get();
  } catch (...) {
    error = std::current_exception();
  }
  if (ended.wait_for(limit) == std::future_status::ready) {
    runner.join();
  } else {
    runner.detach();
    ++abandoned_systems;
    const std::size_t running = still_running->load();
    const std::string why = running > 0 ? std::to_string(running) + " actor(s) had not ended when it began"
                                        : "every actor had ended when it began: one is still referenced inside CAF";
    std::fprintf(stderr, "troupe: the actor system did not shut down within %.0f s (%s); leaving it behind\n",
                 std::chrono::duration<double>(limit).count(), why.c_str());
  }
  if (error) std::rethrow_exception(error);
}

int abandoned_actor_systems() { return abandoned_systems.load(); }

void configure_actor_system(caf::actor_system_config& cfg) {
  cfg.set("scheduler.max-threads", 1);
  cfg.set("work-stealing.aggressive-poll-attempts", 0);
  cfg.set("work-stealing.moderate-poll-attempts", 0);
  cfg.set("logger.verbosity", caf::atom("quiet"));
}

}  // namespace troupe::actors
