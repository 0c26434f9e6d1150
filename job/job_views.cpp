// JobRun's views: elastic membership's view changes, formed on the run's
// thread because the hooks talk to the nodes from it (job_run.hpp).
#include <caf/all.hpp>

#include <algorithm>

#include "actors/device.hpp"
#include "job/job_run.hpp"

namespace troupe::actors {

// The view the coordinator asked for.
FormedView JobRun::form_view(const ViewPlan& plan) {
  std::vector<std::shared_ptr<net::Collective>> fresh;
  // Shards on ps tasks placed anew (a ps task lost or leaving): fresh
  // shard actors on the ps tasks left, a new front over them, and new
  // routes for every replica; the coordinator then restores the state.
  caf::actor new_front;
  if (plan.replace_shards && push_routes) {
    ClusterHooks::Placement placed =
        cluster->replace_shards(self, *partition_, static_cast<int>(all_devices.size()), plan.ps_remove, decayed_);
    if (!placed.error.empty()) {
      FormedView failed;
      failed.view = plan.view;
      failed.error = placed.error;
      failed.waiting_for_ps = placed.waiting_for_ps;
      failed.lost = placed.lost;
      return failed;
    }
    pc.replicas = static_cast<int>(all_devices.size());
    ps::ParameterServer placed_server = ps::front_over(system, pc, ps::to_ps_actors(placed.handles));
    if (server.front) self->send_exit(server.front, caf::exit_reason::user_shutdown);
    server = placed_server;
    new_front = caf::actor_cast<caf::actor>(server.front);
    push_routes->registry->abort("view " + std::to_string(plan.view) + " placed the shards anew");
    push_routes = cluster->place_shards(placed.addresses, ps_wanted);
  }
  FormedView f = cluster->reform(self, plan, local, fresh);
  f.parameter_server = new_front;
  const int w = local + static_cast<int>(f.devices.size());
  if (f.error.empty()) {
    // This host's replicas enter the view.
    for (int r = 0; r < local && f.error.empty(); ++r) {
      ViewAssignment a;
      a.view = plan.view;
      a.rank = r;
      a.world = w;
      a.batch_size = f.batch;
      a.clock = plan.clock;
      a.cursor = plan.cursor;
      a.collective = fresh[static_cast<std::size_t>(r)];
      if (new_front) a.push_routes = push_routes;
      self->request(devices[static_cast<std::size_t>(r)], config_.timeout, reconfig_atom::value, a)
          .receive([](caf::ok_atom) {},
                   [&](caf::error& e) { f.error = "replica " + std::to_string(r) + ": " + system.render(e); });
    }
  }
  if (f.error.empty()) {
    for (auto& c : collectives) c->abort("view " + std::to_string(plan.view) + " replaces it");
    collectives = fresh;
    all_devices = devices;
    for (auto& d : to_devices(f.devices)) all_devices.push_back(d);
    f.error = hand_on_state(plan, f);
    f.devices = to_actors(all_devices);
    if (config_.metrics) config_.metrics->set_nodes(f.view, f.nodes);
  } else {
    for (auto& c : fresh) c->abort(f.error);
  }
  return f;
}

// The newcomers' replicas, and survivors a step behind the view's clock
// (sync: their all-reduce failed where another's completed), take the
// state of a replica at that clock (parameters and optimizer state; their
// clock and data position came with the view). Ranks are found by node:
// they change between views.
std::string JobRun::hand_on_state(const ViewPlan& plan, const FormedView& f) {
  auto rank_of = [&](const ReplicaRef& ref) -> int {
    for (const auto& n : f.nodes)
      if (n.index == ref.node && ref.local < n.replicas) return n.first_rank + ref.local;
    return -1;
  };
  std::vector<int> targets;
  const auto joined = cluster->newcomers();
  for (const auto& n : f.nodes)
    if (std::find(joined.begin(), joined.end(), n.index) != joined.end())
      for (int r = n.first_rank; r < n.first_rank + n.replicas; ++r) targets.push_back(r);
  for (const auto& ref : plan.behind) {
    const int r = rank_of(ref);
    if (r < 0)
      return "replica " + std::to_string(ref.local) + " of node " + std::to_string(ref.node) +
             " is behind the view's step but not in view " + std::to_string(plan.view);
    targets.push_back(r);
  }
  if (targets.empty()) return "";
  const int source = plan.behind.empty() ? 0 : rank_of(plan.source);
  if (source < 0)
    return "replica " + std::to_string(plan.source.local) + " of node " + std::to_string(plan.source.node) +
           ", whose state the view hands on, is not in view " + std::to_string(plan.view);
  ReplicaState state;
  std::string error;
  self->request(all_devices[static_cast<std::size_t>(source)], config_.timeout, get_state_atom::value)
      .receive([&](ReplicaState& st) { state = std::move(st); },
               [&](caf::error& e) {
                 error = "reading replica " + std::to_string(source) + "'s state: " + system.render(e);
               });
  for (int r : targets) {
    if (!error.empty()) break;
    self->request(all_devices[static_cast<std::size_t>(r)], config_.timeout, set_state_atom::value, state)
        .receive([](caf::ok_atom) {},
                 [&](caf::error& e) {
                   error = "handing the state to replica " + std::to_string(r) + ": " + system.render(e);
                 });
  }
  return error;
}

}  // namespace troupe::actors
