// The coordinator actor's status JSON (`troupe ctl status`, GET /status).
#include "actors/coordinator/state.hpp"

#include <nlohmann/json.hpp>

namespace troupe::actors::coord {

// Written with nlohmann-json: names and addresses are escaped, and a
// non-finite number (a diverged loss) becomes null, never a bare nan.
std::string status_json(const CoordinatorState& s) {
  using Json = nlohmann::ordered_json;
  const double t = s.train_seconds + (s.busy || !s.started ? 0.0 : seconds(Clock::now() - s.t_resume));
  Json out;
  out["step"] = s.global_step;
  out["epoch"] = s.epoch;
  out["epochs"] = s.config.epochs;
  out["mode"] = s.mode.str();
  out["replicas"] = s.config.replicas;
  out["replica_clocks"] = s.clocks;
  out["samples_per_s"] = t > 0 ? double(s.examples) / t : 0.0;
  out["last_loss"] = s.last_loss;
  out["lr"] = double(s.last_lr);
  // null until the first evaluation, and where not measured (no test data;
  // accuracy in regression, mae in classification): a 0 would read as a
  // result. nlohmann-json writes a NaN as null.
  const models::EpochResult none;
  const models::EpochResult& last = s.result.epochs.empty() ? none : s.result.epochs.back();
  out["accuracy"] = last.test_accuracy;
  out["test_loss"] = last.test_loss;
  out["test_mae"] = last.test_mae;
  out["pushes"] = s.result.pushes;
  out["sync_steps"] = s.result.sync_steps;
  if (s.config.ps_tasks) out["rollbacks"] = s.result.rollbacks.size();
  out["state"] = s.finished  ? "finished"
                 : s.paused  ? "paused: " + s.pause_reason
                 : s.busy    ? "at a step boundary"
                 : s.pausing ? "pausing"
                             : "training";
  if (s.config.elastic) {
    out["view"] = s.view;
    out["stale_reports"] = s.stale_reports;
    out["rolled_forward"] = s.result.rolled_forward;
  }
  if (!s.config.nodes.empty()) {
    // Every node of a cluster: its devices, its step (its slowest replica's
    // clock) and its samples/s.
    Json nodes = Json::array();
    for (const NodeInfo& node : s.config.nodes) {
      std::int64_t step = kNever, examples = 0;
      for (int r = node.first_rank; r < node.first_rank + node.replicas; ++r) {
        step = std::min(step, s.clocks[static_cast<std::size_t>(r)]);
        examples += s.rank_examples[static_cast<std::size_t>(r)];
      }
      Json entry;
      entry["index"] = node.index;
      entry["name"] = node.name;
      entry["address"] = node.address;
      entry["devices"] = node.devices;
      entry["ranks"] = {node.first_rank, node.first_rank + node.replicas - 1};
      entry["step"] = node.replicas ? step : 0;
      entry["samples_per_s"] = t > 0 ? double(examples) / t : 0.0;
      nodes.push_back(std::move(entry));
    }
    out["nodes"] = std::move(nodes);
  }
  if (!s.config.links.empty()) out["links"] = s.config.links;
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace troupe::actors::coord
