// The shard's CAF face (shard.hpp): the coordinator's questions and the
// pushes of the coordinator's own replicas reach the core through it.
#include "actors/ps/shard.hpp"

#include <string>

namespace troupe::actors::ps {

ps_actor_t::behavior_type shard_actor(ps_actor_t::stateful_pointer<ShardState> self, std::shared_ptr<ShardCore> core) {
  self->state.core = core;
  auto* system = &self->system();
  // Runs in the actor's cleanup, which may end a moment after its monitors
  // heard of its end.
  self->attach_functor([core, system](const caf::error& reason) {
    core->close("shard " + std::to_string(core->config().index) +
                " is gone (its actor ended: " + system->render(reason) + ")");
  });
  return {
      [core](push_atom, const GradientPush& push) -> caf::result<Tensor> {
        try {
          return core->apply(push).fresh;
        } catch (const std::exception& e) {
          // The text reaches the pusher (device.cpp, shard_apply's callers).
          return caf::make_error(caf::sec::runtime_error, std::string(e.what()));
        }
      },
      [core](get_state_atom) -> ReplicaState { return core->state(); },
      [core](set_state_atom, const ReplicaState& state) {
        core->set_state(state);
        return caf::ok_atom::value;
      },
      [core](position_atom, const Position& p, const std::vector<std::int64_t>& clocks) {
        core->set_position(p, clocks);
        return caf::ok_atom::value;
      },
      [core](counters_atom) -> ServerCounters { return core->counters(); },
      // A new membership view: its replicas, all at the same clock.
      [core](view_clocks_atom, std::uint32_t view, const std::vector<std::int64_t>& clocks) {
        core->reconfig(view, clocks);
        return caf::ok_atom::value;
      },
  };
}

LocalShard spawn_shard(caf::actor_system& system, ShardConfig config, ShardThread thread) {
  LocalShard out;
  out.core = std::make_shared<ShardCore>(std::move(config));
  out.actor = thread == ShardThread::detached ? system.spawn<caf::detached>(shard_actor, out.core)
                                              : system.spawn(shard_actor, out.core);
  return out;
}

}  // namespace troupe::actors::ps
