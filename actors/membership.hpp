// The membership actor (on the coordinator node): admits nodes to the job
// and watches them. One per cluster job, published on 127.0.0.1 behind the
// gate (net/cluster/gate.hpp), so every node that reaches it passed the
// secret handshake.
//
// Protocol:
//   join, name, version, fingerprint -> (admitted, index, job text or why not)
//                                        a node asks to join; refused with the
//                                        reason once training started, beyond
//                                        --max-nodes, for another troupe
//                                        version or job file
//   ready, index, data address, devices -> ok
//                                        the node's data plane listens; the
//                                        listener hears (ready, index, name,
//                                        address, devices, handle)
//   leave, index, why             -> ok  a worker leaving on its own (a signal)
//   done                          -> ok  the job is over: nodes that go are
//                                        no longer lost
// A node whose handle goes down (its process died, its link timed out on
// heartbeats) is lost: (node_lost, index, what) to the listener, once.
// Membership is fixed once training starts (elastic views are future work,
// see docs/ARCHITECTURE.md).
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <functional>
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
  caf::actor handle;
  bool ready = false;
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
  static inline const char* name = "membership";
};

caf::behavior membership_actor(caf::stateful_actor<MembershipState>* self, MembershipState init);

}  // namespace troupe::actors
