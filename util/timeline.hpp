// A timeline of every replica's steps: `--timeline FILE` writes a Chrome
// trace-event JSON (open it in Perfetto, ui.perfetto.dev, or
// chrome://tracing), like Horovod's timeline.
//
// One process per troupe node (its OS pid, named "coordinator" or
// "worker ..."), one track per replica of the node (named with its device;
// its rank in the current view is in every span's args) and one for the
// coordinator. Spans ("X" events) per step: data wait, forward (with the
// loss), backward, all-reduce (sync), push and pull (async, ssp: the push's
// round trip to the parameter server, then copying the fresh parameters
// in), optimizer, and grant wait (the replica had run every step it was
// granted). Instant events on the coordinator's track: mode switches,
// evaluations, checkpoints and membership views.
//
// Time stamps are microseconds of the wall clock (CLOCK_REALTIME at the
// recorder's start plus steady-clock time since), so the files of several
// nodes of one host line up exactly, and those of several hosts as well as
// their clocks agree (NTP: about a millisecond). scripts/timeline.py merges
// the files of a job's nodes into one and draws a window of it as a PNG.
//
// Bounded: only steps in the window [first_step, last_step] (a replica's
// step number, 1-based; --timeline-steps A:B) are recorded, and at most
// kMaxEvents events in all (a note in the file says when the cap cut it).
// Recording is a mutex and a push_back per span (a few per step); the file
// is written at the end, atomically (a temporary file renamed over FILE).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace troupe::actors {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kMaxEvents = 2'000'000;
  static constexpr int kCoordinatorTrack = 1000;

  // `process`: this node's name in the trace; "{pid}" in `path` becomes the
  // process id (one file per node under a shared command line). Throws std::invalid_argument
  // when last_step < first_step or first_step < 1.
  Timeline(std::string path, std::string process, std::int64_t first_step = 1, std::int64_t last_step = 500);
  ~Timeline();  // writes the file if write() was not called (errors are logged, not thrown)
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  const std::string& path() const { return path_; }
  std::int64_t first_step() const { return first_; }
  std::int64_t last_step() const { return last_; }
  bool in_window(std::int64_t step) const { return step >= first_ && step <= last_; }

  // Names a track (a replica: "replica 0 (cpu:0)").
  void name_track(int track, const std::string& name);
  // A span of `step` on `track` (dropped outside the window); `rank`: the
  // replica's rank in its view.
  void span(int track, const char* name, Clock::time_point begin, Clock::time_point end, std::int64_t step, int rank);
  // An instant event on the coordinator's track at global step `step`
  // (always recorded: they are few), with a line saying what happened.
  void instant(const char* name, std::int64_t step, const std::string& detail);

  // Writes FILE (temporary file + rename). Throws std::runtime_error naming
  // the file. Later events are still recorded; a later write() rewrites it.
  void write();

  // "A:B" -> {A, B}; throws std::invalid_argument naming the text.
  static std::pair<std::int64_t, std::int64_t> parse_steps(const std::string& text);

 private:
  struct Event {
    char phase;        // 'X' span, 'i' instant
    const char* name;  // a literal
    int track;
    double ts_us, dur_us;
    std::int64_t step;
    int rank;
    std::string detail;
  };
  double to_us(Clock::time_point t) const;

  std::string path_, process_;
  std::int64_t first_, last_;
  Clock::time_point steady_base_;
  double wall_base_us_;
  std::mutex mutex_;
  std::vector<Event> events_;
  std::vector<std::pair<int, std::string>> tracks_;
  std::size_t dropped_ = 0;
  bool written_ = false;
};

}  // namespace troupe::actors
