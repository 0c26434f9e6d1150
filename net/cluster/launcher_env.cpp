#include "net/cluster/launcher_env.hpp"

#include <stdexcept>

namespace troupe::net {

Environment environment_of(char** envp) {
  Environment env;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));  // the first of repeated names, as getenv
  }
  return env;
}

namespace {

const std::string* find(const Environment& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

bool has(const Environment& env, const std::string& name) { return find(env, name) != nullptr; }

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

// A non-negative decimal integer of at most 9 digits from variable `name`.
int count_of(const Environment& env, const std::string& launcher, const std::string& name) {
  const std::string* value = find(env, name);
  if (value == nullptr) fail(launcher + " environment: " + name + " is not set");
  if (value->empty() || value->size() > 9 || value->find_first_not_of("0123456789") != std::string::npos)
    fail(launcher + " environment: " + name + " '" + *value + "' is not a non-negative integer");
  return std::stoi(*value);
}

void check_rank(const std::string& launcher, const std::string& rank_name, int rank, const std::string& world_name,
                int world) {
  if (world < 1) fail(launcher + " environment: " + world_name + " is 0; it must be at least 1");
  if (rank >= world)
    fail(launcher + " environment: " + rank_name + " " + std::to_string(rank) + " is not below " + world_name + " " +
         std::to_string(world) + " (ranks are 0.." + std::to_string(world - 1) + ")");
}

// A port in 1..65535 from `text`, which came from `what`.
std::uint16_t port_of(const std::string& text, const std::string& what) {
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos)
    fail(what + " '" + text + "' is not a port number in 1..65535");
  const unsigned long value = std::stoul(text);
  if (value == 0 || value > 65535) fail(what + " " + text + " is not a port number in 1..65535");
  return static_cast<std::uint16_t>(value);
}

// The port --port or TROUPE_PORT give, with where it came from; 0 when neither.
std::uint16_t flag_port(const Environment& env, const LauncherFlags& flags, std::string* source) {
  if (flags.port != 0) {
    if (flags.port < 0 || flags.port > 65535) fail("--port " + std::to_string(flags.port) + " is not in 1..65535");
    *source = "--port";
    return static_cast<std::uint16_t>(flags.port);
  }
  if (const std::string* p = find(env, "TROUPE_PORT")) {
    *source = "TROUPE_PORT";
    return port_of(*p, "TROUPE_PORT");
  }
  return 0;
}

// The coordinator's address from --coordinator, when given; else nothing.
std::optional<HostPort> flag_coordinator(const LauncherFlags& flags) {
  if (flags.coordinator.empty()) return std::nullopt;
  return parse_cluster_address(flags.coordinator, "--coordinator");
}

LauncherRole slurm_role(const Environment& env, const LauncherFlags& flags) {
  const std::string launcher = "SLURM";
  LauncherRole role;
  role.launcher = launcher;
  role.rank = count_of(env, launcher, "SLURM_PROCID");
  // SLURM_NPROCS is the older name of SLURM_NTASKS; srun sets both.
  const std::string world_name =
      has(env, "SLURM_NTASKS") || !has(env, "SLURM_NPROCS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
  role.world_size = count_of(env, launcher, world_name);
  check_rank(launcher, "SLURM_PROCID", role.rank, world_name, role.world_size);
  std::string where;
  if (auto c = flag_coordinator(flags)) {
    role.coordinator = *c;
    where = "--coordinator";
  } else {
    const std::string list_name =
        has(env, "SLURM_JOB_NODELIST") || !has(env, "SLURM_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
    const std::string* list = find(env, list_name);
    if (list == nullptr)
      fail(
          "SLURM environment: SLURM_JOB_NODELIST is not set (it names the coordinator's host; or give "
          "--coordinator HOST:PORT)");
    const auto hosts = expand_host_list(*list, list_name + " '" + *list + "'");
    std::string port_source;
    role.coordinator.host = hosts.front();
    role.coordinator.port = flag_port(env, flags, &port_source);
    if (role.coordinator.port == 0)
      fail("SLURM environment: no port for the coordinator on " + hosts.front() + " (the first host of " + list_name +
           "): give --port PORT or set TROUPE_PORT, the same on every task");
    where = "first host of " + list_name + ", port from " + port_source;
  }
  role.rank_source = "SLURM_PROCID, " + world_name;
  role.coordinator_source = where;
  return role;
}

// Open MPI and torchrun: the coordinator is --coordinator, else MASTER_ADDR
// with --port / TROUPE_PORT / MASTER_PORT. `agent_store` says MASTER_PORT
// is taken by torchrun's own store.
HostPort master_address(const Environment& env, const LauncherFlags& flags, const std::string& launcher,
                        const std::string& rank_name, bool agent_store, std::string* where) {
  if (auto c = flag_coordinator(flags)) {
    *where = "--coordinator";
    return *c;
  }
  const std::string* addr = find(env, "MASTER_ADDR");
  if (addr == nullptr || blank(*addr))
    fail(launcher + " environment: " + rank_name +
         " is set but MASTER_ADDR is not (the coordinator's host; or give "
         "--coordinator HOST:PORT)");
  HostPort hp;
  hp.host = *addr;
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']')
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  std::string port_source;
  hp.port = flag_port(env, flags, &port_source);
  if (hp.port == 0) {
    const std::string* port = find(env, "MASTER_PORT");
    if (port == nullptr)
      fail(launcher + " environment: MASTER_ADDR is set but MASTER_PORT is not (or give --port PORT or TROUPE_PORT)");
    if (agent_store)
      fail(launcher + " environment: MASTER_PORT " + *port +
           " is taken by torchrun's own store "
           "(TORCHELASTIC_USE_AGENT_STORE=True, the static rendezvous): give troupe a port of its own with --port "
           "PORT or TROUPE_PORT, or run torchrun with --rdzv-backend=c10d");
    hp.port = port_of(*port, launcher + " environment: MASTER_PORT");
    port_source = "MASTER_PORT";
  }
  *where = "MASTER_ADDR, port from " + port_source;
  return hp;
}

LauncherRole open_mpi_role(const Environment& env, const LauncherFlags& flags) {
  const std::string launcher = "Open MPI";
  LauncherRole role;
  role.launcher = launcher;
  role.rank = count_of(env, launcher, "OMPI_COMM_WORLD_RANK");
  role.world_size = count_of(env, launcher, "OMPI_COMM_WORLD_SIZE");
  check_rank(launcher, "OMPI_COMM_WORLD_RANK", role.rank, "OMPI_COMM_WORLD_SIZE", role.world_size);
  std::string where;
  role.coordinator = master_address(env, flags, launcher, "OMPI_COMM_WORLD_RANK", false, &where);
  role.rank_source = "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE";
  role.coordinator_source = where;
  return role;
}

LauncherRole torchrun_role(const Environment& env, const LauncherFlags& flags) {
  const std::string launcher = "torchrun";
  LauncherRole role;
  role.launcher = launcher;
  if (!has(env, "RANK")) {
    const std::string present = has(env, "MASTER_ADDR")  ? "MASTER_ADDR"
                                : has(env, "WORLD_SIZE") ? "WORLD_SIZE"
                                                         : "MASTER_PORT";
    fail(launcher + " environment: " + present +
         " is set but RANK is not (torchrun sets RANK, WORLD_SIZE, "
         "MASTER_ADDR and MASTER_PORT)");
  }
  role.rank = count_of(env, launcher, "RANK");
  if (!has(env, "WORLD_SIZE")) fail(launcher + " environment: RANK is set but WORLD_SIZE is not");
  role.world_size = count_of(env, launcher, "WORLD_SIZE");
  check_rank(launcher, "RANK", role.rank, "WORLD_SIZE", role.world_size);
  const std::string* store = find(env, "TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = store != nullptr && (*store == "True" || *store == "true" || *store == "1");
  std::string where;
  role.coordinator = master_address(env, flags, launcher, "RANK", agent_store, &where);
  role.rank_source = "RANK, WORLD_SIZE";
  role.coordinator_source = where;
  return role;
}

bool slurm_present(const Environment& env) { return has(env, "SLURM_PROCID"); }
bool open_mpi_present(const Environment& env) { return has(env, "OMPI_COMM_WORLD_RANK"); }
bool torchrun_present(const Environment& env) {
  return has(env, "RANK") || has(env, "WORLD_SIZE") || has(env, "MASTER_ADDR") || has(env, "MASTER_PORT");
}
// See the header: mpirun or torchrun inside an allocation started this process.
bool slurm_decides(const Environment& env) { return slurm_present(env) && !open_mpi_present(env) && !has(env, "RANK"); }
const std::string* tf_config(const Environment& env) {
  const std::string* value = find(env, "TF_CONFIG");
  return value != nullptr && !blank(*value) ? value : nullptr;
}

}  // namespace

std::string LauncherRole::summary() const {
  if (ps_task)
    return rank_source + ": a ps task (parameter-server shards, no replica), joining " + coordinator.str() + " (" +
           coordinator_source + ")";
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (" + rank_source +
         "): " + (is_coordinator() ? "the coordinator, listening at " : "a worker, joining ") + coordinator.str() +
         " (" + coordinator_source + ")" +
         (ps_tasks > 0 ? "; " + std::to_string(ps_tasks) + " ps task(s) host the parameter-server shards" : "");
}

std::string ps_task_refusal(const std::string& what) {
  return what +
         " is a parameter-server task: start it with `troupe node` (it reads the same TF_CONFIG or cluster "
         "flags, joins the chief and hosts the parameter-server shards); a MultiWorkerMirroredStrategy program is a "
         "chief or a worker";
}

LauncherRole role_from_cluster_spec(const ClusterSpec& spec) {
  LauncherRole role;
  if (spec.task_type == "ps") {
    // A ps task joins the chief like a worker and serves pushes on its own
    // entry's address; it is not one of the nodes that train.
    role.launcher = spec.source;
    role.ps_task = true;
    role.rank = -1;
    role.world_size = static_cast<int>(spec.nodes().size());
    role.coordinator = spec.coordinator();
    role.own_address = spec.self().str();
    role.rank_source = "task ps " + std::to_string(spec.task_index);
    role.coordinator_source = spec.chief.empty() ? "cluster.worker[0]" : "cluster.chief[0]";
    role.ps_tasks = spec.ps.size();
    return role;
  }
  role.launcher = spec.source;
  role.rank = spec.rank();
  role.world_size = static_cast<int>(spec.nodes().size());
  role.coordinator = spec.coordinator();
  role.own_address = spec.self().str();
  role.rank_source = "task " + spec.task_type + " " + std::to_string(spec.task_index);
  role.coordinator_source = spec.chief.empty() ? "cluster.worker[0]" : "cluster.chief[0]";
  role.ps_tasks = spec.ps.size();
  return role;
}

std::optional<std::string> launcher_in_environment(const Environment& env) {
  if (has(env, "TROUPE_CLUSTER")) return "TROUPE_CLUSTER";
  if (tf_config(env) != nullptr) return "TF_CONFIG";
  if (slurm_decides(env)) return "SLURM";
  if (open_mpi_present(env)) return "Open MPI";
  if (torchrun_present(env)) return "torchrun";
  return std::nullopt;
}

std::optional<LauncherRole> role_from_environment(const Environment& env, const LauncherFlags& flags) {
  const auto launcher = launcher_in_environment(env);
  if (!launcher) return std::nullopt;
  if (*launcher == "TROUPE_CLUSTER" || *launcher == "TF_CONFIG") {
    if (!flags.coordinator.empty() || flags.port != 0)
      fail("--coordinator and --port complete a SLURM, Open MPI or torchrun environment; the cluster spec in " +
           *launcher + " names every address itself");
    return role_from_cluster_spec(parse_cluster_spec(*find(env, *launcher), *launcher));
  }
  if (*launcher == "SLURM") return slurm_role(env, flags);
  if (*launcher == "Open MPI") return open_mpi_role(env, flags);
  return torchrun_role(env, flags);
}

// ---- Slurm host lists ----------------------------------------------------------

namespace {

// One bracket group's contents ("01-03,7", starting at offset `at` of the
// whole list) as the strings it stands for.
std::vector<std::string> expand_group(const std::string& group, std::size_t at, const std::string& what,
                                      std::size_t limit) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = group.find(',', start);
    const std::string item = group.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::size_t item_at = at + start;
    if (item.empty()) fail(what + ": empty range at offset " + std::to_string(item_at));
    const std::size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    for (const std::string* bound : {&lo, &hi}) {
      if (bound->empty() || bound->find_first_not_of("0123456789") != std::string::npos)
        fail(what + ": '" + item + "' at offset " + std::to_string(item_at) +
             " is not a number or a range LO-HI of numbers");
      if (bound->size() > 18) fail(what + ": '" + item + "' at offset " + std::to_string(item_at) + " is too long");
    }
    const unsigned long long low = std::stoull(lo), high = std::stoull(hi);
    if (low > high)
      fail(what + ": range '" + item + "' at offset " + std::to_string(item_at) + " runs backwards (" + lo + " > " +
           hi + ")");
    if (high - low >= limit || out.size() + (high - low + 1) > limit)
      fail(what + ": more than " + std::to_string(limit) + " hosts");
    // Zero-padded to the width of LO, as Slurm writes them: 01-10 -> 01 .. 10.
    for (unsigned long long n = low; n <= high; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(std::move(digits));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// One name of the list (between top-level commas, starting at offset `at`)
// with its bracket groups expanded, the first group varying slowest.
void expand_name(const std::string& name, std::size_t at, const std::string& what, std::size_t limit,
                 std::vector<std::string>& out) {
  if (name.empty()) fail(what + ": empty host name at offset " + std::to_string(at));
  std::vector<std::string> partial{""};
  std::size_t i = 0;
  while (i < name.size()) {
    if (name[i] == '[') {
      const std::size_t close = name.find(']', i);
      const std::string group = name.substr(i + 1, close - i - 1);
      const std::vector<std::string> values = expand_group(group, at + i + 1, what, limit);
      if (partial.size() * values.size() + out.size() > limit)
        fail(what + ": more than " + std::to_string(limit) + " hosts");
      std::vector<std::string> next;
      next.reserve(partial.size() * values.size());
      for (const auto& p : partial)
        for (const auto& v : values) next.push_back(p + v);
      partial = std::move(next);
      i = close + 1;
    } else {
      const std::size_t open = name.find('[', i);
      const std::string literal = name.substr(i, open == std::string::npos ? std::string::npos : open - i);
      for (auto& p : partial) p += literal;
      i += literal.size();
    }
  }
  out.insert(out.end(), partial.begin(), partial.end());
}

}  // namespace

std::vector<std::string> expand_host_list(const std::string& list, const std::string& what, std::size_t limit) {
  if (blank(list)) fail(what + ": the host list is empty");
  // Brackets first, so that the names below can take them as well formed.
  int depth = 0;
  std::size_t open_at = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const char c = list[i];
    if (c == '[') {
      if (depth > 0) fail(what + ": '[' inside brackets at offset " + std::to_string(i));
      depth = 1;
      open_at = i;
    } else if (c == ']') {
      if (depth == 0) fail(what + ": ']' without '[' at offset " + std::to_string(i));
      depth = 0;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      fail(what + ": white space at offset " + std::to_string(i) + " (names are separated by commas)");
    }
  }
  if (depth > 0) fail(what + ": '[' at offset " + std::to_string(open_at) + " is never closed");

  std::vector<std::string> hosts;
  std::size_t start = 0;
  depth = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[')
      depth = 1;
    else if (c == ']')
      depth = 0;
    else if (c == ',' && depth == 0) {
      expand_name(list.substr(start, i - start), start, what, limit, hosts);
      start = i + 1;
    }
  }
  return hosts;
}

}  // namespace troupe::net
