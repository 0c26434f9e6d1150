// A strict reader of the Prometheus text exposition format 0.0.4, written
// for the tests from the format's description, independently of the writer
// (net/control/prometheus.cpp): every line is empty, a comment (`# HELP`,
// `# TYPE` once per family and before its samples) or `name{labels} value`;
// every sample belongs to a family with a TYPE; every histogram's buckets
// ascend in `le`, are cumulative, end with le="+Inf" equal to `_count`, and
// come with `_sum`. parse_exposition() collects every problem found, each
// naming its line, so one run of a test shows them all.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace troupe::testing {

struct ExpositionSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<ExpositionSample> samples;
  std::map<std::string, std::string> types;  // family -> gauge, counter, histogram, ...
  std::vector<std::string> problems;         // empty: the text is well formed

  // The samples of one series name whose labels include `labels`.
  std::vector<ExpositionSample> find(const std::string& name,
                                     const std::map<std::string, std::string>& labels = {}) const {
    std::vector<ExpositionSample> out;
    for (const auto& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) {
        auto it = s.labels.find(k);
        match = match && it != s.labels.end() && it->second == v;
      }
      if (match) out.push_back(s);
    }
    return out;
  }
};

namespace detail {

inline bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
inline bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

// A value as Go's ParseFloat reads it (the forms this project writes).
inline bool parse_value(const std::string& text, double& out) {
  if (text == "NaN") return out = std::nan(""), true;
  if (text == "+Inf") return out = HUGE_VAL, true;
  if (text == "-Inf") return out = -HUGE_VAL, true;
  if (text.empty() || text.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

// The family a sample name belongs to: itself, or for a histogram's series
// the name without _bucket / _sum / _count.
inline std::string family_of(const std::string& name, const std::map<std::string, std::string>& types) {
  if (types.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = name.substr(0, name.size() - s.size());
      auto it = types.find(base);
      if (it != types.end() && it->second == "histogram") return base;
    }
  }
  return "";
}

}  // namespace detail

inline Exposition parse_exposition(const std::string& text) {
  Exposition e;
  std::set<std::string> helped, sampled_families;
  std::size_t number = 0;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) {
      e.problems.push_back("the text does not end with a newline");
      end = text.size();
    }
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++number;
    const std::string where = "line " + std::to_string(number) + " '" + line + "': ";
    if (line.empty()) continue;
    if (line[0] == '#') {
      const bool help = line.rfind("# HELP ", 0) == 0, type = line.rfind("# TYPE ", 0) == 0;
      if (!help && !type) continue;  // a plain comment
      const std::size_t name_end = line.find(' ', 7);
      const std::string name = line.substr(7, name_end == std::string::npos ? std::string::npos : name_end - 7);
      const std::string rest = name_end == std::string::npos ? "" : line.substr(name_end + 1);
      if (name.empty() || !detail::name_start(name[0])) e.problems.push_back(where + "bad metric name");
      if (sampled_families.count(name)) e.problems.push_back(where + "HELP or TYPE after the family's samples");
      if (help) {
        if (!helped.insert(name).second) e.problems.push_back(where + "a second HELP");
      } else {
        static const std::set<std::string> known{"counter", "gauge", "histogram", "summary", "untyped"};
        if (!known.count(rest)) e.problems.push_back(where + "unknown type '" + rest + "'");
        if (!e.types.emplace(name, rest).second) e.problems.push_back(where + "a second TYPE");
      }
      continue;
    }
    ExpositionSample s;
    std::size_t i = 0;
    if (!detail::name_start(line[0])) {
      e.problems.push_back(where + "neither a comment nor a sample");
      continue;
    }
    while (i < line.size() && detail::name_char(line[i])) ++i;
    s.name = line.substr(0, i);
    bool ok = true;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (ok && i < line.size() && line[i] != '}') {
        const std::size_t start = i;
        while (i < line.size() && detail::name_char(line[i]) && line[i] != ':') ++i;
        const std::string label = line.substr(start, i - start);
        if (label.empty() || line.compare(i, 2, "=\"") != 0) {
          ok = false;
          break;
        }
        i += 2;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\') {
            if (i + 1 >= line.size()) break;
            const char c = line[i + 1];
            if (c == 'n')
              value += '\n';
            else if (c == '\\' || c == '"')
              value += c;
            else
              ok = false;  // only \\, \" and \n are escapes
            i += 2;
          } else {
            value += line[i++];
          }
        }
        if (i >= line.size()) ok = false;
        ++i;  // the closing quote
        if (!s.labels.emplace(label, value).second) ok = false;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size() || line[i] != '}') ok = false;
      ++i;
    }
    if (!ok || i >= line.size() || line[i] != ' ') {
      e.problems.push_back(where + "malformed name or labels");
      continue;
    }
    const std::string value = line.substr(i + 1);
    if (!detail::parse_value(value, s.value)) {
      e.problems.push_back(where + "value '" + value + "' is not a number Prometheus reads");
      continue;
    }
    const std::string family = detail::family_of(s.name, e.types);
    if (family.empty()) e.problems.push_back(where + "a sample of no family with a TYPE before it");
    sampled_families.insert(family);
    e.samples.push_back(std::move(s));
  }

  // Histograms: per series (labels without le), buckets in order.
  struct Series {
    std::vector<std::pair<double, double>> buckets;  // le, value
    bool inf_last = false, has_sum = false, has_count = false;
    double count = 0;
  };
  std::map<std::string, Series> histograms;
  for (const auto& s : e.samples) {
    const std::string family = detail::family_of(s.name, e.types);
    auto type = e.types.find(family);
    if (type == e.types.end() || type->second != "histogram") continue;
    std::map<std::string, std::string> labels = s.labels;
    const std::string le = labels.count("le") ? labels["le"] : "";
    labels.erase("le");
    std::string key = family + "{";
    for (const auto& [k, v] : labels) key += k + "=" + v + ",";
    key += "}";
    Series& h = histograms[key];
    if (s.name == family + "_bucket") {
      double bound = 0;
      if (le.empty() || !detail::parse_value(le, bound)) {
        e.problems.push_back(key + ": a bucket without a numeric le ('" + le + "')");
        continue;
      }
      if (!h.buckets.empty() && !(bound > h.buckets.back().first))
        e.problems.push_back(key + ": le=" + le + " does not ascend");
      if (!h.buckets.empty() && s.value < h.buckets.back().second)
        e.problems.push_back(key + ": bucket le=" + le + " is smaller than the one before: not cumulative");
      h.buckets.emplace_back(bound, s.value);
      h.inf_last = std::isinf(bound) && bound > 0;
    } else if (s.name == family + "_sum") {
      h.has_sum = true;
    } else if (s.name == family + "_count") {
      h.has_count = true;
      h.count = s.value;
    } else {
      e.problems.push_back(key + ": series " + s.name + " in a histogram family");
    }
  }
  for (const auto& [key, h] : histograms) {
    if (h.buckets.empty() || !h.inf_last) e.problems.push_back(key + ": the buckets do not end with le=\"+Inf\"");
    if (!h.has_sum) e.problems.push_back(key + ": no _sum");
    if (!h.has_count) e.problems.push_back(key + ": no _count");
    if (!h.buckets.empty() && h.has_count && h.buckets.back().second != h.count)
      e.problems.push_back(key + ": the +Inf bucket is not _count");
  }
  return e;
}

}  // namespace troupe::testing
