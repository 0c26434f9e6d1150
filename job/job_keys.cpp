#include "job/job_keys.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "models/data/augment.hpp"
#include "models/optimizer.hpp"
#include "models/trainer.hpp"

namespace troupe::actors::job_keys {

static_assert(kMaxTomlInteger == static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));

const char* kind_name(toml::node_type k) {
  switch (k) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "true or false";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

const char* type_name(Type t) {
  switch (t) {
    case Type::string:
      return "a string";
    case Type::integer:
      return "an integer";
    case Type::seed:
      return "a non-negative integer, or a string of decimal digits";
    case Type::floating:
      return "a number";
    case Type::boolean:
      return "true or false";
  }
  return "?";
}

bool type_ok(Type t, toml::node_type k) {
  switch (t) {
    case Type::string:
      return k == toml::node_type::string;
    case Type::integer:
      return k == toml::node_type::integer;
    case Type::seed:
      return k == toml::node_type::integer || k == toml::node_type::string;
    case Type::floating:
      return k == toml::node_type::floating_point || k == toml::node_type::integer;
    case Type::boolean:
      return k == toml::node_type::boolean;
  }
  return false;
}

std::string seed_range() {
  return "a seed is an integer in 0.." + std::to_string(std::numeric_limits<std::uint64_t>::max());
}

namespace {

std::int64_t as_int(const Value& v, std::int64_t min, std::int64_t max) {
  if (v.integer < min || v.integer > max)
    throw BadValue(v.text + " is out of range (" + std::to_string(min) + ".." + std::to_string(max) + ")");
  return v.integer;
}

}  // namespace

std::optional<std::uint64_t> decimal_uint64(std::string_view digits) {
  if (digits.empty()) return std::nullopt;
  std::uint64_t x = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto d = static_cast<unsigned>(c - '0');
    if (x > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return std::nullopt;
    x = x * 10 + d;
  }
  return x;
}

namespace {

std::uint64_t as_seed(const Value& v) {
  if (v.kind == toml::node_type::integer) {
    if (v.integer < 0) throw BadValue(v.text + " is out of range (" + seed_range() + ")");
    return static_cast<std::uint64_t>(v.integer);
  }
  const bool digits = !v.text.empty() && v.text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits)
    throw BadValue("\"" + v.text + "\" is not a seed (" + seed_range() +
                   "; as a string, it is decimal digits alone, as in seed = \"18446744073709551615\")");
  const auto seed = decimal_uint64(v.text);
  if (!seed) throw BadValue("\"" + v.text + "\" is out of range (" + seed_range() + ")");
  return *seed;
}

// The range is checked on the float that is stored, not on the number as
// written: 0.99999999999 rounds to 1.0f, and 1e-50 to 0.0f, which the range
// refuses; accepting them stored a value whose canonical text (to_job_text)
// the parser then refused (fuzz/job_file's round trip, F5).
float as_float(const Value& v, double min, bool min_inclusive, double max = std::numeric_limits<double>::infinity(),
               bool max_inclusive = true) {
  const double x = v.number;
  if (std::isnan(x)) throw BadValue(v.text + " is not a number");
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

}  // namespace

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
  const auto set_decay_all = [](const Value& v, C& c) { c.train.optimizer.decay_all = v.flag; };
  const auto set_clip_norm = [](const Value& v, C& c) { c.train.optimizer.clip_norm = as_float(v, 0, true); };
  const auto set_threads = [](const Value& v, C& c) {
    c.threads_per_device = static_cast<int>(as_int(v, 1, std::numeric_limits<int>::max()));
  };
  static const std::vector<Key> table = {
      {"", "model", Type::string,
       [](const Value& v, C& c) {
         if (v.text.empty()) throw BadValue("must not be empty");
         c.train.model = v.text;
       }},
      {"", "data", Type::string,
       [](const Value& v, C& c) {
         if (v.text.empty()) throw BadValue("must not be empty");
         c.train.data = v.text;
       }},
      {"", "epochs", Type::integer, [](const Value& v, C& c) { c.train.epochs = as_int(v, 1, max64); }},
      {"", "batch", Type::integer, [](const Value& v, C& c) { c.train.batch = as_int(v, 1, max64); }},
      {"", "steps", Type::integer, [](const Value& v, C& c) { c.train.max_steps = as_int(v, 0, max64); }},
      {"", "lr", Type::floating, [](const Value& v, C& c) { c.train.lr = as_float(v, 0, false); }},
      {"", "schedule", Type::string, [](const Value& v, C& c) { c.train.schedule = v.text; }},
      {"", "warmup", Type::integer, [](const Value& v, C& c) { c.train.warmup_steps = as_int(v, 0, max64); }},
      {"", "augment", Type::string,
       [](const Value& v, C& c) {
         try {
           c.train.augment = data::Augmentation::parse(v.text).empty() ? "" : data::Augmentation::parse(v.text).str();
         } catch (const std::invalid_argument& e) {
           throw BadValue(e.what());
         }
       }},
      // How the data is read, as train's flags (cli/data_options.cpp): every
      // node reads it alike.
      {"", "task", Type::string,
       [](const Value& v, C& c) {
         if (v.text != "classify" && v.text != "regress")
           throw BadValue("must be \"classify\" or \"regress\", not \"" + v.text + "\"");
         c.train.data_options.csv.task = v.text == "regress" ? data::Task::regression : data::Task::classification;
       }},
      {"", "label_column", Type::string, [](const Value& v, C& c) { c.train.data_options.csv.label_column = v.text; }},
      {"", "test_fraction", Type::floating,
       [](const Value& v, C& c) {
         const float f = as_float(v, 0, true, 1, false);
         c.train.data_options.csv.test_fraction = f;
         c.train.data_options.images.test_fraction = f;
       }},
      {"", "test_data", Type::string, [](const Value& v, C& c) { c.train.data_options.test_data = v.text; }},
      {"", "image_size", Type::string,
       [](const Value& v, C& c) {
         int height = 0, width = 0;
         char end = 0;
         if (std::sscanf(v.text.c_str(), "%dx%d%c", &height, &width, &end) != 2 || height < 1 || width < 1 ||
             height > 16384 || width > 16384)
           throw BadValue("\"" + v.text + "\": expected \"HxW\", e.g. \"28x28\", each in [1, 16384]");
         c.train.data_options.images.height = height;
         c.train.data_options.images.width = width;
       }},
      {"", "color", Type::string,
       [](const Value& v, C& c) {
         auto& color = c.train.data_options.images.color;
         if (v.text == "auto")
           color = data::ImageColor::automatic;
         else if (v.text == "grey" || v.text == "gray")
           color = data::ImageColor::grey;
         else if (v.text == "rgb")
           color = data::ImageColor::rgb;
         else
           throw BadValue("must be \"auto\", \"grey\" or \"rgb\", not \"" + v.text + "\"");
       }},
      {"", "standardize", Type::boolean, [](const Value& v, C& c) { c.train.standardize = v.flag; }},
      {"", "precision", Type::string,
       [](const Value& v, C& c) {
         try {
           models::parse_precision(v.text);
         } catch (const std::invalid_argument& e) {
           throw BadValue(e.what());
         }
         c.train.precision = v.text;
       }},
      // fp16's first loss scale: part of the job, so every node's replicas
      // start from the same one (the all-reduce sums gradients scaled alike).
      {"", "initial_loss_scale", Type::floating,
       [](const Value& v, C& c) { c.train.initial_loss_scale = as_float(v, 0, false); }},
      {"", "context", Type::integer,
       [](const Value& v, C& c) { c.train.data_options.text.context = as_int(v, 1, std::int64_t{1} << 20); }},
      {"", "layers", Type::integer, [](const Value& v, C& c) { c.train.zoo.layers = as_int(v, 1, 1024); }},
      {"", "heads", Type::integer, [](const Value& v, C& c) { c.train.zoo.heads = as_int(v, 1, 1024); }},
      {"", "width", Type::integer, [](const Value& v, C& c) { c.train.zoo.width = as_int(v, 1, 1 << 16); }},
      {"", "drop_remainder", Type::boolean, [](const Value& v, C& c) { c.train.drop_remainder = v.flag; }},
      {"", "label_smoothing", Type::floating,
       [](const Value& v, C& c) { c.train.label_smoothing = as_float(v, 0, true, 1, true); }},
      {"", "seed", Type::seed, [](const Value& v, C& c) { c.train.seed = as_seed(v); }},
      {"", "mode", Type::string,
       [](const Value& v, C& c) {
         try {
           c.mode = actors::Mode::parse(v.text);
         } catch (const std::invalid_argument& e) {
           throw BadValue(e.what());
         }
       }},
      {"", "switch", Type::string,
       [](const Value& v, C& c) {
         try {
           c.switches = actors::parse_switch_schedule(v.text);
         } catch (const std::invalid_argument& e) {
           throw BadValue(e.what());
         }
       }},
      {"", "prefetch", Type::integer,
       [](const Value& v, C& c) { c.prefetch = static_cast<int>(as_int(v, 1, max_int)); }},
      {"", "ps_shards", Type::integer,
       [](const Value& v, C& c) { c.ps_shards = static_cast<int>(as_int(v, 1, max_int)); }},
      {"", "ps_split_above", Type::integer, [](const Value& v, C& c) { c.ps_split_above = as_int(v, 1, max64); }},
      {"", "threads_per_device", Type::integer, set_threads},
      {"", "threads", Type::integer, set_threads, "threads_per_device"},  // as --threads
      {"", "checkpoint_dir", Type::string, [](const Value& v, C& c) { c.train.checkpoint_dir = v.text; }},
      {"", "tensorboard", Type::string, [](const Value& v, C& c) { c.tensorboard_dir = v.text; }},
      // Elastic membership: what a view change keeps (JobConfig::elastic_batch).
      {"", "elastic_batch", Type::string,
       [](const Value& v, C& c) {
         if (v.text != "replica" && v.text != "global")
           throw BadValue(
               "elastic_batch is \"replica\" (the per-replica batch stays; the default) or \"global\" "
               "(the global batch stays), not \"" +
               v.text + "\"");
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
      {"optimizer", "decay_all", Type::boolean, set_decay_all},
      {"optimizer", "clip_norm", Type::floating, set_clip_norm},
      // The flat spellings of `troupe train --optimizer ... --momentum ...`.
      {"", "optimizer", Type::string, set_optimizer_name, "optimizer.name"},
      {"", "momentum", Type::floating, set_momentum, "optimizer.momentum"},
      {"", "nesterov", Type::boolean, set_nesterov, "optimizer.nesterov"},
      {"", "weight_decay", Type::floating, set_weight_decay, "optimizer.weight_decay"},
      {"", "epsilon", Type::floating, set_epsilon, "optimizer.epsilon"},
      {"", "beta1", Type::floating, set_beta1, "optimizer.beta1"},
      {"", "beta2", Type::floating, set_beta2, "optimizer.beta2"},
      {"", "decay_all", Type::boolean, set_decay_all, "optimizer.decay_all"},
      {"", "clip_norm", Type::floating, set_clip_norm, "optimizer.clip_norm"},
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

}  // namespace troupe::actors::job_keys
