// net/cluster/launcher_env: the role of a `troupe node` from its launcher's
// environment (TROUPE_CLUSTER, TF_CONFIG, SLURM, Open MPI, torchrun), and
// Slurm's compressed host lists. Environments are written out as maps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/cluster/launcher_env.hpp"

namespace troupe::net {
namespace {

using Hosts = std::vector<std::string>;

// The message of what `f` throws as std::invalid_argument, or "" when it does not throw.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, fragment) \
  EXPECT_NE(std::string(text).find(fragment), std::string::npos) << "in: " << (text)

// ---- host lists -----------------------------------------------------------------

TEST(HostList, PlainNamesAndOneHost) {
  EXPECT_EQ(expand_host_list("node01", "L"), (Hosts{"node01"}));
  EXPECT_EQ(expand_host_list("a,b,c", "L"), (Hosts{"a", "b", "c"}));
  EXPECT_EQ(expand_host_list("10.0.0.5", "L"), (Hosts{"10.0.0.5"}));
}

TEST(HostList, RangesAndSinglesInOneBracketEachWithItsOwnWidth) {
  EXPECT_EQ(expand_host_list("node[01-03,7],gpu-a[1-2]", "L"),
            (Hosts{"node01", "node02", "node03", "node7", "gpu-a1", "gpu-a2"}));
  EXPECT_EQ(expand_host_list("n[8-10]", "L"), (Hosts{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_host_list("n[08-10]", "L"), (Hosts{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_host_list("n[098-101]", "L"), (Hosts{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_host_list("n[007]", "L"), (Hosts{"n007"}));
  EXPECT_EQ(expand_host_list("node1[0-2]", "L"), (Hosts{"node10", "node11", "node12"}));
}

TEST(HostList, SeveralBracketGroupsInOneNameVaryTheFirstSlowest) {
  EXPECT_EQ(expand_host_list("rack[1-2]-node[01-02]", "L"),
            (Hosts{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}));
  EXPECT_EQ(expand_host_list("a[1,3]b[5]c,d", "L"), (Hosts{"a1b5c", "a3b5c", "d"}));
  EXPECT_EQ(expand_host_list("[1-2]x", "L"), (Hosts{"1x", "2x"}));
  EXPECT_EQ(expand_host_list("127.0.0.[1-3]", "L"), (Hosts{"127.0.0.1", "127.0.0.2", "127.0.0.3"}));
}

TEST(HostList, MalformedListsAreRefusedWithWhatAndWhere) {
  const std::string what = "SLURM_JOB_NODELIST 'x'";
  auto error = [&](const std::string& list) { return error_of([&] { expand_host_list(list, what); }); };
  EXPECT_CONTAINS(error("node[01-03"), "SLURM_JOB_NODELIST 'x': '[' at offset 4 is never closed");
  EXPECT_CONTAINS(error("node01-03]"), "']' without '[' at offset 9");
  EXPECT_CONTAINS(error("node[1-[2]]"), "'[' inside brackets at offset 7");
  EXPECT_CONTAINS(error("node[]"), "empty range at offset 5");
  EXPECT_CONTAINS(error("node[1,,2]"), "empty range at offset 7");
  EXPECT_CONTAINS(error("node[3-1]"), "range '3-1' at offset 5 runs backwards (3 > 1)");
  EXPECT_CONTAINS(error("node[a-c]"), "'a-c' at offset 5 is not a number or a range LO-HI of numbers");
  EXPECT_CONTAINS(error("node[1-]"), "'1-' at offset 5 is not a number");
  EXPECT_CONTAINS(error("node[1-2-3]"), "'1-2-3' at offset 5 is not a number");
  EXPECT_CONTAINS(error("a,,b"), "empty host name at offset 2");
  EXPECT_CONTAINS(error("a,"), "empty host name at offset 2");
  EXPECT_CONTAINS(error(""), "the host list is empty");
  EXPECT_CONTAINS(error("a, b"), "white space at offset 2");
  EXPECT_CONTAINS(error("n[0-99999999]"), "more than 65536 hosts");
  EXPECT_CONTAINS(error("a[0-999]b[0-999]"), "more than 65536 hosts");
  EXPECT_CONTAINS(error("n[1234567890123456789]"), "is too long");
}

// ---- SLURM ------------------------------------------------------------------------

Environment slurm(const std::string& procid, const std::string& ntasks, const std::string& nodelist) {
  return {
      {"SLURM_PROCID", procid}, {"SLURM_NTASKS", ntasks}, {"SLURM_JOB_NODELIST", nodelist}, {"SLURM_JOB_ID", "4242"}};
}

TEST(LauncherEnv, SlurmRankZeroIsTheCoordinatorOnTheFirstHostOfACompressedList) {
  Environment env = slurm("0", "4", "gpu[07-08,10],cpu-a[1-2]");
  env["TROUPE_PORT"] = "7000";
  const auto role = role_from_environment(env);
  ASSERT_TRUE(role.has_value());
  EXPECT_EQ(role->launcher, "SLURM");
  EXPECT_TRUE(role->is_coordinator());
  EXPECT_EQ(role->world_size, 4);
  EXPECT_EQ(role->coordinator.str(), "gpu07:7000");
  EXPECT_TRUE(role->own_address.empty());
  EXPECT_EQ(role->summary(),
            "rank 0 of 4 (SLURM_PROCID, SLURM_NTASKS): the coordinator, listening at gpu07:7000 "
            "(first host of SLURM_JOB_NODELIST, port from TROUPE_PORT)");
}

TEST(LauncherEnv, SlurmWorkerJoinsTheFirstHostAndPortFlagBeatsTroupePort) {
  Environment env = slurm("2", "3", "node[01-03]");
  env["TROUPE_PORT"] = "7000";
  LauncherFlags flags;
  flags.port = 7100;
  const auto role = role_from_environment(env, flags);
  ASSERT_TRUE(role.has_value());
  EXPECT_EQ(role->rank, 2);
  EXPECT_FALSE(role->is_coordinator());
  EXPECT_EQ(role->coordinator.str(), "node01:7100");
  EXPECT_EQ(role->summary(),
            "rank 2 of 3 (SLURM_PROCID, SLURM_NTASKS): a worker, joining node01:7100 "
            "(first host of SLURM_JOB_NODELIST, port from --port)");
  // --coordinator replaces the host list's first host.
  flags.coordinator = "login-1:7200";
  EXPECT_EQ(role_from_environment(env, flags)->coordinator.str(), "login-1:7200");
}

TEST(LauncherEnv, SlurmOlderNamesAreAccepted) {
  const Environment env{
      {"SLURM_PROCID", "1"}, {"SLURM_NPROCS", "2"}, {"SLURM_NODELIST", "a[1-2]"}, {"TROUPE_PORT", "9"}};
  const auto role = role_from_environment(env);
  ASSERT_TRUE(role.has_value());
  EXPECT_EQ(role->world_size, 2);
  EXPECT_EQ(role->coordinator.str(), "a1:9");
}

TEST(LauncherEnv, MalformedSlurmEnvironmentsNameTheVariable) {
  auto error = [](Environment env, LauncherFlags flags = {}) {
    return error_of([&] { role_from_environment(env, flags); });
  };
  Environment env = slurm("0", "3", "node[01-03]");
  EXPECT_CONTAINS(error(env),
                  "SLURM environment: no port for the coordinator on node01 (the first host of "
                  "SLURM_JOB_NODELIST): give --port PORT or set TROUPE_PORT");
  env["TROUPE_PORT"] = "70000";
  EXPECT_CONTAINS(error(env), "TROUPE_PORT 70000 is not a port number in 1..65535");
  env["TROUPE_PORT"] = "http";
  EXPECT_CONTAINS(error(env), "TROUPE_PORT 'http' is not a port number");
  env["TROUPE_PORT"] = "7000";
  env["SLURM_JOB_NODELIST"] = "node[01-03";
  EXPECT_CONTAINS(error(env), "SLURM_JOB_NODELIST 'node[01-03': '[' at offset 4 is never closed");
  env["SLURM_JOB_NODELIST"] = "node[01-03]";
  env["SLURM_PROCID"] = "3";
  EXPECT_CONTAINS(error(env), "SLURM environment: SLURM_PROCID 3 is not below SLURM_NTASKS 3 (ranks are 0..2)");
  env["SLURM_PROCID"] = "-1";
  EXPECT_CONTAINS(error(env), "SLURM environment: SLURM_PROCID '-1' is not a non-negative integer");
  env["SLURM_PROCID"] = "0";
  env.erase("SLURM_NTASKS");
  EXPECT_CONTAINS(error(env), "SLURM environment: SLURM_NTASKS is not set");
  env["SLURM_NTASKS"] = "0";
  EXPECT_CONTAINS(error(env), "SLURM_NTASKS is 0; it must be at least 1");
  env["SLURM_NTASKS"] = "3";
  env.erase("SLURM_JOB_NODELIST");
  EXPECT_CONTAINS(error(env), "SLURM environment: SLURM_JOB_NODELIST is not set");
  LauncherFlags flags;
  flags.coordinator = "node01";
  EXPECT_CONTAINS(error(env, flags), "--coordinator 'node01': missing port");
}

// ---- Open MPI ---------------------------------------------------------------------

TEST(LauncherEnv, OpenMpiTakesTheCoordinatorFromMasterAddrOrTheFlag) {
  Environment env{{"OMPI_COMM_WORLD_RANK", "1"},       {"OMPI_COMM_WORLD_SIZE", "3"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"PMIX_RANK", "1"},
                  {"MASTER_ADDR", "10.0.0.1"},         {"MASTER_PORT", "29500"}};
  auto role = role_from_environment(env);
  ASSERT_TRUE(role.has_value());
  EXPECT_EQ(role->launcher, "Open MPI");
  EXPECT_EQ(role->rank, 1);
  EXPECT_EQ(role->world_size, 3);
  EXPECT_EQ(role->coordinator.str(), "10.0.0.1:29500");
  EXPECT_EQ(role->summary(),
            "rank 1 of 3 (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE): a worker, joining "
            "10.0.0.1:29500 (MASTER_ADDR, port from MASTER_PORT)");

  LauncherFlags flags;
  flags.coordinator = "[::1]:7000";
  role = role_from_environment(env, flags);
  EXPECT_EQ(role->coordinator.str(), "[::1]:7000");
  EXPECT_CONTAINS(role->summary(), "joining [::1]:7000 (--coordinator)");

  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  role = role_from_environment(env, flags);
  EXPECT_EQ(role->coordinator.str(), "[::1]:7000");
  EXPECT_CONTAINS(error_of([&] { role_from_environment(env); }),
                  "Open MPI environment: OMPI_COMM_WORLD_RANK is set but MASTER_ADDR is not");
  env["MASTER_ADDR"] = "head";
  EXPECT_CONTAINS(error_of([&] { role_from_environment(env); }),
                  "Open MPI environment: MASTER_ADDR is set but MASTER_PORT is not");
  env["OMPI_COMM_WORLD_SIZE"] = "three";
  EXPECT_CONTAINS(error_of([&] { role_from_environment(env); }),
                  "Open MPI environment: OMPI_COMM_WORLD_SIZE 'three' is not a non-negative integer");
}

// ---- torchrun ------------------------------------------------------------------------

Environment torchrun(const std::string& rank) {
  return {{"RANK", rank},
          {"WORLD_SIZE", "2"},
          {"LOCAL_RANK", rank},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", "29500"},
          {"GROUP_RANK", rank},
          {"TORCHELASTIC_USE_AGENT_STORE", "False"}};
}

TEST(LauncherEnv, TorchrunGivesRankWorldAndMaster) {
  const auto role = role_from_environment(torchrun("0"));
  ASSERT_TRUE(role.has_value());
  EXPECT_EQ(role->launcher, "torchrun");
  EXPECT_TRUE(role->is_coordinator());
  EXPECT_EQ(role->world_size, 2);
  EXPECT_EQ(role->coordinator.str(), "127.0.0.1:29500");
  EXPECT_EQ(role->summary(),
            "rank 0 of 2 (RANK, WORLD_SIZE): the coordinator, listening at 127.0.0.1:29500 "
            "(MASTER_ADDR, port from MASTER_PORT)");
  EXPECT_EQ(role_from_environment(torchrun("1"))->rank, 1);
}

TEST(LauncherEnv, TorchrunsStaticRendezvousHoldsMasterPortSoTroupeNeedsItsOwn) {
  Environment env = torchrun("0");
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  EXPECT_CONTAINS(error_of([&] { role_from_environment(env); }),
                  "MASTER_PORT 29500 is taken by torchrun's own store (TORCHELASTIC_USE_AGENT_STORE=True");
  env["TROUPE_PORT"] = "29501";
  EXPECT_EQ(role_from_environment(env)->coordinator.str(), "127.0.0.1:29501");
}

TEST(LauncherEnv, IncompleteTorchrunEnvironmentsNameTheMissingVariable) {
  auto error = [](const Environment& env) { return error_of([&] { role_from_environment(env); }); };
  EXPECT_CONTAINS(error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
                  "torchrun environment: RANK is set but MASTER_ADDR is not");
  EXPECT_CONTAINS(error({{"RANK", "1"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}),
                  "torchrun environment: RANK is set but WORLD_SIZE is not");
  EXPECT_CONTAINS(error({{"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}),
                  "torchrun environment: MASTER_ADDR is set but RANK is not");
  EXPECT_CONTAINS(error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}),
                  "torchrun environment: RANK 2 is not below WORLD_SIZE 2");
  EXPECT_CONTAINS(error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "0"}}),
                  "torchrun environment: MASTER_PORT 0 is not a port number in 1..65535");
}

// ---- TF_CONFIG and TROUPE_CLUSTER ---------------------------------------------------

const char* kSpec =
    R"({"cluster": {"worker": ["a:7000", "b:7000", "c:7000"]}, "task": {"type": "worker", "index": 2}})";

TEST(LauncherEnv, ClusterSpecsInTroupeClusterOrTfConfig) {
  auto role = role_from_environment({{"TF_CONFIG", kSpec}});
  ASSERT_TRUE(role.has_value());
  EXPECT_EQ(role->launcher, "TF_CONFIG");
  EXPECT_EQ(role->rank, 2);
  EXPECT_EQ(role->world_size, 3);
  EXPECT_EQ(role->coordinator.str(), "a:7000");
  EXPECT_EQ(role->own_address, "c:7000");
  EXPECT_EQ(role->summary(), "rank 2 of 3 (task worker 2): a worker, joining a:7000 (cluster.worker[0])");
  // TF_CONFIG's errors name it.
  EXPECT_CONTAINS(error_of([] { role_from_environment({{"TF_CONFIG", "{"}}); }), "TF_CONFIG: malformed JSON");
  // An empty TF_CONFIG is no cluster (as TensorFlow reads it).
  EXPECT_FALSE(role_from_environment({{"TF_CONFIG", " "}}).has_value());
  // A parameter-server task: it joins the chief and serves
  // pushes on its own entry's address; it is no rank of the training nodes.
  const auto ps_role = role_from_environment(
      {{"TF_CONFIG", R"({"cluster": {"worker": ["a:1"], "ps": ["p:2"]}, "task": {"type": "ps", "index": 0}})"}});
  ASSERT_TRUE(ps_role.has_value());
  EXPECT_TRUE(ps_role->ps_task);
  EXPECT_FALSE(ps_role->is_coordinator());
  EXPECT_EQ(ps_role->coordinator.str(), "a:1");
  EXPECT_EQ(ps_role->own_address, "p:2");
  EXPECT_EQ(ps_role->ps_tasks, 1u);
  EXPECT_EQ(ps_role->summary(),
            "task ps 0: a ps task (parameter-server shards, no replica), joining a:1 (cluster.worker[0])");
  // The other tasks of a cluster with ps entries start; the role counts the
  // ps entries, which the node logs as left unused.
  role =
      role_from_environment({{"TF_CONFIG", R"({"cluster": {"chief": ["c:1"], "worker": ["a:1"], "ps": ["p:2", "q:2"]},
                        "task": {"type": "worker", "index": 0}})"}});
  ASSERT_TRUE(role.has_value());
  EXPECT_EQ(role->rank, 1);
  EXPECT_EQ(role->world_size, 2);  // ps tasks are no training nodes
  EXPECT_EQ(role->ps_tasks, 2u);
  EXPECT_EQ(role->coordinator.str(), "c:1");
  // --coordinator / --port do not mix with a spec that names every address.
  LauncherFlags flags;
  flags.port = 7000;
  EXPECT_CONTAINS(error_of([&] {
                    role_from_environment({{"TF_CONFIG", kSpec}}, flags);
                  }),
                  "--coordinator and --port complete a SLURM, Open MPI or torchrun environment");
}

// ---- precedence -------------------------------------------------------------------------

TEST(LauncherEnv, PrecedenceTroupeClusterTfConfigSlurmOpenMpiTorchrun) {
  Environment env = torchrun("1");
  EXPECT_EQ(*launcher_in_environment(env), "torchrun");
  env["OMPI_COMM_WORLD_RANK"] = "1";
  env["OMPI_COMM_WORLD_SIZE"] = "2";
  EXPECT_EQ(*launcher_in_environment(env), "Open MPI");
  EXPECT_EQ(role_from_environment(env)->launcher, "Open MPI");
  // SLURM comes before both, except that a process mpirun or torchrun
  // started inside an allocation takes its rank from them (below).
  Environment with_slurm = slurm("0", "2", "n[1-2]");
  with_slurm["TROUPE_PORT"] = "7000";
  EXPECT_EQ(*launcher_in_environment(with_slurm), "SLURM");
  with_slurm["MASTER_ADDR"] = "n1";  // exported for PyTorch in a batch script: SLURM still decides
  with_slurm["MASTER_PORT"] = "29500";
  EXPECT_EQ(role_from_environment(with_slurm)->launcher, "SLURM");
  env["TF_CONFIG"] = kSpec;
  env.insert(with_slurm.begin(), with_slurm.end());
  EXPECT_EQ(*launcher_in_environment(env), "TF_CONFIG");
  env["TROUPE_CLUSTER"] = R"({"cluster": {"worker": ["x:1"]}, "task": {"type": "worker", "index": 0}})";
  EXPECT_EQ(*launcher_in_environment(env), "TROUPE_CLUSTER");
  const auto role = role_from_environment(env);
  EXPECT_EQ(role->launcher, "TROUPE_CLUSTER");
  EXPECT_EQ(role->coordinator.str(), "x:1");
  // Nothing at all: no role.
  EXPECT_FALSE(launcher_in_environment({{"PATH", "/usr/bin"}, {"HOME", "/root"}}).has_value());
  EXPECT_FALSE(role_from_environment({{"PATH", "/usr/bin"}}).has_value());
}

TEST(LauncherEnv, MpirunOrTorchrunInsideASlurmAllocationTakeTheirOwnRanks) {
  // mpirun in a batch script: every process inherits the batch step's
  // SLURM_PROCID=0, and Open MPI numbers the processes.
  Environment env = slurm("0", "1", "n[1-4]");
  env["TROUPE_PORT"] = "7000";
  env["OMPI_COMM_WORLD_RANK"] = "3";
  env["OMPI_COMM_WORLD_SIZE"] = "4";
  env["MASTER_ADDR"] = "n1";
  auto role = role_from_environment(env);
  EXPECT_EQ(role->launcher, "Open MPI");
  EXPECT_EQ(role->rank, 3);
  EXPECT_EQ(role->coordinator.str(), "n1:7000");  // TROUPE_PORT, with no MASTER_PORT
  // srun torchrun ...: SLURM_PROCID numbers the agents, RANK the processes.
  Environment t = slurm("1", "2", "n[1-2]");
  const Environment tr = torchrun("3");
  t.insert(tr.begin(), tr.end());
  t["WORLD_SIZE"] = "4";
  role = role_from_environment(t);
  EXPECT_EQ(role->launcher, "torchrun");
  EXPECT_EQ(role->rank, 3);
  EXPECT_EQ(role->world_size, 4);
}

TEST(LauncherEnv, EnvironmentOfReadsNameValueEntries) {
  std::string a = "A=1", b = "B=x=y", c = "EMPTY=", d = "junk";
  char* entries[] = {a.data(), b.data(), c.data(), d.data(), nullptr};
  const Environment env = environment_of(entries);
  EXPECT_EQ(env, (Environment{{"A", "1"}, {"B", "x=y"}, {"EMPTY", ""}}));
}

}  // namespace
}  // namespace troupe::net
