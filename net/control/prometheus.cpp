#include "net/control/prometheus.hpp"

#include <charconv>
#include <cmath>
#include <set>
#include <stdexcept>

namespace troupe::net::prometheus {

namespace {

bool name_char(char c, bool first, bool colon) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
  return letter || (!first && c >= '0' && c <= '9');
}

// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names; label names without ':' and
// not starting with "__" (reserved for Prometheus' own labels).
bool valid_name(const std::string& name, bool metric) {
  if (name.empty() || (!metric && name.rfind("__", 0) == 0)) return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0, metric)) return false;
  return true;
}

// "{a="x",b="y"}" (with `le` last when given), or "" without labels.
std::string label_text(const Labels& labels, const std::string& le = "") {
  if (labels.empty() && le.empty()) return "";
  std::string out = "{";
  for (const auto& [name, value] : labels) {
    if (out.size() > 1) out += ',';
    out += name + "=\"" + escape_label_value(value) + "\"";
  }
  if (!le.empty()) out += std::string(out.size() > 1 ? "," : "") + "le=\"" + le + "\"";
  return out + "}";
}

void check_labels(const Family& f, const Labels& labels, std::set<std::string>& seen) {
  std::set<std::string> names;
  for (const auto& [name, value] : labels) {
    if (!valid_name(name, false))
      throw std::invalid_argument("metric " + f.name + ": label name '" + name +
                                  "' is not a valid Prometheus label name");
    if (f.type == Type::histogram && name == "le")
      throw std::invalid_argument("metric " + f.name + ": the label 'le' is reserved for histogram buckets");
    if (!names.insert(name).second)
      throw std::invalid_argument("metric " + f.name + ": label '" + name + "' given twice in one sample");
  }
  // Two samples with the same labels make Prometheus refuse the whole scrape.
  if (!seen.insert(label_text(labels)).second)
    throw std::invalid_argument("metric " + f.name + ": two samples with the labels " +
                                (labels.empty() ? std::string("{}") : label_text(labels)));
}

const char* type_name(Type t) {
  switch (t) {
    case Type::gauge:
      return "gauge";
    case Type::counter:
      return "counter";
    case Type::histogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds) : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]))
      throw std::invalid_argument("histogram bound " + format_value(bounds[i]) +
                                  " is not finite (the +Inf bucket is always there)");
    if (i > 0 && !(bounds[i] > bounds[i - 1]))
      throw std::invalid_argument("histogram bounds must increase: " + format_value(bounds[i]) + " after " +
                                  format_value(bounds[i - 1]));
  }
}

void Histogram::observe(double value) {
  std::size_t i = 0;
  while (i < bounds.size() && !(value <= bounds[i])) ++i;  // NaN compares false: the +Inf bucket
  ++counts[i];
  sum += value;
  ++count;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // The shortest decimal that reads back to the same double, in the C
  // locale whatever the process's locale is. Whole numbers (counts, steps)
  // in full ("1000000", not "1e+06"); others as printf's %g would at that
  // precision ("0.25", "0.0001", "1e-07"), as Prometheus' Go clients do.
  const bool whole = value == std::trunc(value) && std::fabs(value) < 1e15;
  const auto r =
      std::to_chars(buf, buf + sizeof buf, value, whole ? std::chars_format::fixed : std::chars_format::general);
  return std::string(buf, r.ptr);
}

std::string escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_help(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string exposition(const std::vector<Family>& families) {
  std::string out;
  std::set<std::string> family_names;
  for (const Family& f : families) {
    if (!valid_name(f.name, true))
      throw std::invalid_argument("'" + f.name + "' is not a valid Prometheus metric name");
    if (!family_names.insert(f.name).second) throw std::invalid_argument("metric " + f.name + " written twice");
    const bool histogram = f.type == Type::histogram;
    if ((histogram && !f.values.empty()) || (!histogram && !f.histograms.empty()))
      throw std::invalid_argument("metric " + f.name + " is a " + type_name(f.type) +
                                  " but has samples of another type");
    if (f.values.empty() && f.histograms.empty()) continue;  // nothing measured yet: no family (as client_golang)
    out += "# HELP " + f.name + " " + escape_help(f.help) + "\n";
    out += "# TYPE " + f.name + " " + type_name(f.type) + "\n";
    std::set<std::string> seen;
    for (const auto& [labels, value] : f.values) {
      check_labels(f, labels, seen);
      out += f.name + label_text(labels) + " " + format_value(value) + "\n";
    }
    for (const auto& [labels, h] : f.histograms) {
      check_labels(f, labels, seen);
      if (h.counts.size() != h.bounds.size() + 1)
        throw std::invalid_argument("metric " + f.name + ": a histogram has " + std::to_string(h.counts.size()) +
                                    " counts for " + std::to_string(h.bounds.size()) + " bounds (expected one more)");
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < h.bounds.size(); ++i) {
        cumulative += h.counts[i];
        out += f.name + "_bucket" + label_text(labels, format_value(h.bounds[i])) + " " + std::to_string(cumulative) +
               "\n";
      }
      // +Inf is _count by definition: a histogram whose counts do not add
      // up to it would be written with buckets that are not cumulative.
      if (cumulative + h.counts.back() != h.count)
        throw std::invalid_argument("metric " + f.name + ": a histogram's bucket counts add up to " +
                                    std::to_string(cumulative + h.counts.back()) + ", not its count " +
                                    std::to_string(h.count));
      out += f.name + "_bucket" + label_text(labels, "+Inf") + " " + std::to_string(h.count) + "\n";
      out += f.name + "_sum" + label_text(labels) + " " + format_value(h.sum) + "\n";
      out += f.name + "_count" + label_text(labels) + " " + std::to_string(h.count) + "\n";
    }
  }
  return out;
}

}  // namespace troupe::net::prometheus
