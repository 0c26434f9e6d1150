// What the hand-written benchmark mains share: reading their flags' values
// and the median of their timings (bench_sealed_frame, bench_link_layers).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace troupe::bench {

// `text` as a whole integer of at least `least`; std::invalid_argument
// naming `flag` otherwise.
inline long long integer_arg(const std::string& flag, const std::string& text, long long least) {
  long long v = 0;
  std::size_t used = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < least)
    throw std::invalid_argument(flag + " takes whole numbers of at least " + std::to_string(least) + ", not '" + text +
                                "'");
  return v;
}

// "2,3" as {2, 3}, each as integer_arg; at least one.
inline std::vector<long long> integer_list_arg(const std::string& flag, const std::string& text, long long least) {
  std::vector<long long> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) out.push_back(integer_arg(flag, item, least));
  if (out.empty()) throw std::invalid_argument(flag + " needs at least one value");
  return out;
}

// A main's "--flag value" pairs, each handed to `take` (false: unknown
// flag). A missing value, an unknown flag or a value `take` refuses
// (std::invalid_argument) prints the reason and `usage` and exits 2.
inline void parse_flags(int argc, char** argv, const char* program, const char* usage,
                        const std::function<bool(const std::string& flag, const std::string& value)>& take) {
  std::string why;
  for (int i = 1; i < argc && why.empty(); i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      why = "missing value after " + flag;
      break;
    }
    try {
      if (!take(flag, argv[i + 1])) why = "unknown argument " + flag;
    } catch (const std::invalid_argument& e) {
      why = e.what();
    }
  }
  if (why.empty()) return;
  std::cerr << program << ": " << why << "\nusage: " << program << " " << usage << "\n";
  std::exit(2);
}

// The median of `v` (0 for none).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace troupe::bench
