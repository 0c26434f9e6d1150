#include "actors/membership.hpp"

#include <algorithm>

#include "kernels/config.hpp"

namespace troupe::actors {

namespace {
// "worker/HOST/pid N" -> "worker/HOST": what a restarted node keeps.
std::string host_of(const std::string& name) {
  const auto pid = name.rfind("/pid ");
  return pid == std::string::npos ? name : name.substr(0, pid);
}

void record_failure(MembershipState& st, const std::string& name) {
  auto& h = st.hosts[host_of(name)];
  const auto now = std::chrono::steady_clock::now();
  h.failures.push_back(now);
  h.failures.erase(
      std::remove_if(h.failures.begin(), h.failures.end(), [&](auto t) { return now - t > st.failure_window; }),
      h.failures.end());
  if (static_cast<int>(h.failures.size()) >= st.failures_for_cooldown) {
    const auto cooldown = st.first_cooldown * (1 << std::min(h.strikes, 10));
    ++h.strikes;
    h.refused_until = now + cooldown;
    h.failures.clear();
    st.log(host_of(name) + " failed " + std::to_string(st.failures_for_cooldown) + " times within " +
           std::to_string(st.failure_window.count()) + " s: refused for " + std::to_string(cooldown.count()) +
           " s (cool-down)");
  }
}
}  // namespace

membership_actor_t::behavior_type membership_actor(membership_actor_t::stateful_pointer<MembershipState> self,
                                                   MembershipState init) {
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
      const std::string what = (it->leaving ? "node " + std::to_string(it->index) + " (" + it->name + ") left"
                                            : "lost node " + std::to_string(it->index) + " (" + it->name + "): " +
                                                  (down.reason ? self->system().render(down.reason) : "it left"));
      st.log(what);
      if (!it->leaving) record_failure(st, it->name);
      st.gone->add(it->index);
      caf::anon_send(st.listener, node_lost_atom::value, static_cast<std::int32_t>(it->index), what);
      st.members.erase(it);
      return;
    }
  });
  return {
      [=](join_atom, const std::string& name, const std::string& version, const std::string& fingerprint,
          const std::string& role) -> std::tuple<bool, std::int32_t, std::string> {
        auto& st = self->state;
        auto refuse = [&](const std::string& why) {
          st.log("refused " + name + ": " + why);
          return std::make_tuple(false, std::int32_t{-1}, why);
        };
        if (st.max_nodes > 0 && static_cast<int>(st.members.size()) + 1 >= st.max_nodes)
          return refuse("the job already has its --max-nodes " + std::to_string(st.max_nodes) +
                        " nodes (the coordinator included)");
        const auto host = st.hosts.find(host_of(name));
        if (host != st.hosts.end() && std::chrono::steady_clock::now() < host->second.refused_until)
          return refuse(host_of(name) + " is cooling down after repeated failures for another " +
                        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                           host->second.refused_until - std::chrono::steady_clock::now())
                                           .count() +
                                       1) +
                        " s");
        if (version != TROUPE_VERSION)
          return refuse("troupe version " + version + " cannot join a job run by troupe " + TROUPE_VERSION);
        if (!fingerprint.empty() && fingerprint != st.fingerprint)
          return refuse("incompatible job: its job file (fingerprint " + fingerprint.substr(0, 12) +
                        ") differs from the coordinator's (" + st.fingerprint.substr(0, 12) +
                        "); start the worker without --job, or with the same file");
        Member m;
        try {
          m.role = parse_role(role);
        } catch (const std::invalid_argument& e) {
          return refuse(e.what());
        }
        m.index = st.next_index++;
        m.name = name;
        m.handle = caf::actor_cast<caf::actor>(self->current_sender());
        self->monitor(m.handle);
        st.members.push_back(m);
        st.log("node " + std::to_string(m.index) + " joined: " + name +
               (m.role == NodeRole::ps_task ? " (a ps task)" : ""));
        return std::make_tuple(true, static_cast<std::int32_t>(m.index), st.job_text);
      },
      [=](done_atom) -> caf::ok_atom {
        self->state.closing = true;
        return caf::ok_atom::value;
      },
      // A worker leaving on its own (a signal): drained at the next step
      // boundary; its end after that is no failure.
      [=](leave_atom, std::int32_t index, const std::string& why) -> caf::ok_atom {
        auto& st = self->state;
        for (auto& m : st.members) {
          if (m.index != index || m.leaving) continue;
          m.leaving = true;
          if (!st.closing) {
            st.log("node " + std::to_string(index) + " (" + m.name + ") leaves: " + why);
            caf::anon_send(st.listener, drain_atom::value, index, why);
          }
        }
        return caf::ok_atom::value;
      },
      // The coordinator let node `index` go (drained): its end is no failure.
      [=](drain_atom, std::int32_t index) -> caf::ok_atom {
        for (auto& m : self->state.members)
          if (m.index == index) m.leaving = true;
        return caf::ok_atom::value;
      },
      [=](ready_atom, std::int32_t index, const std::string& data_address, const std::vector<std::string>& devices,
          const std::string& nccl) -> caf::ok_atom {
        auto& st = self->state;
        for (auto& m : st.members) {
          if (m.index != index) continue;
          m.ready = true;
          std::string list;
          for (const auto& d : devices) list += (list.empty() ? "" : ",") + d;
          st.log("node " + std::to_string(index) + " is ready: devices " + list + ", data plane " + data_address);
          caf::anon_send(st.listener, ready_atom::value,
                         ReadyNode{index, m.name, m.role, data_address, devices, nccl, m.handle});
        }
        return caf::ok_atom::value;
      },
  };
}

}  // namespace troupe::actors
