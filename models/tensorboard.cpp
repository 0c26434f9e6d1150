// TensorBoard event files (tensorboard.hpp): a protobuf encoder for the few
// messages needed, TFRecord framing, and the callbacks that feed them.
#include "models/tensorboard.hpp"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "util/crc32c.hpp"

namespace troupe::models {

// ---- protobuf wire format ------------------------------------------------------

namespace protobuf {

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, int field, WireType type) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(type));
}

void put_varint_field(std::string& out, int field, std::uint64_t v) {
  put_key(out, field, varint);
  put_varint(out, v);
}

namespace {
template <typename Bits>
void put_little_endian(std::string& out, Bits bits) {
  for (std::size_t i = 0; i < sizeof bits; ++i) out.push_back(static_cast<char>(bits >> (8 * i)));
}
}  // namespace

void put_double_field(std::string& out, int field, double v) {
  put_key(out, field, fixed64);
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_little_endian(out, bits);
}

void put_float_field(std::string& out, int field, float v) {
  put_key(out, field, fixed32);
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_little_endian(out, bits);
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, length_delimited);
  put_varint(out, bytes.size());
  out += bytes;
}

}  // namespace protobuf

// ---- TFRecords and Event messages ------------------------------------------------

namespace tfevents {

std::uint32_t masked_crc32c(const void* data, std::size_t bytes) {
  const std::uint32_t crc = util::crc32c(data, bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string frame_record(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(data.size()) >> (8 * i));
  out.append(reinterpret_cast<const char*>(length), 8);
  const std::uint32_t length_crc = masked_crc32c(length, 8);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(length_crc >> (8 * i)));
  out += data;
  const std::uint32_t data_crc = masked_crc32c(data.data(), data.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(data_crc >> (8 * i)));
  return out;
}

// Field numbers, from tensorboard/compat/proto: event.proto (Event),
// summary.proto (Summary, Summary.Value, SummaryMetadata, PluginData),
// tensor.proto (TensorProto), types.proto (DT_STRING = 7).
namespace {
enum EventField { wall_time = 1, step = 2, file_version = 3, summary = 5 };
enum SummaryField { value = 1 };
enum ValueField { tag = 1, simple_value = 2, tensor = 8, metadata = 9 };
enum MetadataField { plugin_data = 1 };
enum PluginDataField { plugin_name = 1 };
enum TensorField { dtype = 1, tensor_shape = 2, string_val = 8 };
constexpr int dt_string = 7;

std::string event_with_value(double wall, std::int64_t at, const std::string& value_message) {
  std::string summary_message;
  protobuf::put_bytes_field(summary_message, SummaryField::value, value_message);
  std::string event;
  protobuf::put_double_field(event, EventField::wall_time, wall);
  protobuf::put_varint_field(event, EventField::step, static_cast<std::uint64_t>(at));
  protobuf::put_bytes_field(event, EventField::summary, summary_message);
  return event;
}
}  // namespace

std::string file_version_event(double wall) {
  std::string event;
  protobuf::put_double_field(event, EventField::wall_time, wall);
  protobuf::put_bytes_field(event, EventField::file_version, "brain.Event:2");
  return event;
}

std::string scalar_event(double wall, std::int64_t at, const std::string& name, float v) {
  std::string value_message;
  protobuf::put_bytes_field(value_message, ValueField::tag, name);
  protobuf::put_float_field(value_message, ValueField::simple_value, v);
  return event_with_value(wall, at, value_message);
}

std::string text_event(double wall, std::int64_t at, const std::string& name, const std::string& text) {
  std::string plugin;
  protobuf::put_bytes_field(plugin, PluginDataField::plugin_name, "text");
  std::string meta;
  protobuf::put_bytes_field(meta, MetadataField::plugin_data, plugin);
  std::string tensor_message;
  protobuf::put_varint_field(tensor_message, TensorField::dtype, dt_string);
  protobuf::put_bytes_field(tensor_message, TensorField::tensor_shape, "");  // no dimensions: a scalar
  protobuf::put_bytes_field(tensor_message, TensorField::string_val, text);
  std::string value_message;
  protobuf::put_bytes_field(value_message, ValueField::tag, name);
  protobuf::put_bytes_field(value_message, ValueField::tensor, tensor_message);
  protobuf::put_bytes_field(value_message, ValueField::metadata, meta);
  return event_with_value(wall, at, value_message);
}

}  // namespace tfevents

double mode_number(const std::string& mode) {
  if (mode == "sync") return 0;
  if (mode == "async") return 1;
  if (mode.rfind("ssp:", 0) == 0 && mode.size() > 4 && mode.find_first_not_of("0123456789", 4) == std::string::npos)
    return 2 + std::stod(mode.substr(4));
  throw std::invalid_argument("mode_number: '" + mode + "' is not sync, async or ssp:N");
}

// ---- the file ----------------------------------------------------------------------

namespace {
double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

EventFile::EventFile(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("tensorboard: cannot create the folder " + dir + ": " + ec.message());
  char host[256] = "localhost";
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  host[sizeof host - 1] = '\0';
  const double now = unix_time();
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<long long>(now)) + "." +
                                         host + "." + std::to_string(::getpid())))
              .string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("tensorboard: cannot create " + path_ + ": " + std::strerror(errno));
  append(tfevents::file_version_event(now));
}

EventFile::~EventFile() {
  if (fd_ < 0) return;
  ::fdatasync(fd_);
  ::close(fd_);
}

void EventFile::append(const std::string& event) {
  // One write() per record: O_APPEND puts it at the end in one piece, so a
  // crash leaves at most this record cut short (see the header).
  const std::string record = tfevents::frame_record(event);
  for (;;) {
    const ssize_t n = ::write(fd_, record.data(), record.size());
    if (n == static_cast<ssize_t>(record.size())) return;
    if (n < 0 && errno == EINTR) continue;
    // A short write (disk full) leaves a truncated record that readers stop
    // at; writing its rest later would not make it whole, so stop here.
    throw std::runtime_error("tensorboard: writing " + path_ +
                             " failed: " + (n < 0 ? std::strerror(errno) : "short write (disk full?)"));
  }
}

void EventFile::scalar(const std::string& tag, std::int64_t step, double value) {
  append(tfevents::scalar_event(unix_time(), step, tag, static_cast<float>(value)));
}

void EventFile::text(const std::string& tag, std::int64_t step, const std::string& text) {
  append(tfevents::text_event(unix_time(), step, tag, text));
}

void EventFile::flush() {
  if (::fdatasync(fd_) != 0 && errno != EINVAL)
    throw std::runtime_error("tensorboard: flushing " + path_ + " failed: " + std::strerror(errno));
}

// ---- what troupe plots ------------------------------------------------------------------

TensorBoardLog::TensorBoardLog(const std::string& dir, std::int64_t log_every) : file_(dir), log_every_(log_every) {}

void TensorBoardLog::set_job(const std::string& config_text, const std::string& mode, std::int64_t world_size) {
  mode_number(mode);  // a bad mode fails here, not in the middle of training
  config_text_ = config_text;
  mode_ = mode;
  world_size_ = world_size;
}

void TensorBoardLog::start(std::int64_t step) {
  if (started_) return;
  started_ = true;
  start_step_ = step;
  if (!config_text_.empty()) {
    // The text plugin renders Markdown: indented lines are shown verbatim.
    std::string shown;
    std::size_t from = 0;
    while (from < config_text_.size()) {
      std::size_t to = config_text_.find('\n', from);
      if (to == std::string::npos) to = config_text_.size();
      shown += "    " + config_text_.substr(from, to - from) + "\n";
      from = to + 1;
    }
    file_.text("job/config", step, shown);
  }
  if (!mode_.empty()) file_.scalar("job/mode", step, mode_number(mode_));
  if (world_size_ > 0) file_.scalar("job/world_size", step, static_cast<double>(world_size_));
}

void TensorBoardLog::epoch_begin(float lr) { lr_ = lr; }

void TensorBoardLog::step_end(const StepEnd& e) {
  start(e.step - 1);
  if (log_every_ <= 0 || e.step % log_every_ != 0) return;
  file_.scalar("train/loss", e.step, e.loss);
  if (!std::isnan(e.accuracy)) file_.scalar("train/accuracy", e.step, e.accuracy);
  file_.scalar("train/samples_per_s", e.step, e.samples_per_s);
  file_.scalar("train/learning_rate", e.step, e.lr);
}

void TensorBoardLog::evaluation(const EpochResult& r) {
  start(r.step);
  if (r.step == last_test_step_) return;  // an epoch end comes through both hooks
  last_test_step_ = r.step;
  // NaN: not measured (no test data; top-5 of a regression).
  if (!std::isnan(r.test_loss)) file_.scalar("test/loss", r.step, r.test_loss);
  if (!std::isnan(r.test_accuracy)) file_.scalar("test/accuracy", r.step, r.test_accuracy);
  if (!std::isnan(r.test_top5)) file_.scalar("test/top5", r.step, r.test_top5);
}

void TensorBoardLog::final_evaluation(const EpochResult& r) {
  evaluation(r);
  file_.flush();
}

void TensorBoardLog::epoch_end(const EpochResult& r) {
  start(r.step);
  file_.scalar("train/loss", r.step, r.train_loss);
  if (!std::isnan(r.train_accuracy)) file_.scalar("train/accuracy", r.step, r.train_accuracy);
  file_.scalar("train/samples_per_s", r.step, r.samples_per_s);
  file_.scalar("train/learning_rate", r.step, r.lr);
  evaluation(r);
  file_.flush();
}

void TensorBoardLog::watch(Callbacks& cb) {
  cb.on_epoch_begin = [this, next = cb.on_epoch_begin](std::int64_t epoch, std::int64_t steps, float lr) {
    epoch_begin(lr);
    if (next) next(epoch, steps, lr);
  };
  cb.on_step_end = [this, next = cb.on_step_end](const StepEnd& e) {
    step_end(e);
    if (next) next(e);
  };
  cb.on_epoch_end = [this, next = cb.on_epoch_end](const EpochResult& r) {
    epoch_end(r);
    if (next) next(r);
  };
  cb.on_mode_switch = [this, next = cb.on_mode_switch](std::int64_t step, const std::string& mode) {
    mode_switch(step, mode);
    if (next) next(step, mode);
  };
  cb.on_evaluate = [this, next = cb.on_evaluate](const EpochResult& r) {
    evaluation(r);
    if (next) next(r);
  };
  // Membership changes: the world size from the view's first step on.
  cb.on_view_change = [this, next = cb.on_view_change](std::int64_t step, int view, int world, std::int64_t steps) {
    file_.scalar("job/world_size", step, static_cast<double>(world));
    file_.scalar("job/view", step, static_cast<double>(view));
    file_.flush();
    if (next) next(step, view, world, steps);
  };
}

void TensorBoardLog::mode_switch(std::int64_t step, const std::string& mode) {
  live_switches_ = true;
  mode_ = mode;
  file_.scalar("job/mode", step, mode_number(mode));
  file_.flush();  // a switch is rare and worth seeing at once
}

void TensorBoardLog::record_mode_history(const std::vector<std::string>& history) {
  if (live_switches_) return;
  std::string last = mode_;
  for (const std::string& entry : history) {
    const std::size_t at = entry.rfind('@');
    if (at == std::string::npos || entry.find(' ') != std::string::npos) continue;
    const std::string mode = entry.substr(0, at);
    const std::string step_text = entry.substr(at + 1);
    if (step_text.empty() || step_text.find_first_not_of("0123456789") != std::string::npos) continue;
    double number = 0;
    try {
      number = mode_number(mode);
    } catch (const std::invalid_argument&) {
      continue;
    }
    if (mode == last) continue;
    last = mode;
    file_.scalar("job/mode", std::stoll(step_text), number);
  }
  file_.flush();
}

}  // namespace troupe::models
