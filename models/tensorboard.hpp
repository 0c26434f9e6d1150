// TensorBoard event files: what `troupe train --tensorboard DIR`, the
// coordinator of `troupe node --tensorboard DIR` and the C++ API's
// troupe::TensorBoard(dir) write, so that `tensorboard --logdir DIR` plots a
// run.
//
// The file, DIR/events.out.tfevents.<unix time>.<host>.<pid>, is a sequence
// of TFRecords, each
//
//   uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
//
// (little-endian; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), and each
// record's data is one tensorflow.Event protobuf message. The first event
// carries file_version "brain.Event:2"; the others a Summary with one value:
// a scalar (simple_value) or, for the job's configuration, a text summary
// (the "text" plugin: a scalar DT_STRING tensor).
//
// Protobuf encoding. The five messages needed (Event, Summary,
// Summary.Value, SummaryMetadata(.PluginData), TensorProto) use four wire
// types (varint, 64-bit, length-delimited, 32-bit); the encoder below is
// about forty lines and is tested against bytes worked out by hand from the
// protobuf encoding spec, and read back by an independent decoder in
// tests/cli/test_tensorboard.cpp. Debian's protobuf (protobuf-compiler,
// libprotobuf-dev) would instead add a code generator step, copies of
// tensorboard's .proto files (event.proto, summary.proto, tensor.proto,
// tensor_shape.proto, types.proto, resource_handle.proto) and a third
// serialisation library beside Cap'n Proto and CAF's, for writing only.
//
// Writing. The file is opened O_APPEND and each record goes out in ONE
// write() of the whole frame, so records never interleave and a crash (of
// the process, or of the machine before the page cache is flushed) can leave
// at most the last record cut short. A reader (TensorBoard's included)
// detects that by the length or the data CRC and stops there: every earlier
// record is intact. flush() (each epoch end, and close) fdatasync()s the
// file so that what was written survives a power loss.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/trainer.hpp"

namespace troupe::models {

namespace protobuf {
// Wire types (protobuf encoding spec).
enum WireType : int { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };
void put_varint(std::string& out, std::uint64_t v);
void put_key(std::string& out, int field, WireType type);
void put_varint_field(std::string& out, int field, std::uint64_t v);  // int64 as two's complement
void put_double_field(std::string& out, int field, double v);
void put_float_field(std::string& out, int field, float v);
void put_bytes_field(std::string& out, int field, const std::string& bytes);  // string, bytes, messages
}  // namespace protobuf

namespace tfevents {
// ((crc >> 15) | (crc << 17)) + 0xa282ead8
std::uint32_t masked_crc32c(const void* data, std::size_t bytes);
// One TFRecord: length, its masked CRC, data, its masked CRC.
std::string frame_record(const std::string& data);
// Encoded Event messages.
std::string file_version_event(double wall_time);
std::string scalar_event(double wall_time, std::int64_t step, const std::string& tag, float value);
std::string text_event(double wall_time, std::int64_t step, const std::string& tag, const std::string& text);
}  // namespace tfevents

// The number a mode is plotted as (tag "job/mode"): sync 0, async 1, ssp:N
// 2 + N. Throws std::invalid_argument for anything else.
double mode_number(const std::string& mode);

// One event file. Throws std::runtime_error naming the path when the folder
// or the file cannot be created, or a write fails.
class EventFile {
 public:
  // Creates `dir` (and its parents) and the file, and writes the
  // file_version event.
  explicit EventFile(const std::string& dir);
  ~EventFile();  // flushes
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  const std::string& path() const { return path_; }
  void scalar(const std::string& tag, std::int64_t step, double value);
  void text(const std::string& tag, std::int64_t step, const std::string& text);
  void flush();

 private:
  void append(const std::string& event);
  std::string path_;
  int fd_ = -1;
};

// What troupe plots, tag by tag (the step is always the global step, i.e.
// updates applied):
//   train/loss, train/accuracy, train/samples_per_s, train/learning_rate
//       every log_every steps (loss and accuracy there are the epoch's so far,
//       as the metrics CSV's step rows; the rate is that step's) and at each
//       epoch end (the epoch's); no accuracy for regression
//   test/loss, test/accuracy, test/top5   at every evaluation (epoch ends,
//       eval_every, and the final one of a job that --steps ended mid-epoch:
//       final_evaluation)
//   job/mode             at the start and at every mode switch (mode_number above)
//   job/world_size       at the start: the number of replicas (a cluster's
//                        coordinator: its view 0, once the nodes joined), and
//                        at every membership change (with job/view, the view's
//                        number)
//   job/config           a text summary: the job's configuration (job-file text)
// Mode switches are written as they happen (Callbacks::on_mode_switch); a
// runtime without that hook can hand its mode history over at the end
// (record_mode_history), each switch at the step it took effect.
class TensorBoardLog {
 public:
  TensorBoardLog(const std::string& dir, std::int64_t log_every);

  const std::string& path() const { return file_.path(); }
  // The job as it starts: written at the first step's start (the global
  // step before the first reported step, so a resumed run's come at its step).
  void set_job(const std::string& config_text, const std::string& mode, std::int64_t world_size);
  // Chains onto `cb`: on_epoch_begin, on_step_end, on_epoch_end and
  // on_evaluate record here and then call what was there before.
  void watch(Callbacks& cb);
  // Runtime mode history entries "sync@0", "async@500", ... (others, such as
  // "resumed from ...", are skipped); each becomes a job/mode point.
  void record_mode_history(const std::vector<std::string>& history);
  void flush() { file_.flush(); }

  // What watch() calls; the C++ API's callback calls them too.
  void epoch_begin(float lr);
  void step_end(const StepEnd& e);
  void evaluation(const EpochResult& r);
  void epoch_end(const EpochResult& r);
  void mode_switch(std::int64_t step, const std::string& mode);
  // The job's last evaluation (TrainResult::final, History::final): a job
  // that --steps ended mid-epoch evaluates once more at its end, which no
  // hook reports; at an epoch end it is the one already written.
  void final_evaluation(const EpochResult& r);

 private:
  bool live_switches_ = false;  // mode_switch() ran: the history at the end adds nothing
  void start(std::int64_t step);
  EventFile file_;
  std::int64_t log_every_;
  float lr_ = 0;
  bool started_ = false;
  std::int64_t start_step_ = 0;
  std::string config_text_, mode_;
  std::int64_t world_size_ = 0;
  std::int64_t last_test_step_ = -1;
};

}  // namespace troupe::models
