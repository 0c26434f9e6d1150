#include "job/job_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "job/job_keys.hpp"
#include "kernels/config.hpp"
#include "models/schedule.hpp"
#include "net/cluster/auth.hpp"
#include "util/config_file.hpp"

namespace troupe::actors {

namespace {

using namespace job_keys;

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
    return "key '" + key + "' is not part of a job: each node gives it on its own command line (troupe node --" + flag +
           ")";
  }
  return "unknown key '" + key + "'" + hint + " (known" + (table.empty() ? "" : " in [" + table + "]") + ": " +
         known_keys(table) + ")";
}

bool is_bare_key_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// Line `number` (1-based) of the text, without its line break; empty past the end.
std::string_view line_of(std::string_view text, std::size_t number) {
  std::size_t begin = 0;
  for (std::size_t n = 1; n < number; ++n) {
    begin = text.find('\n', begin);
    if (begin == std::string_view::npos) return {};
    ++begin;
  }
  std::string_view line = text.substr(begin, text.find('\n', begin) - begin);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// The byte offset of toml++'s 1-based column, which counts code points.
std::size_t byte_of_column(std::string_view line, std::size_t column) {
  std::size_t i = 0;
  for (std::size_t c = 1; c < column && i < line.size(); ++c) {
    ++i;
    while (i < line.size() && (static_cast<unsigned char>(line[i]) & 0xC0) == 0x80) ++i;  // UTF-8 continuation
  }
  return i;
}

// A value as the file writes it (1e-3, 0x10, 1_000), for messages; empty
// when it spans lines.
std::string written(std::string_view text, const toml::source_region& r) {
  if (r.begin.line != r.end.line || r.end.column <= r.begin.column) return {};
  const std::string_view line = line_of(text, r.begin.line);
  const std::size_t begin = byte_of_column(line, r.begin.column);
  const std::size_t end = byte_of_column(line, r.end.column);
  return std::string(line.substr(begin, end - begin));
}

Value value_of(const toml::node& node, std::string_view text) {
  Value v;
  v.kind = node.type();
  if (const auto* s = node.as_string()) {
    v.text = s->get();
    return v;
  }
  v.text = written(text, node.source());
  if (const auto* i = node.as_integer()) {
    v.integer = i->get();
    v.number = static_cast<double>(v.integer);
    if (v.text.empty()) v.text = std::to_string(v.integer);
  } else if (const auto* f = node.as_floating_point()) {
    v.number = f->get();
    if (v.text.empty()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", v.number);
      v.text = buf;
    }
  } else if (const auto* b = node.as_boolean()) {
    v.flag = b->get();
    v.text = v.flag ? "true" : "false";
  }
  return v;
}

// The key a line of the file starts with ("seed" for `  seed = 1`), if bare.
std::string_view leading_key(std::string_view line) {
  std::size_t i = line.find_first_not_of(" \t");
  if (i == std::string_view::npos) return {};
  std::size_t end = i;
  while (end < line.size() && is_bare_key_char(line[end])) ++end;
  return line.substr(i, end - i);
}

// toml++ refuses an integer literal beyond int64; for `seed`, whose range
// goes on to 2^64 - 1, say how to write one above 2^63 - 1.
std::optional<std::string> seed_literal_message(std::string_view line, const std::string& at) {
  if (leading_key(line) != "seed") return std::nullopt;
  const std::size_t eq = line.find('=');
  if (eq == std::string_view::npos) return std::nullopt;
  std::size_t begin = line.find_first_not_of(" \t", eq + 1);
  if (begin == std::string_view::npos) return std::nullopt;
  std::size_t end = line.find_first_of(" \t#,}", begin);
  if (end == std::string_view::npos) end = line.size();
  const std::string literal(line.substr(begin, end - begin));
  std::string digits = literal;
  digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
  if (!digits.empty() && digits[0] == '+') digits.erase(0, 1);
  const auto seed = decimal_uint64(digits);
  if (!seed) return at + "key 'seed': " + literal + " is out of range (" + seed_range() + ")";
  return at + "key 'seed': " + literal + " is beyond TOML's integers (at most " + std::to_string(kMaxTomlInteger) +
         "); write a seed above that as a string of decimal digits: seed = \"" + std::to_string(*seed) + "\"";
}

bool is_table_header(std::string_view line) {
  const std::size_t i = line.find_first_not_of(" \t");
  return i != std::string_view::npos && line[i] == '[';
}

// A key as the file writes it, as a dotted path ("optimizer . name" is
// "optimizer.name"); nullopt for quoted keys, which the messages built from
// it leave to toml++.
std::optional<std::string> bare_path(std::string_view written) {
  std::string path;
  for (const char c : written) {
    if (c == ' ' || c == '\t') continue;
    if (c != '.' && !is_bare_key_char(c)) return std::nullopt;
    path += c;
  }
  if (path.empty()) return std::nullopt;
  return path;
}

// The table a [header] line names; nullopt for an array of tables.
std::optional<std::string> header_path(std::string_view line) {
  const std::size_t open = line.find('[');
  const std::size_t close = line.find(']', open);
  if (open == std::string_view::npos || close == std::string_view::npos || line.substr(open, 2) == "[[")
    return std::nullopt;
  return bare_path(line.substr(open + 1, close - open - 1));
}

// toml++ refuses a key or a table defined twice ("cannot redefine existing
// floating-point 'lr'") with the line of the second only. The first one is
// found by parsing the lines before the error (valid TOML, since the error
// is the first) and looking up there the path the error line defines (its
// [header], or its key under the last header before it), so that the
// message names both lines, as the job file's own duplicate checks do.
// nullopt when that does not work out (a quoted key, a definition on the
// same line): the caller then gives toml++'s message.
std::optional<std::string> redefinition_message(std::string_view text, const std::string& source, int line,
                                                const std::string& description) {
  if (description.find("cannot redefine existing ") == std::string::npos) return std::nullopt;
  const std::string_view error_line = line_of(text, static_cast<std::size_t>(line));
  const bool header = is_table_header(error_line);
  std::optional<std::string> path;
  bool defines_table = header;  // what the error line defines, a table or a key
  if (header) {
    path = header_path(error_line);
  } else {
    const std::size_t eq = error_line.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    path = bare_path(error_line.substr(0, eq));
    const std::size_t value = error_line.find_first_not_of(" \t", eq + 1);
    defines_table = value != std::string_view::npos && error_line[value] == '{';
    std::string table;  // the last header before the line
    for (int n = line - 1; n >= 1; --n)
      if (const std::string_view l = line_of(text, static_cast<std::size_t>(n)); is_table_header(l)) {
        const auto p = header_path(l);
        if (!p) return std::nullopt;
        table = *p;
        break;
      }
    if (path && !table.empty()) path = table + "." + *path;
  }
  if (!path) return std::nullopt;

  std::size_t prefix_end = 0;  // where the error line starts
  for (int n = 1; n < line && prefix_end != std::string_view::npos; ++n) {
    prefix_end = text.find('\n', prefix_end);
    if (prefix_end != std::string_view::npos) ++prefix_end;
  }
  if (prefix_end == std::string_view::npos) return std::nullopt;
  toml::table before;
  try {
    before = toml::parse(text.substr(0, prefix_end), std::string_view(source));
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
  const toml::node* first = before.at_path(*path).node();
  if (!first) return std::nullopt;
  const int first_line = static_cast<int>(first->source().begin.line);

  const std::string at = source + ":" + std::to_string(line) + ": ";
  if (*path == "optimizer" && first->is_table() != defines_table) {  // the flat name and the table
    if (defines_table) return at + both_optimizer_spellings(first_line, line);
    return at + "key 'optimizer': " + both_optimizer_spellings(line, first_line);
  }
  if (header)
    return first->is_table() ? at + "duplicate table [" + *path + "] (first on line " + std::to_string(first_line) + ")"
                             : std::optional<std::string>();
  const std::string spelled = path->rfind("training.", 0) == 0 ? path->substr(9) : *path;
  return at + "key '" + spelled + "': duplicate key (first set on line " + std::to_string(first_line) + ")";
}

// "FILE:LINE:COLUMN: what toml++ says", or one of the job file's own
// messages where it knows better.
std::string syntax_error_message(std::string_view text, const std::string& source, const toml::parse_error& e) {
  const int line = static_cast<int>(e.source().begin.line);
  const std::string at = source + ":" + std::to_string(line) + ":" + std::to_string(e.source().begin.column) + ": ";
  const std::string description(e.description());
  if (description.find("not representable in 64 bits") != std::string::npos)
    if (auto m = seed_literal_message(line_of(text, static_cast<std::size_t>(line)), at)) return *m;
  if (auto m = redefinition_message(text, source, line, description)) return *m;
  if (description.find("could not determine value type") != std::string::npos)
    return at + description + " (strings need quotes: \"cnn\" or 'cnn')";
  return at + description;
}

// One key = value of the job, or the [optimizer] table itself, where the
// file has it.
struct Entry {
  std::string table;  // "" (the top level or [training]) or "optimizer"
  std::string key;
  std::string path;  // the dotted TOML path, for messages about tables
  const toml::node* node = nullptr;
  toml::source_position at;
  bool optimizer_table = false;
};

void add_entries(const toml::table& t, const std::string& table, const std::string& prefix, std::vector<Entry>& out) {
  for (const auto& [key, node] : t) {
    const std::string name(key.str());
    out.push_back({table, name, prefix + name, &node, key.source().begin, false});
  }
}

}  // namespace

actors::JobConfig parse_job_text(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(std::string_view(text), std::string_view(source));
  } catch (const toml::parse_error& e) {
    throw JobFileError(syntax_error_message(text, source, e));
  }

  // [training] and [optimizer] (headers, inline tables or dotted keys: TOML
  // makes them one table each) are taken apart here; any other table is
  // refused below. The entries are then checked in the order the file gives
  // them, so that of two spellings of one setting the later one is refused.
  std::vector<Entry> entries;
  for (const auto& [key, node] : root) {
    const std::string name(key.str());
    if (const auto* t = node.as_table(); t && (name == "training" || name == "optimizer")) {
      if (name == "optimizer") entries.push_back({"", name, name, &node, node.source().begin, true});
      add_entries(*t, name == "training" ? "" : name, name + ".", entries);
    } else {
      entries.push_back({"", name, name, &node, key.source().begin, false});
    }
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::make_pair(a.at.line, a.at.column) < std::make_pair(b.at.line, b.at.column);
  });

  actors::JobConfig config;
  std::map<std::string, std::pair<int, std::string>> set_on;  // setting -> line, key as spelled there
  int optimizer_key_line = 0;                                 // the flat `optimizer = "..."`
  int optimizer_table_line = 0;                               // the [optimizer] table
  int schedule_line = 0;
  for (const Entry& e : entries) {
    const int number = static_cast<int>(e.at.line);
    const std::string at = source + ":" + std::to_string(number) + ": ";
    if (e.optimizer_table) {
      if (optimizer_key_line != 0) throw JobFileError(at + both_optimizer_spellings(optimizer_key_line, number));
      optimizer_table_line = number;
      continue;
    }
    // A [header] or dotted-key table other than the two; an inline table
    // given to a job key is a wrong type, below.
    const auto* table = e.node->as_table();
    if (table && !table->is_inline())
      throw JobFileError(at + "unknown table [" + e.path + "] (known: [training], [optimizer])");
    const Key* spec = nullptr;
    for (const auto& k : keys())
      if (e.table == k.table && e.key == k.name) spec = &k;
    if (!spec) throw JobFileError(at + unknown_key_message(e.key, e.table));
    const std::string spelled = (e.table.empty() ? "" : e.table + ".") + e.key;
    const std::string where = at + "key '" + spelled + "': ";
    if (e.table.empty() && e.key == "optimizer") {
      if (optimizer_table_line != 0) throw JobFileError(where + both_optimizer_spellings(number, optimizer_table_line));
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

    const Value v = value_of(*e.node, text);
    if (!type_ok(spec->type, v.kind)) {
      std::string got = kind_name(v.kind);
      if (v.kind == toml::node_type::string)
        got += " \"" + v.text + "\"";
      else if (!v.text.empty() && v.kind != toml::node_type::array && v.kind != toml::node_type::table)
        got += " " + v.text;
      throw JobFileError(where + "expected " + type_name(spec->type) + ", got " + got);
    }
    try {
      spec->set(v, config);
    } catch (const BadValue& bad) {
      throw JobFileError(where + bad.what());
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

// A TOML basic string. Control characters (which a file gives with escapes
// such as \u0001 or \r) are written as escapes: TOML refuses them raw.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char escape[8];
          std::snprintf(escape, sizeof escape, "\\u%04X", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += escape;
        } else {
          out += c;
        }
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
  out << "model = " << quoted(t.model) << "\n";
  out << "data = " << quoted(t.data) << "\n";
  out << "epochs = " << t.epochs << "\n";
  out << "batch = " << t.batch << "\n";
  out << "steps = " << t.max_steps << "\n";
  out << "lr = " << float_text(t.lr) << "\n";
  out << "schedule = " << quoted(t.schedule) << "\n";
  out << "warmup = " << t.warmup_steps << "\n";
  // Written when set, so a job without them keeps its canonical text (and
  // its fingerprint).
  if (t.label_smoothing != 0.0f) out << "label_smoothing = " << float_text(t.label_smoothing) << "\n";
  if (!t.augment.empty()) out << "augment = " << quoted(t.augment) << "\n";
  const data::LoadOptions& d = t.data_options;
  if (d.csv.task == data::Task::regression) out << "task = \"regress\"\n";
  if (!d.csv.label_column.empty()) out << "label_column = " << quoted(d.csv.label_column) << "\n";
  const double fraction = std::max(d.csv.test_fraction, d.images.test_fraction);
  if (fraction > 0) out << "test_fraction = " << float_text(static_cast<float>(fraction)) << "\n";
  if (!d.test_data.empty()) out << "test_data = " << quoted(d.test_data) << "\n";
  if (d.images.height > 0) out << "image_size = \"" << d.images.height << "x" << d.images.width << "\"\n";
  if (d.images.color != data::ImageColor::automatic)
    out << "color = " << (d.images.color == data::ImageColor::rgb ? "\"rgb\"" : "\"grey\"") << "\n";
  if (t.standardize) out << "standardize = true\n";
  if (t.precision != "fp32") out << "precision = " << quoted(t.precision) << "\n";
  if (t.initial_loss_scale != models::LossScale::kInitial)
    out << "initial_loss_scale = " << float_text(static_cast<float>(t.initial_loss_scale)) << "\n";
  const models::ZooSizes zoo_defaults;
  if (d.text.context != data::TextOptions{}.context) out << "context = " << d.text.context << "\n";
  if (t.zoo.layers != zoo_defaults.layers) out << "layers = " << t.zoo.layers << "\n";
  if (t.zoo.heads != zoo_defaults.heads) out << "heads = " << t.zoo.heads << "\n";
  if (t.zoo.width != zoo_defaults.width) out << "width = " << t.zoo.width << "\n";
  if (!t.drop_remainder) out << "drop_remainder = false\n";
  // TOML integers stop at 2^63 - 1: a seed above is written as a string of
  // digits (which parse_job_text takes too); below, as an integer, so the
  // canonical text of a job, and so its fingerprint, is as it was before
  // the job file took strings.
  if (t.seed > kMaxTomlInteger)
    out << "seed = \"" << t.seed << "\"\n";
  else
    out << "seed = " << t.seed << "\n";
  out << "mode = " << quoted(c.mode.str()) << "\n";
  out << "switch = " << quoted(switches) << "\n";
  out << "prefetch = " << c.prefetch << "\n";
  out << "threads_per_device = " << c.threads_per_device << "\n";
  out << "ps_shards = " << c.ps_shards << "\n";
  out << "ps_split_above = " << c.ps_split_above << "\n";
  out << "checkpoint_dir = " << quoted(t.checkpoint_dir) << "\n";
  out << "checkpoint_every = " << t.checkpoint_every << "\n";
  out << "checkpoint_minutes = " << float_text(static_cast<float>(t.checkpoint_minutes)) << "\n";
  out << "keep = " << t.keep_last << "\n";
  out << "eval_batch = " << t.eval_batch << "\n";
  out << "eval_every = " << t.eval_every << "\n";
  out << "\n[optimizer]\n";
  out << "name = " << quoted(t.optimizer.name) << "\n";
  out << "momentum = " << float_text(t.optimizer.momentum) << "\n";
  out << "nesterov = " << (t.optimizer.nesterov ? "true" : "false") << "\n";
  out << "weight_decay = " << float_text(t.optimizer.weight_decay) << "\n";
  out << "epsilon = " << float_text(t.optimizer.epsilon) << "\n";
  out << "beta1 = " << float_text(t.optimizer.beta1) << "\n";
  out << "beta2 = " << float_text(t.optimizer.beta2) << "\n";
  if (t.optimizer.decay_all) out << "decay_all = true\n";
  if (t.optimizer.clip_norm != 0.0f) out << "clip_norm = " << float_text(t.optimizer.clip_norm) << "\n";
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
