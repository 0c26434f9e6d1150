#include "actors/membership.hpp"

#include "kernels/config.hpp"

namespace troupe::actors {

caf::behavior membership_actor(caf::stateful_actor<MembershipState>* self, MembershipState init) {
  self->state = std::move(init);
  self->set_down_handler([=](caf::down_msg& down) {
    auto& st = self->state;
    for (auto it = st.members.begin(); it != st.members.end(); ++it) {
      if (it->handle.address() != down.source) continue;
      if (st.closing) {
        // Told to go, and gone: the coordinator stops waiting for its ack.
        st.gone->add(it->index);
        st.members.erase(it);
        return;
      }
      const std::string what = "lost node " + std::to_string(it->index) + " (" + it->name + "): " +
                               (down.reason ? self->system().render(down.reason) : "it left");
      st.log(what);
      st.gone->add(it->index);
      self->send(st.listener, node_lost_atom::value, static_cast<std::int32_t>(it->index), what);
      st.members.erase(it);
      return;
    }
  });
  return {
      [=](join_atom, const std::string& name, const std::string& version, const std::string& fingerprint)
          -> std::tuple<bool, std::int32_t, std::string> {
        auto& st = self->state;
        auto refuse = [&](const std::string& why) {
          st.log("refused " + name + ": " + why);
          return std::make_tuple(false, std::int32_t{-1}, why);
        };
        if (st.max_nodes > 0 && static_cast<int>(st.members.size()) + 1 >= st.max_nodes)
          return refuse("the job already has its --max-nodes " + std::to_string(st.max_nodes) +
                        " nodes (the coordinator included)");
        if (st.started->load()) return refuse("the job has started; its membership is fixed");
        if (version != TROUPE_VERSION)
          return refuse("troupe version " + version + " cannot join a job run by troupe " + TROUPE_VERSION);
        if (!fingerprint.empty() && fingerprint != st.fingerprint)
          return refuse("incompatible job: its job file (fingerprint " + fingerprint.substr(0, 12) +
                        ") differs from the coordinator's (" + st.fingerprint.substr(0, 12) +
                        "); start the worker without --job, or with the same file");
        Member m;
        m.index = st.next_index++;
        m.name = name;
        m.handle = caf::actor_cast<caf::actor>(self->current_sender());
        self->monitor(m.handle);
        st.members.push_back(m);
        st.log("node " + std::to_string(m.index) + " joined: " + name);
        return std::make_tuple(true, static_cast<std::int32_t>(m.index), st.job_text);
      },
      [=](done_atom) {
        self->state.closing = true;
        return caf::ok_atom::value;
      },
      // A worker leaving on its own (a signal): lost like a node whose
      // process died, with its own reason, and never reported twice.
      [=](leave_atom, std::int32_t index, const std::string& why) {
        auto& st = self->state;
        for (auto it = st.members.begin(); it != st.members.end(); ++it) {
          if (it->index != index) continue;
          self->demonitor(it->handle);
          st.gone->add(it->index);
          if (!st.closing) {
            const std::string what = "lost node " + std::to_string(it->index) + " (" + it->name + "): " + why;
            st.log(what);
            self->send(st.listener, node_lost_atom::value, index, what);
          }
          st.members.erase(it);
          break;
        }
        return caf::ok_atom::value;
      },
      [=](ready_atom, std::int32_t index, const std::string& data_address, const std::vector<std::string>& devices) {
        auto& st = self->state;
        for (auto& m : st.members) {
          if (m.index != index) continue;
          m.ready = true;
          std::string list;
          for (const auto& d : devices) list += (list.empty() ? "" : ",") + d;
          st.log("node " + std::to_string(index) + " is ready: devices " + list + ", data plane " + data_address);
          self->send(st.listener, ready_atom::value, index, m.name, data_address, devices, m.handle);
        }
        return caf::ok_atom::value;
      },
  };
}

}  // namespace troupe::actors
