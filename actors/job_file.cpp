#include "actors/job_file.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "kernels/config.hpp"
#include "models/schedule.hpp"
#include "net/cluster/auth.hpp"
#include "util/config_file.hpp"

namespace troupe::actors {

namespace {

// A value as written. Integers keep sign and magnitude so the seed can use
// all of uint64.
struct Value {
  enum class Kind { string, integer, floating, boolean } kind = Kind::string;
  std::string text;  // the string, or the token as written
  bool negative = false;
  std::uint64_t magnitude = 0;
  bool overflow = false;  // an integer beyond 2^64 - 1 (magnitude then holds the maximum)
  double number = 0;
  bool flag = false;
};

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::string: return "a string";
    case Value::Kind::integer: return "an integer";
    case Value::Kind::floating: return "a float";
    case Value::Kind::boolean: return "true or false";
  }
  return "?";
}

enum class Type { string, integer, unsigned_integer, floating, boolean };

const char* type_name(Type t) {
  switch (t) {
    case Type::string: return "a string in double quotes";
    case Type::integer: return "an integer";
    case Type::unsigned_integer: return "a non-negative integer";
    case Type::floating: return "a number";
    case Type::boolean: return "true or false";
  }
  return "?";
}

// Thrown inside a setter; the parser adds FILE:LINE and the key.
struct BadValue : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

std::int64_t as_int(const Value& v, std::int64_t min, std::int64_t max) {
  const bool fits = v.overflow  ? false
                    : v.negative ? v.magnitude <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + 1
                                 : v.magnitude <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  const std::int64_t x = !fits ? 0 : v.negative ? static_cast<std::int64_t>(0 - v.magnitude) : static_cast<std::int64_t>(v.magnitude);
  if (!fits || x < min || x > max)
    throw BadValue(v.text + " is out of range (" + std::to_string(min) + ".." + std::to_string(max) + ")");
  return x;
}

// The range is checked on the float that is stored, not on the number as
// written: 0.99999999999 rounds to 1.0f, and 1e-50 to 0.0f, which the range
// refuses; accepting them stored a value whose canonical text (to_job_text)
// the parser then refused (fuzz/job_file's round trip, F5).
float as_float(const Value& v, double min, bool min_inclusive, double max = std::numeric_limits<double>::infinity(),
               bool max_inclusive = true) {
  const double x = v.number;
  // Below FLT_MAX + half an ulp a double rounds to a finite float (the
  // canonical text of FLT_MAX, 3.4028235e+38, is just above FLT_MAX).
  const bool fits = std::fabs(x) < 0x1.ffffffp+127;
  const float f = fits ? static_cast<float>(x) : 0.0f;
  const double stored = f;
  const bool above = min_inclusive ? stored >= min : stored > min;
  const bool below = max_inclusive ? stored <= max : stored < max;
  if (!fits || !above || !below) {
    auto text = [](double d) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", d);
      return std::string(buf);
    };
    std::string range = std::string(min_inclusive ? "[" : "(") + text(min) + ", ";
    range += std::isinf(max) ? std::string("inf)") : text(max) + (max_inclusive ? "]" : ")");
    if (!fits) throw BadValue(v.text + " is out of range " + range + " (beyond a 32-bit float)");
    if (stored != x) throw BadValue(v.text + " is " + text(stored) + " as a 32-bit float, out of range " + range);
    throw BadValue(v.text + " is out of range " + range);
  }
  return f;
}

struct Key {
  const char* table;  // "" for training keys, "optimizer"
  const char* name;
  Type type;
  std::function<void(const Value&, actors::JobConfig&)> set;
  // The setting it writes, when two spellings write the same one (the flat
  // `momentum` and [optimizer] `momentum`; `threads` and
  // `threads_per_device`); null: "table.name".
  const char* setting = nullptr;
};

const std::vector<Key>& keys() {
  using C = actors::JobConfig;
  constexpr auto max64 = std::numeric_limits<std::int64_t>::max();
  constexpr auto max_int = std::numeric_limits<int>::max();
  const auto set_optimizer_name = [](const Value& v, C& c) {
    const auto names = models::optimizer_names();
    std::string known;
    for (const auto& n : names) {
      if (n == v.text) {
        c.train.optimizer.name = v.text;
        return;
      }
      known += (known.empty() ? "" : ", ") + n;
    }
    throw BadValue("unknown optimizer '" + v.text + "' (known: " + known + ")");
  };
  const auto set_momentum = [](const Value& v, C& c) { c.train.optimizer.momentum = as_float(v, 0, true, 1, false); };
  const auto set_nesterov = [](const Value& v, C& c) { c.train.optimizer.nesterov = v.flag; };
  const auto set_weight_decay = [](const Value& v, C& c) { c.train.optimizer.weight_decay = as_float(v, 0, true); };
  const auto set_epsilon = [](const Value& v, C& c) { c.train.optimizer.epsilon = as_float(v, 0, false); };
  const auto set_beta1 = [](const Value& v, C& c) { c.train.optimizer.beta1 = as_float(v, 0, true, 1, false); };
  const auto set_beta2 = [](const Value& v, C& c) { c.train.optimizer.beta2 = as_float(v, 0, true, 1, false); };
  const auto set_threads = [](const Value& v, C& c) {
    c.threads_per_device = static_cast<int>(as_int(v, 1, std::numeric_limits<int>::max()));
  };
  static const std::vector<Key> table = {
      {"", "model", Type::string, [](const Value& v, C& c) {
         if (v.text.empty()) throw BadValue("must not be empty");
         c.train.model = v.text;
       }},
      {"", "data", Type::string, [](const Value& v, C& c) {
         if (v.text.empty()) throw BadValue("must not be empty");
         c.train.data = v.text;
       }},
      {"", "epochs", Type::integer, [](const Value& v, C& c) { c.train.epochs = as_int(v, 1, max64); }},
      {"", "batch", Type::integer, [](const Value& v, C& c) { c.train.batch = as_int(v, 1, max64); }},
      {"", "steps", Type::integer, [](const Value& v, C& c) { c.train.max_steps = as_int(v, 0, max64); }},
      {"", "lr", Type::floating, [](const Value& v, C& c) { c.train.lr = as_float(v, 0, false); }},
      {"", "schedule", Type::string, [](const Value& v, C& c) { c.train.schedule = v.text; }},
      {"", "warmup", Type::integer, [](const Value& v, C& c) { c.train.warmup_steps = as_int(v, 0, max64); }},
      {"", "seed", Type::unsigned_integer, [](const Value& v, C& c) {
         if (v.overflow || (v.negative && v.magnitude != 0))
           throw BadValue(v.text + " is out of range (a seed is an integer in 0.." +
                          std::to_string(std::numeric_limits<std::uint64_t>::max()) + ")");
         c.train.seed = v.magnitude;
       }},
      {"", "mode", Type::string, [](const Value& v, C& c) {
         try {
           c.mode = actors::Mode::parse(v.text);
         } catch (const std::invalid_argument& e) {
           throw BadValue(e.what());
         }
       }},
      {"", "switch", Type::string, [](const Value& v, C& c) {
         try {
           c.switches = actors::parse_switch_schedule(v.text);
         } catch (const std::invalid_argument& e) {
           throw BadValue(e.what());
         }
       }},
      {"", "prefetch", Type::integer, [](const Value& v, C& c) { c.prefetch = static_cast<int>(as_int(v, 1, max_int)); }},
      {"", "ps_shards", Type::integer,
       [](const Value& v, C& c) { c.ps_shards = static_cast<int>(as_int(v, 1, max_int)); }},
      {"", "ps_split_above", Type::integer, [](const Value& v, C& c) { c.ps_split_above = as_int(v, 1, max64); }},
      {"", "threads_per_device", Type::integer, set_threads},
      {"", "threads", Type::integer, set_threads, "threads_per_device"},  // as --threads
      {"", "checkpoint_dir", Type::string, [](const Value& v, C& c) { c.train.checkpoint_dir = v.text; }},
      {"", "tensorboard", Type::string, [](const Value& v, C& c) { c.tensorboard_dir = v.text; }},
      // Elastic membership: what a view change keeps (JobConfig::elastic_batch).
      {"", "elastic_batch", Type::string, [](const Value& v, C& c) {
         if (v.text != "replica" && v.text != "global")
           throw BadValue("elastic_batch is \"replica\" (the per-replica batch stays; the default) or \"global\" "
                          "(the global batch stays), not \"" + v.text + "\"");
         c.elastic_batch = v.text;
       }},
      {"", "checkpoint_every", Type::integer,
       [](const Value& v, C& c) { c.train.checkpoint_every = as_int(v, 0, max64); }},
      {"", "checkpoint_minutes", Type::floating,
       [](const Value& v, C& c) { c.train.checkpoint_minutes = as_float(v, 0, true); }},
      {"", "keep", Type::integer,
       [](const Value& v, C& c) { c.train.keep_last = static_cast<std::size_t>(as_int(v, 0, max64)); }},
      {"", "eval_batch", Type::integer, [](const Value& v, C& c) { c.train.eval_batch = as_int(v, 1, max64); }},
      {"", "eval_every", Type::integer, [](const Value& v, C& c) { c.train.eval_every = as_int(v, 0, max64); }},
      {"optimizer", "name", Type::string, set_optimizer_name},
      {"optimizer", "momentum", Type::floating, set_momentum},
      {"optimizer", "nesterov", Type::boolean, set_nesterov},
      {"optimizer", "weight_decay", Type::floating, set_weight_decay},
      {"optimizer", "epsilon", Type::floating, set_epsilon},
      {"optimizer", "beta1", Type::floating, set_beta1},
      {"optimizer", "beta2", Type::floating, set_beta2},
      // The flat spellings of `troupe train --optimizer ... --momentum ...`.
      {"", "optimizer", Type::string, set_optimizer_name, "optimizer.name"},
      {"", "momentum", Type::floating, set_momentum, "optimizer.momentum"},
      {"", "nesterov", Type::boolean, set_nesterov, "optimizer.nesterov"},
      {"", "weight_decay", Type::floating, set_weight_decay, "optimizer.weight_decay"},
      {"", "epsilon", Type::floating, set_epsilon, "optimizer.epsilon"},
      {"", "beta1", Type::floating, set_beta1, "optimizer.beta1"},
      {"", "beta2", Type::floating, set_beta2, "optimizer.beta2"},
  };
  return table;
}

std::string known_keys(const std::string& table) {
  std::string out;
  for (const auto& k : keys())
    if (table == k.table) out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

std::string setting_of(const Key& k) {
  if (k.setting) return k.setting;
  return *k.table ? std::string(k.table) + "." + k.name : std::string(k.name);
}

// TOML itself refuses a key and a table of the same name.
std::string both_optimizer_spellings(int key_line, int table_line) {
  return "key 'optimizer' (line " + std::to_string(key_line) + ") and table [optimizer] (line " +
         std::to_string(table_line) +
         ") both name the optimizer; give either optimizer = \"adam\" with flat keys (momentum = 0.9), or an "
         "[optimizer] table with name = \"adam\", not both";
}

// What `troupe train` takes on its command line but a job does not: each
// node gives it on its own command line.
const char* node_option(const std::string& key) {
  static const char* const options[] = {"devices", "control", "metrics", "log_every", "summary_json", "resume"};
  for (const char* o : options)
    if (key == o) return o;
  return nullptr;
}

std::string unknown_key_message(const std::string& key, const std::string& table) {
  std::string hint;
  for (const auto& k : keys())
    if (key == k.name && table != k.table)
      hint = " (it belongs in " + std::string(*k.table ? "[optimizer]" : "[training] or before any table") + ")";
  std::string underscored = key;
  for (char& c : underscored)
    if (c == '-') c = '_';
  if (underscored != key)
    for (const auto& k : keys())
      if (underscored == k.name) hint = " (did you mean '" + underscored + "'? job keys use '_' where flags use '-')";
  if (const char* option = node_option(underscored)) {
    std::string flag = option;
    for (char& c : flag)
      if (c == '_') c = '-';
    return "key '" + key + "' is not part of a job: each node gives it on its own command line (troupe node --" +
           flag + ")";
  }
  return "unknown key '" + key + "'" + hint + " (known" + (table.empty() ? "" : " in [" + table + "]") + ": " +
         known_keys(table) + ")";
}

bool is_bare_key_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// Parses an integer or float token. Returns false when it is neither.
bool parse_number(const std::string& token, Value& v) {
  if (token.empty()) return false;
  // Underscores only between digits, as TOML.
  std::string plain;
  for (std::size_t i = 0; i < token.size(); ++i) {
    const char c = token[i];
    if (c == '_') {
      const bool ok = i > 0 && i + 1 < token.size() && std::isdigit(static_cast<unsigned char>(token[i - 1])) &&
                      std::isdigit(static_cast<unsigned char>(token[i + 1]));
      if (!ok) return false;
      continue;
    }
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E'))
      return false;
    plain += c;
  }
  v.text = token;
  const bool is_float = plain.find_first_of(".eE") != std::string::npos;
  std::size_t pos = 0;
  if (plain[0] == '+' || plain[0] == '-') {
    v.negative = plain[0] == '-';
    pos = 1;
  }
  if (pos >= plain.size() || !std::isdigit(static_cast<unsigned char>(plain[pos]))) return false;
  if (!is_float) {
    if (plain.size() - pos > 1 && plain[pos] == '0') return false;  // no leading zeros (TOML)
    std::uint64_t m = 0;
    for (std::size_t i = pos; i < plain.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(plain[i]))) return false;
      const unsigned d = static_cast<unsigned>(plain[i] - '0');
      if (m > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
        v.kind = Value::Kind::integer;
        v.magnitude = std::numeric_limits<std::uint64_t>::max();  // out of every range below
        v.overflow = true;
        v.number = std::strtod(plain.c_str(), nullptr);  // still a number for a float key
        return true;
      }
      m = m * 10 + d;
    }
    v.kind = Value::Kind::integer;
    v.magnitude = m;
    v.number = v.negative ? -static_cast<double>(m) : static_cast<double>(m);
    return true;
  }
  char* end = nullptr;
  v.number = std::strtod(plain.c_str(), &end);
  if (end != plain.c_str() + plain.size() || plain.back() == '.' || plain.find(".e") != std::string::npos ||
      plain.find(".E") != std::string::npos)
    return false;
  v.kind = Value::Kind::floating;
  return true;
}

}  // namespace

actors::JobConfig parse_job_text(const std::string& text, const std::string& source) {
  actors::JobConfig config;
  std::map<std::string, std::pair<int, std::string>> set_on;  // setting -> line, key as spelled there
  std::map<std::string, int> tables_seen;                       // header -> line
  std::string table;                                            // current: "" or "optimizer"
  int optimizer_key_line = 0;                                   // the flat `optimizer = "..."`
  int schedule_line = 0;

  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string at = source + ":" + std::to_string(number) + ": ";
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::size_t i = 0;
    auto skip_space = [&] {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    };
    auto rest_is_comment = [&](const std::string& what) {
      skip_space();
      if (i < line.size() && line[i] != '#')
        throw JobFileError(at + "unexpected '" + line.substr(i) + "' after " + what);
    };
    skip_space();
    if (i == line.size() || line[i] == '#') continue;

    if (line[i] == '[') {  // [table]
      const auto close = line.find(']', i);
      if (close == std::string::npos) throw JobFileError(at + "unclosed table header '" + line.substr(i) + "'");
      std::string name = line.substr(i + 1, close - i - 1);
      while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.erase(0, 1);
      while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
      if (name != "training" && name != "optimizer")
        throw JobFileError(at + "unknown table [" + name + "] (known: [training], [optimizer])");
      if (const auto it = tables_seen.find(name); it != tables_seen.end())
        throw JobFileError(at + "duplicate table [" + name + "] (first on line " + std::to_string(it->second) + ")");
      if (name == "optimizer" && optimizer_key_line != 0)
        throw JobFileError(at + both_optimizer_spellings(optimizer_key_line, number));
      tables_seen[name] = number;
      table = name == "training" ? "" : name;
      i = close + 1;
      rest_is_comment("the table header");
      continue;
    }

    // key = value
    const std::size_t key_start = i;
    while (i < line.size() && is_bare_key_char(line[i])) ++i;
    const std::string key = line.substr(key_start, i - key_start);
    if (key.empty()) throw JobFileError(at + "expected KEY = VALUE, got '" + line.substr(key_start) + "'");
    skip_space();
    if (i < line.size() && line[i] == '.')
      throw JobFileError(at + "key '" + key + "': dotted keys are not supported; use a [table] header");
    if (i == line.size() || line[i] != '=')
      throw JobFileError(at + "key '" + key + "': expected '=' after the key");
    ++i;
    skip_space();
    const std::string where = at + "key '" + (table.empty() ? "" : table + ".") + key + "': ";
    if (i == line.size() || line[i] == '#') throw JobFileError(where + "missing value");

    Value v;
    if (line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        const char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\') {
          if (i == line.size()) break;
          const char e = line[i++];
          if (e == '"' || e == '\\') v.text += e;
          else if (e == 'n') v.text += '\n';
          else if (e == 't') v.text += '\t';
          else throw JobFileError(where + "unsupported escape '\\" + std::string(1, e) + "' (use \\\" \\\\ \\n \\t)");
        } else if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
          // As TOML: control characters other than tab must be escaped, and
          // to_job_text could not write them back (fuzz/job_file found it).
          char byte[8];
          std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          throw JobFileError(where + "control character " + byte + " in a string (write \\n or \\t, or remove it)");
        } else {
          v.text += c;
        }
      }
      if (!closed) throw JobFileError(where + "unterminated string");
      v.kind = Value::Kind::string;
    } else if (line[i] == '\'' || line[i] == '[' || line[i] == '{') {
      throw JobFileError(where + "'" + std::string(1, line[i]) +
                         "' values (literal strings, arrays, inline tables) are not supported in job files");
    } else {
      const std::size_t start = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '#') ++i;
      const std::string token = line.substr(start, i - start);
      if (token == "true" || token == "false") {
        v.kind = Value::Kind::boolean;
        v.flag = token == "true";
        v.text = token;
      } else if (!parse_number(token, v)) {
        throw JobFileError(where + "'" + token + "' is not a value (strings need double quotes)");
      }
    }
    rest_is_comment("the value");

    const Key* spec = nullptr;
    for (const auto& k : keys())
      if (table == k.table && key == k.name) spec = &k;
    if (!spec) throw JobFileError(at + unknown_key_message(key, table));
    const std::string spelled = (table.empty() ? "" : table + ".") + key;
    if (table.empty() && key == "optimizer") {
      if (const auto it = tables_seen.find("optimizer"); it != tables_seen.end())
        throw JobFileError(where + both_optimizer_spellings(number, it->second));
      optimizer_key_line = number;
    }
    const std::string setting = setting_of(*spec);
    if (const auto it = set_on.find(setting); it != set_on.end()) {
      const auto& [first_line, first_spelled] = it->second;
      if (first_spelled == spelled)
        throw JobFileError(where + "duplicate key (first set on line " + std::to_string(first_line) + ")");
      throw JobFileError(where + "sets what key '" + first_spelled + "' on line " + std::to_string(first_line) +
                         " already set; give one of the two");
    }
    set_on[setting] = {number, spelled};

    const bool type_ok = spec->type == Type::string ? v.kind == Value::Kind::string
                         : spec->type == Type::boolean ? v.kind == Value::Kind::boolean
                         : spec->type == Type::floating
                             ? (v.kind == Value::Kind::floating || v.kind == Value::Kind::integer)
                             : v.kind == Value::Kind::integer;
    if (!type_ok)
      throw JobFileError(where + "expected " + type_name(spec->type) + ", got " + kind_name(v.kind) +
                         (v.kind == Value::Kind::string ? " \"" + v.text + "\"" : " " + v.text));
    try {
      spec->set(v, config);
    } catch (const BadValue& e) {
      throw JobFileError(where + e.what());
    }
    if (setting == "schedule") schedule_line = number;
  }

  // The schedule needs lr and warmup, which may come later in the file.
  try {
    models::LrSchedule check(config.train.schedule, config.train.lr, config.train.warmup_steps);
  } catch (const std::invalid_argument& e) {
    throw JobFileError(source + ":" + std::to_string(schedule_line) + ": key 'schedule': " + e.what());
  }
  return config;
}

actors::JobConfig load_job_file(const std::string& path) {
  std::string text;
  try {
    text = util::read_config_file(path, "job file");
  } catch (const util::ConfigFileError& e) {
    throw JobFileError(e.what());
  }
  return parse_job_text(text, path);
}

namespace {

std::string quoted(const std::string& s, const char* key) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
          throw std::invalid_argument(std::string("job key '") + key + "' holds a control character");
        out += c;
    }
  }
  return out + "\"";
}

// The shortest decimal form that reads back to the same float.
std::string float_text(float x) {
  char buf[32];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(x));
    if (std::strtof(buf, nullptr) == x) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // a float, also to a strict TOML reader
  return s;
}

}  // namespace

std::string to_job_text(const actors::JobConfig& c) {
  const auto& t = c.train;
  std::string switches;
  for (const auto& s : c.switches)
    switches += (switches.empty() ? "" : ",") + std::to_string(s.step) + ":" + s.mode.str();
  std::ostringstream out;
  out << "# troupe job\n";
  out << "model = " << quoted(t.model, "model") << "\n";
  out << "data = " << quoted(t.data, "data") << "\n";
  out << "epochs = " << t.epochs << "\n";
  out << "batch = " << t.batch << "\n";
  out << "steps = " << t.max_steps << "\n";
  out << "lr = " << float_text(t.lr) << "\n";
  out << "schedule = " << quoted(t.schedule, "schedule") << "\n";
  out << "warmup = " << t.warmup_steps << "\n";
  out << "seed = " << t.seed << "\n";
  out << "mode = " << quoted(c.mode.str(), "mode") << "\n";
  out << "switch = " << quoted(switches, "switch") << "\n";
  out << "prefetch = " << c.prefetch << "\n";
  out << "threads_per_device = " << c.threads_per_device << "\n";
  out << "ps_shards = " << c.ps_shards << "\n";
  out << "ps_split_above = " << c.ps_split_above << "\n";
  out << "checkpoint_dir = " << quoted(t.checkpoint_dir, "checkpoint_dir") << "\n";
  out << "checkpoint_every = " << t.checkpoint_every << "\n";
  out << "checkpoint_minutes = " << float_text(static_cast<float>(t.checkpoint_minutes)) << "\n";
  out << "keep = " << t.keep_last << "\n";
  out << "eval_batch = " << t.eval_batch << "\n";
  out << "eval_every = " << t.eval_every << "\n";
  out << "\n[optimizer]\n";
  out << "name = " << quoted(t.optimizer.name, "optimizer.name") << "\n";
  out << "momentum = " << float_text(t.optimizer.momentum) << "\n";
  out << "nesterov = " << (t.optimizer.nesterov ? "true" : "false") << "\n";
  out << "weight_decay = " << float_text(t.optimizer.weight_decay) << "\n";
  out << "epsilon = " << float_text(t.optimizer.epsilon) << "\n";
  out << "beta1 = " << float_text(t.optimizer.beta1) << "\n";
  out << "beta2 = " << float_text(t.optimizer.beta2) << "\n";
  return out.str();
}

JobIdentity job_identity(const actors::JobConfig& config, const std::string& troupe_version) {
  JobIdentity id;
  id.troupe_version = troupe_version;
  id.fingerprint = net::to_hex(net::sha256("troupe-job-v1\ntroupe " + troupe_version + "\n" + to_job_text(config)));
  return id;
}

JobIdentity job_identity(const actors::JobConfig& config) { return job_identity(config, TROUPE_VERSION); }

std::string job_incompatibility(const JobIdentity& local, const JobIdentity& remote) {
  if (local.troupe_version != remote.troupe_version)
    return "troupe versions differ: the peer runs troupe " + remote.troupe_version + ", this node troupe " +
           local.troupe_version + " (run the same version on every node)";
  if (local.fingerprint != remote.fingerprint)
    return "job fingerprints differ: the peer's job " + remote.fingerprint.substr(0, 12) + " is not this node's " +
           local.fingerprint.substr(0, 12) + " (a different job file, or a job text altered on the way)";
  return {};
}

}  // namespace troupe::actors
