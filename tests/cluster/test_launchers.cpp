// `troupe node` under the launchers users already have: every process gets
// the same command line, without --listen or --join, and reads its role
// from the launcher's environment (net/cluster/launcher_env.hpp). A real
// `mpirun` (Debian's openmpi-bin; the test skips without it) starts three
// nodes; SLURM's, torchrun's and TF_CONFIG's variables are set by hand on
// real processes, with a compressed SLURM node list. All on loopback, on
// the real Fashion-MNIST.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <sstream>

#include "tests/cluster/cluster.hpp"
#include "tests/cluster/process.hpp"
#include "tests/support/ports.hpp"

namespace troupe {
namespace {

using namespace std::chrono_literals;
using testing::Process;

// 30 synchronous steps of the mlp, 3 x 32 examples each: a short job that
// ends by itself.
const char* kShortJob = R"(model = "mlp"
data = "fashion-mnist"
seed = 5
batch = 32
steps = 30
mode = "sync"
)";

// A launcher's variables in this test's own environment would be inherited
// by every node and could take precedence over the ones a test sets.
void clear_launcher_environment() {
  for (const char* name :
       {"TROUPE_CLUSTER", "TF_CONFIG", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_JOB_NODELIST",
        "SLURM_NODELIST", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE", "MASTER_ADDR",
        "MASTER_PORT", "TROUPE_PORT", "TORCHELASTIC_USE_AGENT_STORE"})
    ::unsetenv(name);
}

// The path of `program` on $PATH, or "" when it is not there.
std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Every node's command line: the same for all, no role flags.
std::vector<std::string> node_command(const std::string& job, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{TROUPE_BINARY,      "node", "--job",     job,  "--devices",      "cpu:0",
                                "--log-every",      "10",   "--timeout", "30", "--wait-timeout", "120",
                                "--rejoin-timeout", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

#define EXPECT_CONTAINS(text, fragment) \
  EXPECT_NE(std::string(text).find(fragment), std::string::npos) << "no \"" << (fragment) << "\" in:\n" << (text)

// What a finished 30-step job of `nodes` nodes printed on its coordinator.
void expect_trained_together(const std::string& coordinator_log, int nodes) {
  EXPECT_CONTAINS(coordinator_log,
                  "starting with " + std::to_string(nodes) + " node(s), " + std::to_string(nodes) + " replica(s)");
  EXPECT_CONTAINS(coordinator_log, "the " + std::to_string(nodes) + " replicas agree bitwise");
  const Accounting a = accounting(coordinator_log);
  EXPECT_EQ(a.steps, 30) << coordinator_log;
  EXPECT_EQ(a.sync, 30) << coordinator_log;
}

// A group of processes started with the same command line and a launcher's
// variables, one environment each.
struct Launch {
  std::string dir;
  std::vector<std::unique_ptr<Process>> nodes;

  Launch(const std::string& name, const std::vector<std::string>& args,
         const std::vector<std::vector<std::string>>& envs)
      : dir(temp_dir(name)) {
    for (std::size_t r = 0; r < envs.size(); ++r)
      nodes.push_back(std::make_unique<Process>(args, dir + "/rank" + std::to_string(r) + ".log", envs[r]));
  }
  std::vector<int> wait_all(std::chrono::milliseconds limit) {
    std::vector<int> out{nodes[0]->wait_for(limit)};
    for (std::size_t r = 1; r < nodes.size(); ++r) out.push_back(nodes[r]->wait_for(10s));
    return out;
  }
  std::string logs() const {
    std::string out;
    for (std::size_t r = 0; r < nodes.size(); ++r) out += "--- rank " + std::to_string(r) + ":\n" + nodes[r]->output();
    return out;
  }
};

// ---- mpirun ---------------------------------------------------------------------

TEST(Launchers, MpirunStartsThreeNodesThatTrainTogether) {
  clear_launcher_environment();
  const std::string mpirun = find_on_path("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "mpirun is not installed (Debian's openmpi-bin, in scripts/setup.sh): skipped";
  const std::string dir = temp_dir("mpirun");
  const std::string job = write_file(dir, "job.toml", kShortJob);
  const std::string port = std::to_string(troupe::testing::free_loopback_port());
  // As root Open MPI wants --allow-run-as-root; --oversubscribe lets three
  // ranks share fewer cores. --tag-output prefixes each line with its rank.
  std::vector<std::string> args{
      mpirun, "--allow-run-as-root", "--oversubscribe", "--tag-output", "-np", "3", "-x", "MASTER_ADDR=127.0.0.1",
      "-x",   "MASTER_PORT=" + port};
  for (const auto& a : node_command(job)) args.push_back(a);
  Process run(args, dir + "/mpirun.log");
  ASSERT_TRUE(run.started());
  const int status = run.wait_for(300s);
  if (status == -1) {
    run.signal(SIGTERM);  // mpirun passes it on to its ranks
    run.wait_for(15s);
  }
  const std::string out = run.output();
  ASSERT_EQ(status, 0) << out;
  // Each rank's role, from Open MPI's variables.
  EXPECT_CONTAINS(out,
                  "[1,0]<stderr>:troupe node: role from Open MPI: rank 0 of 3 (OMPI_COMM_WORLD_RANK, "
                  "OMPI_COMM_WORLD_SIZE): the coordinator, listening at 127.0.0.1:" +
                      port + " (MASTER_ADDR, port from MASTER_PORT); training starts with 3 node(s)");
  for (const char* rank : {"1", "2"}) {
    EXPECT_CONTAINS(out, std::string("[1,") + rank + "]<stderr>:troupe node: role from Open MPI: rank " + rank +
                             " of 3 (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE): a worker, joining 127.0.0.1:" + port);
    EXPECT_CONTAINS(out, std::string("[1,") + rank + "]<stderr>:troupe node: the job is done");
  }
  expect_trained_together(out, 3);
}

// ---- SLURM ----------------------------------------------------------------------

// srun's variables for task `rank` of 3, the first host of a compressed list
// (localhost) being the coordinator's, the port from TROUPE_PORT.
std::vector<std::string> slurm_env(int rank, const std::string& port) {
  return {"SLURM_JOB_ID=4242",
          "SLURM_PROCID=" + std::to_string(rank),
          "SLURM_NTASKS=3",
          "SLURM_NNODES=3",
          "SLURM_JOB_NODELIST=localhost,node[02-03]",
          "SLURM_NODEID=" + std::to_string(rank),
          "SLURM_LOCALID=0",
          "TROUPE_PORT=" + port};
}

TEST(Launchers, SlurmVariablesGiveEachProcessItsRoleAndTheSameCommandLineServesAll) {
  clear_launcher_environment();
  const std::string dir = temp_dir("slurm");
  const std::string job = write_file(dir, "job.toml", kShortJob);
  const std::string summary = dir + "/summary.json";
  const std::string port = std::to_string(troupe::testing::free_loopback_port());
  // A coordinator's option on the shared command line: the workers leave it to rank 0.
  Launch launch("slurm-run", node_command(job, {"--summary-json", summary}),
                {slurm_env(0, port), slurm_env(1, port), slurm_env(2, port)});
  ASSERT_EQ(launch.wait_all(300s), (std::vector<int>{0, 0, 0})) << launch.logs();
  const std::string coordinator = launch.nodes[0]->output();
  EXPECT_CONTAINS(coordinator,
                  "troupe node: role from SLURM: rank 0 of 3 (SLURM_PROCID, SLURM_NTASKS): the "
                  "coordinator, listening at localhost:" +
                      port +
                      " (first host of SLURM_JOB_NODELIST, port from TROUPE_PORT); training starts with 3 node(s)");
  for (int r : {1, 2}) {
    const std::string worker = launch.nodes[static_cast<std::size_t>(r)]->output();
    EXPECT_CONTAINS(worker, "role from SLURM: rank " + std::to_string(r) +
                                " of 3 (SLURM_PROCID, SLURM_NTASKS): a "
                                "worker, joining localhost:" +
                                port);
    EXPECT_CONTAINS(worker,
                    "rank " + std::to_string(r) + " is a worker: --summary-json left to the coordinator (rank 0)");
    EXPECT_CONTAINS(worker, "the job is done");
  }
  expect_trained_together(coordinator, 3);
  EXPECT_TRUE(std::filesystem::exists(summary)) << launch.logs();
}

// ---- torchrun and TF_CONFIG -----------------------------------------------------

TEST(Launchers, TorchrunAndTfConfigVariablesStartTwoNodes) {
  clear_launcher_environment();
  const std::string dir = temp_dir("torchrun");
  const std::string job = write_file(dir, "job.toml", kShortJob);
  {
    SCOPED_TRACE("torchrun");
    const std::string port = std::to_string(troupe::testing::free_loopback_port());
    auto env = [&](int rank) {
      return std::vector<std::string>{
          "RANK=" + std::to_string(rank), "LOCAL_RANK=0",        "WORLD_SIZE=2",
          "MASTER_ADDR=127.0.0.1",        "MASTER_PORT=" + port, "TORCHELASTIC_USE_AGENT_STORE=False"};
    };
    Launch launch("torchrun-run", node_command(job), {env(0), env(1)});
    ASSERT_EQ(launch.wait_all(300s), (std::vector<int>{0, 0})) << launch.logs();
    EXPECT_CONTAINS(launch.nodes[0]->output(),
                    "role from torchrun: rank 0 of 2 (RANK, WORLD_SIZE): the coordinator, "
                    "listening at 127.0.0.1:" +
                        port);
    EXPECT_CONTAINS(launch.nodes[1]->output(), "role from torchrun: rank 1 of 2 (RANK, WORLD_SIZE): a worker");
    expect_trained_together(launch.nodes[0]->output(), 2);
  }
  {
    SCOPED_TRACE("TF_CONFIG");
    const std::string a = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
    const std::string b = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
    auto env = [&](int index) {
      return std::vector<std::string>{R"(TF_CONFIG={"cluster": {"worker": [")" + a + R"(", ")" + b +
                                      R"("]}, "task": {"type": "worker", "index": )" + std::to_string(index) + "}}"};
    };
    Launch launch("tf-config-run", node_command(job), {env(0), env(1)});
    ASSERT_EQ(launch.wait_all(300s), (std::vector<int>{0, 0})) << launch.logs();
    EXPECT_CONTAINS(launch.nodes[0]->output(),
                    "role from TF_CONFIG: rank 0 of 2 (task worker 0): the coordinator, listening at " + a);
    // A worker of a cluster spec serves its data plane at its own entry.
    EXPECT_CONTAINS(launch.nodes[1]->output(),
                    "role from TF_CONFIG: rank 1 of 2 (task worker 1): a worker, joining " + a);
    expect_trained_together(launch.nodes[0]->output(), 2);
  }
}

// ---- seed 002's shape: TF1's flags, ps entries ----------------------------------

// TF1's ps/worker launch, in the seed's flag spelling and as a TF_CONFIG with
// chief, worker and ps entries: every task gets the same command
// line; the ps tasks join the chief, host the parameter-server shards (shard
// i on ps task i mod P) and serve the replicas' pushes on the data plane;
// the chief waits for all of them before training.
TEST(Launchers, TheSeedsFlagsAndATfConfigWithPsEntriesStartAWorkingJob) {
  clear_launcher_environment();
  const std::string dir = temp_dir("tf1-flags");
  auto free_address = [] { return "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port()); };
  const std::string a = free_address(), b = free_address(), p = free_address(), q = free_address();
  {
    SCOPED_TRACE("--ps_hosts --worker_hosts --job_name --task_index: 2 workers, 2 ps tasks, async");
    std::string text = kShortJob;
    const std::string sync_line = "mode = \"sync\"";
    text.replace(text.find(sync_line), sync_line.size(), "mode = \"async\"");
    const std::string job = write_file(dir, "async.toml", text);
    auto flags = [&](const std::string& name, int index) {
      return node_command(job, {"--worker_hosts", a + "," + b, "--ps_hosts", p + "," + q, "--job_name", name,
                                "--task_index", std::to_string(index)});
    };
    Process ps0(flags("ps", 0), dir + "/ps0.log");
    Process ps1(flags("ps", 1), dir + "/ps1.log");
    Process w0(flags("worker", 0), dir + "/worker0.log");
    Process w1(flags("worker", 1), dir + "/worker1.log");
    auto logs = [&] {
      return "--- worker 0:\n" + w0.output() + "--- worker 1:\n" + w1.output() + "--- ps 0:\n" + ps0.output() +
             "--- ps 1:\n" + ps1.output();
    };
    ASSERT_EQ(w0.wait_for(300s), 0) << logs();
    ASSERT_EQ(w1.wait_for(10s), 0) << logs();
    ASSERT_EQ(ps0.wait_for(10s), 0) << logs();
    ASSERT_EQ(ps1.wait_for(10s), 0) << logs();
    const std::string out = w0.output();
    EXPECT_CONTAINS(out,
                    "role from --worker_hosts/--ps_hosts: rank 0 of 2 (task worker 0): the coordinator, "
                    "listening at " +
                        a);
    EXPECT_CONTAINS(w1.output(),
                    "role from --worker_hosts/--ps_hosts: rank 1 of 2 (task worker 1): a "
                    "worker, joining " +
                        a);
    EXPECT_CONTAINS(ps0.output(), "task ps 0: a ps task (parameter-server shards, no replica), joining " + a);
    EXPECT_CONTAINS(out, "starting with 2 node(s), 2 replica(s) and 2 ps task(s)");
    const Accounting acc = accounting(out);
    EXPECT_EQ(acc.pushed, 30) << out;
    EXPECT_EQ(acc.applied, 30) << out;
    // Every shard applied every push, each on its ps task.
    EXPECT_CONTAINS(out, "30 applied by the server (by shard: 30, 30)");
    // One shard each (placed in the order the tasks joined).
    const std::string both = ps0.output() + ps1.output();
    EXPECT_CONTAINS(both, "hosting shard(s) 0 ");
    EXPECT_CONTAINS(both, "hosting shard(s) 1 ");
    EXPECT_CONTAINS(ps0.output(), "hosting shard(s) ");
    EXPECT_CONTAINS(ps1.output(), "hosting shard(s) ");
    EXPECT_CONTAINS(ps0.output(), "the job is done (30 pushes applied here; ");  // a push is a global step
    EXPECT_CONTAINS(ps1.output(), "the job is done (30 pushes applied here; ");
  }
  {
    SCOPED_TRACE("TF_CONFIG with chief, worker and ps entries");
    std::string text = kShortJob;
    const std::string sync_line = "mode = \"sync\"";
    text.replace(text.find(sync_line), sync_line.size(), "mode = \"ssp:2\"");
    const std::string job = write_file(dir, "ssp.toml", text);
    auto env = [&](const std::string& type) {
      return std::vector<std::string>{R"(TF_CONFIG={"cluster": {"chief": [")" + a + R"("], "worker": [")" + b +
                                      R"("], "ps": [")" + p + R"("]}, "task": {"type": ")" + type +
                                      R"(", "index": 0}})"};
    };
    Launch launch("tf-config-ps", node_command(job), {env("chief"), env("worker"), env("ps")});
    ASSERT_EQ(launch.wait_all(300s), (std::vector<int>{0, 0, 0})) << launch.logs();
    EXPECT_CONTAINS(launch.nodes[0]->output(),
                    "role from TF_CONFIG: rank 0 of 2 (task chief 0): the coordinator, listening at " + a);
    EXPECT_CONTAINS(launch.nodes[1]->output(),
                    "role from TF_CONFIG: rank 1 of 2 (task worker 0): a worker, joining " + a);
    EXPECT_CONTAINS(launch.nodes[2]->output(), "role from TF_CONFIG: task ps 0: a ps task");
    EXPECT_CONTAINS(launch.nodes[0]->output(), "starting with 2 node(s), 2 replica(s) and 1 ps task(s)");
    EXPECT_CONTAINS(launch.nodes[0]->output(), "30 applied by the server");
    EXPECT_CONTAINS(launch.nodes[2]->output(), "the job is done (30 pushes applied here; ");
  }
  {
    SCOPED_TRACE("a ps task needs a coordinator to join");
    Process alone({TROUPE_BINARY, "node", "--ps"}, dir + "/ps-alone.log");
    EXPECT_EQ(alone.wait_for(30s), 2) << alone.output();
    EXPECT_CONTAINS(alone.output(), "--ps needs --join HOST:PORT (the coordinator)");
    Process listening({TROUPE_BINARY, "node", "--ps", "--listen", a}, dir + "/ps-listen.log");
    EXPECT_EQ(listening.wait_for(30s), 2) << listening.output();
    EXPECT_CONTAINS(listening.output(), "it cannot be the coordinator");
  }
}

// ---- errors and precedence --------------------------------------------------------

// Runs `troupe node ARGS` with the extra environment `env`; (status, output).
std::pair<int, std::string> run_node(const std::string& name, std::vector<std::string> args,
                                     std::vector<std::string> env, std::chrono::seconds limit = 30s) {
  const std::string dir = temp_dir(name);
  args.insert(args.begin(), {TROUPE_BINARY, "node"});
  Process p(args, dir + "/out.log", std::move(env));
  const int status = p.wait_for(limit);
  return {status, p.output()};
}

TEST(Launchers, AMalformedEnvironmentIsAUsageErrorNamingTheVariable) {
  clear_launcher_environment();
  auto [status, out] = run_node("env-rank-only", {"--devices", "cpu:0"}, {"RANK=1", "WORLD_SIZE=2"});
  EXPECT_EQ(status, 2) << out;
  EXPECT_CONTAINS(out, "troupe: torchrun environment: RANK is set but MASTER_ADDR is not");
  std::tie(status, out) = run_node("env-nodelist", {"--devices", "cpu:0", "--port", "7000"},
                                   {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_NODELIST=node[01-02"});
  EXPECT_EQ(status, 2) << out;
  EXPECT_CONTAINS(out, "troupe: SLURM_JOB_NODELIST 'node[01-02': '[' at offset 4 is never closed");
  std::tie(status, out) =
      run_node("env-port", {"--devices", "cpu:0"}, {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_JOB_NODELIST=n[1-2]"});
  EXPECT_EQ(status, 2) << out;
  EXPECT_CONTAINS(out, "troupe: SLURM environment: no port for the coordinator on n1");
  std::tie(status, out) = run_node("env-none", {"--devices", "cpu:0", "--port", "7000"}, {});
  EXPECT_EQ(status, 2) << out;
  EXPECT_CONTAINS(out, "--coordinator and --port complete a launcher's environment, and none was found");
  std::tie(status, out) = run_node("env-nothing", {"--devices", "cpu:0"}, {});
  EXPECT_EQ(status, 2) << out;
  EXPECT_CONTAINS(out,
                  "troupe node needs exactly one of --listen HOST:PORT (coordinator), --join HOST:PORT (worker) "
                  "or --cluster FILE, or a launcher's environment");
}

TEST(Launchers, ExplicitRoleFlagsWinOverTheEnvironment) {
  clear_launcher_environment();
  // A malformed SLURM environment is not even read when --join is given:
  // the worker tries its coordinator (none is there) and gives up.
  const std::string address = "127.0.0.1:" + std::to_string(troupe::testing::free_loopback_port());
  auto [status, out] = run_node(
      "explicit-join", {"--join", address, "--devices", "cpu:0", "--wait-timeout", "2", "--rejoin-timeout", "0"},
      {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_NODELIST=node[01-02"});
  EXPECT_EQ(status, 1) << out;
  EXPECT_CONTAINS(out, "troupe node: --join given: the role in the SLURM environment is not used");
  EXPECT_CONTAINS(out, "cannot join " + address);
  EXPECT_EQ(out.find("never closed"), std::string::npos) << out;
  // --listen over TROUPE_CLUSTER (which used to be refused as a conflict):
  // a coordinator waiting for a second node, stopped by SIGTERM.
  const std::string dir = temp_dir("explicit-listen");
  const std::string job = write_file(dir, "job.toml", kShortJob);
  Process coordinator(
      {TROUPE_BINARY, "node", "--listen", address, "--job", job, "--min-nodes", "2", "--devices", "cpu:0"},
      dir + "/out.log",
      {R"(TROUPE_CLUSTER={"cluster": {"worker": ["x:1", "y:1"]}, "task": {"type": "worker", "index": 1}})"});
  ASSERT_TRUE(coordinator.wait_for_output("waiting for 1 more node(s)", 60s)) << coordinator.output();
  coordinator.signal(SIGTERM);
  EXPECT_NE(coordinator.wait_for(10s), -1);
  EXPECT_CONTAINS(coordinator.output(),
                  "troupe node: --listen given: the role in the TROUPE_CLUSTER environment is not used");
  EXPECT_CONTAINS(coordinator.output(), "coordinator listening on " + address);
}

}  // namespace
}  // namespace troupe
