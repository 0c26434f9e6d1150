// The job's control front: how a request from outside the actor system
// (troupe ctl through the HTTP control server, the C++ API's Strategy)
// reaches the coordinator. The caller's thread hands the request to this
// actor with caf::anon_send (safe from any thread, creates no actor there),
// and the front asks the coordinator at once: the request is in the
// coordinator's mailbox within microseconds, not at the job thread's next
// look. A drain goes to the job's thread first, which alone knows the ps
// tasks (their shards move, ClusterHooks); it answers or hands the request
// on to the coordinator.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "actors/coordinator/coordinator.hpp"  // ControlReply
#include "actors/messages.hpp"

namespace troupe::actors {

// One request, answered exactly once by whoever answers first: the
// coordinator's reply, the front's deadline, or the end of the job.
class ControlRequest {
 public:
  enum class Kind { status, mode, checkpoint, stop, drain };
  ControlRequest(Kind kind, std::string argument, std::optional<std::chrono::milliseconds> wait = std::nullopt)
      : kind(kind), argument(std::move(argument)), wait(wait) {}

  const Kind kind;
  const std::string argument;  // the mode, the node to drain; else empty
  // How long the asker waits (troupe ctl's Troupe-Wait): a switch, a
  // checkpoint or a stop not done by then is answered 202, pending, instead
  // of leaving the asker to time out on a request that then takes effect.
  const std::optional<std::chrono::milliseconds> wait;

  std::future<ControlReply> reply() { return promise_.get_future(); }
  // Later answers are dropped (the request was answered already).
  void answer(ControlReply reply) {
    if (!answered_.exchange(true)) promise_.set_value(std::move(reply));
  }

 private:
  std::atomic<bool> answered_{false};
  std::promise<ControlReply> promise_;
};
using ControlRequestPtr = std::shared_ptr<ControlRequest>;

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::ControlRequestPtr)

namespace troupe::actors {

// What the front accepts: requests, and nothing else. The job's thread
// answers `(drain_atom, node)` with a ControlReply (a ps task's shards move
// at the next step boundary) or delegates it to the coordinator.
using control_front_t = caf::typed_actor<caf::reacts_to<ControlRequestPtr>>;

// `answer_within`: how long a request may wait for the coordinator (a mode
// switch or a checkpoint is answered at the next step boundary); after it
// the request is answered 504, or, for a switch, a checkpoint or a stop
// whose asker said how long it waits (ControlRequest::wait), 202 pending
// when that wait is shorter. When the front exits (the job is over) every
// request still waiting is answered 409.
control_front_t spawn_control_front(caf::actor_system& system, coordinator_actor_t coordinator, caf::actor job_thread,
                                    std::chrono::milliseconds answer_within);

}  // namespace troupe::actors
