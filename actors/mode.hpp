// The update mode of a job: how gradients become updates.
//
//   sync     all-reduce the replicas' gradients; every replica applies the same
//            update (TF MirroredStrategy); replicas stay identical.
//   async    each replica pushes its gradient to the parameter server, which
//            applies it at once and returns fresh parameters (TF1 ps/worker).
//   ssp:N    async, but a replica may begin a step only while it is at most N
//            steps ahead of the slowest replica (stale-synchronous parallel).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::actors {

struct Mode {
  enum class Kind : std::uint8_t { sync, async, ssp };
  Kind kind = Kind::sync;
  std::int64_t staleness = 0;  // ssp only

  // "sync", "async", "ssp:N" (N >= 0). Throws std::invalid_argument listing
  // the valid forms.
  static Mode parse(const std::string& text);
  std::string str() const;
  bool uses_server() const { return kind != Kind::sync; }
  friend bool operator==(const Mode& a, const Mode& b) {
    return a.kind == b.kind && (a.kind != Kind::ssp || a.staleness == b.staleness);
  }
  friend bool operator!=(const Mode& a, const Mode& b) { return !(a == b); }
};

// A planned switch: at global step `step`, change to `mode`.
struct ScheduledSwitch {
  std::int64_t step = 0;
  Mode mode;
};

// "500:async,1500:sync" (steps strictly increasing). Throws
// std::invalid_argument naming the bad item.
std::vector<ScheduledSwitch> parse_switch_schedule(const std::string& text);

}  // namespace troupe::actors
