// A static cluster spec in TF_CONFIG's shape, from `--cluster FILE` or the
// environment variable TROUPE_CLUSTER (which holds the JSON itself, as
// TF_CONFIG does):
//
//   {"cluster": {"worker": ["host-a:7000", "host-b:7000"],
//                "chief":  ["host-c:7000"],          (optional)
//                "ps":     ["host-d:7001"]},         (optional)
//    "task": {"type": "worker", "index": 0}}
//
// How the lists map onto troupe:
//   chief   the coordinator (TF's chief owns checkpoints and membership, as
//           troupe's coordinator does). At most one entry. It also trains.
//   worker  training nodes. Without a chief, worker[0] is the coordinator.
//   ps      ps tasks: they host the parameter-server shards and serve the
//           replicas' pushes on the data plane, and train nothing
//           (`troupe node --ps`, cluster/ps_node.cpp; launcher_env.hpp
//           gives a task of type "ps" that role).
// Training nodes are ranked chief first, then the workers in list order;
// rank 0 is the coordinator.
//
// Errors (std::invalid_argument) begin with the source ("cluster spec FILE"
// or "TROUPE_CLUSTER") and say what is wrong: malformed JSON with its line,
// a missing "cluster" or "task", an address without a port or with a bad
// port (naming the entry, e.g. cluster.worker[1]), an index out of range
// (with the range), a duplicate address (naming both entries), an unknown
// task type (listing the known ones), a key repeated in an object, JSON
// nested more than 32 levels deep (the reader recurses per level; a spec
// needs 3). A file is read with util::read_config_file: a regular file of at
// most 1 MiB.
// The JSON is read with nlohmann-json; "index" may be a number or a string
// holding one ("1"), as TF_CONFIG writers differ; an address must be a
// string.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "net/control/address.hpp"

namespace troupe::net {

struct ClusterSpec {
  std::vector<HostPort> chief;  // zero or one
  std::vector<HostPort> workers;
  std::vector<HostPort> ps;
  std::string task_type;  // "chief", "worker" or "ps"
  int task_index = 0;
  std::string source;  // "cluster spec FILE" or "TROUPE_CLUSTER"

  // The training nodes in rank order: chief (if any), then workers.
  std::vector<HostPort> nodes() const;
  const HostPort& coordinator() const;  // nodes()[0]
  const HostPort& self() const;         // this task's address
  bool is_coordinator() const;          // this task is rank 0
  // This task's rank among nodes(); -1 for a ps task.
  int rank() const;
};

// `json` read from `source` (used in messages).
ClusterSpec parse_cluster_spec(const std::string& json, const std::string& source);
// The file when `path` is not empty, else $TROUPE_CLUSTER when set, else
// nothing. Throws std::invalid_argument (util::ConfigFileError for a file
// that cannot be read, is not a regular file or holds more than 1 MiB).
std::optional<ClusterSpec> load_cluster_spec(const std::string& path);

// TF1's cluster flags, in the spelling of the seed's scripts: --ps_hosts and
// --worker_hosts (comma-separated HOST:PORT lists), --job_name ("ps" or
// "worker") and --task_index (default 0, as in TF1). As in TF1, worker 0 is
// the chief (troupe's coordinator); the flags have no chief list.
struct ClusterFlags {
  std::string ps_hosts, worker_hosts, job_name;
  int task_index = 0;
  bool task_index_given = false;
  // Any of the four given.
  bool given() const { return !ps_hosts.empty() || !worker_hosts.empty() || !job_name.empty() || task_index_given; }
};

// The spec the flags describe, with the checks parse_cluster_spec makes
// (its errors begin "--worker_hosts/--ps_hosts" and name entries as
// cluster.worker[1]). Throws std::invalid_argument for a missing
// --worker_hosts or --job_name, a job name other than ps or worker, an empty
// entry in a list, and everything parse_cluster_spec refuses.
ClusterSpec cluster_spec_from_flags(const ClusterFlags& flags);

// Splits "HOST:PORT" (IPv6 in brackets) of the cluster entry `what`, with
// errors naming it. Port 0 is refused: peers must know where to connect.
HostPort parse_cluster_address(const std::string& address, const std::string& what);

}  // namespace troupe::net
