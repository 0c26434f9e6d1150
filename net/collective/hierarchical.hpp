// The hierarchical collective: how the replicas of a cluster reduce
// (DESIGN.md: "replicas within a node reduce locally first, then one ring
// runs across nodes").
//
// A node's replicas form a `local` group; one replica per node (its local
// rank 0, the node's leader) is also a member of a group `across` the nodes
// (the `tcp` ring). An all-reduce is then
//   1. all-reduce inside the node        (memory bandwidth, no network),
//   2. the leaders all-reduce across nodes (one ring, one buffer per node),
//   3. each leader broadcasts inside its node,
// so the network carries one buffer per node rather than one per replica,
// and every replica of every node ends bitwise identical (the ring's result
// is, and the broadcast copies it).
//
// Global ranks are numbered node by node: a node's replicas hold ranks
// first_rank .. first_rank + local size - 1. Buffers on a GPU are staged
// through host memory for the ring (the tcp backend takes host tensors).
//
// Supported: allreduce, broadcast from global rank 0, barrier, abort. The
// others fail with CollectiveError(invalid): nothing in troupe issues them
// on a cluster yet.
#pragma once

#include <memory>
#include <vector>

#include "net/collective/collective.hpp"

namespace troupe::net {

// Wraps one node's local group. `across` is the group of node leaders (null
// or of size 1 on a single node); only the local rank 0 member uses it.
std::vector<std::unique_ptr<Collective>> make_hierarchical_group(std::vector<std::unique_ptr<Collective>> local,
                                                                 std::shared_ptr<Collective> across, int first_rank,
                                                                 int world, CollectiveOptions options);

}  // namespace troupe::net
