#include "actors/control_front.hpp"

#include <map>

namespace troupe::actors {
namespace {

// Requests asked and not yet answered, by a number of the front's own:
// answered 409 when the front exits, so no caller waits for a job that has
// ended. Shared with the exit functor, which runs after the actor's state
// is gone.
struct Waiting {
  std::map<std::uint64_t, ControlRequestPtr> requests;
  std::uint64_t next = 0;
};

using Front = control_front_t::pointer;

control_front_t::behavior_type front(Front self, coordinator_actor_t coordinator, caf::actor job_thread,
                                     std::chrono::milliseconds answer_within) {
  auto waiting = std::make_shared<Waiting>();
  self->attach_functor([waiting] {
    for (auto& [id, r] : waiting->requests) r->answer(ControlReply{409, "the job has finished"});
    waiting->requests.clear();
  });
  return {
      [=](ControlRequestPtr r) {
        const std::uint64_t id = waiting->next++;
        waiting->requests.emplace(id, r);
        auto answer = [=](ControlReply c) {
          r->answer(std::move(c));
          waiting->requests.erase(id);
        };
        auto on_error = [=](caf::error& e) {
          answer(ControlReply{504, "no answer from the coordinator: " + self->system().render(e)});
        };
        auto on_reply = [=](ControlReply& c) { answer(std::move(c)); };
        // A switch, a checkpoint or a stop is answered when it is done, at
        // the next step boundary; an asker who waits less hears before then
        // that it is pending (the coordinator has it and carries it out).
        const bool pending_answer = r->wait && *r->wait < answer_within && r->kind != ControlRequest::Kind::drain &&
                                    r->kind != ControlRequest::Kind::status;
        const auto within = pending_answer ? *r->wait : answer_within;
        auto on_wait_error = [=](caf::error& e) {
          if (pending_answer && e == caf::sec::request_timeout) {
            const char* what = r->kind == ControlRequest::Kind::mode         ? "switches to "
                               : r->kind == ControlRequest::Kind::checkpoint ? "writes a checkpoint"
                                                                             : "stops";
            answer(ControlReply{202, std::string("pending: the coordinator has the request and ") + what +
                                         (r->kind == ControlRequest::Kind::mode ? r->argument : std::string()) +
                                         " at the next step boundary, not reached within " +
                                         std::to_string(within.count()) +
                                         " ms; troupe ctl status shows when it has (mode, step)"});
            return;
          }
          on_error(e);
        };
        switch (r->kind) {
          case ControlRequest::Kind::status:
            self->request(coordinator, answer_within, status_atom::value)
                .then(
                    [=](std::string& json) {
                      answer(ControlReply{200, std::move(json)});
                    },
                    on_error);
            break;
          case ControlRequest::Kind::mode:
            self->request(coordinator, within, mode_atom::value, r->argument).then(on_reply, on_wait_error);
            break;
          case ControlRequest::Kind::checkpoint:
            self->request(coordinator, within, checkpoint_atom::value).then(on_reply, on_wait_error);
            break;
          case ControlRequest::Kind::stop:
            self->request(coordinator, within, stop_atom::value).then(on_reply, on_wait_error);
            break;
          case ControlRequest::Kind::drain:
            self->request(job_thread, answer_within, drain_atom::value, r->argument).then(on_reply, on_error);
            break;
        }
      },
  };
}

}  // namespace

control_front_t spawn_control_front(caf::actor_system& system, coordinator_actor_t coordinator, caf::actor job_thread,
                                    std::chrono::milliseconds answer_within) {
  return system.spawn(front, std::move(coordinator), std::move(job_thread), answer_within);
}

}  // namespace troupe::actors
