#include "net/cluster/cluster_spec.hpp"

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>

#include "util/config_file.hpp"

namespace troupe::net {

namespace pt = boost::property_tree;

std::vector<HostPort> ClusterSpec::nodes() const {
  std::vector<HostPort> out = chief;
  out.insert(out.end(), workers.begin(), workers.end());
  return out;
}

const HostPort& ClusterSpec::coordinator() const { return chief.empty() ? workers.at(0) : chief.at(0); }

const HostPort& ClusterSpec::self() const {
  if (task_type == "chief") return chief.at(static_cast<std::size_t>(task_index));
  if (task_type == "ps") return ps.at(static_cast<std::size_t>(task_index));
  return workers.at(static_cast<std::size_t>(task_index));
}

int ClusterSpec::rank() const {
  if (task_type == "chief") return task_index;
  if (task_type == "worker") return static_cast<int>(chief.size()) + task_index;
  return -1;
}

bool ClusterSpec::is_coordinator() const { return rank() == 0; }

HostPort parse_cluster_address(const std::string& address, const std::string& what) {
  auto bad = [&](const std::string& why) -> HostPort {
    throw std::invalid_argument(what + " '" + address + "': " + why + " (expected HOST:PORT, e.g. host-a:7000)");
  };
  HostPort hp;
  std::string port;
  if (!address.empty() && address.front() == '[') {
    const auto close = address.find(']');
    if (close == std::string::npos) return bad("unclosed '[' around an IPv6 host");
    hp.host = address.substr(1, close - 1);
    if (close + 1 >= address.size() || address[close + 1] != ':') return bad("missing port");
    port = address.substr(close + 2);
  } else {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) return bad("missing port");
    if (address.find(':') != colon) return bad("an IPv6 host needs brackets, as in [::1]:7000");
    hp.host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (hp.host.empty()) return bad("missing host");
  if (port.empty()) return bad("missing port");
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return bad("port '" + port + "' is not a number in 1..65535");
  const unsigned long value = std::stoul(port);
  if (value == 0 || value > 65535) return bad("port " + port + " is not in 1..65535");
  hp.port = static_cast<std::uint16_t>(value);
  return hp;
}

namespace {

std::vector<HostPort> read_list(const pt::ptree& cluster, const std::string& name, const std::string& source) {
  std::vector<HostPort> out;
  const auto it = cluster.find(name);
  if (it == cluster.not_found()) return out;
  const pt::ptree& list = it->second;
  if (list.empty() && !list.data().empty())
    throw std::invalid_argument(source + ": cluster." + name + " must be a list of \"HOST:PORT\" strings, got '" +
                                list.data() + "'");
  std::size_t i = 0;
  for (const auto& [key, entry] : list) {
    const std::string what = source + ": cluster." + name + "[" + std::to_string(i) + "]";
    if (!key.empty())
      throw std::invalid_argument(source + ": cluster." + name + " must be a list, not an object (key '" + key +
                                  "')");
    if (!entry.empty()) throw std::invalid_argument(what + " must be a \"HOST:PORT\" string");
    out.push_back(parse_cluster_address(entry.data(), what));
    ++i;
  }
  return out;
}

// JSON objects may repeat a key; property_tree keeps both and find() would
// silently use the first.
void refuse_repeated_keys(const pt::ptree& object, const std::string& where, const std::string& source) {
  std::map<std::string, int> count;
  for (const auto& [key, value] : object) {
    (void)value;
    if (!key.empty() && ++count[key] == 2)
      throw std::invalid_argument(source + ": \"" + key + "\" appears twice in " + where);
  }
}

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

// property_tree's JSON reader descends one call per '[' or '{', so a spec
// nested 100,000 levels deep overflows the stack. A TF_CONFIG needs 3
// levels; refuse anything past kMaxJsonDepth before the reader sees it.
constexpr int kMaxJsonDepth = 32;

void refuse_deep_nesting(const std::string& json, const std::string& source) {
  int depth = 0;
  int line = 1;
  bool in_string = false;
  bool escaped = false;
  for (const char c : json) {
    if (c == '\n') ++line;
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw std::invalid_argument(source + ": malformed JSON at line " + std::to_string(line) +
                                    ": nested more than " + std::to_string(kMaxJsonDepth) +
                                    " levels deep (a cluster spec needs 3: {\"cluster\": {\"worker\": [...]}})");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

}  // namespace

ClusterSpec parse_cluster_spec(const std::string& json, const std::string& source) {
  refuse_deep_nesting(json, source);
  pt::ptree root;
  try {
    std::istringstream in(json);
    pt::read_json(in, root);
  } catch (const pt::json_parser_error& e) {
    throw std::invalid_argument(source + ": malformed JSON at line " + std::to_string(e.line()) + ": " +
                                e.message());
  }
  ClusterSpec spec;
  spec.source = source;
  refuse_repeated_keys(root, "the top-level object", source);
  const auto cluster_it = root.find("cluster");
  if (cluster_it == root.not_found() || cluster_it->second.empty())
    throw std::invalid_argument(source + ": missing \"cluster\" object (e.g. {\"cluster\": {\"worker\": "
                                "[\"host-a:7000\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}})");
  const pt::ptree& cluster = cluster_it->second;
  refuse_repeated_keys(cluster, "\"cluster\"", source);
  for (const auto& [key, value] : cluster) {
    (void)value;
    if (key != "chief" && key != "worker" && key != "ps")
      throw std::invalid_argument(source + ": unknown list cluster." + key + " (known: chief, worker, ps)");
  }
  spec.chief = read_list(cluster, "chief", source);
  spec.workers = read_list(cluster, "worker", source);
  spec.ps = read_list(cluster, "ps", source);
  if (spec.chief.size() > 1)
    throw std::invalid_argument(source + ": cluster.chief has " + std::to_string(spec.chief.size()) +
                                " entries; there is one coordinator");
  if (spec.chief.empty() && spec.workers.empty())
    throw std::invalid_argument(source + ": cluster has no nodes: give a non-empty \"worker\" (or \"chief\") list");

  // Duplicates (hosts compared case-insensitively, not resolved).
  std::map<std::string, std::string> seen;
  for (const auto* name : {"chief", "worker", "ps"}) {
    const auto& list = std::string(name) == "chief" ? spec.chief : std::string(name) == "worker" ? spec.workers : spec.ps;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string entry = "cluster." + std::string(name) + "[" + std::to_string(i) + "]";
      const std::string key = lower(list[i].host) + ":" + std::to_string(list[i].port);
      const auto [it, fresh] = seen.emplace(key, entry);
      if (!fresh)
        throw std::invalid_argument(source + ": duplicate address " + list[i].str() + " in " + it->second +
                                    " and " + entry);
    }
  }

  const auto task_it = root.find("task");
  if (task_it == root.not_found() || task_it->second.empty())
    throw std::invalid_argument(source + ": missing \"task\" object (e.g. \"task\": {\"type\": \"worker\", "
                                "\"index\": 0})");
  const pt::ptree& task = task_it->second;
  refuse_repeated_keys(task, "\"task\"", source);
  for (const auto& [key, value] : task) {
    (void)value;
    if (key != "type" && key != "index")
      throw std::invalid_argument(source + ": unknown field task." + key + " (known: type, index)");
  }
  const auto type = task.get_optional<std::string>("type");
  if (!type) throw std::invalid_argument(source + ": missing task.type (chief, worker or ps)");
  spec.task_type = *type;
  const std::vector<HostPort>* list = nullptr;
  if (spec.task_type == "chief") list = &spec.chief;
  else if (spec.task_type == "worker") list = &spec.workers;
  else if (spec.task_type == "ps") list = &spec.ps;
  else
    throw std::invalid_argument(source + ": unknown task.type '" + spec.task_type + "' (known: chief, worker, ps)");
  const auto index_text = task.get_optional<std::string>("index");
  if (!index_text) throw std::invalid_argument(source + ": missing task.index");
  long long index = -1;
  try {
    std::size_t used = 0;
    index = std::stoll(*index_text, &used);
    if (used != index_text->size()) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw std::invalid_argument(source + ": task.index '" + *index_text + "' is not an integer");
  }
  if (list->empty())
    throw std::invalid_argument(source + ": task.type is '" + spec.task_type + "' but cluster." + spec.task_type +
                                " is missing or empty");
  if (index < 0 || index >= static_cast<long long>(list->size()))
    throw std::invalid_argument(source + ": task.index " + *index_text + " is out of range for cluster." +
                                spec.task_type + " (0.." + std::to_string(list->size() - 1) + ")");
  spec.task_index = static_cast<int>(index);
  return spec;
}

std::optional<ClusterSpec> load_cluster_spec(const std::string& path) {
  if (!path.empty()) {
    return parse_cluster_spec(util::read_config_file(path, "cluster spec"), "cluster spec " + path);
  }
  if (const char* env = std::getenv("TROUPE_CLUSTER")) return parse_cluster_spec(env, "TROUPE_CLUSTER");
  return std::nullopt;
}

}  // namespace troupe::net
