// The cluster spec reader (net/cluster/cluster_spec.hpp, TF_CONFIG's shape):
// the input is the JSON text of --cluster FILE or TROUPE_CLUSTER.
//
// Properties: parse_cluster_spec returns or throws std::invalid_argument
// (no nlohmann exception, nothing else, no crash, no stack overflow from
// deep nesting); a spec it returns is one troupe can act on: at most one
// chief, at least one training node, the task's index inside its list,
// every address with a host and a non-zero port and no address twice, and
// coordinator(), self() and rank() answer without throwing.
#include <set>
#include <stdexcept>

#include "fuzz/fuzz_support.hpp"
#include "net/cluster/cluster_spec.hpp"

using namespace troupe::net;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  ClusterSpec spec;
  try {
    spec = parse_cluster_spec(json, "TROUPE_CLUSTER");
  } catch (const std::invalid_argument&) {
    return 0;
  }
  TROUPE_FUZZ_CHECK(spec.chief.size() <= 1, "more than one chief");
  TROUPE_FUZZ_CHECK(!spec.nodes().empty(), "no training node");
  const std::vector<HostPort>* list = spec.task_type == "chief"    ? &spec.chief
                                      : spec.task_type == "worker" ? &spec.workers
                                      : spec.task_type == "ps"     ? &spec.ps
                                                                   : nullptr;
  TROUPE_FUZZ_CHECK(list != nullptr, "task type '" + spec.task_type + "'");
  TROUPE_FUZZ_CHECK(spec.task_index >= 0 && static_cast<std::size_t>(spec.task_index) < list->size(),
                    "task index out of range");
  std::set<std::string> seen;
  for (const auto* l : {&spec.chief, &spec.workers, &spec.ps})
    for (const HostPort& hp : *l) {
      TROUPE_FUZZ_CHECK(!hp.host.empty() && hp.port != 0, "address " + hp.str());
      std::string key = hp.host;
      for (char& c : key)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      TROUPE_FUZZ_CHECK(seen.insert(key + ":" + std::to_string(hp.port)).second, "address twice: " + hp.str());
    }
  try {
    (void)spec.coordinator();
    (void)spec.self();
  } catch (const std::exception& e) {
    troupe::fuzz::fail(std::string("coordinator() or self() throws: ") + e.what());
  }
  const int rank = spec.rank();
  TROUPE_FUZZ_CHECK(spec.task_type == "ps" ? rank == -1 : rank >= 0 && rank < static_cast<int>(spec.nodes().size()),
                    "rank " + std::to_string(rank));
  return 0;
}
