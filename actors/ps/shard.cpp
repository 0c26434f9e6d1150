#include "actors/ps/shard.hpp"

#include <algorithm>

#include "actors/job_metrics.hpp"

namespace troupe::actors::ps {

caf::behavior shard_actor(caf::stateful_actor<ShardState>* self, ShardConfig config) {
  auto& s = self->state;
  s.config = std::move(config);
  s.master = Tensor::zeros({s.config.size});
  s.optimizer = models::make_optimizer(s.config.optimizer, s.master);
  s.clocks.assign(static_cast<std::size_t>(s.config.replicas), 0);
  s.pulled_at.assign(s.clocks.size(), 0);
  // Staleness counts from here for every replica: after a switch to async
  // (every replica holds the state the server just took), and at a new
  // view, whose ranks are numbered anew (a survivor's first push then looks
  // fresher than it is, once per view change). Not at `position`: that
  // comes at every step boundary, where async replicas keep older parameters.
  auto everyone_pulled = [self] {
    auto& st = self->state;
    st.pulled_at.assign(st.clocks.size(), st.counters.applied);
  };
  return {
      [=](push_atom, const GradientPush& push) -> caf::result<Tensor> {
        auto& st = self->state;
        // A push from a view that has ended (a node removed while it was
        // computing, or one that was stopped and came back) is never applied.
        if (push.gradient.numel() != st.master.numel()) {
          ++st.counters.dropped;
          return caf::make_error(caf::sec::runtime_error,
                                 "push from replica " + std::to_string(push.rank) + " dropped: " +
                                     std::to_string(push.gradient.numel()) + " floats for shard " +
                                     std::to_string(st.config.index) + " of " + std::to_string(st.master.numel()));
        }
        if (push.view != st.view || push.rank < 0 || static_cast<std::size_t>(push.rank) >= st.clocks.size()) {
          ++st.counters.dropped;
          return caf::make_error(caf::sec::runtime_error,
                                 "push from replica " + std::to_string(push.rank) + " of view " +
                                     std::to_string(push.view) + " dropped: the job is in view " +
                                     std::to_string(st.view));
        }
        const std::int64_t slowest = *std::min_element(st.clocks.begin(), st.clocks.end());
        st.counters.max_lead = std::max(st.counters.max_lead, (push.clock - 1) - slowest);
        const float lr = st.config.schedule->at(st.position.global_step + st.applied_since_position,
                                                st.position.epoch);
        st.optimizer->step(st.master, push.gradient, lr);
        const auto rank = static_cast<std::size_t>(push.rank);
        if (rank < st.pulled_at.size()) {
          const std::int64_t staleness = st.counters.applied - st.pulled_at[rank];
          st.counters.staleness_sum += staleness;
          st.counters.staleness_max = std::max(st.counters.staleness_max, staleness);
          if (st.config.metrics) st.config.metrics->record_push_staleness(push.view, push.rank, staleness);
        }
        ++st.applied_since_position;
        ++st.counters.applied;
        st.clocks[rank] = push.clock;
        if (rank < st.pulled_at.size()) st.pulled_at[rank] = st.counters.applied;  // the answer below
        return st.master.clone();
      },
      [=](get_state_atom) -> ReplicaState {
        auto& st = self->state;
        ReplicaState out;
        out.clock = st.position.global_step + st.applied_since_position;
        out.parameters = st.master.clone();
        for (const auto& [name, buffer] : st.optimizer->buffers()) out.buffers.emplace_back(name, buffer.clone());
        out.scalars = st.optimizer->scalars();
        out.replica_clocks = st.clocks;
        return out;
      },
      [=](set_state_atom, const ReplicaState& state) {
        restore_state(self->state.master, *self->state.optimizer, state);
        everyone_pulled();
        return caf::ok_atom::value;
      },
      [=](position_atom, const Position& p, const std::vector<std::int64_t>& clocks) {
        auto& st = self->state;
        st.position = p;
        st.applied_since_position = 0;
        st.clocks = clocks;
        if (st.pulled_at.size() != clocks.size()) everyone_pulled();
        return caf::ok_atom::value;
      },
      [=](counters_atom) -> ServerCounters {
        ServerCounters c = self->state.counters;
        c.shard_applied = {c.applied};
        return c;
      },
      // A new membership view: its replicas, all at the same clock.
      [=](reconfig_atom, std::uint32_t view, const std::vector<std::int64_t>& clocks) {
        auto& st = self->state;
        st.view = view;
        st.clocks = clocks;
        everyone_pulled();
        return caf::ok_atom::value;
      },
  };
}

}  // namespace troupe::actors::ps
