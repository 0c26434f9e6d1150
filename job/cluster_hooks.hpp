// What a cluster adds to a job on its coordinator node, in three narrow
// interfaces (cluster/coordinator_cluster.hpp implements all three; a
// single-host job has none). Job::run calls every method on run()'s
// thread, the one that talks to the nodes (its scoped actor `self`).
//
//   ClusterStart   before training: the nodes gathered, the first view
//                  formed (again, without a member lost meanwhile), the
//                  other nodes' devices; at the end, the nodes told.
//                  Order: configure, gather, form [, FirstViewLost:
//                  regather, form ...], remote_devices, ..., finish.
//   ClusterViews   while training: the membership's events (a worker
//                  joined, lost, draining) turned into views the
//                  coordinator actor asks for: add_joiner / forget /
//                  abort_view as events come, then reform, newcomers and
//                  take_events for each view formed.
//   ClusterShards  the parameter server's shards across nodes: on ps tasks
//                  (placed at the start and anew when one is lost or
//                  leaves) or served from this process on the data plane.
//
// A node's role (worker or ps task) is what it said when it joined
// (actors/messages.hpp, NodeRole), never read from its name.
#pragma once

#include <caf/all.hpp>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/device_protocol.hpp"
#include "actors/messages.hpp"
#include "actors/ps/partition.hpp"
#include "actors/ps/shard.hpp"  // ShardCore
#include "models/data/epoch_plan.hpp"
#include "net/collective/collective.hpp"
#include "net/push/push_routes.hpp"

namespace troupe::actors {

// A member of the first view was lost while the view formed: the job
// starts without it (ClusterHooks::form, regather).
struct FirstViewLost : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Before training starts, and its end.
class ClusterStart {
 public:
  virtual ~ClusterStart() = default;
  // Before the actor system starts: remoting, heartbeats, message types.
  virtual void configure(caf::actor_system_config& config) = 0;
  // Admits nodes until the job can start; returns each other node's number
  // of replicas, in node order (their ranks follow this host's).
  virtual std::vector<int> gather(caf::scoped_actor& self) = 0;
  // Asks every node to connect the data plane and spawn its replicas, and
  // returns the collectives of this host's `local` replicas (ranks 0..local-1).
  // Throws FirstViewLost when a member was lost while the view formed and
  // the job may start without it (regather, then everything that depends
  // on the world again, then form again).
  virtual std::vector<std::shared_ptr<net::Collective>> form(caf::scoped_actor& self, int local, int world,
                                                             const data::Cursor& start) = 0;
  // After FirstViewLost (from form(), remote_devices(), or the job's first
  // state sent to the replicas): the nodes left (and any that joined meanwhile),
  // waiting for --min-nodes of them (and the ps tasks) if need be; returns
  // each other node's number of replicas as gather() does. The next form()
  // tries the next view number (first_view()).
  // `why`: what was lost, for the log; the nodes still in the view that
  // did not form are told (abort_view).
  virtual std::vector<int> regather(caf::scoped_actor& /*self*/, const std::string& /*why*/) {
    throw std::logic_error("regather: this job cannot start again without a lost node");
  }
  // Whether a first view lost now could be tried again (FirstViewLost).
  virtual bool may_start_again() const { return false; }
  // The node (membership index; 0: this host) whose replica has global
  // rank `rank` in the current view, and whether a node is gone.
  virtual int node_of_rank(int /*rank*/) const { return 0; }
  virtual bool node_gone(int /*index*/) const { return false; }
  // The number of the job's first view: 0, or more when members were lost
  // while earlier ones formed. Every replica, shard and the coordinator
  // start in it.
  virtual std::uint32_t first_view() const { return 0; }
  // The other nodes' device actors, in rank order.
  virtual std::vector<device_actor_t> remote_devices(caf::scoped_actor& self) = 0;
  virtual std::vector<NodeInfo> nodes() const = 0;
  // How the links between nodes are protected, for the status ("sealed
  // (AES-256-GCM)", "NOT sealed (--insecure)", ...); empty: not said.
  virtual std::string links() const { return {}; }
  // Tells every node the job is over (error empty: done; else why it failed).
  virtual void finish(caf::scoped_actor& self, const std::string& error) = 0;
};

// Elastic membership, while the job runs.
class ClusterViews {
 public:
  virtual ~ClusterViews() = default;
  // run()'s actor hears from the membership actor: (ready, ReadyNode) for
  // a node that joined, (node_lost, index, what), (drain, index, why); it
  // turns them into MemberEvents for the coordinator actor, and forms the
  // views the coordinator asks for.
  // A worker that joined after the start, kept until a view includes it.
  virtual void add_joiner(const ReadyNode& node) = 0;
  // A node is gone (lost, or told to leave): never asked anything again.
  // Says whether it was in the current view.
  virtual bool forget(int index) = 0;
  // Tells the nodes of the current view to abort their collectives (run()
  // aborts this host's): every survivor's pending all-reduce fails at once.
  virtual void abort_view(caf::scoped_actor& self, const std::string& why) = 0;
  // Forms `plan`'s view: the data plane of its nodes, this host's `local`
  // replicas' new collectives (into `collectives`), and the nodes' replicas
  // entering it. Returns the other nodes' devices (ranks local.. in order),
  // every node and the per-replica batch, or why it failed (and which nodes
  // were found gone meanwhile).
  virtual FormedView reform(caf::scoped_actor& self, const ViewPlan& plan, int local,
                            std::vector<std::shared_ptr<net::Collective>>& collectives) = 0;
  // The nodes that entered the last view formed (they take the state).
  virtual std::vector<int> newcomers() const = 0;
  // Membership events the hooks received while they waited.
  virtual std::vector<MemberEvent> take_events() = 0;
};

// The parameter server's shards across nodes.
class ClusterShards {
 public:
  virtual ~ClusterShards() = default;
  // A node that hosts parameter-server shards and runs no replica.
  struct PsTask {
    int index = 0;        // the membership's number
    std::string name;     // "ps/HOST/pid N"
    std::string address;  // its push server (data plane)
    caf::actor handle;    // takes (host_shards, indices, sizes, replicas)
  };
  // The ps tasks the job starts with (gather waited for them), in join order.
  virtual std::vector<PsTask> ps_tasks() const { return {}; }
  virtual bool is_ps_task(int /*index*/) const { return false; }
  // Where the shards run: every view sent to the nodes from now on carries
  // `addresses` (by shard) so that their replicas push on the data plane.
  // Returns the routes of this host's replicas (the cluster's handshake,
  // the job's push id), or null when the hooks cannot route pushes.
  virtual std::shared_ptr<const net::push::PushRoutes> place_shards(const std::vector<std::string>& /*addresses*/,
                                                                    int /*partition_shards*/) {
    return nullptr;
  }
  // Without ps tasks: serves the shards of this process (by index) on the
  // data plane, so that the other nodes' replicas push each its part there
  // (this host's replicas push to them in process). Every view sent from
  // now on carries the address. Stopped by finish().
  virtual void serve_shards(const std::map<int, std::shared_ptr<ps::ShardCore>>& /*shards*/,
                            const ps::Partition& /*partition*/, int /*partition_shards*/) {}

  // Lost, leaving or joining while the job runs:
  // Where every shard runs after a new placement, or why there is none.
  struct Placement {
    std::vector<caf::actor> handles;     // by shard: its new actor
    std::vector<std::string> addresses;  // by shard: its ps task's push server
    std::string error;                   // empty: placed
    bool waiting_for_ps = false;         // no ps task is left (error says so)
    std::vector<int> lost;               // ps tasks found gone while placing
  };
  // Places every shard of `partition`, shard i on the i mod P-th of the P
  // ps tasks there are (in join order, without `leaving`, which are let go
  // first): at the start, and anew when a ps task was lost or leaves; each
  // task ends the shards it hosted and starts its new ones, empty.
  // `replicas`: the world the shards count clocks for; `decayed`: where
  // weight decay applies in the whole flat buffer (Model::decayed_ranges),
  // each shard told its part (Partition::ranges_in).
  virtual Placement replace_shards(caf::scoped_actor& /*self*/, const ps::Partition& /*partition*/, int /*replicas*/,
                                   const std::vector<int>& /*leaving*/, const models::FlatRanges& /*decayed*/) {
    Placement p;
    p.error = "this job cannot place its shards anew";
    return p;
  }
  // A ps task that joined after the start: a spare (told to stand by),
  // used by the next placement.
  virtual void add_spare_ps(caf::scoped_actor& /*self*/, int /*index*/, const std::string& /*name*/,
                            const std::string& /*address*/, const caf::actor& /*handle*/) {}
  // A ps task is gone: forgotten. Says whether it hosted shards.
  virtual bool ps_gone(int /*index*/) { return false; }
  // Whether the ps task hosts shards now (a spare does not).
  virtual bool hosts_shards(int /*index*/) const { return false; }
  // Lets a ps task go now (it hosts no shard): it exits 0.
  virtual void release_ps(caf::scoped_actor& /*self*/, int /*index*/, const std::string& /*why*/) {}
  // Tells every node to fail its pushes in flight at once (a ps task was
  // lost): none waits for its push's timeout.
  virtual void abort_pushes(caf::scoped_actor& /*self*/, const std::string& /*why*/) {}
};

// The three together: what JobConfig::cluster holds.
class ClusterHooks : public ClusterStart, public ClusterViews, public ClusterShards {};

}  // namespace troupe::actors
