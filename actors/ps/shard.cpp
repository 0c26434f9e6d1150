#include "actors/ps/shard.hpp"

#include <algorithm>
#include <stdexcept>

namespace troupe::actors::ps {

ShardCore::ShardCore(ShardConfig config)
    : config_(std::move(config)),
      master_(Tensor::zeros({config_.size})),
      optimizer_(models::make_optimizer(config_.optimizer, master_, config_.decayed)) {
  clocks_.assign(static_cast<std::size_t>(config_.replicas), 0);
  pulled_at_.assign(clocks_.size(), 0);
}

// After a switch to async (every replica holds the state the server just
// took), and at a new view, whose ranks are numbered anew (a survivor's
// first push then looks fresher than it is, once per view change). Not at
// `position`: that comes at every step boundary, where async replicas keep
// older parameters.
void ShardCore::everyone_pulled() { pulled_at_.assign(clocks_.size(), counters_.applied); }

AppliedPush ShardCore::apply(const GradientPush& push) {
  Tensor fresh;
  const std::int64_t staleness = apply(push, [&fresh](const Tensor& part) { fresh = part.clone(); });
  return AppliedPush(std::move(fresh), staleness);
}

std::int64_t ShardCore::apply(const GradientPush& push, const std::function<void(const Tensor& fresh)>& read_fresh) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!closed_.empty()) throw std::runtime_error(closed_);
  // A push from a view that has ended (a node removed while it was
  // computing, or one that was stopped and came back) is never applied.
  if (push.gradient.numel() != master_.numel()) {
    ++counters_.dropped;
    throw std::runtime_error("push from replica " + std::to_string(push.rank) +
                             " dropped: " + std::to_string(push.gradient.numel()) + " floats for shard " +
                             std::to_string(config_.index) + " of " + std::to_string(master_.numel()));
  }
  if (push.view != view_ || push.rank < 0 || static_cast<std::size_t>(push.rank) >= clocks_.size()) {
    ++counters_.dropped;
    throw std::runtime_error("push from replica " + std::to_string(push.rank) + " of view " +
                             std::to_string(push.view) + " dropped: the job is in view " + std::to_string(view_));
  }
  const std::int64_t slowest = *std::min_element(clocks_.begin(), clocks_.end());
  counters_.max_lead = std::max(counters_.max_lead, (push.clock - 1) - slowest);
  const float lr = config_.schedule->at(position_.global_step + applied_since_position_, position_.epoch);
  optimizer_->step(master_, push.gradient, lr);
  const auto rank = static_cast<std::size_t>(push.rank);
  const std::int64_t staleness = counters_.applied - pulled_at_[rank];
  counters_.staleness_sum += staleness;
  counters_.staleness_max = std::max(counters_.staleness_max, staleness);
  if (config_.record_staleness) config_.record_staleness(push.view, push.rank, staleness);
  ++applied_since_position_;
  ++counters_.applied;
  clocks_[rank] = push.clock;
  pulled_at_[rank] = counters_.applied;  // the answer below
  read_fresh(master_);
  return staleness;
}

ReplicaState ShardCore::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ReplicaState out;
  out.clock = position_.global_step + applied_since_position_;
  out.parameters = master_.clone();
  for (const auto& [name, buffer] : optimizer_->buffers()) out.buffers.emplace_back(name, buffer.clone());
  out.scalars = optimizer_->scalars();
  out.replica_clocks = clocks_;
  return out;
}

void ShardCore::set_state(const ReplicaState& state) {
  std::lock_guard<std::mutex> lock(mutex_);
  restore_state(master_, *optimizer_, state);
  everyone_pulled();
}

void ShardCore::set_position(const Position& position, const std::vector<std::int64_t>& clocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  position_ = position;
  applied_since_position_ = 0;
  clocks_ = clocks;
  if (pulled_at_.size() != clocks_.size()) everyone_pulled();
}

void ShardCore::reconfig(std::uint32_t view, const std::vector<std::int64_t>& clocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  view_ = view;
  clocks_ = clocks;
  everyone_pulled();
}

ServerCounters ShardCore::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ServerCounters c = counters_;
  c.shard_applied = {c.applied};
  return c;
}

void ShardCore::close(std::string why) {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = std::move(why);
}

std::string ShardCore::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

std::function<AppliedPush(int shard, GradientPush push)> shard_apply(std::map<int, std::shared_ptr<ShardCore>> shards) {
  return [shards = std::move(shards)](int shard, GradientPush push) {
    const auto found = shards.find(shard);
    if (found == shards.end()) throw std::runtime_error("shard " + std::to_string(shard) + " is not hosted here");
    return found->second->apply(push);
  };
}

}  // namespace troupe::actors::ps
