// CoordinatorCluster as ClusterViews: elastic membership's views, and the
// data plane every view connects (coordinator_cluster.hpp).
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

void CoordinatorCluster::add_joiner(const ReadyNode& node) {
  if (gone_->contains(node.index)) return;
  if (node.role == NodeRole::ps_task) return;  // JobRun::node_ready turns a late ps task away
  pending_.push_back(node);
}

bool CoordinatorCluster::forget(int index) {
  gone_->add(index);
  bool in_view = false;
  for (const auto& n : ready_) in_view = in_view || n.index == index;
  auto drop = [index](std::vector<ReadyNode>& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [&](const ReadyNode& n) { return n.index == index; }), v.end());
  };
  drop(pending_);
  return in_view;
}

void CoordinatorCluster::abort_view(caf::scoped_actor& self, const std::string& why) {
  for (const auto& n : ready_)
    if (!gone_->contains(n.index)) self->send(n.handle, abort_view_atom::value, view_, why);
}

FormedView CoordinatorCluster::reform(caf::scoped_actor& self, const ViewPlan& plan, int local,
                                      std::vector<std::shared_ptr<net::Collective>>& collectives) {
  FormedView out;
  out.view = plan.view;
  // The members: the view's nodes that stay, then the joiners in order.
  std::vector<ReadyNode> members, leaving;
  for (const auto& n : ready_) {
    const bool removed = std::find(plan.remove.begin(), plan.remove.end(), n.index) != plan.remove.end();
    if (gone_->contains(n.index)) continue;
    (removed ? leaving : members).push_back(n);
  }
  // The newcomers of a view that did not form have not taken the job's
  // state yet: they are newcomers of this one too.
  std::vector<int> carried;
  if (!last_formed_)
    for (int k : newcomers_)
      if (!gone_->contains(k)) carried.push_back(k);
  newcomers_ = carried;
  last_formed_ = false;
  for (const auto& n : pending_) {
    if (gone_->contains(n.index)) continue;
    if (options_.max_nodes > 0 && static_cast<int>(members.size()) + 1 >= options_.max_nodes) break;
    members.push_back(n);
    newcomers_.push_back(n.index);
  }
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const ReadyNode& n) {
                                  return std::find(newcomers_.begin(), newcomers_.end(), n.index) != newcomers_.end();
                                }),
                 pending_.end());
  ready_ = members;
  int world = local;
  for (const auto& n : ready_) world += static_cast<int>(n.devices.size());
  out.batch = plan.global_batch > 0 ? std::max<std::int64_t>(1, plan.global_batch / world) : plan.batch;
  batch_ = out.batch;
  view_ = plan.view;
  // A node drained: it is not in the view; tell it to go (exit 0).
  for (const auto& n : leaving) {
    // The membership first (and wait for it): the node ends right after
    // being told, and its end must not count as a failure.
    if (membership_)
      self->request(membership_, 5s, drain_atom::value, static_cast<std::int32_t>(n.index))
          .receive([](caf::ok_atom) {}, [](caf::error&) {});
    self->send(n.handle, drain_atom::value, std::string("left the job at a step boundary"));
    gone_->add(n.index);
  }
  try {
    const std::optional<net::NcclId> nccl_id = choose_view_collective(plan.view);
    send_view(self, plan, local, world, out.batch, nccl_id);
    collectives.clear();
    // Peers of a view that fails to form are found by the membership's
    // heartbeats within seconds: a shorter connect deadline than --timeout.
    connect_view(plan.view, local, world, collectives, std::min<std::chrono::milliseconds>(options_.timeout, 20s),
                 nccl_id);
  } catch (const std::exception& e) {
    out.error = e.what();
    return give_up(self, out);
  }
  // Every node's replicas, in rank order.
  std::map<int, std::vector<caf::actor>> by_node;
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  while (by_node.size() < ready_.size() && out.error.empty()) {
    bool timed_out = false;
    self->receive(
        [&](formed_atom, std::uint32_t view, std::int32_t k, const std::vector<caf::actor>& devices,
            const std::string& why) {
          if (view != plan.view) return;
          if (!why.empty())
            out.error = "node " + std::to_string(ready_[static_cast<std::size_t>(k - 1)].index) +
                        " could not enter view " + std::to_string(view) + ": " + why;
          by_node[k] = devices;
        },
        [&](node_lost_atom, std::int32_t index, const std::string& what) {
          if (is_ps_task(index)) {
            lost_meanwhile(self, index, what);
            return;
          }
          forget(index);
          events_.push_back(MemberEvent{MemberEvent::Kind::lost, index, what});
          for (const auto& n : ready_)
            if (n.index == index) {
              out.lost.push_back(index);
              out.error = what;
            }
        },
        [&](ready_atom, const ReadyNode& node) {
          if (node.role == NodeRole::ps_task) {
            if (local_routes_) {  // shards on ps tasks: a spare
              add_spare_ps(self, node.index, node.name, node.data_address, node.handle);
              events_.push_back(MemberEvent{MemberEvent::Kind::ps_joined, node.index, node.name});
            } else {
              turn_away(self, node.index, node.handle, "the parameter-server shards run on the coordinator");
            }
            return;
          }
          add_joiner(node);
          events_.push_back(MemberEvent{MemberEvent::Kind::joined, node.index, node.name});
        },
        [&](drain_atom, std::int32_t index, const std::string& why) {
          if (is_ps_task(index)) {
            if (hosts_shards(index))
              events_.push_back(MemberEvent{MemberEvent::Kind::ps_leaving, index, why});
            else
              release_ps(self, index, "left the job (a spare): " + why);
            return;
          }
          events_.push_back(MemberEvent{MemberEvent::Kind::drain, index, why});
        },
        caf::after(std::min<std::chrono::steady_clock::duration>(
            std::max<std::chrono::steady_clock::duration>(deadline - std::chrono::steady_clock::now(), 0s), 100ms)) >>
            [&] { timed_out = std::chrono::steady_clock::now() >= deadline; });
    if (timed_out)
      out.error = "the nodes did not enter view " + std::to_string(plan.view) + " within " +
                  net::describe_seconds(std::chrono::duration<double>(options_.timeout).count());
  }
  if (!out.error.empty()) {
    for (auto& c : collectives) c->abort(out.error);
    return give_up(self, out);
  }
  last_formed_ = true;
  for (auto& [k, devices] : by_node) {
    (void)k;
    for (auto& d : devices) out.devices.push_back(d);
  }
  out.nodes = nodes_;
  return out;
}

FormedView CoordinatorCluster::give_up(caf::scoped_actor& self, FormedView& out) {
  if (out.lost.empty())
    for (const auto& n : ready_)
      if (gone_->contains(n.index)) out.lost.push_back(n.index);
  abort_view(self, out.error);
  return out;
}

std::vector<MemberEvent> CoordinatorCluster::take_events() {
  std::vector<MemberEvent> out;
  out.swap(events_);
  return out;
}

std::optional<net::NcclId> CoordinatorCluster::choose_view_collective(std::uint32_t view) {
  std::vector<NodeFacts> facts;
  facts.push_back(NodeFacts{"the coordinator", net::parse_host_port(data_address_).host, local_device_list_,
                            nccl_unavailable_for(local_device_list_)});
  for (const auto& n : ready_) {
    std::vector<kernels::Device> devices;
    for (const auto& d : n.devices) devices.push_back(kernels::Device::parse(d));
    facts.push_back(NodeFacts{"node " + std::to_string(n.index) + " (" + n.name + ")",
                              net::parse_host_port(n.data_address).host, devices, n.nccl});
  }
  const AcrossChoice choice = choose_across_nodes(facts, secret_.configured() && !options_.insecure);
  if (!ready_.empty()) log_("view " + std::to_string(view) + " reduces through " + choice.why);
  if (choice.kind != AcrossKind::nccl) return std::nullopt;
  return net::nccl_unique_id();
}

void CoordinatorCluster::send_view(caf::scoped_actor& self, const ViewPlan& plan, int local, int world,
                                   std::int64_t batch, const std::optional<net::NcclId>& nccl_id) {
  std::vector<std::string> addresses{data_address_};
  for (const auto& n : ready_) addresses.push_back(n.data_address);
  nodes_.clear();
  nodes_.push_back(NodeInfo{0, "coordinator", data_address_, 0, local, local_devices_});
  int first = local;
  for (std::size_t k = 0; k < ready_.size(); ++k) {
    const auto& n = ready_[k];
    nodes_.push_back(NodeInfo{n.index, n.name, n.data_address, first, static_cast<int>(n.devices.size()), n.devices});
    FormView f;
    f.view = plan.view;
    f.node_rank = static_cast<std::int32_t>(k + 1);
    f.first_rank = first;
    f.world = world;
    f.addresses = addresses;
    f.clock = plan.clock;
    f.epoch = plan.cursor.epoch;
    f.batch = plan.cursor.batch;
    f.offset = plan.cursor.offset;
    f.batch_size = batch;
    if (nccl_id) f.nccl_id = nccl_id->hex();
    f.ps_addresses = shard_addresses_;
    f.ps_partition_shards = partition_shards_;
    self->send(n.handle, form_atom::value, f);
    first += static_cast<int>(n.devices.size());
  }
}

void CoordinatorCluster::connect_view(std::uint32_t view, int local, int world,
                                      std::vector<std::shared_ptr<net::Collective>>& out,
                                      std::chrono::milliseconds connect_timeout,
                                      const std::optional<net::NcclId>& nccl_id) {
  if (static_cast<std::size_t>(local) != local_device_list_.size())
    throw std::logic_error("connect_view: " + std::to_string(local) + " local replicas, but this host has " +
                           std::to_string(local_device_list_.size()) + " devices");
  net::CollectiveOptions co{options_.timeout};
  if (nccl_id) {
    for (auto& c : net::make_nccl_group(*nccl_id, 0, world, local_device_list_, co)) out.emplace_back(std::move(c));
    return;
  }
  std::shared_ptr<net::Collective> across;
  if (!ready_.empty()) {
    net::TcpGroupConfig tc;
    tc.rank = 0;
    tc.addresses = {data_address_};
    for (const auto& n : ready_) tc.addresses.push_back(n.data_address);
    tc.job_id = ring_id_of(identity_.fingerprint, view);
    tc.options.timeout = options_.timeout;
    tc.connect_timeout = connect_timeout;
    tc.listen_fd = ::dup(data_fd_);
    if (tc.listen_fd < 0) throw std::runtime_error("duplicating the data-plane socket failed");
    tc.authenticate = net::handshake_hook(handshake_config(secret_, options_, "coordinator"));
    // A node of the view lost while the ring connects (the membership
    // marks it gone at once): give up now, and the view is formed again
    // without it, instead of waiting for the connect timeout.
    std::vector<int> members;
    for (const auto& n : ready_) members.push_back(n.index);
    tc.abandon = [gone = gone_, members]() -> std::string {
      for (int k : members)
        if (gone->contains(k)) return "node " + std::to_string(k) + " of the view was lost";
      return "";
    };
    across = net::make_tcp_group(tc);
  }
  // This host's replicas: local or nccl by their devices (collective_choice.hpp).
  for (auto& c : net::make_hierarchical_group(make_replica_group(local_device_list_, co), across, 0, world, co))
    out.emplace_back(std::move(c));
}

void CoordinatorCluster::lost_meanwhile(caf::scoped_actor& self, int index, const std::string& what) {
  if (!is_ps_task(index)) {
    forget(index);
    events_.push_back(MemberEvent{MemberEvent::Kind::lost, index, what});
    return;
  }
  if (ps_gone(index)) {
    abort_pushes(self, what);
    events_.push_back(MemberEvent{MemberEvent::Kind::ps_lost, index, what + ", a ps task hosting shards"});
  }
}

void CoordinatorCluster::turn_away(caf::scoped_actor& self, int index, const caf::actor& handle,
                                   const std::string& why) {
  log_("node " + std::to_string(index) + " is not used: " + why);
  gone_->add(index);
  self->send(handle, done_atom::value, "not used: " + why);
}

}  // namespace troupe::actors
