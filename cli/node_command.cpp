// `troupe node`: one process per host of a cluster (cluster/node.hpp).
//
//   troupe node --listen 0.0.0.0:7000 --job job.toml --min-nodes 3 --control 127.0.0.1:8080
//   troupe node --join host-a:7000
//   TROUPE_CLUSTER='{"cluster":{"worker":["a:7000","b:7001"]},"task":{"type":"worker","index":1}}' troupe node
//   mpirun -np 3 -x MASTER_ADDR=host-a -x MASTER_PORT=7000 troupe node --job job.toml
//   srun -n 4 troupe node --job job.toml --port 7000
//   troupe node --worker_hosts a:7000,b:7000 --ps_hosts p:7001 --job_name worker --task_index 0 --job job.toml
//
// The role, in order: --listen / --join (explicit flags always win), then
// --cluster FILE or TF1's flags (--worker_hosts ...: the same spec
// written as flags), then the environment of the launcher that started the
// node (net/cluster/launcher_env.hpp: TROUPE_CLUSTER, TF_CONFIG, SLURM, Open
// MPI, torchrun). A role read from a file or the environment is logged with
// where each figure came from; rank 0 is the coordinator and waits for the
// world size's nodes before it starts training.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "cli/commands.hpp"
#include "job/job_file.hpp"
#include "net/cluster/cluster_spec.hpp"
#include "net/cluster/launcher_env.hpp"

extern char** environ;

namespace troupe::cli {

void add_node_command(CLI::App& app, NodeOptions& o) {
  auto* cmd =
      app.add_subcommand("node",
                         "Run one node of a cluster: the coordinator (--listen) or a worker (--join), or the role "
                         "a cluster spec or a launcher (mpirun, SLURM, torchrun) gives");
  auto& n = o.node;
  cmd->add_option("--listen", n.listen, "Be the coordinator, accepting nodes at HOST:PORT");
  cmd->add_option("--join", n.join, "Be a worker, joining the coordinator at HOST:PORT");
  cmd->add_option(
      "--cluster", o.cluster,
      "A TF_CONFIG-shaped cluster spec file (or set TROUPE_CLUSTER or TF_CONFIG); index 0 is the coordinator");
  cmd->add_option("--coordinator", o.coordinator,
                  "Under a launcher (SLURM, mpirun, torchrun; no --listen / --join): the coordinator's HOST:PORT, "
                  "instead of the first SLURM host or MASTER_ADDR:MASTER_PORT; rank 0 listens there");
  cmd->add_option("--port", o.port,
                  "Under a launcher: the coordinator's port (else TROUPE_PORT; SLURM needs one of them, for "
                  "mpirun and torchrun it replaces MASTER_PORT)");
  auto& tf1 = o.tf1;
  cmd->add_option("--worker_hosts,--worker-hosts", tf1.worker_hosts,
                  "TF1's cluster flags (the seed's spelling): the workers' HOST:PORT list, comma-separated; worker 0 "
                  "is the chief (the coordinator). With --job_name and --task_index");
  cmd->add_option("--ps_hosts,--ps-hosts", tf1.ps_hosts,
                  "TF1's cluster flags: the ps tasks' HOST:PORT list; they host the parameter-server shards of "
                  "async and ssp (the chief waits for all of them before training)");
  cmd->add_option("--job_name,--job-name", tf1.job_name,
                  "TF1's cluster flags: worker (worker 0 is the chief) or ps (a ps task: hosts parameter-server "
                  "shards, trains nothing)");
  cmd->add_option_function<int>(
      "--task_index,--task-index",
      [&tf1](int i) {
        tf1.task_index = i;
        tf1.task_index_given = true;
      },
      "TF1's cluster flags: this task's index in its job's list (default 0)");
  cmd->add_flag("--ps", o.ps,
                "Be a ps task (--job_name ps): join the coordinator (--join) and host the parameter-server shards "
                "it places here (async and ssp pushes come on the data plane, --data-address); trains nothing");
  cmd->add_option("--ps-tasks", n.ps_tasks,
                  "Coordinator: ps tasks (troupe node --ps --join ...) to wait for before training; the "
                  "parameter-server shards then run on them, at least one each (0: in this process)")
      ->capture_default_str();
  cmd->add_option("--job", n.job_file,
                  "Job file (coordinator: required; worker: optional, refused if it differs from the coordinator's)");
  cmd->add_option("--max-nodes", n.max_nodes,
                  "Coordinator: nodes, this one included, at most; a node beyond them is refused with that reason "
                  "(0: no limit)")
      ->capture_default_str();
  cmd->add_option("--min-nodes", n.min_nodes,
                  "Coordinator: nodes, this one included, needed to train: training starts with them and pauses "
                  "while fewer are present (for at most --wait-timeout, then stops with a checkpoint)")
      ->capture_default_str();
  cmd->add_option("--start-nodes", n.start_nodes,
                  "Coordinator: nodes, this one included, to wait for before training starts (default: --min-nodes); "
                  "later nodes join the running job")
      ->capture_default_str();
  cmd->add_option(
      "--devices", o.devices,
      "This node's devices, e.g. cpu:0,cpu:1, cuda:0,cuda:1 or cuda:0,cuda:0 (default: every GPU, else 2 CPU devices)");
  cmd->add_option("--secret-file", n.secret_file,
                  "File holding the cluster secret (else TROUPE_SECRET; without one only loopback peers are accepted)");
  cmd->add_flag("--insecure", n.insecure,
                "For a trusted network only: nodes still prove the cluster secret when they connect, but the links "
                "between them are NOT sealed afterwards (anyone on the path can read and alter gradients, "
                "parameters and control messages); full plaintext speed, and NCCL between GPU nodes. Every node "
                "of the cluster must agree; needs a secret");
  cmd->add_option("--data-address", n.data_address,
                  "This node's data-plane address HOST[:PORT] (default: the address peers reach it by, a free port)");
  cmd->add_option("--threads,--threads-per-device", n.threads_per_device, "CPU threads for each device's kernels")
      ->capture_default_str();
  cmd->add_option("--prefetch", n.prefetch, "Batches each data loader keeps ready")->capture_default_str();
  cmd->add_flag("--resume", o.reporting.config.resume,
                "Coordinator: resume from the newest checkpoint in the job's checkpoint_dir (workers join as usual)");
  cmd->add_flag("--resume-or-start", o.reporting.config.resume_or_start,
                "Coordinator, with --resume: start from step 0 when checkpoint_dir holds no checkpoint");
  cmd->add_option("--control", o.reporting.control,
                  "Coordinator: serve the HTTP control endpoint at HOST:PORT (troupe ctl --at HOST:PORT)");
  cmd->add_option("--metrics-token-file", o.reporting.metrics_token_file,
                  "Coordinator, with a secret: a file holding a bearer token that GET /metrics on --control accepts "
                  "instead of a signed request (Prometheus' authorization credentials_file)");
  cmd->add_option("--metrics", o.reporting.metrics, "Coordinator: write metrics rows here (CSV, or JSON lines)");
  cmd->add_option("--log-every", o.reporting.log_every, "Coordinator: steps between log lines")->capture_default_str();
  cmd->add_option("--summary-json", o.reporting.summary_json, "Coordinator: write the final figures here as JSON");
  cmd->add_option("--tensorboard", o.reporting.tensorboard,
                  "Coordinator: write TensorBoard event files into this folder");
  cmd->add_option("--timeline", o.reporting.timeline,
                  "Write a Chrome trace of this node's replicas' steps here (each node its own file; "
                  "scripts/timeline.py merges them)");
  cmd->add_option("--timeline-steps", o.reporting.timeline_steps, "The steps --timeline records, A:B")
      ->capture_default_str();
  cmd->add_option_function<double>(
      "--wait-timeout",
      [&n](double s) { n.wait_timeout = std::chrono::milliseconds(static_cast<long long>(s * 1000)); },
      "Seconds to wait for --min-nodes (coordinator) or for the job to start (worker; reaching the coordinator "
      "takes at most 30 s of it) (default 600)");
  cmd->add_option_function<double>(
      "--rejoin-timeout",
      [&n](double s) { n.rejoin_timeout = std::chrono::milliseconds(static_cast<long long>(s * 1000)); },
      "Worker: after losing the coordinator, seconds to keep trying to join it again, so that a coordinator "
      "restarted with --resume goes on with this node (0: exit at once) (default 120)");
  cmd->add_option_function<double>(
      "--timeout", [&n](double s) { n.timeout = std::chrono::milliseconds(static_cast<long long>(s * 1000)); },
      "Seconds any one collective or remote request may take (default 60)");
}

namespace {

void node_log(const std::string& line) { std::fprintf(stderr, "troupe node: %s\n", line.c_str()); }

// The role --cluster FILE or the launcher's environment gives, when neither
// --listen nor --join was given (those always win: the environment is then
// left aside, and the log says so).
std::optional<net::LauncherRole> role_of(const NodeOptions& o) {
  const auto& n = o.node;
  const bool explicit_role = !n.listen.empty() || !n.join.empty();
  const net::Environment env = net::environment_of(environ);
  net::ClusterFlags tf1 = o.tf1;
  if (o.ps) {
    if (!tf1.job_name.empty() && tf1.job_name != "ps")
      throw UsageError("--ps and --job_name " + tf1.job_name + " disagree");
    tf1.job_name = "ps";
  }
  if (tf1.given()) {
    if (tf1.worker_hosts.empty() && tf1.ps_hosts.empty()) {
      // `--ps --join HOST:PORT` (or --job_name ps with --join): a ps task
      // joining by address.
      if (tf1.job_name == "ps" && !tf1.task_index_given && !n.join.empty()) return std::nullopt;
      if (tf1.job_name == "ps" && !n.listen.empty())
        throw UsageError(std::string(o.ps ? "--ps" : "--job_name ps") +
                         ": a ps task joins the coordinator (--join HOST:PORT); it cannot be the coordinator");
      if (tf1.job_name == "ps")
        throw UsageError(std::string(o.ps ? "--ps" : "--job_name ps") +
                         " needs --join HOST:PORT (the coordinator), or TF1's --ps_hosts and --worker_hosts");
      throw UsageError(
          "--job_name and --task_index go with --worker_hosts (and --ps_hosts), TF1's cluster flags; "
          "with --listen, --join, --cluster or a launcher's environment leave them out");
    }
    if (explicit_role || !o.cluster.empty())
      throw UsageError("give one of --listen / --join, --cluster FILE and --worker_hosts / --ps_hosts, not two");
    if (!o.coordinator.empty() || o.port != 0)
      throw UsageError(
          "--coordinator and --port complete a launcher's environment; --worker_hosts and --ps_hosts "
          "name every address themselves");
    if (const auto launcher = net::launcher_in_environment(env))
      node_log("--worker_hosts given: the role in the " + *launcher + " environment is not used");
    return net::role_from_cluster_spec(net::cluster_spec_from_flags(tf1));
  }
  if (!o.cluster.empty()) {
    if (explicit_role) throw UsageError("give either --listen / --join or --cluster " + o.cluster + ", not both");
    if (!o.coordinator.empty() || o.port != 0)
      throw UsageError("--coordinator and --port complete a launcher's environment; --cluster " + o.cluster +
                       " names every address itself");
    return net::role_from_cluster_spec(*net::load_cluster_spec(o.cluster));
  }
  if (explicit_role) {
    if (!o.coordinator.empty() || o.port != 0)
      throw UsageError("--coordinator and --port complete a launcher's environment (SLURM, mpirun, torchrun); with " +
                       std::string(n.listen.empty() ? "--join" : "--listen") + " give the address there");
    if (const auto launcher = net::launcher_in_environment(env))
      node_log(std::string(n.listen.empty() ? "--join" : "--listen") + " given: the role in the " + *launcher +
               " environment is not used");
    return std::nullopt;
  }
  net::LauncherFlags flags;
  flags.coordinator = o.coordinator;
  flags.port = o.port;
  auto role = net::role_from_environment(env, flags);
  if (!role && (!o.coordinator.empty() || o.port != 0))
    throw UsageError(
        "--coordinator and --port complete a launcher's environment, and none was found (SLURM_PROCID, "
        "OMPI_COMM_WORLD_RANK or RANK for the rank); give --listen or --join instead");
  return role;
}

// A worker started with the command line every rank shares: the
// coordinator's options are its business, not an error here.
void drop_coordinator_options(NodeOptions& o, const std::string& who) {
  auto& r = o.reporting;
  std::string dropped;
  const auto drop = [&](bool given, const char* flag) {
    if (given) dropped += (dropped.empty() ? "" : ", ") + std::string(flag);
  };
  drop(!r.control.empty(), "--control");
  drop(!r.metrics.empty(), "--metrics");
  drop(!r.metrics_token_file.empty(), "--metrics-token-file");
  drop(!r.summary_json.empty(), "--summary-json");
  drop(!r.tensorboard.empty(), "--tensorboard");
  drop(r.config.resume, "--resume");
  drop(r.config.resume_or_start, "--resume-or-start");
  if (dropped.empty()) return;
  node_log(who + ": " + dropped + " left to the coordinator (rank 0)");
  r.control.clear();
  r.metrics.clear();
  r.metrics_token_file.clear();
  r.summary_json.clear();
  r.tensorboard.clear();
  r.config.resume = r.config.resume_or_start = false;
}

}  // namespace

int run_node(NodeOptions& o) {
  auto& n = o.node;
  if (const auto role = role_of(o)) {
    if (role->ps_task) {
      n.join = role->coordinator.str();
      if (n.data_address.empty()) n.data_address = role->own_address;
      node_log("role from " + role->launcher + ": " + role->summary());
      drop_coordinator_options(o, "this is a ps task");
      o.ps = true;
    } else if (role->is_coordinator()) {
      if (n.ps_tasks == 0) n.ps_tasks = static_cast<int>(role->ps_tasks);
      n.listen = role->coordinator.str();
      // Every node of the launch before training starts (unless
      // --start-nodes says otherwise); losing one later does not stop the
      // job (--min-nodes, default 1).
      if (n.start_nodes == 0) n.start_nodes = role->world_size;
      node_log("role from " + role->launcher + ": " + role->summary() + "; training starts with " +
               std::to_string(std::max(n.start_nodes, n.min_nodes)) + " node(s)");
    } else {
      n.join = role->coordinator.str();
      if (n.data_address.empty()) n.data_address = role->own_address;
      node_log("role from " + role->launcher + ": " + role->summary());
      drop_coordinator_options(o, "rank " + std::to_string(role->rank) + " is a worker");
    }
  }
  if (n.listen.empty() == n.join.empty())
    throw UsageError(
        "troupe node needs exactly one of --listen HOST:PORT (coordinator), --join HOST:PORT (worker) "
        "or --cluster FILE, or a launcher's environment (TROUPE_CLUSTER, TF_CONFIG, SLURM, mpirun, "
        "torchrun)");
  if (n.threads_per_device < 1) throw UsageError("--threads must be at least 1");
  if (n.prefetch < 1) throw UsageError("--prefetch must be at least 1");
  if (n.timeout.count() <= 0 || n.wait_timeout.count() <= 0) throw UsageError("timeouts must be positive");
  if (n.max_nodes < 0) throw UsageError("--max-nodes must be >= 0 (0: no limit)");
  if (n.rejoin_timeout.count() < 0) throw UsageError("--rejoin-timeout must be >= 0 seconds");
  if (!o.devices.empty()) n.devices = actors::parse_devices(o.devices);
  use_threads(n.threads_per_device);
  if (!n.join.empty()) {
    if (!o.reporting.control.empty() || !o.reporting.metrics.empty() || !o.reporting.summary_json.empty() ||
        !o.reporting.tensorboard.empty() || o.reporting.config.resume || o.reporting.config.resume_or_start ||
        !o.reporting.metrics_token_file.empty())
      throw UsageError(
          "--control, --metrics, --metrics-token-file, --summary-json, --tensorboard, --resume and "
          "--resume-or-start belong to the coordinator (--listen)");
    if (o.ps || o.tf1.job_name == "ps") {
      if (n.ps_tasks != 0) throw UsageError("--ps-tasks belongs to the coordinator (--listen)");
      // The seed's launch gives every task the same command line: what only
      // replicas use is left aside, and said.
      if (!o.devices.empty() || !o.reporting.timeline.empty())
        node_log("a ps task runs no replica: --devices and --timeline are not used");
      return actors::run_ps_task(n);
    }
    if (n.ps_tasks != 0) throw UsageError("--ps-tasks belongs to the coordinator (--listen)");
    if (!o.reporting.timeline.empty()) {
      const auto [first, last] = actors::Timeline::parse_steps(o.reporting.timeline_steps);
      prepare_output_path("--timeline", o.reporting.timeline);
      n.timeline = std::make_shared<actors::Timeline>(o.reporting.timeline, "worker " + n.join, first, last);
    }
    const int status = actors::run_worker(n);
    if (n.timeline) {
      n.timeline->write();
      std::fprintf(stderr, "troupe node: timeline: %s\n", n.timeline->path().c_str());
    }
    return status;
  }
  if (o.ps) throw UsageError("--ps: a ps task joins the coordinator (--join HOST:PORT); it cannot be the coordinator");
  if (n.ps_tasks < 0) throw UsageError("--ps-tasks must be >= 0");
  if (n.job_file.empty()) throw UsageError("the coordinator needs --job FILE (the job every node trains)");
  actors::JobConfig jc = actors::load_job_file(n.job_file);
  jc.devices = n.devices.empty() ? actors::default_devices() : n.devices;
  jc.threads_per_device = n.threads_per_device;
  jc.prefetch = n.prefetch;
  jc.timeout = n.timeout;
  jc.min_nodes = n.min_nodes;
  jc.wait_timeout = n.wait_timeout;
  jc.train.resume = o.reporting.config.resume;
  jc.train.resume_or_start = o.reporting.config.resume_or_start;
  jc.cluster = actors::make_coordinator_cluster(n, jc);
  o.reporting.secret_file = n.secret_file;  // the control endpoint's credential: the cluster secret
  return run_actor_job(jc, o.reporting);
}

}  // namespace troupe::cli
