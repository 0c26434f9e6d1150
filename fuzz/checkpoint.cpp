// The checkpoint reader (models/checkpoint/checkpoint.hpp): the input is a
// checkpoint file's bytes.
//
// Properties: read() returns or throws CheckpointError (no Cap'n Proto
// exception, nothing else, no crash, no allocation by a length in the file
// beyond the file's size); a file it accepts is written back by write() to
// a file that reads to the same State.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "fuzz/fuzz_support.hpp"
#include "models/checkpoint/checkpoint.hpp"

using namespace troupe::checkpoint;

namespace {

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool same_doubles(const std::map<std::string, double>& a, const std::map<std::string, double>& b) {
  if (a.size() != b.size()) return false;
  for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j)
    if (i->first != j->first || std::memcmp(&i->second, &j->second, sizeof(double)) != 0) return false;
  return true;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same(const State& a, const State& b) {
  if (a.troupe_version.empty() != b.troupe_version.empty()) return false;  // write() stamps its own
  if (a.model.name != b.model.name || a.model.spec != b.model.spec) return false;
  if (!same_floats(a.parameters, b.parameters)) return false;
  const auto &o = a.optimizer, &p = b.optimizer;
  if (o.name != p.name || o.spec != p.spec || !same_doubles(o.hyper_parameters, p.hyper_parameters) ||
      !same_doubles(o.scalars, p.scalars) || o.buffers.size() != p.buffers.size())
    return false;
  for (std::size_t i = 0; i < o.buffers.size(); ++i)
    if (o.buffers[i].name != p.buffers[i].name || !same_floats(o.buffers[i].values, p.buffers[i].values)) return false;
  const auto &x = a.position, &y = b.position;
  if (x.global_step != y.global_step || x.epoch != y.epoch || x.cursor.epoch != y.cursor.epoch ||
      x.cursor.batch_in_epoch != y.cursor.batch_in_epoch || x.cursor.shuffle_seed != y.cursor.shuffle_seed ||
      x.replica_clocks != y.replica_clocks)
    return false;
  const auto &s = x.segment, &t = y.segment;
  if (s.start_clock != t.start_clock || s.offset != t.offset || s.world != t.world || s.batch != t.batch ||
      s.steps_before != t.steps_before || s.epoch_examples != t.epoch_examples ||
      !same_bits(s.epoch_loss_sum, t.epoch_loss_sum) || s.epoch_correct != t.epoch_correct ||
      s.epoch_unscored != t.epoch_unscored)
    return false;
  const auto &u = a.schedule, &v = b.schedule;
  if (u.spec != v.spec || u.evaluated_at_step != v.evaluated_at_step || u.evaluated_at_epoch != v.evaluated_at_epoch ||
      !same_bits(u.learning_rate, v.learning_rate))
    return false;
  return a.rng.seed == b.rng.seed && a.rng.counter == b.rng.counter && a.update_mode == b.update_mode &&
         a.metrics_note == b.metrics_note;
}

// Where write() writes (it needs a directory for its temporary file);
// removed at exit.
struct ScratchDir {
  std::string dir;
  ScratchDir() {
    const char* base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    dir = std::string(base) + "/troupe-fuzz-checkpoint-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static troupe::fuzz::MemFile file;
  static ScratchDir scratch;
  static const std::string again = scratch.dir + "/again.troupe";
  State state;
  try {
    state = read(file.write(data, size));
  } catch (const CheckpointError&) {
    return 0;
  }
  try {
    write(again, state);
  } catch (const CheckpointError& e) {
    troupe::fuzz::fail(std::string("a state read from a checkpoint cannot be written: ") + e.what());
  }
  State back;
  try {
    back = read(again);
  } catch (const CheckpointError& e) {
    troupe::fuzz::fail(std::string("a checkpoint written from a read one does not read: ") + e.what());
  }
  TROUPE_FUZZ_CHECK(same(state, back), "read(write(read(file))) differs from read(file)");
  std::filesystem::remove(again);
  return 0;
}
