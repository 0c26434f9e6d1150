// JobMetrics: what GET /metrics tells of a running job, in the Prometheus
// text format (net/control/prometheus.hpp). docs/USER-GUIDE.md, "Prometheus
// metrics", lists every series.
//
// The values are gathered where they already are, never asked for:
//   the job's Callbacks (watch), on the coordinator's thread: step, epoch,
//       loss, samples/s, test accuracy, mode, world size: the figures the
//       --metrics rows and the TensorBoard scalars get;
//   each step report the coordinator accepts (record_step): the step's time
//       and its all-reduce or push time, measured by the device actor on its
//       own node (StepReport::step_seconds, wait_seconds);
//   the parameter server, at each push it applies (record_push_staleness),
//       when its shards run in the coordinator's process; when they run on
//       ps tasks (staleness_from_reports), each push's staleness as shard 0
//       answered it to the pusher, from the step report;
//   the job's thread, for each membership view (set_nodes): which node
//       holds which ranks, so cluster series carry a `node` label.
// The control endpoint's handler thread renders them (prometheus_text) at
// any time without asking an actor, so a scrape is answered even while the
// job's thread is busy forming a view or the coordinator sits at a step
// boundary. One mutex guards everything; a step takes it once or twice for
// a few increments, which is nothing beside a step.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "actors/mode.hpp"
#include "models/trainer.hpp"
#include "net/control/prometheus.hpp"

namespace troupe::actors {

class JobMetrics {
 public:
  // The mode the job starts in and its replicas. A cluster's (`cluster`
  // true) are known once its nodes joined (set_nodes): until then it
  // reports 0 nodes and 0 replicas.
  JobMetrics(const Mode& mode, int replicas, bool cluster = false);

  // Chains onto `cb` (after what it already does): step, epoch, loss,
  // samples/s, test accuracy and loss, mode switches, world size.
  void watch(models::Callbacks& cb);

  // A cluster's nodes in membership view `view` (their ranks). Never called
  // on one host: its series then carry no `node` label.
  void set_nodes(std::uint32_t view, const std::vector<NodeInfo>& nodes);
  // A step report the coordinator accepted. One of a view other than the
  // last set_nodes (a moment at a view change) is left out.
  void record_step(const StepReport& report);
  // A push the parameter server applied: `updates` it had applied since the
  // pusher last received parameters (its staleness), from rank `rank` of
  // view `view`.
  void record_push_staleness(std::uint32_t view, int rank, std::int64_t updates);
  // The shards run on ps tasks, out of reach of record_push_staleness: from
  // now on record_step records each push's staleness from its report
  // (StepReport::staleness, when measured).
  void staleness_from_reports();
  // Shards on ps tasks placed anew while the job ran (a ps task lost or
  // leaving), and what state the job then restored.
  enum class Restored { none, gathered, rollback };
  //   none       sync mode: the replicas held the state, nothing restored
  //   gathered   the state gathered at that step boundary (nothing lost)
  //   rollback   the newest checkpoint or the start (steps trained again)
  void record_shards_placed(Restored restored);

  std::string prometheus_text() const;

  // Upper bounds (seconds, or updates for staleness): wide enough for a
  // small model's millisecond steps on a CPU and a large one's seconds.
  static const std::vector<double>& step_bounds();
  static const std::vector<double>& wait_bounds();
  static const std::vector<double>& staleness_bounds();

 private:
  bool staleness_from_reports_ = false;
  struct NodeSeries {
    net::prometheus::Histogram step, allreduce, push, staleness;
    double examples = 0;  // a counter: examples its replicas trained on
  };
  int node_of(std::uint32_t view, int rank) const;  // -2: another view; -1: one host
  NodeSeries& series(int node);                     // created on first use

  mutable std::mutex mutex_;
  Mode mode_;
  int replicas_;
  std::optional<double> step_, epoch_, loss_, samples_per_s_, test_accuracy_, test_loss_;
  // Cluster: the current view's nodes, each rank's node and last clock.
  bool cluster_ = false;
  std::uint32_t view_ = 0;
  std::vector<NodeInfo> nodes_;
  std::vector<int> rank_node_;
  std::vector<std::int64_t> rank_clock_;   // -1: no report in this view yet
  std::map<int, std::int64_t> node_step_;  // a node's slowest replica's clock
  // Placements of the shards while the job ran, by what they restored;
  // shown once the job has ps tasks (staleness_from_reports).
  double placed_none_ = 0, placed_gathered_ = 0, placed_rollback_ = 0;
  // By node (-1 on one host). A node that left keeps its histograms and
  // counters: they are cumulative, and Prometheus keeps what it scraped.
  std::map<int, NodeSeries> by_node_;
};

}  // namespace troupe::actors
