// CoordinatorCluster as ClusterShards: the parameter server's shards on ps
// tasks, or served from this process (coordinator_cluster.hpp).
#include <unistd.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <map>
#include <optional>

#include "actors/membership.hpp"
#include "cluster/coordinator_cluster.hpp"
#include "cluster/node.hpp"
#include "cluster/node_support.hpp"
#include "job/collective_choice.hpp"
#include "job/job_file.hpp"
#include "kernels/config.hpp"
#include "net/cluster/auth.hpp"
#include "net/cluster/gate.hpp"
#include "net/collective/hierarchical.hpp"
#include "net/collective/nccl.hpp"
#include "net/control/address.hpp"
#include "net/push/push_link.hpp"
#include "net/push/push_routes.hpp"
#include "net/tcp/tcp.hpp"

namespace troupe::actors {

using namespace std::chrono_literals;
using namespace node_support;

bool CoordinatorCluster::is_ps_task(int index) const {
  for (const auto& t : ps_tasks_)
    if (t.index == index) return true;
  return false;
}

CoordinatorCluster::Placement CoordinatorCluster::replace_shards(caf::scoped_actor& self,
                                                                 const ps::Partition& partition, int replicas,
                                                                 const std::vector<int>& leaving,
                                                                 const models::FlatRanges& decayed) {
  Placement out;
  // The leavers' state was gathered at this boundary: they go first.
  for (int index : leaving) release_ps(self, index, "its shards moved to the other ps tasks at a step boundary");
  // Losses heard here: a ps task's is handled (lost_meanwhile); another
  // node's goes back to the mailbox, for whoever waits for it next.
  struct Others {
    caf::scoped_actor& self;
    std::vector<std::pair<std::int32_t, std::string>> lost;
    ~Others() {
      for (auto& [index, what] : lost) self->send(self, node_lost_atom::value, index, what);
    }
  } others{self, {}};
  auto on_lost = [&](std::int32_t index, const std::string& what) {
    if (is_ps_task(index))
      lost_meanwhile(self, index, what);
    else
      others.lost.emplace_back(index, what);
  };
  // A ps task whose loss is known but not yet heard (a replica's failed
  // push can bring the job here first): heard now, so it is not asked.
  // This placement is the answer to its loss (the state it restores is
  // whole without the task: the rollback point, the state gathered at the
  // boundary, or the replicas' in sync), so the loss is no event of its
  // own: as one, it would place the shards a second time right after.
  for (bool more = true; more;)
    self->receive(
        [&](node_lost_atom, std::int32_t index, const std::string& what) {
          if (!is_ps_task(index)) {
            others.lost.emplace_back(index, what);
            return;
          }
          if (ps_gone(index)) abort_pushes(self, what);
        },
        caf::after(std::chrono::milliseconds(0)) >> [&] { more = false; });
  std::vector<PsTask> tasks;
  for (const auto& t : ps_tasks_)
    if (!gone_->contains(t.index)) tasks.push_back(t);
  if (tasks.empty()) {
    out.error = "no ps task is left to host the parameter-server shards (start one: troupe node --ps --join " +
                options_.listen + ")";
    out.waiting_for_ps = true;
    return out;
  }
  const int shards = partition.shards();
  const int count = static_cast<int>(tasks.size());
  out.handles.resize(static_cast<std::size_t>(shards));
  out.addresses.resize(static_cast<std::size_t>(shards));
  std::string placed;
  const std::uint32_t placement = ++placements_;
  for (int k = 0; k < count; ++k) {
    const auto& task = tasks[static_cast<std::size_t>(k)];
    std::vector<std::int32_t> indices;
    std::vector<std::int64_t> sizes;
    // Where weight decay applies in each of its shards, as
    // [ranges of shard 1, then offset, count of each; ranges of shard 2, ...]:
    // a ps task knows sizes, not which floats are kernels and which biases.
    std::vector<std::int64_t> decay;
    for (int i = k; i < shards; i += count) {
      indices.push_back(i);
      sizes.push_back(partition.size(i));
      const auto ranges = partition.ranges_in(i, decayed);
      decay.push_back(static_cast<std::int64_t>(ranges.size()));
      for (const auto& [offset, length] : ranges) decay.insert(decay.end(), {offset, length});
    }
    // The answer is a message tagged with the placement (ps_node.cpp):
    // waited for with a deadline while a loss of the task is watched for,
    // since a request to a lost node fails only at its timeout.
    self->send(task.handle, host_shards_atom::value, placement, indices, sizes, static_cast<std::int32_t>(replicas),
               decay);
    std::string error;
    std::vector<caf::actor> got;
    bool answered = false;
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (!answered && error.empty()) {
      self->receive(
          [&](host_shards_atom, std::uint32_t id, std::vector<caf::actor>& handles, const std::string& refused) {
            if (id != placement || self->current_sender() != task.handle.address()) return;
            answered = true;
            got = std::move(handles);
            error = refused;
          },
          [&](node_lost_atom, std::int32_t index, const std::string& what) {
            on_lost(index, what);
            if (index == task.index) error = what;
          },
          caf::after(std::chrono::milliseconds(100)) >>
              [&] {
                // The membership marks a lost node gone before its message
                // reaches this thread.
                if (gone_->contains(task.index))
                  error = "the membership lost it";
                else if (std::chrono::steady_clock::now() >= deadline)
                  error = "no answer within " +
                          net::describe_seconds(std::chrono::duration<double>(options_.timeout).count());
              });
    }
    if (error.empty() && got.size() != indices.size())
      error = "it started " + std::to_string(got.size()) + " of " + std::to_string(indices.size()) + " shards";
    if (!error.empty()) {
      out.error = "ps task " + std::to_string(task.index) + " (" + task.name + ") could not host its shards: " + error;
      out.lost.push_back(task.index);
      return out;
    }
    for (std::size_t j = 0; j < indices.size(); ++j) {
      out.handles[static_cast<std::size_t>(indices[j])] = got[j];
      out.addresses[static_cast<std::size_t>(indices[j])] = task.address;
    }
    if (!indices.empty()) {
      std::string list;
      for (auto i : indices) list += (list.empty() ? "" : ",") + std::to_string(i);
      placed += (placed.empty() ? "" : "; ") + std::string("shard(s) ") + list + " on node " +
                std::to_string(task.index) + " (" + task.name + ")";
    }
  }
  if (placement == 1) return out;  // the first, at the start: JobRun::start_world says where
  log_("parameter server placed anew on " + std::to_string(count) + " ps task(s): " + placed);
  return out;
}

void CoordinatorCluster::add_spare_ps(caf::scoped_actor& self, int index, const std::string& name,
                                      const std::string& address, const caf::actor& handle) {
  if (gone_->contains(index)) return;
  ps_tasks_.push_back(PsTask{index, name, address, handle});
  self->send(handle, standby_atom::value);
}

bool CoordinatorCluster::ps_gone(int index) {
  gone_->add(index);
  const bool hosted = hosts_shards(index);
  ps_tasks_.erase(std::remove_if(ps_tasks_.begin(), ps_tasks_.end(), [&](const PsTask& t) { return t.index == index; }),
                  ps_tasks_.end());
  hosting_.erase(std::remove(hosting_.begin(), hosting_.end(), index), hosting_.end());
  return hosted;
}

bool CoordinatorCluster::hosts_shards(int index) const {
  return std::find(hosting_.begin(), hosting_.end(), index) != hosting_.end();
}

void CoordinatorCluster::release_ps(caf::scoped_actor& self, int index, const std::string& why) {
  for (const auto& t : ps_tasks_) {
    if (t.index != index) continue;
    // The membership first (and wait for it): the task ends right after
    // being told, and its end must not count as a loss.
    if (membership_)
      self->request(membership_, 5s, drain_atom::value, static_cast<std::int32_t>(index))
          .receive([](caf::ok_atom) {}, [](caf::error&) {});
    self->send(t.handle, drain_atom::value, why);
    break;
  }
  ps_gone(index);
}

void CoordinatorCluster::abort_pushes(caf::scoped_actor& self, const std::string& why) {
  for (const auto& n : ready_)
    if (!gone_->contains(n.index)) self->send(n.handle, abort_push_atom::value, why);
}

void CoordinatorCluster::serve_shards(const std::map<int, std::shared_ptr<ps::ShardCore>>& shards,
                                      const ps::Partition& partition, int partition_shards) {
  // On this host's data-plane address, another port (the ring keeps its
  // own listening socket across views).
  std::string address;
  const int fd = bind_data_plane("", net::parse_host_port(data_address_).host, &address);
  net::push::PushServerConfig pc;
  pc.listen_fd = fd;
  pc.job_id = net::push::push_job_id(identity_.fingerprint);
  pc.authenticate = net::handshake_hook(handshake_config(secret_, options_, "coordinator"));
  for (const auto& [index, shard] : shards) {
    (void)shard;
    pc.shards[index] = partition.size(index);
  }
  pc.apply = ps::shard_apply(shards);
  pc.io_timeout = options_.timeout;
  pc.log = log_;
  if (push_server_) push_server_->stop();  // a first view that did not form had one
  push_server_ = std::make_unique<net::push::PushServer>(std::move(pc));
  shard_addresses_.assign(shards.size(), address);
  partition_shards_ = partition_shards;
  log_("parameter server: the other nodes push to it on the data plane at " + address);
}

std::shared_ptr<const net::push::PushRoutes> CoordinatorCluster::place_shards(const std::vector<std::string>& addresses,
                                                                              int partition_shards) {
  shard_addresses_ = addresses;
  partition_shards_ = partition_shards;
  hosting_.clear();
  for (const auto& t : ps_tasks_)
    if (std::find(addresses.begin(), addresses.end(), t.address) != addresses.end()) hosting_.push_back(t.index);
  auto routes = std::make_shared<net::push::PushRoutes>();
  routes->addresses = addresses;
  routes->job_id = net::push::push_job_id(identity_.fingerprint);
  routes->authenticate = net::handshake_hook(handshake_config(secret_, options_, "coordinator"));
  routes->connect_timeout = std::min<std::chrono::milliseconds>(options_.timeout, 20s);
  routes->timeout = options_.timeout;
  local_routes_ = routes;
  return routes;
}

}  // namespace troupe::actors
