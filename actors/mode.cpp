#include "actors/mode.hpp"

#include <sstream>
#include <stdexcept>

namespace troupe::actors {

Mode Mode::parse(const std::string& text) {
  if (text == "sync") return {Kind::sync, 0};
  if (text == "async") return {Kind::async, 0};
  if (text.rfind("ssp:", 0) == 0) {
    const std::string n = text.substr(4);
    try {
      std::size_t used = 0;
      long long v = std::stoll(n, &used);
      if (used == n.size() && v >= 0) return {Kind::ssp, v};
    } catch (const std::exception&) {}
  }
  throw std::invalid_argument("unknown mode '" + text + "': expected sync, async or ssp:N (N >= 0)");
}

std::string Mode::str() const {
  switch (kind) {
    case Kind::sync:
      return "sync";
    case Kind::async:
      return "async";
    case Kind::ssp:
      return "ssp:" + std::to_string(staleness);
  }
  return "?";
}

std::vector<ScheduledSwitch> parse_switch_schedule(const std::string& text) {
  std::vector<ScheduledSwitch> out;
  if (text.empty()) return out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    auto colon = item.find(':');
    if (colon == std::string::npos)
      throw std::invalid_argument("--switch item '" + item + "': expected STEP:MODE, e.g. 500:async");
    ScheduledSwitch s;
    try {
      std::size_t used = 0;
      s.step = std::stoll(item.substr(0, colon), &used);
      if (used != colon || s.step < 0) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw std::invalid_argument("--switch item '" + item + "': '" + item.substr(0, colon) + "' is not a step number");
    }
    s.mode = Mode::parse(item.substr(colon + 1));
    if (!out.empty() && s.step <= out.back().step)
      throw std::invalid_argument("--switch steps must increase: " + std::to_string(s.step) + " after " +
                                  std::to_string(out.back().step));
    out.push_back(s);
  }
  return out;
}

}  // namespace troupe::actors
