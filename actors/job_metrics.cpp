#include "actors/job_metrics.hpp"

#include <algorithm>
#include <utility>

namespace troupe::actors {

namespace prom = net::prometheus;

const std::vector<double>& JobMetrics::step_bounds() {
  static const std::vector<double> b{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  return b;
}
const std::vector<double>& JobMetrics::wait_bounds() {
  // An all-reduce among the replicas of one host takes tens of microseconds.
  static const std::vector<double> b{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                     0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  return b;
}
const std::vector<double>& JobMetrics::staleness_bounds() {
  // Async with W replicas sees about W - 1 updates between a pull and a push.
  static const std::vector<double> b{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128};
  return b;
}

JobMetrics::JobMetrics(const Mode& mode, int replicas, bool cluster)
    : mode_(mode), replicas_(cluster ? 0 : replicas), cluster_(cluster) {
  if (!cluster_) series(-1);  // one host: the histograms exist (empty) from the start
}

JobMetrics::NodeSeries& JobMetrics::series(int node) {
  auto it = by_node_.find(node);
  if (it == by_node_.end()) {
    NodeSeries n{prom::Histogram(step_bounds()), prom::Histogram(wait_bounds()), prom::Histogram(wait_bounds()),
                 prom::Histogram(staleness_bounds()), 0};
    it = by_node_.emplace(node, std::move(n)).first;
  }
  return it->second;
}

void JobMetrics::watch(models::Callbacks& cb) {
  cb.on_epoch_begin = [this, next = cb.on_epoch_begin](std::int64_t epoch, std::int64_t steps, float lr) {
    if (next) next(epoch, steps, lr);
    std::lock_guard<std::mutex> lock(mutex_);
    epoch_ = static_cast<double>(epoch);
  };
  cb.on_step_end = [this, next = cb.on_step_end](const models::StepEnd& e) {
    if (next) next(e);
    std::lock_guard<std::mutex> lock(mutex_);
    step_ = static_cast<double>(e.step);
    loss_ = e.loss;
    samples_per_s_ = e.samples_per_s;
  };
  cb.on_evaluate = [this, next = cb.on_evaluate](const models::EpochResult& r) {
    if (next) next(r);
    std::lock_guard<std::mutex> lock(mutex_);
    test_accuracy_ = r.test_accuracy;
    test_loss_ = r.test_loss;
  };
  cb.on_mode_switch = [this, next = cb.on_mode_switch](std::int64_t step, const std::string& mode) {
    if (next) next(step, mode);
    const Mode m = Mode::parse(mode);  // the coordinator's own Mode::str(): always parses
    std::lock_guard<std::mutex> lock(mutex_);
    mode_ = m;
  };
  cb.on_view_change = [this, next = cb.on_view_change](std::int64_t step, int view, int world, std::int64_t steps) {
    if (next) next(step, view, world, steps);
    std::lock_guard<std::mutex> lock(mutex_);
    replicas_ = world;
  };
}

void JobMetrics::set_nodes(std::uint32_t view, const std::vector<NodeInfo>& nodes) {
  std::lock_guard<std::mutex> lock(mutex_);
  by_node_.erase(-1);  // a cluster labels every series with its node
  cluster_ = true;
  view_ = view;
  nodes_ = nodes;
  int world = 0;
  for (const NodeInfo& n : nodes) world = std::max(world, n.first_rank + n.replicas);
  rank_node_.assign(static_cast<std::size_t>(world), -1);
  rank_clock_.assign(static_cast<std::size_t>(world), -1);
  replicas_ = 0;
  for (const NodeInfo& n : nodes) {
    for (int r = n.first_rank; r < n.first_rank + n.replicas; ++r) rank_node_[static_cast<std::size_t>(r)] = n.index;
    replicas_ += n.replicas;
    series(n.index);
  }
}

int JobMetrics::node_of(std::uint32_t view, int rank) const {
  if (!cluster_) return -1;
  if (view != view_ || rank < 0 || static_cast<std::size_t>(rank) >= rank_node_.size()) return -2;
  return rank_node_[static_cast<std::size_t>(rank)];
}

void JobMetrics::record_step(const StepReport& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int node = node_of(r.view, r.rank);
  if (node == -2) return;
  NodeSeries& s = series(node);
  s.step.observe(r.step_seconds);
  (r.pushed ? s.push : s.allreduce).observe(r.wait_seconds);
  if (r.pushed && staleness_from_reports_ && r.staleness >= 0) s.staleness.observe(static_cast<double>(r.staleness));
  s.examples += static_cast<double>(r.examples);
  if (!cluster_) return;
  // The node's step is its slowest replica's clock, as /status shows it.
  rank_clock_[static_cast<std::size_t>(r.rank)] = r.clock;
  std::int64_t slowest = -1;
  for (std::size_t k = 0; k < rank_node_.size(); ++k)
    if (rank_node_[k] == node && rank_clock_[k] >= 0 && (slowest < 0 || rank_clock_[k] < slowest))
      slowest = rank_clock_[k];
  if (slowest >= 0) node_step_[node] = slowest;
}

void JobMetrics::staleness_from_reports() {
  std::lock_guard<std::mutex> lock(mutex_);
  staleness_from_reports_ = true;
}

void JobMetrics::record_shards_placed(Restored restored) {
  std::lock_guard<std::mutex> lock(mutex_);
  switch (restored) {
    case Restored::none:
      placed_none_ += 1;
      break;
    case Restored::gathered:
      placed_gathered_ += 1;
      break;
    case Restored::rollback:
      placed_rollback_ += 1;
      break;
  }
}

void JobMetrics::record_push_staleness(std::uint32_t view, int rank, std::int64_t updates) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int node = node_of(view, rank);
  if (node == -2) return;
  series(node).staleness.observe(static_cast<double>(updates));
}

std::string JobMetrics::prometheus_text() const {
  using prom::Family;
  using prom::Type;
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Family> f;
  auto gauge = [&](const char* name, const char* help, std::optional<double> value) {
    Family g{name, help, Type::gauge, {}, {}};
    if (value) g.values.push_back({{}, *value});
    f.push_back(std::move(g));
  };
  gauge("troupe_step",
        "The global step: updates applied to the model (one per synchronous step, one per applied push).", step_);
  gauge("troupe_epoch", "The epoch in progress, counted from 0 as in /status and the --metrics rows.", epoch_);
  gauge("troupe_samples_per_second", "Training examples per second over the epoch so far, all replicas together.",
        samples_per_s_);
  gauge("troupe_loss", "The mean training loss over the epoch so far (as the progress bar and the --metrics rows).",
        loss_);
  gauge("troupe_test_accuracy", "Top-1 accuracy on the test split at the last evaluation.", test_accuracy_);
  gauge("troupe_test_loss", "Loss on the test split at the last evaluation.", test_loss_);
  Family mode{"troupe_mode", "1 for the update mode the job is in, 0 for the others.", Type::gauge, {}, {}};
  for (const auto& [name, kind] : {std::pair<const char*, Mode::Kind>{"sync", Mode::Kind::sync},
                                   {"async", Mode::Kind::async},
                                   {"ssp", Mode::Kind::ssp}})
    mode.values.push_back({{{"mode", name}}, mode_.kind == kind ? 1.0 : 0.0});
  f.push_back(std::move(mode));
  gauge("troupe_ssp_bound", "N of the mode ssp:N (steps a replica may run ahead of the slowest); 0 in sync and async.",
        static_cast<double>(mode_.kind == Mode::Kind::ssp ? mode_.staleness : 0));
  gauge("troupe_nodes",
        "Nodes (hosts) in the job's current membership view; 1 for a job on one host, 0 while a "
        "cluster gathers its first nodes.",
        static_cast<double>(cluster_ ? nodes_.size() : 1));
  gauge("troupe_replicas", "Model replicas in the job's current membership view, all nodes together.",
        static_cast<double>(replicas_));
  if (cluster_) {
    gauge("troupe_view", "The number of the current membership view (it grows by one at every change).",
          static_cast<double>(view_));
    Family info{"troupe_node_info",
                "1 for each node of the current view, with its name and data-plane address.",
                Type::gauge,
                {},
                {}};
    Family replicas{
        "troupe_node_replicas", "Replicas (devices) of each node of the current view.", Type::gauge, {}, {}};
    Family step{"troupe_node_step",
                "Steps the slowest replica of each node of the current view has completed.",
                Type::gauge,
                {},
                {}};
    for (const NodeInfo& n : nodes_) {
      const std::string node = std::to_string(n.index);
      info.values.push_back({{{"node", node}, {"name", n.name}, {"address", n.address}}, 1});
      replicas.values.push_back({{{"node", node}}, static_cast<double>(n.replicas)});
      if (auto it = node_step_.find(n.index); it != node_step_.end())
        step.values.push_back({{{"node", node}}, static_cast<double>(it->second)});
    }
    f.push_back(std::move(info));
    f.push_back(std::move(replicas));
    f.push_back(std::move(step));
  }
  if (staleness_from_reports_) {
    Family placed{"troupe_ps_placements_total",
                  "Placements of the parameter-server shards on the ps tasks while the job ran (a ps task lost or "
                  "leaving): restored=\"rollback\" went back to the newest checkpoint or the start (its steps are "
                  "trained again), restored=\"gathered\" restored the state gathered at that step boundary, "
                  "restored=\"none\" was in sync mode (the replicas held the state).",
                  Type::counter,
                  {},
                  {}};
    placed.values.push_back({{{"restored", "rollback"}}, placed_rollback_});
    placed.values.push_back({{{"restored", "gathered"}}, placed_gathered_});
    placed.values.push_back({{{"restored", "none"}}, placed_none_});
    f.push_back(std::move(placed));
  }
  Family examples{"troupe_examples_total",
                  "Training examples the replicas have trained on, as their step reports "
                  "said; rate() gives samples per second.",
                  Type::counter,
                  {},
                  {}};
  Family step{"troupe_step_seconds",
              "Wall time of one training step on a replica: waiting for its batch, forward, "
              "backward, all-reduce or push, optimizer.",
              Type::histogram,
              {},
              {}};
  Family allreduce{"troupe_allreduce_seconds",
                   "Time a synchronous step waited for its gradient all-reduce.",
                   Type::histogram,
                   {},
                   {}};
  Family push{"troupe_push_seconds",
              "Push latency: from sending a gradient to the parameter server (async, ssp) to "
              "receiving its fresh parameters.",
              Type::histogram,
              {},
              {}};
  Family staleness{"troupe_push_staleness",
                   "Updates the parameter server applied between a replica's receiving "
                   "parameters and its next push being applied (the push's staleness).",
                   Type::histogram,
                   {},
                   {}};
  for (const auto& [node, s] : by_node_) {
    const prom::Labels labels = node < 0 ? prom::Labels{} : prom::Labels{{"node", std::to_string(node)}};
    examples.values.push_back({labels, s.examples});
    step.histograms.push_back({labels, s.step});
    allreduce.histograms.push_back({labels, s.allreduce});
    push.histograms.push_back({labels, s.push});
    staleness.histograms.push_back({labels, s.staleness});
  }
  f.push_back(std::move(examples));
  f.push_back(std::move(step));
  f.push_back(std::move(allreduce));
  f.push_back(std::move(push));
  f.push_back(std::move(staleness));
  return prom::exposition(f);
}

}  // namespace troupe::actors
