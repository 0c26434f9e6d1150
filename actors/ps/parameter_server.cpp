#include "actors/ps/parameter_server.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <type_traits>

#include "actors/job_metrics.hpp"
#include "actors/ps/shard.hpp"
#include "models/model.hpp"

namespace troupe::actors::ps {

namespace {

struct FrontState {
  ParameterServerConfig config;
  std::vector<ps_actor_t> shards;
  // Questions to the shards still unanswered, by number: each fails its
  // caller at once when a shard ends (a ps task lost), instead of leaving
  // it to its timeout (CAF 0.17 does not fail a request to a lost node
  // early, nor one whose receiver ends while it waits).
  std::map<std::uint64_t, std::function<void(const caf::error&)>> pending;
  std::uint64_t next_pending = 0;
  static inline const char* name = "parameter_server";
};

using Self = std::remove_pointer_t<ps_actor_t::stateful_pointer<FrontState>>;

// Registers `fail` for the question being asked; returns its number, for
// settle().
std::uint64_t track(Self* self, std::function<void(const caf::error&)> fail) {
  const std::uint64_t id = ++self->state.next_pending;
  self->state.pending.emplace(id, std::move(fail));
  return id;
}
void settle(Self* self, std::uint64_t id) { self->state.pending.erase(id); }

// Asks every shard the same question; `done` gets their answers by shard
// index once all have come, or `failed` the first error (and nothing else
// is called after it).
template <class T, class... Ts>
void ask_every_shard(Self* self, std::function<void(std::vector<T>&)> done,
                     std::function<void(const caf::error&)> failed, const Ts&... xs) {
  struct Gather {
    std::vector<T> answers;
    std::size_t left = 0;
    bool over = false;
  };
  const auto& shards = self->state.shards;
  auto g = std::make_shared<Gather>();
  g->answers.resize(shards.size());
  g->left = shards.size();
  const std::uint64_t id = track(self, [g, failed](const caf::error& e) {
    if (g->over) return;
    g->over = true;
    failed(e);
  });
  for (std::size_t i = 0; i < shards.size(); ++i)
    self->request(shards[i], self->state.config.timeout, xs...)
        .then(
            [=](T answer) {
              if (g->over) return;
              g->answers[i] = std::move(answer);
              if (--g->left == 0) {
                g->over = true;
                settle(self, id);
                done(g->answers);
              }
            },
            [=](caf::error& e) {
              if (g->over) return;
              g->over = true;
              settle(self, id);
              failed(e);
            });
}

// The same, for questions whose answer is ok: delivers ok once every shard
// has answered ok.
template <class... Ts>
caf::typed_response_promise<caf::ok_atom> tell_every_shard(Self* self, const Ts&... xs) {
  auto rp = self->make_response_promise<caf::ok_atom>();
  ask_every_shard<caf::ok_atom>(
      self, [rp](std::vector<caf::ok_atom>&) mutable { rp.deliver(caf::ok_atom::value); },
      [rp](const caf::error& e) mutable { rp.deliver(e); }, xs...);
  return rp;
}

ps_actor_t::behavior_type front_actor(Self* self, ParameterServerConfig config, std::vector<ps_actor_t> shards) {
  self->state.config = std::move(config);
  self->state.shards = std::move(shards);
  for (const auto& s : self->state.shards) self->link_to(s);
  // A shard ended (its ps task lost, or the job is over): every question
  // still waiting fails now, then the front ends as the link says.
  self->set_exit_handler([=](caf::exit_msg& msg) {
    auto pending = std::move(self->state.pending);
    self->state.pending.clear();
    const caf::error why = msg.reason ? msg.reason : caf::make_error(caf::exit_reason::normal);
    for (auto& [id, fail] : pending) {
      (void)id;
      fail(caf::make_error(caf::sec::runtime_error, "a parameter-server shard ended: " + self->system().render(why)));
    }
    self->quit(msg.reason);
  });
  return {
      // A whole gradient (a replica on another node, through its relay).
      [=](push_atom, const GradientPush& push) -> caf::result<Tensor> {
        auto& st = self->state;
        const Partition& partition = *st.config.partition;
        if (st.shards.size() == 1) {
          auto rp = self->make_response_promise<Tensor>();
          rp.delegate(st.shards[0], push_atom::value, push);
          return rp;
        }
        if (push.gradient.numel() != partition.total())
          return caf::make_error(caf::sec::runtime_error, "push from replica " + std::to_string(push.rank) + " of " +
                                                              std::to_string(push.gradient.numel()) +
                                                              " floats to a parameter server of " +
                                                              std::to_string(partition.total()));
        // Pushes may overlap here (several nodes): each has its own staging.
        const Tensor staging = Tensor::empty({partition.total()});
        partition.pack_all(push.gradient, staging);
        auto rp = self->make_response_promise<Tensor>();
        auto partition_ptr = st.config.partition;
        struct Gather {
          Tensor fresh;
          int left = 0;
          bool over = false;
        };
        auto g = std::make_shared<Gather>();
        g->fresh = Tensor::empty({partition.total()});
        g->left = partition.shards();
        for (int i = 0; i < partition.shards(); ++i) {
          GradientPush part{push.view, push.rank, push.clock, partition.part(i, staging)};
          self->request(st.shards[static_cast<std::size_t>(i)], st.config.timeout, push_atom::value, std::move(part))
              .then(
                  [=](const Tensor& fresh) mutable {
                    if (g->over) return;
                    partition_ptr->unpack(i, fresh, g->fresh);
                    if (--g->left == 0) {
                      g->over = true;
                      rp.deliver(g->fresh);
                    }
                  },
                  [=](caf::error& e) mutable {
                    if (g->over) return;
                    g->over = true;
                    rp.deliver(std::move(e));
                  });
        }
        return rp;
      },
      [=](get_state_atom) -> caf::result<ReplicaState> {
        auto rp = self->make_response_promise<ReplicaState>();
        auto partition = self->state.config.partition;
        ask_every_shard<ReplicaState>(
            self,
            [rp, partition](std::vector<ReplicaState>& parts) mutable {
              ReplicaState whole;
              for (std::size_t i = 0; i < parts.size(); ++i)
                put_state_part(*partition, static_cast<int>(i), parts[i], whole);
              rp.deliver(std::move(whole));
            },
            [rp](const caf::error& e) mutable { rp.deliver(e); }, get_state_atom::value);
        return rp;
      },
      [=](set_state_atom, const ReplicaState& state) -> caf::result<caf::ok_atom> {
        auto& st = self->state;
        const Partition& partition = *st.config.partition;
        if (state.parameters.numel() != partition.total())
          return caf::make_error(caf::sec::runtime_error, "a state of " + std::to_string(state.parameters.numel()) +
                                                              " parameters for a parameter server of " +
                                                              std::to_string(partition.total()));
        // Each shard gets its own part (a question per shard, so not
        // tell_every_shard's one message for all).
        auto rp = self->make_response_promise<caf::ok_atom>();
        auto left = std::make_shared<int>(partition.shards());
        auto over = std::make_shared<bool>(false);
        const std::uint64_t id = track(self, [rp, over](const caf::error& e) mutable {
          if (*over) return;
          *over = true;
          rp.deliver(e);
        });
        for (int i = 0; i < partition.shards(); ++i)
          self->request(st.shards[static_cast<std::size_t>(i)], st.config.timeout, set_state_atom::value,
                        state_part(partition, i, state))
              .then(
                  [=](caf::ok_atom) mutable {
                    if (!*over && --*left == 0) {
                      *over = true;
                      settle(self, id);
                      rp.deliver(caf::ok_atom::value);
                    }
                  },
                  [=](caf::error& e) mutable {
                    if (*over) return;
                    *over = true;
                    settle(self, id);
                    rp.deliver(std::move(e));
                  });
        return rp;
      },
      [=](position_atom, const Position& p, const std::vector<std::int64_t>& clocks) {
        return tell_every_shard(self, position_atom::value, p, clocks);
      },
      [=](view_clocks_atom, std::uint32_t view, const std::vector<std::int64_t>& clocks) {
        return tell_every_shard(self, view_clocks_atom::value, view, clocks);
      },
      [=](counters_atom) -> caf::result<ServerCounters> {
        auto rp = self->make_response_promise<ServerCounters>();
        ask_every_shard<ServerCounters>(
            self,
            [rp](std::vector<ServerCounters>& each) mutable {
              ServerCounters all;
              all.applied = each.front().applied;
              all.staleness_sum = each.front().staleness_sum;
              all.staleness_max = each.front().staleness_max;
              for (const auto& c : each) {
                all.applied = std::min(all.applied, c.applied);
                all.max_lead = std::max(all.max_lead, c.max_lead);
                all.dropped = std::max(all.dropped, c.dropped);  // every shard drops the same pushes
                all.shard_applied.push_back(c.applied);
              }
              rp.deliver(std::move(all));
            },
            [rp](const caf::error& e) mutable { rp.deliver(e); }, counters_atom::value);
        return rp;
      },
  };
}

}  // namespace

ParameterServer spawn_parameter_server(caf::actor_system& system, const ParameterServerConfig& config) {
  ParameterServer out;
  out.partition = config.partition;
  for (int i = 0; i < config.partition->shards(); ++i) {
    ShardConfig sc;
    sc.index = i;
    sc.size = config.partition->size(i);
    sc.optimizer = config.optimizer;
    sc.decayed = config.partition->ranges_in(i, config.decayed);
    sc.schedule = config.schedule;
    sc.replicas = config.replicas;
    // One record per push, not one per shard.
    if (i == 0 && config.metrics)
      sc.record_staleness = [metrics = config.metrics](std::uint32_t view, int rank, std::int64_t updates) {
        metrics->record_push_staleness(view, rank, updates);
      };
    LocalShard shard = spawn_shard(system, std::move(sc));
    out.shards.push_back(shard.actor);
    out.cores.push_back(std::move(shard.core));
  }
  out.front = system.spawn<caf::detached>(front_actor, config, out.shards);
  return out;
}

ParameterServer front_over(caf::actor_system& system, const ParameterServerConfig& config,
                           std::vector<ps_actor_t> shards) {
  if (static_cast<int>(shards.size()) != config.partition->shards())
    throw std::invalid_argument("front_over: " + std::to_string(shards.size()) + " shards for a partition of " +
                                std::to_string(config.partition->shards()));
  ParameterServer out;
  out.partition = config.partition;
  out.shards = std::move(shards);
  out.front = system.spawn<caf::detached>(front_actor, config, out.shards);
  return out;
}

Partition partition_for(const models::ModelSpec& spec, int shards, std::int64_t split_above) {
  models::Model probe(spec, kernels::Device::cpu());
  std::vector<Range> layers;
  for (const auto& [offset, count] : probe.layer_ranges()) layers.push_back({offset, count});
  return Partition::make(probe.parameter_count(), layers, shards, split_above).without_empty_shards();
}

ReplicaState state_part(const Partition& partition, int shard, const ReplicaState& whole) {
  ReplicaState part;
  part.clock = whole.clock;
  part.parameters = Tensor::empty({partition.size(shard)});
  partition.pack(shard, whole.parameters, part.parameters);
  for (const auto& [name, buffer] : whole.buffers) {
    Tensor packed = Tensor::empty({partition.size(shard)});
    partition.pack(shard, buffer, packed);
    part.buffers.emplace_back(name, std::move(packed));
  }
  part.scalars = whole.scalars;
  part.replica_clocks = whole.replica_clocks;
  return part;
}

void put_state_part(const Partition& partition, int shard, const ReplicaState& part, ReplicaState& whole) {
  const bool first = !whole.parameters.defined() || whole.parameters.raw() == nullptr;
  if (first) {
    // The first part gives everything but the other parts' elements: every
    // shard applied the same pushes, so clocks and scalars are alike.
    whole.clock = part.clock;
    whole.scalars = part.scalars;
    whole.replica_clocks = part.replica_clocks;
    whole.parameters = Tensor::zeros({partition.total()});
    whole.buffers.clear();
    for (const auto& [name, buffer] : part.buffers)
      whole.buffers.emplace_back(name, Tensor::zeros({partition.total()}));
  }
  partition.unpack(shard, part.parameters, whole.parameters);
  for (std::size_t b = 0; b < part.buffers.size() && b < whole.buffers.size(); ++b)
    partition.unpack(shard, part.buffers[b].second, whole.buffers[b].second);
}

}  // namespace troupe::actors::ps
