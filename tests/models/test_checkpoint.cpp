// Checkpoint files and directories, on real files in a fresh temp directory.
// Every error test checks that the message names the file and the reason.
//
//   ./tests/models_tests --gtest_filter='*Checkpoint*'
#include <capnp/message.h>
#include <capnp/schema.capnp.h>  // a foreign Cap'n Proto message (capnp's own schema.Node)
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "models/checkpoint/checkpoint.hpp"

namespace troupe::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

float bits_to_float(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The special values that must survive bit-exactly.
std::vector<float> special_values() {
  return {bits_to_float(0x7fc00000u),  // quiet NaN
          bits_to_float(0x7fc01234u),  // NaN with a payload
          bits_to_float(0xffc00001u),  // negative NaN
          bits_to_float(0x7f800001u),  // signalling NaN
          -0.0f,
          0.0f,
          std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::denorm_min(),
          std::numeric_limits<float>::max(),
          std::numeric_limits<float>::lowest()};
}

::testing::AssertionResult bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      return ::testing::AssertionFailure() << "element " << i << " differs: " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

State small_state(std::uint64_t step, std::size_t parameters = 1000) {
  State s;
  s.model = {"mlp", "mlp in=784 hidden=128 out=10"};
  s.parameters.resize(parameters);
  for (std::size_t i = 0; i < parameters; ++i) s.parameters[i] = static_cast<float>(i) * 0.5f + step;
  s.optimizer.name = "sgd";
  s.optimizer.spec = "sgd lr=0.1";
  s.optimizer.hyper_parameters = {{"lr", 0.1}};
  s.position.global_step = step;
  s.update_mode = "sync";
  return s;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return "NO EXCEPTION";
}

// Finds `needle` in `haystack` starting at `from`; fails the test when absent.
std::size_t find_or_fail(const std::string& haystack, const std::string& needle, std::size_t from = 0) {
  std::size_t at = haystack.find(needle, from);
  EXPECT_NE(at, std::string::npos) << "pattern not found in the file";
  return at;
}

template <typename T>
std::string bytes_of(const T& value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof value);
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "troupe-checkpoint-test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = pattern;
  }
  void TearDown() override {
    testing::set_write_fault_hook(nullptr);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // Writes a valid checkpoint, applies `mutate` to its bytes, returns the read error.
  std::string error_after(const std::string& name, const State& state,
                          const std::function<void(std::string&)>& mutate) {
    std::string file = path(name);
    write(file, state);
    std::string bytes = read_bytes(file);
    mutate(bytes);
    write_bytes(file, bytes);
    return message_of([&] { read(file); });
  }

  std::string dir_;
};

using CheckpointFileTest = CheckpointTest;
using CheckpointErrorTest = CheckpointTest;
using CheckpointDirectoryTest = CheckpointTest;

// ---- round trips ---------------------------------------------------------------

TEST_F(CheckpointFileTest, RoundTripsEveryFieldWithMultiChunkParameters) {
  State s;
  s.model = {"cnn", "cnn conv=32,64 kernel=3 fc=128 classes=10\nsecond line"};
  // 16 MiB chunks: 2 full chunks and a partial, odd-sized third one.
  const std::size_t n = 2 * (4u << 20) + 12345;
  s.parameters.resize(n);
  for (std::size_t i = 0; i < n; ++i) s.parameters[i] = static_cast<float>(i) * 0.25f - 7.0f;
  std::vector<float> special = special_values();
  std::copy(special.begin(), special.end(), s.parameters.begin() + (4u << 20) - 3);  // across a chunk edge
  std::copy(special.begin(), special.end(), s.parameters.end() - special.size());
  s.model_state = {0.5f, -1.25f, 3.0f, 1.0f};  // running statistics
  s.optimizer.name = "adam";
  s.optimizer.spec = "adam lr=0.001 beta1=0.9 beta2=0.999";
  s.optimizer.hyper_parameters = {{"lr", 0.001}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}};
  s.optimizer.buffers = {{"m", std::vector<float>(1001, 0.125f)}, {"v", special}, {"velocity", {}}};
  s.optimizer.scalars = {{"adam_step", 1234.0}, {"m_schedule", 0.987654321}};
  s.position = {
      1234, 3, {3, 17, 0xdeadbeefcafef00dull}, {1234, 1233, 1235}, {1200, 41216, 3, 32, 500, 45000, 12345.678, 40001}};
  s.schedule = {"cosine base=0.1 warmup=500", 1233, 3, 0.0421};
  s.rng = {42, 987654321987ull};
  s.update_mode = "ssp:4";
  s.metrics_note = "loss=0.231 accuracy=0.934";

  const std::string file = path("full.troupe");
  const auto before = std::chrono::system_clock::now();
  write(file, s);
  const auto after = std::chrono::system_clock::now();
  EXPECT_GT(fs::file_size(file), n * sizeof(float));
  State r = read(file);

  EXPECT_EQ(r.model.name, s.model.name);
  EXPECT_EQ(r.model.spec, s.model.spec);
  EXPECT_TRUE(bit_equal(r.parameters, s.parameters));
  EXPECT_EQ(r.model_state, s.model_state);
  EXPECT_EQ(r.optimizer.name, s.optimizer.name);
  EXPECT_EQ(r.optimizer.spec, s.optimizer.spec);
  EXPECT_EQ(r.optimizer.hyper_parameters, s.optimizer.hyper_parameters);
  ASSERT_EQ(r.optimizer.buffers.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.optimizer.buffers[i].name, s.optimizer.buffers[i].name);
    EXPECT_TRUE(bit_equal(r.optimizer.buffers[i].values, s.optimizer.buffers[i].values)) << i;
  }
  EXPECT_EQ(r.optimizer.scalars, s.optimizer.scalars);
  EXPECT_EQ(r.position.global_step, 1234u);
  EXPECT_EQ(r.position.epoch, 3u);
  EXPECT_EQ(r.position.cursor.epoch, 3u);
  EXPECT_EQ(r.position.cursor.batch_in_epoch, 17u);
  EXPECT_EQ(r.position.cursor.shuffle_seed, 0xdeadbeefcafef00dull);
  EXPECT_EQ(r.position.replica_clocks, (std::vector<std::uint64_t>{1234, 1233, 1235}));
  EXPECT_EQ(r.position.segment.start_clock, 1200u);
  EXPECT_EQ(r.position.segment.offset, 41216u);
  EXPECT_EQ(r.position.segment.world, 3u);
  EXPECT_EQ(r.position.segment.batch, 32u);
  EXPECT_EQ(r.position.segment.steps_before, 500u);
  EXPECT_EQ(r.position.segment.epoch_examples, 45000u);
  EXPECT_EQ(r.position.segment.epoch_loss_sum, 12345.678);
  EXPECT_EQ(r.position.segment.epoch_correct, 40001u);
  EXPECT_EQ(r.schedule.spec, s.schedule.spec);
  EXPECT_EQ(r.schedule.evaluated_at_step, 1233u);
  EXPECT_EQ(r.schedule.evaluated_at_epoch, 3u);
  EXPECT_EQ(r.schedule.learning_rate, 0.0421);
  EXPECT_EQ(r.rng.seed, 42u);
  EXPECT_EQ(r.rng.counter, 987654321987ull);
  EXPECT_EQ(r.update_mode, "ssp:4");
  EXPECT_EQ(r.metrics_note, s.metrics_note);
  EXPECT_FALSE(r.troupe_version.empty());
  const auto ms = [](auto t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  EXPECT_GE(r.written_at_unix_ms, ms(before));
  EXPECT_LE(r.written_at_unix_ms, ms(after));
}

// Cap'n Proto's default traversal limit is 64 MiB; read() must set its own.
TEST_F(CheckpointFileTest, ReadsFilesOverCapnpsDefault64MiBLimit) {
  State s = small_state(9, 0);
  s.parameters.assign((17u << 20) + 3, 0.75f);  // 68 MiB, 5 chunks
  s.parameters.back() = -0.0f;
  const std::string file = path("big.troupe");
  write(file, s);
  EXPECT_GT(fs::file_size(file), 64u << 20);
  EXPECT_TRUE(bit_equal(read(file).parameters, s.parameters));
}

TEST_F(CheckpointFileTest, SpecialFloatsSurviveBitExactly) {
  State s = small_state(7, 0);
  s.parameters = special_values();
  s.optimizer.buffers = {{"velocity", special_values()}};
  s.schedule.learning_rate = -0.0;
  s.optimizer.scalars = {{"inf", std::numeric_limits<double>::infinity()}};
  const std::string file = path("special.troupe");
  write(file, s);
  State r = read(file);
  EXPECT_TRUE(bit_equal(r.parameters, s.parameters));
  EXPECT_TRUE(bit_equal(r.optimizer.buffers.at(0).values, s.optimizer.buffers.at(0).values));
  EXPECT_TRUE(std::signbit(r.schedule.learning_rate));
  EXPECT_EQ(r.optimizer.scalars.at("inf"), std::numeric_limits<double>::infinity());
}

TEST_F(CheckpointFileTest, RoundTripsAnEmptyState) {
  const std::string file = path("empty-state.troupe");
  write(file, State{});
  State r = read(file);
  EXPECT_TRUE(r.parameters.empty());
  EXPECT_TRUE(r.model.name.empty());
  EXPECT_TRUE(r.optimizer.buffers.empty());
  EXPECT_EQ(r.position.global_step, 0u);
}

TEST_F(CheckpointFileTest, OverwritesAnExistingCheckpoint) {
  const std::string file = path("x.troupe");
  write(file, small_state(1));
  write(file, small_state(2));
  EXPECT_EQ(read(file).position.global_step, 2u);
  EXPECT_EQ(files(), std::vector<std::string>{"x.troupe"});
}

TEST_F(CheckpointFileTest, CapnpDecodePrintsTheFile) {
  if (std::system("command -v capnp > /dev/null 2>&1") != 0) GTEST_SKIP() << "capnp tool not installed";
  const std::string file = path("decode.troupe");
  write(file, small_state(5, 4));
  // From the source tree's root (a definition from CMake: __FILE__ may be
  // relative to the build directory, e.g. under ccache).
  const fs::path schema = fs::path(TROUPE_SOURCE_DIR) / "models/checkpoint/checkpoint.capnp";
  const std::string out = path("decoded.txt");
  const std::string command =
      "capnp decode --short '" + schema.string() + "' Checkpoint < '" + file + "' > '" + out + "' 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << read_bytes(out);
  const std::string text = read_bytes(out);
  EXPECT_NE(text.find("magic = \"troupe.checkpoint\""), std::string::npos) << text;
  EXPECT_NE(text.find("globalStep = 5"), std::string::npos) << text;
}

// ---- atomic writes -------------------------------------------------------------

TEST_F(CheckpointFileTest, FailedWriteKeepsTheOldCheckpointAndLeavesNoTempFile) {
  const std::string file = path("ckpt.troupe");
  for (const char* step : {"open", "write", "fsync", "rename"}) {
    SCOPED_TRACE(step);
    write(file, small_state(1, 100000));
    testing::set_write_fault_hook([&](const std::string& s) { return s == step ? ENOSPC : 0; });
    const std::string error = message_of([&] { write(file, small_state(2, 100000)); });
    testing::set_write_fault_hook(nullptr);
    EXPECT_NE(error.find(file), std::string::npos) << error;
    EXPECT_NE(error.find(std::strerror(ENOSPC)), std::string::npos) << error;
    EXPECT_EQ(read(file).position.global_step, 1u);
    EXPECT_EQ(files(), std::vector<std::string>{"ckpt.troupe"});
  }
}

TEST_F(CheckpointFileTest, DirectoryFsyncFailureIsReportedAfterTheRename) {
  const std::string file = path("ckpt.troupe");
  write(file, small_state(1));
  testing::set_write_fault_hook([](const std::string& s) { return s == "fsync-dir" ? EIO : 0; });
  const std::string error = message_of([&] { write(file, small_state(2)); });
  EXPECT_NE(error.find(file), std::string::npos) << error;
  EXPECT_NE(error.find("cannot fsync directory"), std::string::npos) << error;
  EXPECT_NE(error.find(std::strerror(EIO)), std::string::npos) << error;
  testing::set_write_fault_hook(nullptr);
  EXPECT_EQ(read(file).position.global_step, 2u);  // in place, just not known durable
  EXPECT_EQ(files(), std::vector<std::string>{"ckpt.troupe"});
}

// A real (not injected) failure that happens as root too: the name is legal,
// but the temporary name beside it is longer than NAME_MAX.
TEST_F(CheckpointFileTest, TooLongTemporaryNameFailsAndKeepsTheOldCheckpoint) {
  const std::string file = path(std::string(250, 'c'));
  write(path("short.troupe"), small_state(1));
  fs::rename(path("short.troupe"), file);
  const std::string error = message_of([&] { write(file, small_state(2)); });
  EXPECT_NE(error.find(file), std::string::npos) << error;
  EXPECT_NE(error.find(std::strerror(ENAMETOOLONG)), std::string::npos) << error;
  EXPECT_EQ(read(file).position.global_step, 1u);
  EXPECT_EQ(files(), std::vector<std::string>{std::string(250, 'c')});
}

TEST_F(CheckpointFileTest, WriteIntoAMissingDirectoryFailsAndCreatesNothing) {
  const std::string file = path("no/such/dir/ckpt.troupe");
  const std::string error = message_of([&] { write(file, small_state(1)); });
  EXPECT_NE(error.find(file), std::string::npos) << error;
  EXPECT_NE(error.find(std::strerror(ENOENT)), std::string::npos) << error;
  EXPECT_TRUE(files().empty());
}

// ---- Directory -----------------------------------------------------------------

TEST_F(CheckpointDirectoryTest, KeepsTheLastKAndNamesFilesByStep) {
  Directory checkpoints(path("run"), 3);
  for (std::uint64_t step : {100, 200, 300, 400, 500, 1000}) {
    EXPECT_EQ(checkpoints.save(small_state(step)),
              path("run/ckpt-" + std::string(step < 1000 ? 9 : 8, '0') + std::to_string(step) + ".troupe"));
  }
  std::vector<Directory::Entry> entries = checkpoints.list();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].step, 400u);
  EXPECT_EQ(entries[1].step, 500u);
  EXPECT_EQ(entries[2].step, 1000u);  // numeric order, not just names
  EXPECT_EQ(entries[2].path, path("run/ckpt-000000001000.troupe"));
  EXPECT_EQ(read(entries[0].path).position.global_step, 400u);
  EXPECT_EQ(fs::path(checkpoints.path_for_step(7)).filename(), "ckpt-000000000007.troupe");
}

TEST_F(CheckpointDirectoryTest, KeepZeroKeepsEverything) {
  Directory checkpoints(path("all"), 0);
  for (std::uint64_t step = 1; step <= 5; ++step) checkpoints.save(small_state(step));
  EXPECT_EQ(checkpoints.list().size(), 5u);
}

TEST_F(CheckpointDirectoryTest, LatestIsTheNewestCompleteCheckpoint) {
  Directory checkpoints(dir_, 10);
  EXPECT_FALSE(checkpoints.latest().has_value());
  checkpoints.save(small_state(10));
  checkpoints.save(small_state(20));
  EXPECT_EQ(checkpoints.latest(), checkpoints.path_for_step(20));

  // Newer, but not usable: a truncated copy, garbage, an empty file; and
  // names that are not checkpoints at all.
  std::string good = read_bytes(checkpoints.path_for_step(20));
  write_bytes(checkpoints.path_for_step(30), good.substr(0, good.size() / 2));
  write_bytes(checkpoints.path_for_step(40), std::string(5000, 'x'));
  write_bytes(checkpoints.path_for_step(50), "");
  write_bytes(path("ckpt-000000000090.troupe.tmp.abcdef"), good);
  write_bytes(path("ckpt-99.troupe.bak"), good);
  write_bytes(path("notes.txt"), "hello");
  EXPECT_EQ(checkpoints.latest(), checkpoints.path_for_step(20));
  EXPECT_EQ(checkpoints.list().size(), 5u);  // 10, 20, 30, 40, 50
}

TEST_F(CheckpointDirectoryTest, UnwritableDirectoryIsReportedAtConstruction) {
  // Works as root too: nothing can be created below a regular file.
  write_bytes(path("file"), "not a directory");
  const std::string below = path("file/sub");
  std::string error = message_of([&] { Directory checkpoints(below, 3); });
  EXPECT_NE(error.find(below), std::string::npos) << error;
  EXPECT_NE(error.find("cannot create"), std::string::npos) << error;

  error = message_of([&] { Directory checkpoints(path("file"), 3); });
  EXPECT_NE(error.find(path("file")), std::string::npos) << error;
  EXPECT_NE(error.find("not a directory"), std::string::npos) << error;

  if (::geteuid() != 0) {  // permissions only bind non-root users
    ASSERT_EQ(::mkdir(path("readonly").c_str(), 0555), 0);
    error = message_of([&] { Directory checkpoints(path("readonly"), 3); });
    EXPECT_NE(error.find("is not writable"), std::string::npos) << error;
  }
}

TEST_F(CheckpointDirectoryTest, ConstructionCreatesTheDirectoryAndLeavesNoProbe) {
  Directory checkpoints(path("a/b/c"), 2);
  EXPECT_TRUE(fs::is_directory(path("a/b/c")));
  EXPECT_TRUE(fs::is_empty(path("a/b/c")));
}

// ---- errors on read ------------------------------------------------------------

TEST_F(CheckpointErrorTest, TruncatedFileIsReportedAtEveryCut) {
  const std::string file = path("cut.troupe");
  write(file, small_state(3, 100000));
  const std::string good = read_bytes(file);
  for (std::size_t cut : {std::size_t{200}, std::size_t{1000}, good.size() / 2, good.size() - 8, good.size() - 1}) {
    SCOPED_TRACE(cut);
    write_bytes(file, good.substr(0, cut));
    const std::string error = message_of([&] { read(file); });
    EXPECT_NE(error.find(file), std::string::npos) << error;
    EXPECT_NE(error.find("truncated"), std::string::npos) << error;
    EXPECT_NE(error.find(std::to_string(cut) + " bytes"), std::string::npos) << error;
  }
  // Cut before the magic: can't be told from a foreign file, but still clear.
  for (std::size_t cut : {std::size_t{4}, std::size_t{8}, std::size_t{64}}) {
    SCOPED_TRACE(cut);
    write_bytes(file, good.substr(0, cut));
    const std::string error = message_of([&] { read(file); });
    EXPECT_NE(error.find(file), std::string::npos) << error;
    EXPECT_NE(error.find("not a troupe checkpoint"), std::string::npos) << error;
  }
}

TEST_F(CheckpointErrorTest, TrailingBytesAreReported) {
  const std::string error =
      error_after("tail.troupe", small_state(1), [](std::string& b) { b += std::string(16, '\0'); });
  EXPECT_NE(error.find(path("tail.troupe")), std::string::npos) << error;
  EXPECT_NE(error.find("16 unexpected bytes after the message"), std::string::npos) << error;
}

TEST_F(CheckpointErrorTest, CorruptedParameterChunkFailsItsCrc) {
  // Two chunks; corrupt the second.
  State s = small_state(1, (4u << 20) + 100);
  for (std::size_t i = 0; i < s.parameters.size(); ++i) s.parameters[i] = static_cast<float>(i);
  const float marker[2] = {static_cast<float>((4u << 20) + 50), static_cast<float>((4u << 20) + 51)};
  const std::string error = error_after("crc.troupe", s, [&](std::string& b) {
    b[find_or_fail(b, std::string(reinterpret_cast<const char*>(marker), 8)) + 1] ^= 0x01;
  });
  EXPECT_NE(error.find(path("crc.troupe")), std::string::npos) << error;
  EXPECT_NE(error.find("CRC mismatch in parameters chunk 1 of 2"), std::string::npos) << error;
}

TEST_F(CheckpointErrorTest, CorruptedOptimizerStateFailsItsCrcByName) {
  State s = small_state(1);
  s.optimizer.buffers = {{"m", std::vector<float>(64, 0.0f)}, {"v", std::vector<float>(64, 1234.5678f)}};
  const std::string error =
      error_after("crc-v.troupe", s, [&](std::string& b) { b[find_or_fail(b, bytes_of(1234.5678f)) + 2] ^= 0x40; });
  EXPECT_NE(error.find(path("crc-v.troupe")), std::string::npos) << error;
  EXPECT_NE(error.find("CRC mismatch in optimizer state 'v' chunk 0 of 1"), std::string::npos) << error;
}

TEST_F(CheckpointErrorTest, DamagedMetadataFailsTheMetadataCrc) {
  State s = small_state(0x1122334455667788ull);
  s.metrics_note = "loss=0.5";
  std::string error = error_after(
      "meta.troupe", s, [&](std::string& b) { b[find_or_fail(b, bytes_of(s.position.global_step)) + 3] ^= 0x04; });
  EXPECT_NE(error.find(path("meta.troupe")), std::string::npos) << error;
  EXPECT_NE(error.find("metadata CRC mismatch"), std::string::npos) << error;

  error = error_after("note.troupe", s, [&](std::string& b) { b[find_or_fail(b, "loss=0.5") + 5] = '9'; });
  EXPECT_NE(error.find("metadata CRC mismatch"), std::string::npos) << error;
}

// The data segment (elastic resume) has its own CRC, like the replica clocks.
TEST_F(CheckpointErrorTest, DamagedDataSegmentFailsItsCrc) {
  State s = small_state(0x1122334455667788ull);
  s.position.replica_clocks = {700, 700};
  s.position.segment = {600, 0x0000123456789abcull, 2, 32, 100, 20000, 1.5, 17000};
  const std::string error = error_after("segment.troupe", s, [&](std::string& b) {
    b[find_or_fail(b, bytes_of(s.position.segment.offset)) + 2] ^= 0x10;
  });
  EXPECT_NE(error.find(path("segment.troupe")), std::string::npos) << error;
  EXPECT_NE(error.find("data segment CRC mismatch"), std::string::npos) << error;
}

// epochUnscored (a lost node's last step, counted without a loss): it
// round-trips, and a damaged value fails the segment's CRC.
TEST_F(CheckpointErrorTest, TheSegmentsUnscoredCountRoundTripsAndIsCoveredByItsCrc) {
  State s = small_state(0x5566778899aabbccull);
  s.position.replica_clocks = {700, 700};
  s.position.segment = {600, 9000, 2, 32, 100, 20000, 1.5, 17000};
  s.position.segment.epoch_unscored = 0x0000777766665555ull;
  write(path("unscored.troupe"), s);
  EXPECT_EQ(read(path("unscored.troupe")).position.segment.epoch_unscored, 0x0000777766665555ull);
  const std::string error = error_after("unscored-damaged.troupe", s, [&](std::string& b) {
    b[find_or_fail(b, bytes_of(s.position.segment.epoch_unscored)) + 1] ^= 0x01;
  });
  EXPECT_NE(error.find("data segment CRC mismatch"), std::string::npos) << error;
}

TEST_F(CheckpointErrorTest, ChunkBytesMustMatchTheElementCount) {
  // The count appears twice: model.parameterCount, then the buffer's elementCount.
  const std::uint64_t count = 123457;
  State s = small_state(1, count);
  std::string error = error_after("count.troupe", s, [&](std::string& b) {
    std::size_t first = find_or_fail(b, bytes_of(count));
    std::size_t second = find_or_fail(b, bytes_of(count), first + 8);
    std::uint64_t wrong = count - 1;
    b.replace(second, 8, bytes_of(wrong));
  });
  EXPECT_NE(error.find(path("count.troupe")), std::string::npos) << error;
  EXPECT_NE(error.find("parameters declares 123456 float32 elements (493824 bytes), but its 1 chunks hold "
                       "493828 bytes"),
            std::string::npos)
      << error;

  error = error_after("huge.troupe", s, [&](std::string& b) {
    std::size_t first = find_or_fail(b, bytes_of(count));
    std::size_t second = find_or_fail(b, bytes_of(count), first + 8);
    std::uint64_t huge = std::uint64_t{1} << 60;
    b.replace(second, 8, bytes_of(huge));
  });
  EXPECT_NE(error.find("more than the"), std::string::npos) << error;

  error = error_after("param-count.troupe", s, [&](std::string& b) {
    std::uint64_t wrong = 99;
    b.replace(find_or_fail(b, bytes_of(count)), 8, bytes_of(wrong));
  });
  EXPECT_NE(error.find(path("param-count.troupe")), std::string::npos) << error;
  EXPECT_NE(error.find("model.parameterCount is 99 but the parameter buffer holds 123457"), std::string::npos) << error;
}

TEST_F(CheckpointErrorTest, NewerFormatVersionIsRefused) {
  const std::string error = error_after("future.troupe", small_state(1), [&](std::string& b) {
    // Root struct data starts after the 8-byte segment table and the 8-byte
    // root pointer; formatVersion is its first UInt32.
    std::uint32_t version = 0;
    std::memcpy(&version, b.data() + 16, 4);
    ASSERT_EQ(version, format_version());
    version = 7;
    std::memcpy(b.data() + 16, &version, 4);
  });
  EXPECT_NE(error.find(path("future.troupe")), std::string::npos) << error;
  EXPECT_NE(error.find("format version 7"), std::string::npos) << error;
  EXPECT_NE(error.find("newer than this build"), std::string::npos) << error;
}

TEST_F(CheckpointErrorTest, GarbageIsNotACheckpoint) {
  std::mt19937 rng(1234);
  std::string random(10000, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  for (const std::string& bytes :
       {random, std::string("hello, this is a text file, not a checkpoint\n"), std::string(64, '\0'),
        std::string(4096, '\xff'), std::string(8, '\0'), std::string(16, '\0')}) {
    const std::string file = path("garbage.troupe");
    write_bytes(file, bytes);
    const std::string error = message_of([&] { read(file); });
    EXPECT_NE(error.find(file), std::string::npos) << error;
    EXPECT_NE(error.find("not a troupe checkpoint"), std::string::npos) << error;
  }
}

TEST_F(CheckpointErrorTest, EmptyFileIsReported) {
  const std::string file = path("empty.troupe");
  write_bytes(file, "");
  const std::string error = message_of([&] { read(file); });
  EXPECT_NE(error.find(file), std::string::npos) << error;
  EXPECT_NE(error.find("empty file"), std::string::npos) << error;
}

TEST_F(CheckpointErrorTest, MissingFileIsReported) {
  const std::string file = path("missing.troupe");
  const std::string error = message_of([&] { read(file); });
  EXPECT_NE(error.find(file), std::string::npos) << error;
  EXPECT_NE(error.find(std::strerror(ENOENT)), std::string::npos) << error;
}

TEST_F(CheckpointErrorTest, ForeignCapnpMessagesAreNotCheckpoints) {
  const std::string file = path("foreign.capnp");
  auto write_message = [&](capnp::MessageBuilder& message) {
    auto words = capnp::messageToFlatArray(message);
    auto bytes = words.asBytes();
    write_bytes(file, std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
  };
  {  // capnp's own schema.Node: its first pointer is Text, so a readable wrong magic
    capnp::MallocMessageBuilder message;
    auto node = message.initRoot<capnp::schema::Node>();
    node.setDisplayName("foo.capnp:Bar");
    node.setId(0x1234);
    write_message(message);
    const std::string error = message_of([&] { read(file); });
    EXPECT_NE(error.find(file), std::string::npos) << error;
    EXPECT_NE(error.find("not a troupe checkpoint (magic is 'foo.capnp:Bar'"), std::string::npos) << error;
  }
  {  // a Node without displayName: its first pointer is null, so no magic
    capnp::MallocMessageBuilder message;
    auto node = message.initRoot<capnp::schema::Node>();
    node.initParameters(0);
    write_message(message);
    const std::string error = message_of([&] { read(file); });
    EXPECT_NE(error.find(file), std::string::npos) << error;
    EXPECT_NE(error.find("not a troupe checkpoint (no checkpoint magic)"), std::string::npos) << error;
  }
  {  // a root that is a list, not a struct (Cap'n Proto itself objects)
    capnp::MallocMessageBuilder message;
    message.getRoot<capnp::AnyPointer>().initAs<capnp::List<std::uint64_t>>(3);
    write_message(message);
    const std::string error = message_of([&] { read(file); });
    EXPECT_NE(error.find(file), std::string::npos) << error;
    EXPECT_NE(error.find("not a troupe checkpoint"), std::string::npos) << error;
  }
}

TEST_F(CheckpointErrorTest, ModelMismatchNamesBothModels) {
  const std::string file = path("cnn.troupe");
  State s = small_state(1, 10);
  s.model.name = "cnn";
  write(file, s);
  State r = read(file);
  EXPECT_EQ(message_of([&] { check_model(r, file, "mlp"); }),
            "checkpoint " + file + " is for model 'cnn', but 'mlp' was requested");
  EXPECT_EQ(message_of([&] { check_model(r, file, "cnn", 11); }),
            "checkpoint " + file + " has 10 parameters, but model 'cnn' has 11");
  EXPECT_NO_THROW(check_model(r, file, "cnn", 10));
}

TEST_F(CheckpointErrorTest, DuplicateOptimizerBufferNamesAreRefusedOnWrite) {
  const std::string file = path("dup.troupe");
  State s = small_state(1, 10);
  s.optimizer.buffers = {{"m", {1.0f}}, {"m", {2.0f}}};
  const std::string error = message_of([&] { write(file, s); });
  EXPECT_NE(error.find(file), std::string::npos) << error;
  EXPECT_NE(error.find("'m' appears twice"), std::string::npos) << error;
  EXPECT_TRUE(files().empty());
}

TEST_F(CheckpointErrorTest, ErrorsCarryThePath) {
  const std::string file = path("missing.troupe");
  try {
    read(file);
    FAIL() << "no exception";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.path(), file);
  }
}

}  // namespace
}  // namespace troupe::checkpoint
