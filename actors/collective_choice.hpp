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
// Across hosts (actors/coordinator_node.cpp, worker_node.cpp) this is the
// group inside each node, under the hierarchical group whose tcp ring of
// node leaders stages GPU buffers through host memory (NCCL's own socket
// transport between nodes is not wired: nccl.hpp takes the id a coordinator
// would send, but no control message carries one yet).
//
// choose_collective is pure (tests call it with any device list and either
// answer for "NCCL built"); make_replica_group builds what it chose.
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

// The devices troupe uses when none are named, from what the machine has:
// every GPU when there are any, otherwise two CPU devices on a machine with
// at least two cores (one with fewer). default_devices() asks the machine.
std::vector<kernels::Device> default_devices_for(int gpus, unsigned cores);

// The ranks 0 .. devices.size() - 1 of this host's group, by
// choose_collective(devices, net::nccl_built()).
std::vector<std::unique_ptr<net::Collective>> make_replica_group(const std::vector<kernels::Device>& devices,
                                                                 net::CollectiveOptions options);

}  // namespace troupe::actors
