// JobRun's second phase: the coordinator, the run's receive loop, the end
// (job_run.hpp).
#include <caf/all.hpp>

#include <algorithm>
#include <cstdio>

#include "actors/device.hpp"
#include "job/job_run.hpp"

namespace troupe::actors {

namespace {

// The ps task named by its index or name ("3", "ps/HOST/pid N"), or -1.
int ps_task_index(const ClusterShards* cluster, const std::string& which) {
  if (!cluster) return -1;
  for (const auto& task : cluster->ps_tasks())
    if (which == std::to_string(task.index) || which == task.name) return task.index;
  return -1;
}

}  // namespace

JobResult JobRun::run() {
  start();
  JobResult result;
  try {
    coordinator_actor_t coordinator = spawn_coordinator(system, coordinator_config());
    self->monitor(coordinator);
    job_.open_control(system, coordinator, caf::actor_cast<caf::actor>(self));
    self->send(coordinator, start_atom::value);
    result = train(coordinator);
    job_.close_control("the job has finished");
    if (config_.collect_replica_parameters && result.error.empty()) {
      for (auto& d : all_devices)
        self->request(d, config_.timeout, get_state_atom::value)
            .receive([&](const ReplicaState& s) { job_.replica_parameters_.push_back(s.parameters.to_vector()); },
                     [&](caf::error& e) { result.error = "collecting parameters: " + system.render(e); });
    }
    self->send_exit(coordinator, caf::exit_reason::user_shutdown);
  } catch (const std::exception& e) {
    job_.close_control("the job has finished");
    for (auto& c : collectives) c->abort("the job is shutting down");
    if (cluster) cluster->finish(self, e.what());
    shutdown();
    throw;
  }
  if (!result.error.empty())
    for (auto& c : collectives) c->abort("the job failed: " + result.error);
  if (cluster) cluster->finish(self, result.error);
  shutdown();
  result.resumed_from = resumed_path;
  if (!resumed_path.empty()) result.mode_history.insert(result.mode_history.begin(), "resumed from " + resumed_path);
  return result;
}

CoordinatorConfig JobRun::coordinator_config() {
  CoordinatorConfig cc;
  cc.replicas = world;
  cc.batches_per_epoch = batches_per_epoch_;
  cc.epochs = t.epochs;
  cc.max_steps = t.max_steps;
  cc.global_batch = t.batch * world;
  cc.mode = config_.mode;
  cc.switches = config_.switches;
  cc.devices = all_devices;
  if (cluster) cc.nodes = cluster->nodes();
  if (cluster) cc.links = cluster->links();
  if (cluster && config_.metrics) config_.metrics->set_nodes(0, cc.nodes);
  cc.metrics = config_.metrics;
  cc.timeline = config_.timeline;
  cc.parameter_server = server.front;
  cc.listener = caf::actor_cast<caf::actor>(self);
  cc.checkpoints = checkpoints_;
  cc.checkpoint_every = t.checkpoint_every;
  cc.checkpoint_each_epoch = t.checkpoint_each_epoch;
  cc.eval_every = t.eval_every;
  cc.model_name = spec_.name;
  cc.model_spec = spec_.text();
  cc.model_state_count = state_count_;
  cc.optimizer = t.optimizer;
  cc.schedule = schedule;
  cc.seed = t.seed;
  cc.start = start_at;
  cc.start_clocks = start_clocks;
  cc.start_data = data_start;
  cc.checkpoint_interval = std::chrono::milliseconds(static_cast<std::int64_t>(t.checkpoint_minutes * 60000.0));
  cc.classification = data_.train.task == data::Task::classification;
  cc.positions_per_example = std::max<std::int64_t>(1, data_.train.window);
  cc.timeout = config_.timeout;
  cc.callbacks = callbacks;
  cc.elastic = cluster != nullptr;
  if (t.precision == "fp16") cc.sync_only = "--precision fp16 trains in sync mode only (its loss scale)";
  cc.dataset_examples = data_.train.size();
  cc.batch = t.batch;
  cc.drop_remainder = t.drop_remainder;
  cc.fixed_global_batch = config_.elastic_batch == "global";
  cc.min_nodes = config_.min_nodes;
  if (cluster) cc.first_view = cluster->first_view();
  cc.wait_timeout = config_.wait_timeout;
  cc.ps_tasks = push_routes != nullptr && ps_wanted > 0;
  cc.shuffle = t.shuffle;
  return cc;
}

// A ps task asked to leave (its own SIGTERM or SIGINT, or troupe ctl
// drain): a spare goes at once; one hosting shards at the next step
// boundary, where the coordinator gathers their state and moves them to
// the ps tasks left (nothing is lost).
std::string JobRun::ps_task_leaves(const coordinator_actor_t& coordinator, int index, const std::string& why) {
  if (!cluster || !cluster->is_ps_task(index)) return "";
  const std::string label = "node " + std::to_string(index) + " (a ps task)";
  if (!cluster->hosts_shards(index)) {
    cluster->release_ps(self, index, "left the job (a spare): " + why);
    return label + " hosted no shard and left at once";
  }
  self->send(coordinator, member_atom::value, MemberEvent{MemberEvent::Kind::ps_leaving, index, why});
  return label + " leaves at the next step boundary: its shards move to the other ps tasks";
}

void JobRun::node_lost(const coordinator_actor_t& coordinator, int index, const std::string& what) {
  if (cluster && cluster->is_ps_task(index)) {
    // Its shards' parameters and optimizer state are gone with it.
    // Every push in flight fails now (not at its timeout), and the
    // coordinator places the shards anew on the ps tasks left and
    // restores a consistent state (actors/coordinator/views.cpp). A spare's
    // loss changes nothing.
    if (!cluster->ps_gone(index)) {
      std::fprintf(stderr, "troupe node: %s (a spare ps task)\n", what.c_str());
      return;
    }
    if (push_routes) push_routes->registry->abort(what);
    cluster->abort_pushes(self, what);
    self->send(coordinator, member_atom::value,
               MemberEvent{MemberEvent::Kind::ps_lost, index, what + ", a ps task hosting shards"});
    return;
  }
  // A node of the view is gone: no collective of the view can
  // complete. Every survivor's all-reduce is aborted now (not at
  // its timeout) and the coordinator forms a view without it.
  if (cluster && cluster->forget(index)) {
    for (auto& c : collectives) c->abort(what);
    cluster->abort_view(self, what);
  }
  self->send(coordinator, member_atom::value, MemberEvent{MemberEvent::Kind::lost, index, what});
}

void JobRun::node_ready(const coordinator_actor_t& coordinator, const ReadyNode& node) {
  if (!cluster) return;
  const int index = node.index;
  const std::string& name = node.name;
  if (node.role == NodeRole::ps_task) {
    if (push_routes) {
      // Shards on ps tasks: a spare, used when one is lost or leaves.
      cluster->add_spare_ps(self, index, name, node.data_address, node.handle);
      self->send(coordinator, member_atom::value, MemberEvent{MemberEvent::Kind::ps_joined, index, name});
      return;
    }
    // The shards run in this process (the job started without ps
    // tasks): a ps task has nothing to host.
    const std::string why =
        "not used: the parameter-server shards run on the coordinator (the job started "
        "without --ps-tasks)";
    std::fprintf(stderr, "troupe node: node %d (%s) is %s\n", index, name.c_str(), why.c_str());
    cluster->forget(index);
    self->send(node.handle, done_atom::value, why);
    return;
  }
  cluster->add_joiner(node);
  std::string list;
  for (const auto& d : node.devices) list += (list.empty() ? "" : ",") + d;
  self->send(coordinator, member_atom::value, MemberEvent{MemberEvent::Kind::joined, index, name + " with " + list});
}

JobResult JobRun::train(const coordinator_actor_t& coordinator) {
  JobResult result;
  bool done = false;
  // A view the coordinator asked for, formed after the receive below (the
  // hooks wait for the nodes with receives of their own).
  std::optional<ViewPlan> view_plan;
  caf::response_promise view_promise;
  while (!done) {
    self->receive(
        [&](JobResult& r) {
          result = std::move(r);
          done = true;
        },
        [&](caf::down_msg& down) {
          result.error = "the coordinator stopped unexpectedly: " + system.render(down.reason);
          done = true;
        },
        [&](node_lost_atom, std::int32_t index, const std::string& what) { node_lost(coordinator, index, what); },
        [&](ready_atom, const ReadyNode& node) { node_ready(coordinator, node); },
        [&](drain_atom, std::int32_t index, const std::string& why) {
          if (!ps_task_leaves(coordinator, index, why).empty()) return;
          self->send(coordinator, member_atom::value, MemberEvent{MemberEvent::Kind::drain, index, why});
        },
        // troupe ctl drain NODE, from the control front: a ps task is
        // known here (its shards move); a node with replicas is the
        // coordinator's.
        [&](drain_atom, const std::string& which) {
          auto rp = self->make_response_promise();
          const int ps_task = ps_task_index(cluster, which);
          if (ps_task >= 0)
            rp.deliver(ControlReply{200, ps_task_leaves(coordinator, ps_task, "troupe ctl drain")});
          else
            rp.delegate(coordinator, drain_atom::value, which);
        },
        [&](form_view_atom, const ViewPlan& plan) {
          view_plan = plan;
          view_promise = self->make_response_promise();
        });
    if (done) break;
    if (view_plan && cluster) {
      FormedView f = form_view(*view_plan);
      view_plan.reset();
      view_promise.deliver(std::move(f));
      for (auto& e : cluster->take_events()) {
        // A ps task lost while the view formed: this host's pushes in
        // flight fail now too (the hooks told the other nodes).
        if (e.kind == MemberEvent::Kind::ps_lost && push_routes) push_routes->registry->abort(e.what);
        self->send(coordinator, member_atom::value, std::move(e));
      }
    }
  }
  return result;
}

}  // namespace troupe::actors
