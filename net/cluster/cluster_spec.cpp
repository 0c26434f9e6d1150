#include "net/cluster/cluster_spec.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "util/config_file.hpp"

namespace troupe::net {

using Json = nlohmann::json;

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

std::vector<HostPort> read_list(const Json& cluster, const std::string& name, const std::string& source) {
  std::vector<HostPort> out;
  const auto it = cluster.find(name);
  if (it == cluster.end()) return out;
  const Json& list = *it;
  if (!list.is_array())
    throw std::invalid_argument(source + ": cluster." + name + " must be a list of \"HOST:PORT\" strings, got " +
                                list.dump(-1, ' ', false, Json::error_handler_t::replace));
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string what = source + ": cluster." + name + "[" + std::to_string(i) + "]";
    if (!list[i].is_string()) throw std::invalid_argument(what + " must be a \"HOST:PORT\" string");
    out.push_back(parse_cluster_address(list[i].get<std::string>(), what));
  }
  return out;
}

// JSON objects may repeat a key; nlohmann keeps the last one silently. The
// parser callback sees every key as it is read, so a repeat is refused
// there, naming the object it is in.
class RepeatedKeyCheck {
 public:
  explicit RepeatedKeyCheck(std::string source) : source_(std::move(source)) {}
  bool operator()(int depth, Json::parse_event_t event, Json& parsed) {
    (void)depth;
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start: {
        std::string where = "an object";
        if (open_.empty())
          where = "the top-level object";
        else if (!open_.back().is_array)
          where = "\"" + open_.back().last_key + "\"";
        open_.push_back({event == Json::parse_event_t::array_start, std::move(where), {}, {}});
        break;
      }
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!open_.empty()) open_.pop_back();
        break;
      case Json::parse_event_t::key: {
        if (open_.empty()) break;
        Level& level = open_.back();
        level.last_key = parsed.get<std::string>();
        if (!level.keys.insert(level.last_key).second)
          throw std::invalid_argument(source_ + ": \"" + level.last_key + "\" appears twice in " + level.where);
        break;
      }
      case Json::parse_event_t::value:
        break;
    }
    return true;
  }

 private:
  struct Level {
    bool is_array;
    std::string where, last_key;
    std::set<std::string> keys;
  };
  std::string source_;
  std::vector<Level> open_;
};

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

// A TF_CONFIG needs 3 levels. nlohmann's parser keeps its own stack, but
// the value it builds is as deep as the text, and every walk over it (copy,
// destruction, dump) costs memory per level: refuse anything past
// kMaxJsonDepth before the parser sees it. This pre-scan, not the parser,
// owns the bound so that its message can name the line.
constexpr int kMaxJsonDepth = 32;

void refuse_deep_nesting(const std::string& json, const std::string& source) {
  int depth = 0;
  int line = 1;
  bool in_string = false;
  bool escaped = false;
  for (const char c : json) {
    if (c == '\n') ++line;
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
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

namespace {
// "[json.exception.parse_error.101] parse error at line 2, column 40: syntax
// error ..." becomes "malformed JSON at line 2: syntax error ...".
std::string parse_error_text(const Json::parse_error& e, const std::string& json) {
  const std::size_t at = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, json.size());
  const auto line = 1 + std::count(json.begin(), json.begin() + static_cast<std::ptrdiff_t>(at), '\n');
  std::string what = e.what();
  if (const auto colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
  return "malformed JSON at line " + std::to_string(line) + ": " + what;
}

const Json* find_object(const Json& parent, const char* key) {
  const auto it = parent.find(key);
  if (it == parent.end() || !it->is_object() || it->empty()) return nullptr;
  return &*it;
}
}  // namespace

ClusterSpec parse_cluster_spec(const std::string& json, const std::string& source) {
  refuse_deep_nesting(json, source);
  Json root;
  try {
    root = Json::parse(json, RepeatedKeyCheck(source));
  } catch (const Json::parse_error& e) {
    throw std::invalid_argument(source + ": " + parse_error_text(e, json));
  } catch (const Json::exception& e) {
    // Not only parse errors: a number too large for a double is
    // out_of_range.406 (fuzz/cluster_spec found it escaping as that).
    std::string what = e.what();
    if (const auto bracket = what.find("] "); what.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos)
      what = what.substr(bracket + 2);
    throw std::invalid_argument(source + ": malformed JSON: " + what);
  }
  if (!root.is_object())
    throw std::invalid_argument(source + ": the cluster spec must be a JSON object, got " + root.type_name());
  ClusterSpec spec;
  spec.source = source;
  const Json* cluster_object = find_object(root, "cluster");
  if (cluster_object == nullptr)
    throw std::invalid_argument(source +
                                ": missing \"cluster\" object (e.g. {\"cluster\": {\"worker\": "
                                "[\"host-a:7000\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}})");
  const Json& cluster = *cluster_object;
  for (const auto& [key, value] : cluster.items()) {
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
    const auto& list = std::string(name) == "chief"    ? spec.chief
                       : std::string(name) == "worker" ? spec.workers
                                                       : spec.ps;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string entry = "cluster." + std::string(name) + "[" + std::to_string(i) + "]";
      const std::string key = lower(list[i].host) + ":" + std::to_string(list[i].port);
      const auto [it, fresh] = seen.emplace(key, entry);
      if (!fresh)
        throw std::invalid_argument(source + ": duplicate address " + list[i].str() + " in " + it->second + " and " +
                                    entry);
    }
  }

  const Json* task_object = find_object(root, "task");
  if (task_object == nullptr)
    throw std::invalid_argument(source +
                                ": missing \"task\" object (e.g. \"task\": {\"type\": \"worker\", "
                                "\"index\": 0})");
  const Json& task = *task_object;
  for (const auto& [key, value] : task.items()) {
    (void)value;
    if (key != "type" && key != "index")
      throw std::invalid_argument(source + ": unknown field task." + key + " (known: type, index)");
  }
  const auto type = task.find("type");
  if (type == task.end()) throw std::invalid_argument(source + ": missing task.type (chief, worker or ps)");
  if (!type->is_string())
    throw std::invalid_argument(source + ": task.type must be a string (chief, worker or ps), got " +
                                type->dump(-1, ' ', false, Json::error_handler_t::replace));
  spec.task_type = type->get<std::string>();
  const std::vector<HostPort>* list = nullptr;
  if (spec.task_type == "chief")
    list = &spec.chief;
  else if (spec.task_type == "worker")
    list = &spec.workers;
  else if (spec.task_type == "ps")
    list = &spec.ps;
  else
    throw std::invalid_argument(source + ": unknown task.type '" + spec.task_type + "' (known: chief, worker, ps)");
  const auto index_value = task.find("index");
  if (index_value == task.end()) throw std::invalid_argument(source + ": missing task.index");
  // TF_CONFIG writers differ: accept 1 and "1".
  const std::string index_text = index_value->is_string()
                                     ? index_value->get<std::string>()
                                     : index_value->dump(-1, ' ', false, Json::error_handler_t::replace);
  long long index = -1;
  try {
    if (index_value->is_number_integer()) {
      index = index_value->get<long long>();
    } else if (index_value->is_number_unsigned() || !index_value->is_string()) {
      throw std::invalid_argument("");
    } else {
      std::size_t used = 0;
      index = std::stoll(index_text, &used);
      if (used != index_text.size()) throw std::invalid_argument("");
    }
  } catch (const std::exception&) {
    throw std::invalid_argument(source + ": task.index '" + index_text + "' is not an integer");
  }
  if (list->empty())
    throw std::invalid_argument(source + ": task.type is '" + spec.task_type + "' but cluster." + spec.task_type +
                                " is missing or empty");
  if (index < 0 || index >= static_cast<long long>(list->size()))
    throw std::invalid_argument(source + ": task.index " + index_text + " is out of range for cluster." +
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

namespace {
// "a:1,b:2" as its entries; an empty one ("a:1,,b:2", a trailing comma) is
// refused here, where the message can name the flag.
std::vector<std::string> split_hosts(const std::string& list, const std::string& flag) {
  std::vector<std::string> out;
  if (list.empty()) return out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = list.find(',', start);
    const std::string entry = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (entry.empty())
      throw std::invalid_argument(flag + " '" + list + "': entry " + std::to_string(out.size()) +
                                  " is empty (expected HOST:PORT,HOST:PORT,...)");
    out.push_back(entry);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}
}  // namespace

ClusterSpec cluster_spec_from_flags(const ClusterFlags& flags) {
  if (flags.worker_hosts.empty())
    throw std::invalid_argument(
        "--worker_hosts is missing: TF1's cluster flags need the workers' HOST:PORT list "
        "(e.g. --worker_hosts a:7000,b:7000 --job_name worker --task_index 0)");
  if (flags.job_name.empty())
    throw std::invalid_argument("--job_name is missing: ps or worker, with --task_index (worker 0 is the chief)");
  if (flags.job_name != "ps" && flags.job_name != "worker")
    throw std::invalid_argument("--job_name '" + flags.job_name +
                                "' is not ps or worker (TF1's cluster flags "
                                "have no chief: worker 0 is the chief)");
  // The same spec in TF_CONFIG's shape, read by the one parser, so that
  // both spellings are checked alike.
  Json spec;
  spec["cluster"]["worker"] = split_hosts(flags.worker_hosts, "--worker_hosts");
  const auto ps = split_hosts(flags.ps_hosts, "--ps_hosts");
  if (!ps.empty()) spec["cluster"]["ps"] = ps;
  spec["task"]["type"] = flags.job_name;
  spec["task"]["index"] = flags.task_index;
  return parse_cluster_spec(spec.dump(), "--worker_hosts/--ps_hosts");
}

}  // namespace troupe::net
