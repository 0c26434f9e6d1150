#include "actors/messages.hpp"

namespace troupe::actors {

void register_message_types(caf::actor_system_config& config) {
  config.add_message_type<kernels::Tensor>("troupe::Tensor");
  config.add_message_type<Mode>("troupe::Mode");
  config.add_message_type<Grant>("troupe::Grant");
  config.add_message_type<StepReport>("troupe::StepReport");
  config.add_message_type<GradientPush>("troupe::GradientPush");
  config.add_message_type<ReplicaState>("troupe::ReplicaState");
  config.add_message_type<ReplicaPosition>("troupe::ReplicaPosition");
  config.add_message_type<FormView>("troupe::FormView");
  // Between the parameter server's front and shards on ps tasks.
  config.add_message_type<Position>("troupe::Position");
  config.add_message_type<ServerCounters>("troupe::ServerCounters");
  config.add_message_type<std::vector<std::int64_t>>("std::vector<std::int64_t>");
  config.add_message_type<std::vector<std::int32_t>>("std::vector<std::int32_t>");
}

const char* role_text(NodeRole role) { return role == NodeRole::ps_task ? "ps-task" : "worker"; }

NodeRole parse_role(const std::string& text) {
  if (text == "worker") return NodeRole::worker;
  if (text == "ps-task") return NodeRole::ps_task;
  throw std::invalid_argument("unknown node role '" + text + "'; a node is a worker or a ps-task");
}

void restore_state(const Tensor& parameters, models::Optimizer& optimizer, const ReplicaState& state) {
  parameters.copy_from(state.parameters);
  for (const auto& [name, buffer] : optimizer.buffers()) {
    for (const auto& [saved_name, saved] : state.buffers)
      if (saved_name == name) buffer.copy_from(saved);
  }
  for (const auto& [name, value] : state.scalars) optimizer.set_scalar(name, value);
}

void restore_model_state(models::Model& model, const Tensor& state) {
  if (!state.defined() || model.state_count() == 0) return;
  if (state.numel() != model.state_count())
    throw std::invalid_argument("a model state of " + std::to_string(state.numel()) +
                                " values for a model that keeps " + std::to_string(model.state_count()));
  Tensor target = model.state();
  target.copy_from(state);
}

}  // namespace troupe::actors
