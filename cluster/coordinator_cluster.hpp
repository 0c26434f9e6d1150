// The coordinator node's side of a cluster job (private to cluster/): the
// ClusterHooks that actors::Job calls, behind the gate and the membership
// actor. Its methods are split by what they serve (job/cluster_hooks.hpp):
//
//   coordinator_start.cpp   ClusterStart: the nodes gathered, the first
//                           view, the nodes' devices, the end.
//   coordinator_views.cpp   ClusterViews: elastic membership's views, and
//                           the data plane every view connects.
//   coordinator_shards.cpp  ClusterShards: the parameter server's shards on
//                           ps tasks, or served from this process.
//
// cluster/node.hpp's make_coordinator_cluster makes one
// (coordinator_start.cpp).
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/membership.hpp"
#include "cluster/node.hpp"
#include "cluster/node_support.hpp"
#include "job/cluster_hooks.hpp"
#include "job/job_file.hpp"
#include "net/cluster/auth.hpp"
#include "net/cluster/gate.hpp"
#include "net/collective/nccl.hpp"
#include "net/control/address.hpp"
#include "net/push/push_link.hpp"
#include "net/push/push_routes.hpp"

namespace troupe::actors {

class CoordinatorCluster final : public ClusterHooks {
 public:
  CoordinatorCluster(const NodeOptions& options, const JobConfig& job);

  ~CoordinatorCluster() override;

  void configure(caf::actor_system_config& cfg) override { node_support::configure_cluster(cfg); }

  std::vector<int> gather(caf::scoped_actor& self) override;

  // After a first view that did not form (FirstViewLost): its lost members
  // are gone, nodes that joined meanwhile are in; the job starts as soon as
  // --min-nodes are there (a loss right after the start would pause it
  // there too), on the next view number.
  std::vector<int> regather(caf::scoped_actor& self, const std::string& why) override;

  std::uint32_t first_view() const override { return first_view_; }
  bool may_start_again() const override { return first_view_ + 1 < kFirstViewTries; }
  int node_of_rank(int rank) const override;
  bool node_gone(int index) const override { return gone_->contains(index); }

  // Admits nodes and ps tasks until `nodes` nodes (this one included) and
  // --ps-tasks ps tasks are ready, within --wait-timeout; `flag` names the
  // option that asked for them in the error.
  void await_nodes(caf::scoped_actor& self, int nodes, const std::string& flag);

  // A node ready to take part: a worker, or a ps task while the job wants
  // more.
  void admit(caf::scoped_actor& self, const ReadyNode& node);

  // A node lost before the job started.
  void drop(std::int32_t index);

  // Each other node's number of replicas, in node order, logged after `what`.
  std::vector<int> counts(const std::string& what);

  std::vector<std::shared_ptr<net::Collective>> form(caf::scoped_actor& self, int local, int world,
                                                     const data::Cursor& start) override;

  std::vector<device_actor_t> remote_devices(caf::scoped_actor& self) override;

  std::vector<NodeInfo> nodes() const override { return nodes_; }
  std::string links() const override { return node_support::links_status(secret_, options_); }

  void finish(caf::scoped_actor& self, const std::string& error) override;

  // ---- elastic membership ----

  void add_joiner(const ReadyNode& node) override;

  bool forget(int index) override;

  void abort_view(caf::scoped_actor& self, const std::string& why) override;

  FormedView reform(caf::scoped_actor& self, const ViewPlan& plan, int local,
                    std::vector<std::shared_ptr<net::Collective>>& collectives) override;

  std::vector<int> newcomers() const override { return newcomers_; }

  // A view that will not form (out.error): the members lost meanwhile are
  // named, so that the coordinator forms the next view without them, and
  // the members still connecting the ring (to one that is gone, say) are
  // told (abort_view: this view's number) and give up now, waiting for the
  // next view (worker_node.cpp) instead of the connect deadline.
  FormedView give_up(caf::scoped_actor& self, FormedView& out);

  std::vector<PsTask> ps_tasks() const override { return ps_tasks_; }

  bool is_ps_task(int index) const override;

  Placement replace_shards(caf::scoped_actor& self, const ps::Partition& partition, int replicas,
                           const std::vector<int>& leaving, const models::FlatRanges& decayed) override;

  void add_spare_ps(caf::scoped_actor& self, int index, const std::string& name, const std::string& address,
                    const caf::actor& handle) override;

  bool ps_gone(int index) override;

  bool hosts_shards(int index) const override;

  void release_ps(caf::scoped_actor& self, int index, const std::string& why) override;

  void abort_pushes(caf::scoped_actor& self, const std::string& why) override;

  void serve_shards(const std::map<int, std::shared_ptr<ps::ShardCore>>& shards, const ps::Partition& partition,
                    int partition_shards) override;

  std::shared_ptr<const net::push::PushRoutes> place_shards(const std::vector<std::string>& addresses,
                                                            int partition_shards) override;

  std::vector<MemberEvent> take_events() override;

 private:
  // How the view of this host and ready_ reduces (collective_choice.hpp,
  // choose_across_nodes), logged with why: a fresh NCCL id when one NCCL
  // group spans the nodes (every view makes its own: the old view's
  // communicators are aborted, and an elastic view has other ranks), else
  // nullopt for the hierarchical group.
  std::optional<net::NcclId> choose_view_collective(std::uint32_t view);

  // Sends every member its part of the view (FormView) and records the
  // nodes (with their ranks) for status.
  void send_view(caf::scoped_actor& self, const ViewPlan& plan, int local, int world, std::int64_t batch,
                 const std::optional<net::NcclId>& nccl_id);

  // This host's side of the view's data plane: ranks 0 .. local - 1 of the
  // view's NCCL group when nccl_id is set, else the ring of node leaders (the
  // listening socket is kept across views; each view's group takes a
  // duplicate) under the local group.
  void connect_view(std::uint32_t view, int local, int world, std::vector<std::shared_ptr<net::Collective>>& out,
                    std::chrono::milliseconds connect_timeout, const std::optional<net::NcclId>& nccl_id);

  // A ps task lost while the hooks waited (forming a view, placing the
  // shards): as JobRun::node_lost does, pushes in flight fail now, and
  // the coordinator hears it with take_events().
  void lost_meanwhile(caf::scoped_actor& self, int index, const std::string& what);

  // A node the job has no use for: told the job is over for it (it exits
  // 1 with the reason) and forgotten.
  void turn_away(caf::scoped_actor& self, int index, const caf::actor& handle, const std::string& why);

  void release(caf::scoped_actor& self);

  NodeOptions options_;
  std::function<void(const std::string&)> log_;
  net::HostPort listen_;
  net::Secret secret_;
  JobIdentity identity_;
  std::string job_text_;
  std::vector<std::string> local_devices_;
  std::vector<kernels::Device> local_device_list_;
  int data_fd_ = -1;
  std::string data_address_;
  membership_actor_t membership_;
  std::uint16_t caf_port_ = 0;
  std::unique_ptr<net::Gate> gate_;
  std::shared_ptr<std::atomic<bool>> started_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<GoneNodes> gone_ = std::make_shared<GoneNodes>();
  std::vector<ReadyNode> ready_;     // the current view's nodes, in rank order
  std::vector<ReadyNode> pending_;   // joined after the start, waiting for a view
  std::vector<int> newcomers_;       // entered the last view formed (or tried to)
  bool last_formed_ = true;          // the last view tried formed
  std::vector<MemberEvent> events_;  // heard while forming a view
  std::uint32_t view_ = 0;
  // The first view's number: 0, or 1 or 2 after members were lost while
  // the first tries formed (regather).
  static constexpr std::uint32_t kFirstViewTries = 3;
  std::uint32_t first_view_ = 0;
  std::int64_t batch_ = 1;  // per replica
  std::vector<NodeInfo> nodes_;
  bool finished_ = false;
  std::vector<PsTask> ps_tasks_;              // every ps task there is (hosting shards or a spare), in join order
  std::vector<int> hosting_;                  // of them, those hosting shards now
  std::uint32_t placements_ = 0;              // of the shards on the ps tasks, the first at the start
  std::vector<std::string> shard_addresses_;  // by shard: its ps task's push server
  int partition_shards_ = 0;
  std::shared_ptr<const net::push::PushRoutes> local_routes_;
  std::unique_ptr<net::push::PushServer> push_server_;  // shards in this process, for the other nodes
};

}  // namespace troupe::actors
