// Which collective backend reduces the replicas of one host, from the kinds
// of their devices (docs/ARCHITECTURE.md, "Which collective"):
//
//   cpu:0,cpu:1,...          local   host memory shared by the ranks' threads
//   cuda:0 (alone)           local   one rank: nothing to reduce
//   cuda:0,cuda:0,...        local   logical replicas on one GPU: the ranks sum
//                                    one another's device buffers with the cuda
//                                    kernels on that GPU's stream; no host staging
//   cuda:0,cuda:1,...        nccl    one rank per GPU (NCCL refuses two on one)
//   cpu and cuda mixed       refused: one kind per job
//   cuda:0,cuda:0,cuda:1     refused: logical replicas on several GPUs (a
//                                    local group per GPU under an NCCL group of
//                                    leaders) are not built yet
//
// Across hosts (cluster/coordinator_views.cpp, worker_node.cpp) the
// coordinator decides once per view, with choose_across_nodes below:
//
//   every node cuda: only, one replica per GPU,
//   NCCL loads on every node, and links not
//   sealed (no secret, or --insecure: NCCL's
//   transport cannot be sealed)               nccl: one NCCL group of the
//                                             whole view; its unique id
//                                             travels in the view message
//   anything else (a CPU node, logical        hierarchical: this table's
//   replicas, NCCL missing somewhere, two     group inside each node, under
//   nodes of one host naming one GPU)         a tcp ring of node leaders
//                                             (GPU buffers staged through
//                                             host memory)
//
// choose_collective and choose_across_nodes are pure (tests call them with
// any devices and either answer for "NCCL built" / "NCCL loads");
// make_replica_group builds what choose_collective chose.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/device.hpp"
#include "net/collective/collective.hpp"

namespace troupe::actors {

enum class CollectiveKind { local, nccl };
const char* to_string(CollectiveKind kind);

struct CollectiveChoice {
  CollectiveKind kind = CollectiveKind::local;
  std::string why;  // one line for the job's log: "2 replicas on distinct GPUs: nccl"
};

// Throws std::invalid_argument naming the devices when no backend can
// reduce them (empty, mixed kinds, logical replicas on several GPUs, or
// distinct GPUs in a build without NCCL).
CollectiveChoice choose_collective(const std::vector<kernels::Device>& devices, bool nccl_built);

// One node of a view, as the choice across nodes sees it.
struct NodeFacts {
  std::string name;                      // for the log: "coordinator", "worker/HOST:PORT"
  std::string host;                      // its data-plane host: nodes of one host share its GPUs
  std::vector<kernels::Device> devices;  // its replicas' devices
  std::string nccl_unavailable;          // "" when NCCL loads there, else why not (net::nccl_unavailable)
};

enum class AcrossKind { hierarchical, nccl };
const char* to_string(AcrossKind kind);

struct AcrossChoice {
  AcrossKind kind = AcrossKind::hierarchical;
  std::string why;  // one line for the coordinator's log
};

// How the replicas of a view of several nodes reduce (the table above):
// nccl when every node holds only cuda: replicas on distinct GPUs and NCCL
// loads on every node, else hierarchical, saying which node stops NCCL and
// why. Refuses nothing: each node's own devices were checked by
// choose_collective before it said it was ready. Fewer than two nodes:
// hierarchical (one node has no "across"; make_replica_group decides).
// With `links_sealed` (the cluster has a secret and no --insecure, so every
// link between nodes is sealed: net/transport/sealed.hpp) it is hierarchical
// too: NCCL's own transport neither encrypts nor authenticates, and troupe's
// threat model (docs/ARCHITECTURE.md) promises that no gradient crosses hosts
// in the clear. Without a secret the cluster is loopback only, so an NCCL
// group of several nodes never leaves the machine; with --insecure the user
// has said the network is trusted, and NCCL carries the gradients.
AcrossChoice choose_across_nodes(const std::vector<NodeFacts>& nodes, bool links_sealed);

// What a node reports as NodeFacts::nccl_unavailable: "" when NCCL loads
// here, else why not. A node with a CPU replica does not try to load it
// (NCCL cannot reduce its replicas anyway) and says so.
std::string nccl_unavailable_for(const std::vector<kernels::Device>& devices);

// The devices troupe uses when none are named, from what the machine has:
// every GPU when there are any, otherwise two CPU devices on a machine with
// at least two cores (one with fewer). default_devices() asks the machine.
std::vector<kernels::Device> default_devices_for(int gpus, unsigned cores);

// The ranks 0 .. devices.size() - 1 of this host's group, by
// choose_collective(devices, net::nccl_built()).
std::vector<std::unique_ptr<net::Collective>> make_replica_group(const std::vector<kernels::Device>& devices,
                                                                 net::CollectiveOptions options);

}  // namespace troupe::actors
