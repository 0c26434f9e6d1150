// The membership actor (on the coordinator node): admits nodes to the job
// and watches them. One per cluster job, published on 127.0.0.1 behind the
// gate (net/cluster/gate.hpp), so every node that reaches it passed the
// secret handshake.
//
// Protocol:
//   join, name, version, fingerprint, role
//                                 -> (admitted, index, job text or why not)
//                                        a node asks to join, at any time (a
//                                        node joining a running job enters at
//                                        the next step boundary); refused with
//                                        the reason beyond --max-nodes, for
//                                        another troupe version or job file,
//                                        or while its host is cooling down;
//                                        role: "worker" or "ps-task" (NodeRole)
//   ready, index, data address, devices, nccl -> ok
//                                        the node's data plane listens; nccl
//                                        is "" when NCCL loads there, else
//                                        why not (the coordinator picks the
//                                        view's collective from it); the
//                                        listener hears (ready, ReadyNode)
//   leave, index, why             -> ok  a worker leaving on its own (SIGTERM,
//                                        SIGINT): the listener hears (drain,
//                                        index, why) and removes it at the next
//                                        step boundary; no step is lost
//   drain, index                        the coordinator let the node go: its
//                                        end is not a failure
//   done                          -> ok  the job is over: nodes that go are
//                                        no longer lost
// A node whose handle goes down (its process died, its link timed out on
// heartbeats) is lost: (node_lost, index, what) to the listener, once.
// Views (numbered memberships) are the coordinator actor's: see
// actors/coordinator/coordinator.hpp, "Membership views".
//
// Cool-down: a host whose nodes were lost 3 times within 10 minutes is
// refused for 60 s, then 120 s, 240 s, ... (logged with its name), so a
// node that crashes in a loop does not make the job change views forever.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "actors/messages.hpp"

namespace troupe::actors {

// A worker that leaves on its own (SIGINT, SIGTERM) says so first:
// (leave, index, why) to the membership actor, which answers ok.
using leave_atom = caf::atom_constant<caf::atom("leave")>;

// The nodes that are gone (lost or left): the membership actor writes, the
// hooks read when they tell the nodes the job is over (a request to a node
// that is gone would only wait for its timeout).
struct GoneNodes {
  std::mutex mutex;
  std::set<int> indices;
  void add(int index) {
    std::lock_guard<std::mutex> lock(mutex);
    indices.insert(index);
  }
  bool contains(int index) {
    std::lock_guard<std::mutex> lock(mutex);
    return indices.count(index) > 0;
  }
};

struct Member {
  int index = 0;
  std::string name;
  NodeRole role = NodeRole::worker;
  caf::actor handle;
  bool ready = false;
  bool leaving = false;  // said it leaves: its end is not a failure
};

// Repeated failures of one host (a node's name without its pid).
struct HostRecord {
  std::vector<std::chrono::steady_clock::time_point> failures;
  int strikes = 0;
  std::chrono::steady_clock::time_point refused_until{};
};

struct MembershipState {
  std::string fingerprint, job_text;
  caf::actor listener;
  std::function<void(const std::string&)> log;
  std::shared_ptr<std::atomic<bool>> started;
  int next_index = 1;
  int max_nodes = 0;     // the coordinator included; 0: no limit
  bool closing = false;  // the job is over: nodes leaving are not lost
  std::vector<Member> members;
  std::shared_ptr<GoneNodes> gone;
  std::map<std::string, HostRecord> hosts;
  int failures_for_cooldown = 3;
  std::chrono::seconds failure_window{600}, first_cooldown{60};
  static inline const char* name = "membership";
};

// The protocol above, checked by the compiler on both sides: a worker
// connects with remote_actor<membership_actor_t>, which also refuses, when
// it connects, a peer whose interface differs. (What the listener hears goes
// by anon_send: a typed actor may send() only to typed actors, and the
// listener, Job::run's loop, is dynamically typed.)
using membership_actor_t = caf::typed_actor<
    caf::replies_to<join_atom, std::string, std::string, std::string, std::string>::with<bool, std::int32_t,
                                                                                         std::string>,
    caf::replies_to<ready_atom, std::int32_t, std::string, std::vector<std::string>, std::string>::with<caf::ok_atom>,
    caf::replies_to<leave_atom, std::int32_t, std::string>::with<caf::ok_atom>,
    caf::replies_to<drain_atom, std::int32_t>::with<caf::ok_atom>, caf::replies_to<done_atom>::with<caf::ok_atom>>;

membership_actor_t::behavior_type membership_actor(membership_actor_t::stateful_pointer<MembershipState> self,
                                                   MembershipState init);

}  // namespace troupe::actors
