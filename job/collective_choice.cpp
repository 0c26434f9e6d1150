#include "job/collective_choice.hpp"

#include <set>
#include <stdexcept>
#include <utility>

#include "net/collective/local.hpp"
#include "net/collective/nccl.hpp"

namespace troupe::actors {

const char* to_string(CollectiveKind kind) { return kind == CollectiveKind::nccl ? "nccl" : "local"; }

namespace {

std::string list(const std::vector<kernels::Device>& devices) {
  std::string out;
  for (const auto& d : devices) out += (out.empty() ? "" : ",") + d.str();
  return out;
}

}  // namespace

CollectiveChoice choose_collective(const std::vector<kernels::Device>& devices, bool nccl_built) {
  if (devices.empty()) throw std::invalid_argument("no devices to train on");
  int cpus = 0;
  std::set<int> gpus;
  for (const auto& d : devices) {
    if (d.is_cpu())
      ++cpus;
    else
      gpus.insert(d.index);
  }
  const int n = static_cast<int>(devices.size());
  const std::string replicas = std::to_string(n) + (n == 1 ? " replica" : " replicas");
  if (cpus > 0 && cpus < n)
    throw std::invalid_argument("--devices " + list(devices) +
                                " mixes CPU and CUDA devices, which one job cannot reduce together (the local "
                                "backend needs one memory space, NCCL GPU buffers); use one kind per job");
  if (cpus == n) return {CollectiveKind::local, replicas + " on the host: local"};
  if (gpus.size() == 1)
    return {CollectiveKind::local, replicas + " on cuda:" + std::to_string(*gpus.begin()) +
                                       (n == 1 ? ": local" : ": local, summed on the GPU (logical replicas)")};
  if (static_cast<int>(gpus.size()) < n)
    throw std::invalid_argument("--devices " + list(devices) +
                                " puts several replicas on some of several GPUs; name each GPU once (NCCL) or one "
                                "GPU several times (logical replicas, local backend), not both");
  if (!nccl_built)
    throw std::invalid_argument("--devices " + list(devices) +
                                " names several GPUs, which reduce through NCCL, but this troupe was built without "
                                "the nccl backend; use one GPU (cuda:0, or cuda:0,cuda:0 for logical replicas)");
  return {CollectiveKind::nccl, replicas + " on distinct GPUs: nccl"};
}

const char* to_string(AcrossKind kind) { return kind == AcrossKind::nccl ? "nccl" : "hierarchical"; }

AcrossChoice choose_across_nodes(const std::vector<NodeFacts>& nodes, bool links_sealed) {
  const auto hierarchical = [](const std::string& why) {
    return AcrossChoice{AcrossKind::hierarchical,
                        "hierarchical (local or nccl inside each node, tcp ring between nodes): " + why};
  };
  if (nodes.size() < 2) return hierarchical("one node");
  std::set<std::pair<std::string, int>> gpus_by_host;  // (host, GPU) pairs named so far
  int world = 0;
  for (const auto& n : nodes) {
    std::set<int> gpus;
    for (const auto& d : n.devices) {
      if (d.is_cpu()) return hierarchical(n.name + " has CPU replicas (" + list(n.devices) + ")");
      gpus.insert(d.index);
    }
    if (gpus.size() < n.devices.size())
      return hierarchical(n.name + " runs logical replicas (" + list(n.devices) +
                          "), which NCCL cannot hold (two ranks on one GPU)");
    // Two nodes on one machine naming one GPU would be two NCCL ranks on it.
    for (int g : gpus)
      if (!gpus_by_host.insert({n.host, g}).second)
        return hierarchical(n.name + " shares cuda:" + std::to_string(g) + " with another node on " + n.host);
    if (!n.nccl_unavailable.empty())
      return hierarchical("NCCL is unavailable on " + n.name + ": " + n.nccl_unavailable);
    world += static_cast<int>(n.devices.size());
  }
  if (links_sealed)
    return hierarchical(
        "the links between nodes are sealed (a cluster secret) and NCCL's transport is not, so the "
        "sealed tcp ring carries the gradients between nodes");
  return {AcrossKind::nccl, "nccl: " + std::to_string(world) + " replicas on distinct GPUs of " +
                                std::to_string(nodes.size()) + " nodes, one NCCL group across them"};
}

std::string nccl_unavailable_for(const std::vector<kernels::Device>& devices) {
  for (const auto& d : devices)
    if (d.is_cpu()) return "not loaded on a node with CPU replicas";
  return net::nccl_unavailable();
}

std::vector<kernels::Device> default_devices_for(int gpus, unsigned cores) {
  std::vector<kernels::Device> out;
  for (int i = 0; i < gpus; ++i) out.push_back(kernels::Device::cuda(i));
  if (out.empty()) {
    out.push_back(kernels::Device::cpu(0));
    if (cores >= 2) out.push_back(kernels::Device::cpu(1));
  }
  return out;
}

std::vector<std::unique_ptr<net::Collective>> make_replica_group(const std::vector<kernels::Device>& devices,
                                                                 net::CollectiveOptions options) {
  const CollectiveChoice choice = choose_collective(devices, net::nccl_built());
  if (choice.kind == CollectiveKind::nccl) return net::make_nccl_group(devices, options);
  return net::make_local_group(static_cast<int>(devices.size()), options);
}

}  // namespace troupe::actors
