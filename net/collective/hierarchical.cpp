#include "net/collective/hierarchical.hpp"

#include "kernels/ops.hpp"

namespace troupe::net {

namespace {

class HierarchicalCollective final : public Collective {
 public:
  HierarchicalCollective(std::unique_ptr<Collective> local, std::shared_ptr<Collective> across, int first_rank,
                         int world, CollectiveOptions options)
      : local_(std::move(local)),
        across_(std::move(across)),
        rank_(first_rank + local_->rank()),
        world_(world),
        options_(options) {}

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string name() const override {
    return "hierarchical(" + local_->name() + (across_ ? "+" + across_->name() : "") + ")";
  }

  std::shared_ptr<Work> allreduce(const Tensor& buffer, ReduceOp op) override {
    return run([&](Deadline deadline) {
      local_->allreduce(buffer, ReduceOp::sum)->wait(deadline);
      if (leads())
        on_host(buffer, [&](const Tensor& host) { across_->allreduce(host, ReduceOp::sum)->wait(deadline); });
      local_->broadcast(buffer, 0)->wait(deadline);
      if (op == ReduceOp::mean) kernels::ops::scale(buffer, 1.0f / static_cast<float>(world_));
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& buffer, int root) override {
    if (root != 0) return invalid("broadcast from rank " + std::to_string(root) + " (only rank 0 is supported)");
    return run([&](Deadline deadline) {
      if (leads()) on_host(buffer, [&](const Tensor& host) { across_->broadcast(host, 0)->wait(deadline); });
      local_->broadcast(buffer, 0)->wait(deadline);
    });
  }

  std::shared_ptr<Work> barrier() override {
    return run([&](Deadline deadline) {
      local_->barrier()->wait(deadline);
      if (leads()) across_->barrier()->wait(deadline);
      local_->barrier()->wait(deadline);
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor&, const Tensor&, ReduceOp) override {
    return invalid("reduce_scatter");
  }
  std::shared_ptr<Work> allgather(const Tensor&, const Tensor&) override { return invalid("allgather"); }
  std::shared_ptr<Work> send(const Tensor&, int, int) override { return invalid("send"); }
  std::shared_ptr<Work> recv(const Tensor&, int, int) override { return invalid("recv"); }

  void abort(const std::string& reason) override {
    local_->abort(reason);
    if (across_) across_->abort(reason);
  }

 private:
  bool leads() const { return local_->rank() == 0 && across_ && across_->size() > 1; }

  template <class Body>
  std::shared_ptr<Work> run(Body body) {
    try {
      body(Clock::now() + options_.timeout);
      return completed_work();
    } catch (const CollectiveError& e) {
      // A failure on one level breaks the other too: the node's replicas
      // must not wait for a leader whose ring failed, nor the ring for a
      // node whose local group failed.
      abort(e.what());
      return completed_work(std::current_exception());
    }
  }

  template <class Body>
  static void on_host(const Tensor& buffer, Body body) {
    if (buffer.device().is_cpu()) {
      body(buffer);
      return;
    }
    Tensor host = buffer.to(kernels::Device::cpu());
    body(host);
    buffer.copy_from(host);
  }

  std::shared_ptr<Work> invalid(const std::string& what) const {
    return completed_work(std::make_exception_ptr(CollectiveError(
        CollectiveErrorKind::invalid, what + " on rank " + std::to_string(rank_) + " of " + std::to_string(world_) +
                                          ": not supported by the hierarchical group")));
  }

  std::unique_ptr<Collective> local_;
  std::shared_ptr<Collective> across_;
  int rank_, world_;
  CollectiveOptions options_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> make_hierarchical_group(std::vector<std::unique_ptr<Collective>> local,
                                                                 std::shared_ptr<Collective> across, int first_rank,
                                                                 int world, CollectiveOptions options) {
  if (first_rank < 0 || first_rank + static_cast<int>(local.size()) > world)
    throw std::invalid_argument("hierarchical group: ranks " + std::to_string(first_rank) + ".." +
                                std::to_string(first_rank + static_cast<int>(local.size()) - 1) +
                                " do not fit a world of " + std::to_string(world));
  std::vector<std::unique_ptr<Collective>> out;
  for (auto& member : local)
    out.push_back(std::make_unique<HierarchicalCollective>(std::move(member), across, first_rank, world, options));
  return out;
}

}  // namespace troupe::net
