// The role of a `troupe node` started without --listen, --join or --cluster,
// read from the environment of the launcher that started it. Pure functions
// over a map of variables (no getenv, no sockets), so every launcher's
// environment can be tested as text.
//
// Launchers, in order of precedence (the first one present decides):
//
//   TROUPE_CLUSTER   a cluster spec in TF_CONFIG's shape (cluster_spec.hpp)
//   TF_CONFIG        the same, as TensorFlow and Kubernetes operators set it
//   SLURM            SLURM_PROCID (rank), SLURM_NTASKS (world size), the
//                    coordinator at the first host of SLURM_JOB_NODELIST (a
//                    compressed host list, expand_host_list) and the port of
//                    --port or TROUPE_PORT
//   Open MPI / PMIx  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, the
//                    coordinator at --coordinator HOST:PORT or
//                    MASTER_ADDR:MASTER_PORT
//   torchrun         RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//
// One refinement of that order: a process that mpirun or torchrun started
// inside a Slurm allocation inherits the allocation's SLURM_* variables, and
// there SLURM_PROCID numbers srun's tasks (one mpirun daemon or torchrun
// agent per node), not the processes. So SLURM gives way to Open MPI or
// torchrun when OMPI_COMM_WORLD_RANK or RANK is set too: the launcher that
// started this very process knows its rank.
//
// For SLURM, Open MPI and torchrun, --coordinator HOST:PORT replaces the
// coordinator's address the environment gives, and --port (else
// TROUPE_PORT) its port; torchrun's static rendezvous keeps its own store on
// MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), so there troupe needs a
// port of its own.
//
// Rank 0 is the coordinator: it listens at the coordinator's address and
// waits for world-size nodes before training starts. The others join it.
//
// Errors are std::invalid_argument naming the variable and what was expected:
// a rank that is not a number or not below the world size, RANK without
// MASTER_ADDR, a host list that does not parse, no port.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "net/cluster/cluster_spec.hpp"
#include "net/control/address.hpp"

namespace troupe::net {

using Environment = std::map<std::string, std::string>;

// The process environment ("NAME=value" entries of `envp`) as a map.
Environment environment_of(char** envp);

// The options of `troupe node` that complete a launcher's environment.
struct LauncherFlags {
  std::string coordinator;  // --coordinator HOST:PORT; empty: none
  int port = 0;             // --port; 0: none (then TROUPE_PORT)
};

struct LauncherRole {
  std::string launcher;  // "TROUPE_CLUSTER", "TF_CONFIG", "cluster spec FILE", "SLURM", "Open MPI", "torchrun"
  int rank = 0;          // 0: the coordinator
  int world_size = 1;    // nodes, the coordinator included
  HostPort coordinator;  // where rank 0 listens and the others join
  // A cluster spec's own entry for this task (its data-plane address);
  // empty for the other launchers (the address peers reach the node by).
  std::string own_address;
  // Where the figures came from, for the log: "SLURM_PROCID, SLURM_NTASKS"
  // and "first host of SLURM_JOB_NODELIST, port from TROUPE_PORT".
  std::string rank_source, coordinator_source;
  // A cluster spec's ps entries: the coordinator waits for this many ps
  // tasks, which host the parameter-server shards.
  std::size_t ps_tasks = 0;
  // This task is one of them (TF_CONFIG task type "ps", --job_name ps): it
  // joins `coordinator` and hosts shards, training nothing; rank is -1.
  bool ps_task = false;

  bool is_coordinator() const { return rank == 0 && !ps_task; }
  // "rank 1 of 3 (SLURM_PROCID, SLURM_NTASKS): a worker, joining
  // node01:7000 (first host of SLURM_JOB_NODELIST, port from TROUPE_PORT)";
  // rank 0 is "the coordinator, listening at ...".
  std::string summary() const;
};

// The role the first launcher present in `env` gives (see the order above),
// or nothing when no launcher's variables are set. Throws
// std::invalid_argument naming the variable when they are malformed or
// incomplete.
std::optional<LauncherRole> role_from_environment(const Environment& env, const LauncherFlags& flags = {});

// The role a parsed cluster spec gives; its source names the launcher. A
// "ps" task gets ps_task set.
LauncherRole role_from_cluster_spec(const ClusterSpec& spec);

// The message that refuses a parameter-server task in a program that trains
// (api/troupe.cpp, MultiWorkerMirroredStrategy: `what` is "TF_CONFIG: task
// ps 0 (p:7001)"): ps tasks are `troupe node` processes.
std::string ps_task_refusal(const std::string& what);

// The name of the launcher whose variables `env` holds (in the order
// above), without reading them further: for the log line that says an
// explicit --listen / --join set it aside. Nothing when there is none.
std::optional<std::string> launcher_in_environment(const Environment& env);

// Expands a Slurm compressed host list: comma-separated names, each with any
// number of bracket groups holding comma-separated numbers and ranges
// LO-HI, each zero-padded to the width of its LO, as Slurm writes them
// ("node[01-03,7],gpu-a[1-2]" -> node01 node02 node03 node7 gpu-a1 gpu-a2;
// "n[8-10]" -> n8 n9 n10; "r[1-2]-n[1-2]" -> r1-n1 r1-n2 r2-n1 r2-n2). Throws std::invalid_argument starting with
// `what` (e.g. "SLURM_JOB_NODELIST 'node[1-'") and naming the offset for an unclosed or stray bracket, an empty name or
// range, LO > HI, a non-digit inside brackets, or more than `limit` hosts.
std::vector<std::string> expand_host_list(const std::string& list, const std::string& what, std::size_t limit = 65536);

}  // namespace troupe::net
