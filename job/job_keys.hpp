// The job file's keys (job_file.cpp parses, job_keys.cpp knows each key):
// one table, keys(), of every key a job file may give, its type and the
// setter that checks its value and writes it into a JobConfig, plus the
// value and type vocabulary the parser and the setters share. Internal to
// job/: the public API is job_file.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "job/job.hpp"

namespace troupe::actors::job_keys {

// One value of the parsed file, as the setters take it.
struct Value {
  toml::node_type kind = toml::node_type::none;
  std::string text;  // a string's value; otherwise the value as written in the file (for messages)
  std::int64_t integer = 0;
  double number = 0;  // an integer's or a float's
  bool flag = false;
};

const char* kind_name(toml::node_type k);

// `seed` is an integer, or a string of decimal digits: TOML integers stop at
// 2^63 - 1, seeds (as --seed) at 2^64 - 1.
enum class Type { string, integer, seed, floating, boolean };
const char* type_name(Type t);
bool type_ok(Type t, toml::node_type k);

constexpr std::uint64_t kMaxTomlInteger = 9223372036854775807ULL;  // INT64_MAX
std::string seed_range();
// Decimal digits, at most 2^64 - 1; nullopt otherwise.
std::optional<std::uint64_t> decimal_uint64(std::string_view digits);

// Thrown inside a setter; the parser adds FILE:LINE and the key.
struct BadValue : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

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

// Every key, in the order the reference (docs/USER-GUIDE.md) lists them.
const std::vector<Key>& keys();
// The keys of `table` ("" or "optimizer"), comma-separated, for messages.
std::string known_keys(const std::string& table);
// "table.name", or the key's shared setting.
std::string setting_of(const Key& k);

}  // namespace troupe::actors::job_keys
