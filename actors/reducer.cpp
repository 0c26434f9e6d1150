#include "actors/reducer.hpp"

#include <algorithm>

#include "actors/device.hpp"

namespace troupe::actors {

caf::behavior reducer_actor(caf::stateful_actor<ReducerState>* self, ReducerConfig config) {
  auto& s = self->state;
  s.config = std::move(config);
  s.master = Tensor::zeros({s.config.parameter_count});
  s.optimizer = models::make_optimizer(s.config.optimizer, s.master);
  s.clocks.assign(static_cast<std::size_t>(s.config.replicas), 0);
  return {
      [=](push_atom, const GradientPush& push) -> Tensor {
        auto& st = self->state;
        const std::int64_t slowest = *std::min_element(st.clocks.begin(), st.clocks.end());
        st.counters.max_lead = std::max(st.counters.max_lead, (push.clock - 1) - slowest);
        const float lr = st.config.schedule->at(st.position.global_step + st.applied_since_position,
                                                st.position.epoch);
        st.optimizer->step(st.master, push.gradient, lr);
        ++st.applied_since_position;
        ++st.counters.applied;
        st.clocks[static_cast<std::size_t>(push.rank)] = push.clock;
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
        return caf::ok_atom::value;
      },
      [=](position_atom, const Position& p, const std::vector<std::int64_t>& clocks) {
        auto& st = self->state;
        st.position = p;
        st.applied_since_position = 0;
        st.clocks = clocks;
        return caf::ok_atom::value;
      },
      [=](counters_atom) -> ServerCounters { return self->state.counters; },
  };
}

}  // namespace troupe::actors
