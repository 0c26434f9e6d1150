// Checkpoints: the whole training state in one file, written atomically.
//
// The file is one unpacked Cap'n Proto message (checkpoint.capnp, which
// documents every field); `capnp decode` prints it (README.md here). State
// mirrors the schema with plain C++ types, so callers never see Cap'n Proto:
//
//   troupe::checkpoint::Directory dir("runs/mnist/ckpt", /*keep_last_k=*/3);
//   dir.save(state);                                 // ckpt-000000001000.troupe
//   if (auto path = dir.latest()) {
//     State s = troupe::checkpoint::read(*path);
//     troupe::checkpoint::check_model(s, *path, "mlp", model_parameter_count);
//   }
//
// Every failure is a CheckpointError (a std::runtime_error) whose one-line
// message names the file and what was wrong; no Cap'n Proto (kj) exception
// leaves this module.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace troupe::checkpoint {

class CheckpointError : public std::runtime_error {
 public:
  CheckpointError(const std::string& path, const std::string& what);
  // The file or directory the error is about.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A named float32 buffer: optimizer state such as "m", "v", "velocity".
struct NamedBuffer {
  std::string name;
  std::vector<float> values;
};

struct ModelInfo {
  std::string name;  // zoo name: "mlp", "cnn"
  std::string spec;  // full spec text, enough to rebuild the model
};

struct OptimizerState {
  std::string name;                                // "sgd", "adam", ...
  std::string spec;                                // spec text as given
  std::map<std::string, double> hyper_parameters;  // "beta1" -> 0.9
  std::vector<NamedBuffer> buffers;                // "m", "v", "velocity"
  std::map<std::string, double> scalars;           // "adam_step", "m_schedule"
};

struct DataCursor {
  std::uint64_t epoch = 0;
  std::uint64_t batch_in_epoch = 0;  // next batch in that epoch's order
  std::uint64_t shuffle_seed = 0;
};

// The data segment replicas train (checkpoint.capnp, Segment); world 0:
// none recorded.
struct Segment {
  std::uint64_t start_clock = 0;
  std::uint64_t offset = 0;  // permutation positions of the epoch used before it
  std::uint32_t world = 0;
  std::uint64_t batch = 0;         // per replica
  std::uint64_t steps_before = 0;  // steps of the epoch before it
  std::uint64_t epoch_examples = 0;
  double epoch_loss_sum = 0;
  std::uint64_t epoch_correct = 0;
  std::uint64_t epoch_unscored =
      0;  // of epoch_examples: used without a loss or correct count (a lost node's last step)
  bool recorded() const { return world > 0; }
};

struct Position {
  std::uint64_t global_step = 0;  // also names the file in Directory::save
  std::uint64_t epoch = 0;
  DataCursor cursor;
  // Steps each replica had completed, by rank (the actor runtime writes it;
  // empty from the single-replica trainer and in older files).
  std::vector<std::uint64_t> replica_clocks;
  Segment segment;  // the actor runtime writes it
};

struct ScheduleState {
  std::string spec;
  std::uint64_t evaluated_at_step = 0;
  std::uint64_t evaluated_at_epoch = 0;
  double learning_rate = 0.0;
};

struct RngState {
  std::uint64_t seed = 0;
  std::uint64_t counter = 0;
};

// Everything a checkpoint holds. The file also records the parameter count
// (parameters.size()), the format version and magic; write() fills those.
struct State {
  // Set by write() (this build's TROUPE_VERSION and the current time);
  // read() returns what the file says. Ignored on write.
  std::string troupe_version;
  std::int64_t written_at_unix_ms = 0;

  ModelInfo model;
  std::vector<float> parameters;   // the model's flat parameter buffer
  std::vector<float> model_state;  // its state that is not trained (running statistics); empty: none
  OptimizerState optimizer;
  Position position;
  ScheduleState schedule;
  RngState rng;
  std::string update_mode;   // "sync", "async", "ssp:N"
  std::string metrics_note;  // optional, empty when none
};

// The format version this build writes and the newest it reads.
std::uint32_t format_version();

// Writes `state` to `path` atomically: a unique temporary file in the same
// directory, flushed and fsync'ed, renamed over `path`, then the directory
// fsync'ed. On failure the temporary file is removed, `path` is untouched
// (an older checkpoint there survives) and CheckpointError names the path
// and the errno text.
void write(const std::string& path, const State& state);

// Reads and fully verifies a checkpoint: magic, format version, file size
// against the message's segment table, each chunk's CRC32, chunk sizes
// against element counts. The Cap'n Proto traversal limit comes from the
// file size, never from a length field inside the file.
State read(const std::string& path);

// Throws CheckpointError unless the checkpoint at `path` (already read into
// `state`) is for model `requested_model`, e.g.
//   "checkpoint runs/x/ckpt-000000000100.troupe is for model 'cnn', but 'mlp' was requested".
// With `expected_parameter_count`, also checks the parameter count.
void check_model(const State& state, const std::string& path, const std::string& requested_model,
                 std::optional<std::uint64_t> expected_parameter_count = std::nullopt);

// A folder of checkpoints named ckpt-<global step, 12 digits>.troupe.
class Directory {
 public:
  struct Entry {
    std::uint64_t step;
    std::string path;
  };

  // Creates `dir` if needed and checks it is writable (creates and deletes a
  // probe file), so a bad path fails before training starts. keep_last_k = 0
  // keeps every checkpoint.
  Directory(std::string dir, std::size_t keep_last_k);
  // A folder that is only read (eval, predict and export given a job's
  // checkpoint folder): it must exist; it is not checked for writing, so a
  // read-only copy of a job's folder serves too.
  static Directory existing(std::string dir);

  // Writes state as ckpt-<state.position.global_step>.troupe (replacing one
  // of the same step), then deletes all but the newest keep_last_k.
  // Returns the path written.
  std::string save(const State& state);

  // The newest checkpoint (by step) that is complete: its size matches its
  // segment table and it carries the checkpoint magic. A cheap check (no
  // CRCs); read() verifies everything. None when there is no such file.
  std::optional<std::string> latest() const;

  // The newest checkpoint that read() fully verifies (CRCs included), read.
  // Each newer file that fails is appended to `skipped` with the reason, so
  // a resume can fall back past a corrupt or truncated newest file and say
  // which one it skipped and why. None when no file verifies.
  struct Loaded {
    State state;
    std::string path;
  };
  struct Skipped {
    std::string path, reason;
  };
  std::optional<Loaded> newest_valid(std::vector<Skipped>* skipped = nullptr) const;

  // All files named like checkpoints, oldest step first (not verified).
  std::vector<Entry> list() const;

  // The path save() uses for `step`.
  std::string path_for_step(std::uint64_t step) const;

  const std::string& dir() const { return dir_; }
  std::size_t keep_last_k() const { return keep_last_k_; }

 private:
  struct ReadOnly {};
  Directory(std::string dir, ReadOnly) : dir_(std::move(dir)), keep_last_k_(0) {}
  std::string dir_;
  std::size_t keep_last_k_;
};

namespace testing {
// Fault injection for tests of the atomic write. When set, write() calls the
// hook before each step ("open", "write", "fsync", "rename", "fsync-dir");
// a non-zero return is taken as the errno of that step failing. The "write"
// step is checked after the first half of the bytes is written, so a failure
// there leaves a partly written temporary file behind to clean up.
void set_write_fault_hook(std::function<int(const std::string& step)> hook);
}  // namespace testing

}  // namespace troupe::checkpoint
