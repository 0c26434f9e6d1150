#include "util/timeline.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace troupe::actors {

Timeline::Timeline(std::string path, std::string process, std::int64_t first_step, std::int64_t last_step)
    : path_(std::move(path)), process_(std::move(process)), first_(first_step), last_(last_step) {
  if (path_.empty()) throw std::invalid_argument("--timeline: an empty file name");
  // Nodes started with one shared command line (mpirun, srun) on one host
  // need a file each: "{pid}" in the name becomes the process id.
  for (std::size_t at = path_.find("{pid}"); at != std::string::npos; at = path_.find("{pid}", at))
    path_.replace(at, 5, std::to_string(::getpid()));
  if (first_ < 1 || last_ < first_)
    throw std::invalid_argument("--timeline-steps " + std::to_string(first_) + ":" + std::to_string(last_) +
                                ": want A:B with 1 <= A <= B");
  steady_base_ = Clock::now();
  wall_base_us_ =
      std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count();
  events_.reserve(4096);
}

Timeline::~Timeline() {
  if (written_) return;
  try {
    write();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "timeline: %s\n", e.what());
  }
}

double Timeline::to_us(Clock::time_point t) const {
  return wall_base_us_ + std::chrono::duration<double, std::micro>(t - steady_base_).count();
}

void Timeline::name_track(int track, const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [t, n] : tracks_)
    if (t == track) {
      n = name;
      return;
    }
  tracks_.emplace_back(track, name);
}

void Timeline::span(int track, const char* name, Clock::time_point begin, Clock::time_point end, std::int64_t step,
                    int rank) {
  if (!in_window(step)) return;
  const double ts = to_us(begin), dur = std::chrono::duration<double, std::micro>(end - begin).count();
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  events_.push_back(Event{'X', name, track, ts, dur < 0 ? 0 : dur, step, rank, {}});
}

void Timeline::instant(const char* name, std::int64_t step, const std::string& detail) {
  const double ts = to_us(Clock::now());
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  events_.push_back(Event{'i', name, kCoordinatorTrack, ts, 0, step, -1, detail});
}

void Timeline::write() {
  nlohmann::json trace;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const int pid = static_cast<int>(::getpid());
    auto& events = trace["traceEvents"] = nlohmann::json::array();
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", process_}}}});
    bool coordinator_track = false;
    for (const auto& e : events_) coordinator_track = coordinator_track || e.track == kCoordinatorTrack;
    auto tracks = tracks_;
    if (coordinator_track) tracks.emplace_back(kCoordinatorTrack, "coordinator");
    for (const auto& [track, name] : tracks) {
      events.push_back(
          {{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", track}, {"args", {{"name", name}}}});
      events.push_back({{"ph", "M"},
                        {"name", "thread_sort_index"},
                        {"pid", pid},
                        {"tid", track},
                        {"args", {{"sort_index", track}}}});
    }
    for (const auto& e : events_) {
      nlohmann::json j{
          {"ph", std::string(1, e.phase)}, {"name", e.name}, {"pid", pid}, {"tid", e.track}, {"ts", e.ts_us}};
      if (e.phase == 'X') {
        j["dur"] = e.dur_us;
        j["cat"] = "step";
        j["args"] = {{"step", e.step}, {"rank", e.rank}};
      } else {
        j["s"] = "p";  // an instant of the whole process: a line across its tracks
        j["cat"] = "job";
        j["args"] = {{"step", e.step}, {"what", e.detail}};
      }
      events.push_back(std::move(j));
    }
    trace["displayTimeUnit"] = "ms";
    trace["otherData"] = {{"troupe_process", process_},
                          {"steps", std::to_string(first_) + ":" + std::to_string(last_)},
                          {"events_dropped_at_cap", dropped_}};
    written_ = true;
  }
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("timeline: cannot write " + tmp + ": " + std::strerror(errno));
    out << trace.dump() << '\n';
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw std::runtime_error("timeline: writing " + tmp + " failed: " + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw std::runtime_error("timeline: cannot rename " + tmp + " to " + path_ + ": " + why);
  }
}

std::pair<std::int64_t, std::int64_t> Timeline::parse_steps(const std::string& text) {
  const std::size_t colon = text.find(':');
  auto number = [&](const std::string& part) -> std::int64_t {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size() || v < 1)
      throw std::invalid_argument("--timeline-steps '" + text + "': want A:B, steps from 1 (e.g. 100:200)");
    return v;
  };
  if (colon == std::string::npos)
    throw std::invalid_argument("--timeline-steps '" + text + "': want A:B, steps from 1 (e.g. 100:200)");
  const auto a = number(text.substr(0, colon)), b = number(text.substr(colon + 1));
  if (b < a) throw std::invalid_argument("--timeline-steps '" + text + "': the last step comes before the first");
  return {a, b};
}

}  // namespace troupe::actors
