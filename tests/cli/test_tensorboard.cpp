// TensorBoard event files (models/tensorboard.hpp), read back by a reader
// written here from the formats' specs alone: TFRecord frames with both
// masked CRC-32Cs (a bit-by-bit CRC, not util/crc32c), protobuf fields
// decoded by number. The encoder is checked against bytes worked out by hand,
// and real `troupe train --tensorboard` runs (the actor runtime on two CPU
// devices, and the single-replica trainer) against their own metrics CSV.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "models/tensorboard.hpp"

namespace {

namespace fs = std::filesystem;
using troupe::models::TensorBoardLog;

// ---- an independent reader ----------------------------------------------------

std::uint32_t crc32c_bitwise(const std::string& bytes) {
  std::uint32_t crc = ~0u;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}
std::uint32_t masked(std::uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::uint64_t le(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Every complete record's data; stops at a truncated one (as TensorBoard does),
// fails the test on a bad CRC.
std::vector<std::string> read_records(const std::string& file, bool* truncated = nullptr) {
  std::vector<std::string> out;
  std::size_t at = 0;
  if (truncated) *truncated = false;
  while (at < file.size()) {
    if (file.size() - at < 12) break;
    const std::uint64_t length = le(file, at, 8);
    EXPECT_EQ(le(file, at + 8, 4), masked(crc32c_bitwise(file.substr(at, 8)))) << "length CRC at offset " << at;
    if (file.size() - at - 12 < length + 4) break;
    const std::string data = file.substr(at + 12, length);
    EXPECT_EQ(le(file, at + 12 + length, 4), masked(crc32c_bitwise(data))) << "data CRC at offset " << at;
    out.push_back(data);
    at += 12 + length + 4;
  }
  if (truncated) *truncated = at != file.size();
  return out;
}

// One protobuf field: number, wire type and its value (varint / fixed bits,
// or the bytes of a length-delimited field).
struct Field {
  int number = 0, type = 0;
  std::uint64_t bits = 0;
  std::string bytes;
};

std::uint64_t varint(const std::string& s, std::size_t& at) {
  std::uint64_t v = 0;
  for (int shift = 0; at < s.size() && shift < 64; shift += 7) {
    const auto b = static_cast<unsigned char>(s[at++]);
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  ADD_FAILURE() << "bad varint";
  return v;
}

std::vector<Field> fields(const std::string& message) {
  std::vector<Field> out;
  std::size_t at = 0;
  while (at < message.size()) {
    Field f;
    const std::uint64_t key = varint(message, at);
    f.number = static_cast<int>(key >> 3);
    f.type = static_cast<int>(key & 7);
    if (f.type == 0)
      f.bits = varint(message, at);
    else if (f.type == 1)
      f.bits = le(message, at, 8), at += 8;
    else if (f.type == 5)
      f.bits = le(message, at, 4), at += 4;
    else if (f.type == 2) {
      const std::uint64_t n = varint(message, at);
      f.bytes = message.substr(at, n);
      at += n;
    } else {
      ADD_FAILURE() << "wire type " << f.type;
      break;
    }
    out.push_back(f);
  }
  return out;
}

const Field* field(const std::vector<Field>& fs_, int number) {
  for (const auto& f : fs_)
    if (f.number == number) return &f;
  return nullptr;
}

// An Event, as far as troupe writes them.
struct Event {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version, tag, text, plugin;
  bool has_value = false;
  float value = 0;
};

Event decode_event(const std::string& data) {
  Event e;
  const auto ev = fields(data);
  if (const Field* f = field(ev, 1)) std::memcpy(&e.wall_time, &f->bits, 8);
  if (const Field* f = field(ev, 2)) e.step = static_cast<std::int64_t>(f->bits);
  if (const Field* f = field(ev, 3)) e.file_version = f->bytes;
  if (const Field* summary = field(ev, 5)) {
    const auto values = fields(summary->bytes);
    EXPECT_EQ(values.size(), 1u);
    const auto v = fields(field(values, 1)->bytes);  // Summary.value
    e.tag = field(v, 1)->bytes;
    if (const Field* f = field(v, 2)) {
      EXPECT_EQ(f->type, 5);
      const auto bits = static_cast<std::uint32_t>(f->bits);
      std::memcpy(&e.value, &bits, 4);
      e.has_value = true;
    }
    if (const Field* tensor = field(v, 8)) {
      const auto t = fields(tensor->bytes);
      EXPECT_EQ(field(t, 1)->bits, 7u);   // DT_STRING
      EXPECT_EQ(field(t, 2)->bytes, "");  // a scalar: no dimensions
      e.text = field(t, 8)->bytes;
    }
    if (const Field* meta = field(v, 9)) e.plugin = field(fields(field(fields(meta->bytes), 1)->bytes), 1)->bytes;
  }
  return e;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string the_event_file(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) found.push_back(entry.path().string());
  EXPECT_EQ(found.size(), 1u) << dir;
  return found.empty() ? "" : found[0];
}

std::string temp(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("troupe_tensorboard_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// ---- the encoder, by hand -----------------------------------------------------------

std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) out += std::string{digits[c >> 4], digits[c & 15]};
  return out;
}

TEST(TensorBoard, ProtobufFieldsMatchTheEncodingSpec) {
  namespace pb = troupe::models::protobuf;
  std::string s;
  pb::put_varint_field(s, 2, 300);  // key (2 << 3 | 0) = 0x10, 300 = ac 02
  EXPECT_EQ(hex(s), "10ac02");
  s.clear();
  pb::put_bytes_field(s, 3, "brain.Event:2");  // key 0x1a, length 13
  EXPECT_EQ(hex(s), "1a0d" + hex("brain.Event:2"));
  s.clear();
  pb::put_double_field(s, 1, 1.0);  // key 0x09, 1.0 = 0x3ff0000000000000 little-endian
  EXPECT_EQ(hex(s), "09000000000000f03f");
  s.clear();
  pb::put_float_field(s, 2, 1.0f);  // key 0x15, 1.0f = 0x3f800000 little-endian
  EXPECT_EQ(hex(s), "150000803f");
  s.clear();
  pb::put_varint_field(s, 2, static_cast<std::uint64_t>(std::int64_t{-1}));  // int64 -1: ten bytes
  EXPECT_EQ(hex(s), "10ffffffffffffffffff01");
}

TEST(TensorBoard, RecordsCarryBothMaskedCrcs) {
  // CRC-32C check value, masked by hand: crc32c("123456789") = 0xe3069283.
  EXPECT_EQ(crc32c_bitwise("123456789"), 0xe3069283u);
  EXPECT_EQ(troupe::models::tfevents::masked_crc32c("123456789", 9), masked(0xe3069283u));
  const std::string record = troupe::models::tfevents::frame_record("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(le(record, 0, 8), 3u);
  EXPECT_EQ(read_records(record), std::vector<std::string>{"abc"});
}

TEST(TensorBoard, ACutRecordLosesOnlyItselfAndModesAreNumbers) {
  const std::string dir = temp("cut");
  std::string path;
  {
    TensorBoardLog log(dir, 10);
    path = log.path();
    log.set_job("model = \"mlp\"", "ssp:3", 4);
    log.epoch_begin(0.5f);
    troupe::models::StepEnd e;
    e.step = 10;
    e.loss = 2.0;
    e.accuracy = 0.75;
    e.samples_per_s = 100;
    e.lr = 0.5f;
    log.step_end(e);
    log.record_mode_history({"ssp:3@0", "sync@7", "resumed from x@1"});
  }
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
  std::string file = slurp(path);
  std::vector<Event> events;
  for (const auto& r : read_records(file)) events.push_back(decode_event(r));
  ASSERT_GE(events.size(), 7u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  std::map<std::string, std::vector<std::pair<std::int64_t, float>>> by_tag;
  for (const auto& e : events)
    if (e.has_value) by_tag[e.tag].push_back({e.step, e.value});
  EXPECT_EQ(events[1].tag, "job/config");
  EXPECT_EQ(events[1].plugin, "text");
  EXPECT_NE(events[1].text.find("model = \"mlp\""), std::string::npos);
  EXPECT_EQ(events[1].step, 9);  // the step before the first one reported
  const std::vector<std::pair<std::int64_t, float>> modes{{9, 5.0f}, {7, 0.0f}};  // ssp:3 = 2 + 3, then sync
  EXPECT_EQ(by_tag["job/mode"], modes);
  EXPECT_EQ(by_tag["job/world_size"].at(0).second, 4.0f);
  EXPECT_EQ(by_tag["train/learning_rate"].at(0), (std::pair<std::int64_t, float>{10, 0.5f}));
  EXPECT_EQ(by_tag["train/accuracy"].at(0), (std::pair<std::int64_t, float>{10, 0.75f}));

  // A crash mid-record: every earlier record still reads, with good CRCs.
  const std::size_t records = events.size();
  file.resize(file.size() - 5);
  bool truncated = false;
  EXPECT_EQ(read_records(file, &truncated).size(), records - 1);
  EXPECT_TRUE(truncated);
  EXPECT_THROW(troupe::models::mode_number("fast"), std::invalid_argument);
}

// ---- a real run against its metrics CSV ----------------------------------------------

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

// `steps`: 60 ends an epoch (one replica: 60 steps of 1000; two: 30 of
// 2 x 1000); 50 ends the job mid-epoch, whose final evaluation must be
// there too.
void check_run_against_csv(const std::string& devices, std::int64_t limit = 60) {
  const std::string dir = temp((devices == "cpu:0" ? "single" : "job") + std::to_string(limit));
  const std::string csv = dir + "/m.csv", tb = dir + "/tb", log = dir + "/log";
  const std::string cmd = std::string(TROUPE_BINARY) + " train --model mlp --steps " + std::to_string(limit) +
                          " --log-every 20 --epochs 2 --batch 1000 --devices " + devices + " --metrics " + csv +
                          " --tensorboard " + tb + " > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(log);

  std::map<std::string, std::vector<std::pair<std::int64_t, float>>> by_tag;
  std::vector<Event> events;
  for (const auto& r : read_records(slurp(the_event_file(tb)))) events.push_back(decode_event(r));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  bool config = false;
  for (const auto& e : events) {
    EXPECT_GT(e.wall_time, 1.5e9);
    if (e.has_value) by_tag[e.tag].push_back({e.step, e.value});
    if (e.tag == "job/config") config = e.plugin == "text" && e.text.find("model = \"mlp\"") != std::string::npos;
  }
  EXPECT_TRUE(config) << "no text summary of the job";
  ASSERT_EQ(by_tag["job/mode"].size(), 1u);
  EXPECT_EQ(by_tag["job/mode"][0], (std::pair<std::int64_t, float>{0, 0.0f}));
  EXPECT_EQ(by_tag["job/world_size"].at(0).second, devices == "cpu:0" ? 1.0f : 2.0f);

  // Each CSV row's figures at its step (the CSV prints 6 significant digits).
  auto near = [](float tb_value, const std::string& csv_text) {
    const double v = std::stod(csv_text);
    return std::fabs(tb_value - v) <= 1e-5 * std::max(1.0, std::fabs(v));
  };
  auto expect_point = [&](const std::string& tag, std::int64_t step, const std::string& text) {
    bool found = false;
    for (const auto& [s, v] : by_tag[tag])
      if (s == step && near(v, text)) found = true;
    EXPECT_TRUE(found) << tag << " at step " << step << " = " << text << " missing";
  };
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  ASSERT_EQ(line,
            "kind,epoch,step,loss,accuracy,samples_per_s,lr,test_loss,test_accuracy,test_top5,test_mae,seconds,world");
  int steps = 0, epochs = 0, evaluations = 0, train_accuracy = 0;
  while (std::getline(in, line)) {
    const auto c = split(line);
    ASSERT_EQ(c.size(), 13u) << line;
    EXPECT_EQ(c[12], devices == "cpu:0" ? "1" : "2") << line;  // the world: replicas
    EXPECT_GE(std::stod(c[11]), 0.0) << line;                  // seconds since the start
    EXPECT_EQ(c[10], "") << line;                              // test_mae: a classifier has none
    const std::int64_t step = std::stoll(c[2]);
    if (c[0] == "eval") {
      // Every evaluation of the actor runtime (here: the epoch ends).
      ++evaluations;
      expect_point("test/accuracy", step, c[8]);
      expect_point("test/loss", step, c[7]);
      continue;
    }
    expect_point("train/loss", step, c[3]);
    expect_point("train/learning_rate", step, c[6]);
    // samples/s: the CSV rounds it to 0.1
    bool rate = false;
    for (const auto& [s, v] : by_tag["train/samples_per_s"])
      if (s == step && std::fabs(v - std::stod(c[5])) <= 0.05 + 1e-6 * v) rate = true;
    EXPECT_TRUE(rate) << "samples/s at " << step;
    if (c[0] == "step") {
      ++steps;
      expect_point("train/accuracy", step, c[4]);  // the epoch's so far
    } else {
      ++epochs;
      if (!c[4].empty()) {  // empty where not measured
        expect_point("train/accuracy", step, c[4]);
        ++train_accuracy;
      }
      expect_point("test/loss", step, c[7]);
      expect_point("test/accuracy", step, c[8]);
      expect_point("test/top5", step, c[9]);
    }
  }
  const std::int64_t per_epoch = devices == "cpu:0" ? 60 : 30;
  const bool mid_epoch = limit % per_epoch != 0;
  EXPECT_EQ(steps, limit / 20);  // 20, 40, 60
  EXPECT_EQ(epochs, limit / per_epoch);
  // The single-replica trainer has no on_evaluate; the actor runtime writes
  // an "eval" row at each epoch end here.
  EXPECT_EQ(evaluations, devices == "cpu:0" ? 0 : epochs);
  EXPECT_EQ(by_tag["train/loss"].size(), static_cast<std::size_t>(steps + epochs));
  EXPECT_EQ(by_tag["train/accuracy"].size(), static_cast<std::size_t>(steps + train_accuracy));
  // Every evaluation, and a job ended mid-epoch by --steps evaluates once
  // more at its last step: the test accuracy it prints.
  ASSERT_EQ(by_tag["test/accuracy"].size(), static_cast<std::size_t>(epochs + (mid_epoch ? 1 : 0)));
  const auto last = by_tag["test/accuracy"].back();
  EXPECT_EQ(last.first, limit);
  const std::string out = slurp(log);
  const auto at = out.rfind("test accuracy ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_NEAR(last.second, std::stod(out.substr(at + 14, 6)), 6e-5) << out;
}

TEST(TensorBoardCli, TheActorRuntimesEventsMatchItsMetricsCsv) { check_run_against_csv("cpu:0,cpu:1"); }

TEST(TensorBoardCli, TheSingleReplicaTrainersEventsMatchItsMetricsCsv) { check_run_against_csv("cpu:0"); }

TEST(TensorBoardCli, AJobEndedMidEpochByStepsHasItsFinalEvaluation) {
  check_run_against_csv("cpu:0,cpu:1", 50);
  check_run_against_csv("cpu:0", 50);
}

// The job file's `tensorboard` key (a one-node `troupe node` coordinator)
// and a mode switch written as it happens, at the step it took effect.
TEST(TensorBoard, JobFileKeyAndALiveModeSwitch) {
  const std::string dir = temp("node");
  const std::string tb = dir + "/tb", log = dir + "/log", job = dir + "/job.toml";
  std::ofstream(job) << "model = \"mlp\"\nbatch = 100\nsteps = 40\nswitch = \"20:async\"\ntensorboard = \"" << tb
                     << "\"\n";
  const std::string cmd = std::string(TROUPE_BINARY) +
                          " node --listen 127.0.0.1:0 --min-nodes 1 --devices cpu:0,cpu:1 --job " + job + " > " + log +
                          " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(log);
  std::vector<std::pair<std::int64_t, float>> modes;
  for (const auto& r : read_records(slurp(the_event_file(tb)))) {
    const Event e = decode_event(r);
    if (e.has_value && e.tag == "job/mode") modes.push_back({e.step, e.value});
  }
  ASSERT_EQ(modes.size(), 2u) << slurp(log);
  EXPECT_EQ(modes[0], (std::pair<std::int64_t, float>{0, 0.0f}));   // sync from the start
  EXPECT_EQ(modes[1], (std::pair<std::int64_t, float>{20, 1.0f}));  // async from step 20
}

}  // namespace
