// Checkpoint files: State <-> one unpacked Cap'n Proto message (checkpoint.capnp).
//
// Write: the message is built in ONE segment sized from the state (so the
// file has a one-entry segment table and `capnp decode`, which refuses more
// than 512 segments, always reads it), serialized through our own fd sink
// (so errno reaches the error message), then fsync + rename + directory fsync.
// The parameters are copied once into the message: writing needs about the
// checkpoint's size in extra memory.
//
// Read: the file is read whole; its segment table is checked against the file
// size by hand before Cap'n Proto sees it (truncation, trailing bytes,
// garbage), then the message is decoded with a traversal limit of twice the
// file's words. Every chunk's size and CRC32 is checked before its bytes are
// used; a CRC over all other fields (metadataCrc32) is checked last. kj exceptions are caught at this file's boundary
// and become CheckpointError.
#include "models/checkpoint/checkpoint.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <kj/exception.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <string_view>

#include "kernels/config.hpp"  // TROUPE_VERSION
#include "models/checkpoint/checkpoint.capnp.h"
#include "util/writable_folder.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint chunks are little-endian float32 copied as raw bytes");
static_assert(sizeof(float) == 4, "float32 expected");

namespace troupe::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kChunkBytes = 16u << 20;   // 16 MiB, far below the 2^29 - 1 Data limit
constexpr std::size_t kMagicSearchBytes = 4096;  // the magic text sits right after the root struct
constexpr std::uint32_t kMaxSegments = 512;      // what capnp's stream reader accepts

std::function<int(const std::string&)>& fault_hook() {
  static std::function<int(const std::string&)> hook;
  return hook;
}

int injected_errno(const std::string& step) {
  auto& hook = fault_hook();
  return hook ? hook(step) : 0;
}

std::string errno_text(int error) { return std::strerror(error); }

[[noreturn]] void fail(const std::string& path, const std::string& reason) {
  throw CheckpointError(path, "checkpoint " + path + ": " + reason);
}

std::string kj_text(const kj::Exception& e) {
  std::string text(e.getDescription().cStr());
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::string parent_dir(const std::string& path) {
  std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// ---- writing ---------------------------------------------------------------

// A file descriptor closed on scope exit (errors from close on that path are
// ignored; the success path closes explicitly and checks).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// Writes all bytes to an fd, retrying short writes and EINTR. Throws
// CheckpointError naming `path` (the target, not the temp name) on failure.
class FdSink : public kj::OutputStream {
 public:
  FdSink(int fd, std::string path, std::size_t total_bytes)
      : fd_(fd), path_(std::move(path)), fault_at_(total_bytes / 2) {}

  void write(const void* buffer, size_t size) override {
    const char* bytes = static_cast<const char*>(buffer);
    while (size > 0) {
      std::size_t step = size;
      if (!fault_checked_) step = std::min(step, std::max<std::size_t>(fault_at_ - written_, 1));
      ssize_t n = ::write(fd_, bytes, step);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(path_, "cannot write: " + errno_text(errno));
      }
      bytes += n;
      size -= static_cast<std::size_t>(n);
      written_ += static_cast<std::size_t>(n);
      if (!fault_checked_ && written_ >= fault_at_) {
        fault_checked_ = true;
        if (int error = injected_errno("write")) fail(path_, "cannot write: " + errno_text(error));
      }
    }
  }

 private:
  int fd_;
  std::string path_;
  std::size_t fault_at_;
  std::size_t written_ = 0;
  bool fault_checked_ = false;
};

std::size_t text_words(const std::string& text) { return (text.size() + 1 + 7) / 8 + 1; }

std::size_t buffer_words(const std::string& name, std::size_t elements) {
  std::size_t bytes = elements * sizeof(float);
  std::size_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  // Buffer struct and its name, the chunk list tag, per chunk a struct
  // (1 data word, 1 pointer) and its data rounded up to words.
  return 8 + text_words(name) + 1 + chunks * 3 + (bytes + 7) / 8;
}

std::size_t estimate_words(const State& s) {
  std::size_t words = 256;  // root and nested structs, list tags
  for (const std::string* text : {&s.model.name, &s.model.spec, &s.optimizer.name, &s.optimizer.spec, &s.schedule.spec,
                                  &s.update_mode, &s.metrics_note}) {
    words += text_words(*text);
  }
  words += buffer_words("parameters", s.parameters.size());
  words += buffer_words("model state", s.model_state.size());
  for (const NamedBuffer& b : s.optimizer.buffers) words += buffer_words(b.name, b.values.size());
  for (const auto* scalars : {&s.optimizer.hyper_parameters, &s.optimizer.scalars}) {
    for (const auto& [key, value] : *scalars) words += 3 + text_words(key);
  }
  return words + 64;
}

void fill_buffer(schema::Buffer::Builder out, const std::string& name, const std::vector<float>& values) {
  out.setName(name);
  out.setElementCount(values.size());
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  std::size_t total = values.size() * sizeof(float);
  std::size_t count = (total + kChunkBytes - 1) / kChunkBytes;
  auto chunks = out.initChunks(static_cast<unsigned>(count));
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t offset = i * kChunkBytes;
    std::size_t size = std::min(kChunkBytes, total - offset);
    auto chunk = chunks[static_cast<unsigned>(i)];
    auto data = chunk.initData(static_cast<unsigned>(size));
    std::memcpy(data.begin(), bytes + offset, size);
    chunk.setCrc32(static_cast<std::uint32_t>(::crc32(0L, bytes + offset, static_cast<uInt>(size))));
  }
}

void fill_scalars(capnp::List<schema::Scalar>::Builder out, const std::map<std::string, double>& values) {
  unsigned i = 0;
  for (const auto& [key, value] : values) {
    out[i].setKey(key);
    out[i].setValue(value);
    ++i;
  }
}

// The fixed encoding Checkpoint.metadataCrc32 covers: the format version 1
// fields in schema order, integers as 8 little-endian bytes, doubles by their
// bits, strings and lists length first; buffers by name and element count
// (their bytes have per-chunk CRCs). Computed from a State, so writer and
// reader agree whatever the message layout.
class MetadataCrc {
 public:
  void add(std::uint64_t value) {
    unsigned char bytes[8];
    std::memcpy(bytes, &value, 8);
    crc_ = ::crc32(crc_, bytes, 8);
  }
  void add(const std::string& text) {
    add(std::uint64_t{text.size()});
    crc_ = ::crc32_z(crc_, reinterpret_cast<const Bytef*>(text.data()), text.size());
  }
  void add_double(double value) {
    std::uint64_t bits;
    std::memcpy(&bits, &value, 8);
    add(bits);
  }
  void add(const std::map<std::string, double>& values) {
    add(std::uint64_t{values.size()});
    for (const auto& [key, value] : values) {
      add(key);
      add_double(value);
    }
  }
  std::uint32_t value() const { return static_cast<std::uint32_t>(crc_); }

 private:
  uLong crc_ = ::crc32(0L, Z_NULL, 0);
};

std::uint32_t metadata_crc32(const State& s, std::uint32_t format_version, const std::string& troupe_version,
                             std::int64_t written_at_unix_ms) {
  MetadataCrc crc;
  crc.add(std::string(schema::MAGIC_TEXT.get().cStr()));
  crc.add(std::uint64_t{format_version});
  crc.add(troupe_version);
  crc.add(static_cast<std::uint64_t>(written_at_unix_ms));
  crc.add(s.model.name);
  crc.add(s.model.spec);
  crc.add(std::uint64_t{s.parameters.size()});
  crc.add(s.optimizer.name);
  crc.add(s.optimizer.spec);
  crc.add(s.optimizer.hyper_parameters);
  crc.add(std::uint64_t{s.optimizer.buffers.size()});
  for (const NamedBuffer& buffer : s.optimizer.buffers) {
    crc.add(buffer.name);
    crc.add(std::uint64_t{buffer.values.size()});
  }
  crc.add(s.optimizer.scalars);
  crc.add(s.position.global_step);
  crc.add(s.position.epoch);
  crc.add(s.position.cursor.epoch);
  crc.add(s.position.cursor.batch_in_epoch);
  crc.add(s.position.cursor.shuffle_seed);
  crc.add(s.schedule.spec);
  crc.add(s.schedule.evaluated_at_step);
  crc.add(s.schedule.evaluated_at_epoch);
  crc.add_double(s.schedule.learning_rate);
  crc.add(s.rng.seed);
  crc.add(s.rng.counter);
  crc.add(s.update_mode);
  crc.add(s.metrics_note);
  return crc.value();
}

std::uint32_t replica_clocks_crc32(const std::vector<std::uint64_t>& clocks) {
  MetadataCrc crc;
  crc.add(std::uint64_t{clocks.size()});
  for (std::uint64_t c : clocks) crc.add(c);
  return crc.value();
}

std::uint32_t segment_crc32(const Segment& g) {
  MetadataCrc crc;
  crc.add(g.start_clock);
  crc.add(g.offset);
  crc.add(std::uint64_t{g.world});
  crc.add(g.batch);
  crc.add(g.steps_before);
  crc.add(g.epoch_examples);
  crc.add_double(g.epoch_loss_sum);
  crc.add(g.epoch_correct);
  // Added after the other fields: in the check only when set, so files
  // written before it (where it reads as 0) keep their CRC.
  if (g.epoch_unscored != 0) crc.add(g.epoch_unscored);
  return crc.value();
}

std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void build_message(capnp::MessageBuilder& message, const State& s) {
  auto root = message.initRoot<schema::Checkpoint>();
  root.setMagic(schema::MAGIC_TEXT.get());  // first, so it lands near the start of the file
  root.setFormatVersion(schema::CURRENT_FORMAT_VERSION);
  root.setTroupeVersion(TROUPE_VERSION);
  const std::int64_t written_at = now_unix_ms();
  root.setWrittenAtUnixMs(written_at);

  auto model = root.initModel();
  model.setName(s.model.name);
  model.setSpec(s.model.spec);
  model.setParameterCount(s.parameters.size());
  fill_buffer(root.initParameters(), "parameters", s.parameters);
  if (!s.model_state.empty()) fill_buffer(root.initModelState(), "model state", s.model_state);

  auto optimizer = root.initOptimizer();
  optimizer.setName(s.optimizer.name);
  optimizer.setSpec(s.optimizer.spec);
  fill_scalars(optimizer.initHyperParameters(static_cast<unsigned>(s.optimizer.hyper_parameters.size())),
               s.optimizer.hyper_parameters);
  auto buffers = optimizer.initState(static_cast<unsigned>(s.optimizer.buffers.size()));
  for (unsigned i = 0; i < s.optimizer.buffers.size(); ++i) {
    fill_buffer(buffers[i], s.optimizer.buffers[i].name, s.optimizer.buffers[i].values);
  }
  fill_scalars(optimizer.initScalars(static_cast<unsigned>(s.optimizer.scalars.size())), s.optimizer.scalars);

  auto position = root.initPosition();
  position.setGlobalStep(s.position.global_step);
  position.setEpoch(s.position.epoch);
  auto cursor = position.initCursor();
  cursor.setEpoch(s.position.cursor.epoch);
  cursor.setBatchInEpoch(s.position.cursor.batch_in_epoch);
  cursor.setShuffleSeed(s.position.cursor.shuffle_seed);
  if (!s.position.replica_clocks.empty()) {
    auto clocks = position.initReplicaClocks(static_cast<unsigned>(s.position.replica_clocks.size()));
    for (unsigned i = 0; i < s.position.replica_clocks.size(); ++i) clocks.set(i, s.position.replica_clocks[i]);
    position.setReplicaClocksCrc32(replica_clocks_crc32(s.position.replica_clocks));
  }
  if (s.position.segment.recorded()) {
    const Segment& g = s.position.segment;
    auto segment = position.initSegment();
    segment.setStartClock(g.start_clock);
    segment.setOffset(g.offset);
    segment.setWorld(g.world);
    segment.setBatch(g.batch);
    segment.setStepsBefore(g.steps_before);
    segment.setEpochExamples(g.epoch_examples);
    segment.setEpochLossSum(g.epoch_loss_sum);
    segment.setEpochCorrect(g.epoch_correct);
    segment.setEpochUnscored(g.epoch_unscored);
    position.setSegmentCrc32(segment_crc32(g));
  }

  auto schedule = root.initSchedule();
  schedule.setSpec(s.schedule.spec);
  schedule.setEvaluatedAtStep(s.schedule.evaluated_at_step);
  schedule.setEvaluatedAtEpoch(s.schedule.evaluated_at_epoch);
  schedule.setLearningRate(s.schedule.learning_rate);

  auto rng = root.initRng();
  rng.setSeed(s.rng.seed);
  rng.setCounter(s.rng.counter);

  root.setUpdateMode(s.update_mode);
  root.setMetricsNote(s.metrics_note);
  root.setMetadataCrc32(metadata_crc32(s, schema::CURRENT_FORMAT_VERSION, TROUPE_VERSION, written_at));
}

void check_names(const std::string& path, const State& s) {
  std::set<std::string> names;
  for (const NamedBuffer& b : s.optimizer.buffers) {
    if (!names.insert(b.name).second) fail(path, "optimizer state buffer '" + b.name + "' appears twice");
  }
}

void fsync_dir(const std::string& path, const std::string& dir) {
  if (int error = injected_errno("fsync-dir")) {
    fail(path, "written, but cannot fsync directory " + dir + ": " + errno_text(error));
  }
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) {
    fail(path, "written, but cannot fsync directory " + dir + ": " + errno_text(errno));
  }
}

// ---- reading ---------------------------------------------------------------

struct FileBytes {
  kj::Array<capnp::word> words;  // the file, zero-padded to whole words
  std::size_t size = 0;          // bytes actually in the file
  const unsigned char* bytes() const { return reinterpret_cast<const unsigned char*>(words.begin()); }
};

FileBytes read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, "cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, "cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  FileBytes file;
  std::size_t capacity = static_cast<std::size_t>(st.st_size);
  file.words = kj::heapArray<capnp::word>((capacity + 7) / 8);
  std::memset(file.words.begin(), 0, file.words.size() * sizeof(capnp::word));
  auto* out = reinterpret_cast<char*>(file.words.begin());
  while (file.size < capacity) {
    ssize_t n = ::read(fd.get(), out + file.size, capacity - file.size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "cannot read: " + errno_text(errno));
    }
    if (n == 0) break;  // shrank while reading: judged by the checks below
    file.size += static_cast<std::size_t>(n);
  }
  return file;
}

bool has_magic_near_start(const unsigned char* bytes, std::size_t size) {
  std::string_view magic(schema::MAGIC_TEXT.get().cStr());
  std::string_view head(reinterpret_cast<const char*>(bytes), std::min(size, kMagicSearchBytes));
  return head.find(magic) != std::string_view::npos;
}

// Checks the segment table against the file size. Returns an empty string
// when they agree, else the one-line reason.
std::string check_framing(const unsigned char* bytes, std::size_t size) {
  const bool magic = has_magic_near_start(bytes, size);
  if (size == 0) return "empty file (0 bytes), not a troupe checkpoint";
  if (size < 8) {
    return "not a troupe checkpoint: " + std::to_string(size) + " bytes is too short for a Cap'n Proto message";
  }
  std::uint32_t first = 0;
  std::memcpy(&first, bytes, 4);
  std::uint64_t segments = std::uint64_t{first} + 1;
  if (segments > kMaxSegments) {
    return "not a troupe checkpoint: not a Cap'n Proto message (its segment table claims " + std::to_string(segments) +
           " segments)";
  }
  std::uint64_t header = (4 + 4 * segments + 7) / 8 * 8;
  if (header > size) {
    return std::string(magic ? "truncated" : "not a troupe checkpoint") + ": the file has " + std::to_string(size) +
           " bytes, less than its Cap'n Proto segment table needs";
  }
  std::uint64_t declared = header;
  for (std::uint64_t i = 0; i < segments; ++i) {
    std::uint32_t words = 0;
    std::memcpy(&words, bytes + 4 + 4 * i, 4);
    declared += std::uint64_t{words} * 8;
  }
  if (declared == size) return "";
  std::string sizes = "the file has " + std::to_string(size) + " bytes but its Cap'n Proto segment table declares " +
                      std::to_string(declared);
  if (!magic) return "not a troupe checkpoint: not a complete Cap'n Proto message (" + sizes + ")";
  if (declared > size) return "truncated: " + sizes;
  return "corrupt: " + std::to_string(size - declared) + " unexpected bytes after the message (" + sizes + ")";
}

std::string printable(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 40)) out += (c >= 32 && c < 127) ? c : '?';
  return text.size() > 40 ? out + "..." : out;
}

void read_buffer(const std::string& path, const std::string& what, schema::Buffer::Reader in, std::size_t file_size,
                 std::vector<float>& out) {
  std::uint64_t count = in.getElementCount();
  if (count > file_size / sizeof(float)) {
    fail(path, what + " declares " + std::to_string(count) + " elements, more than the " + std::to_string(file_size) +
                   "-byte file can hold");
  }
  auto chunks = in.getChunks();
  std::uint64_t total = 0;
  for (auto chunk : chunks) total += chunk.getData().size();
  if (total != count * sizeof(float)) {
    fail(path, what + " declares " + std::to_string(count) + " float32 elements (" +
                   std::to_string(count * sizeof(float)) + " bytes), but its " + std::to_string(chunks.size()) +
                   " chunks hold " + std::to_string(total) + " bytes");
  }
  out.assign(static_cast<std::size_t>(count), 0.0f);
  auto* dest = reinterpret_cast<unsigned char*>(out.data());
  std::size_t offset = 0;
  for (unsigned i = 0; i < chunks.size(); ++i) {
    auto chunk = chunks[i];
    auto data = chunk.getData();
    std::string where = what + " chunk " + std::to_string(i) + " of " + std::to_string(chunks.size());
    if (data.size() % sizeof(float) != 0) {
      fail(path, where + " holds " + std::to_string(data.size()) + " bytes, not a whole number of float32 elements");
    }
    auto crc = static_cast<std::uint32_t>(::crc32(0L, data.begin(), static_cast<uInt>(data.size())));
    if (crc != chunk.getCrc32()) {
      char numbers[64];
      std::snprintf(numbers, sizeof numbers, "stored 0x%08" PRIx32 ", computed 0x%08" PRIx32, chunk.getCrc32(), crc);
      fail(path, "CRC mismatch in " + where + " (elements " + std::to_string(offset / 4) + ".." +
                     std::to_string((offset + data.size()) / 4) + "): " + numbers);
    }
    if (data.size() > 0) std::memcpy(dest + offset, data.begin(), data.size());
    offset += data.size();
  }
}

void read_scalars(const std::string& path, const std::string& what, capnp::List<schema::Scalar>::Reader in,
                  std::map<std::string, double>& out) {
  for (auto scalar : in) {
    std::string key = scalar.getKey();
    if (!out.emplace(key, scalar.getValue()).second) {
      fail(path, what + " '" + key + "' appears twice");
    }
  }
}

State decode(const std::string& path, const FileBytes& file) {
  capnp::ReaderOptions options;
  // Reading every object once visits each word of the file once; twice that
  // leaves room for the few re-read struct headers. Never from the file's own
  // length fields.
  options.traversalLimitInWords = 2 * file.words.size() + 1024;
  std::optional<capnp::FlatArrayMessageReader> message;
  schema::Checkpoint::Reader root;

  State s;
  {
    // Anything unreadable before the magic matches means "not ours".
    std::string magic;
    try {
      message.emplace(file.words.asPtr(), options);
      root = message->getRoot<schema::Checkpoint>();
      magic = root.getMagic();
    } catch (const kj::Exception& e) {
      fail(path, "not a troupe checkpoint (Cap'n Proto: " + kj_text(e) + ")");
    }
    if (magic != schema::MAGIC_TEXT.get().cStr()) {
      fail(path, magic.empty() ? std::string("not a troupe checkpoint (no checkpoint magic)")
                               : "not a troupe checkpoint (magic is '" + printable(magic) + "', expected '" +
                                     schema::MAGIC_TEXT.get().cStr() + "')");
    }
  }
  s.troupe_version = root.getTroupeVersion();
  std::uint32_t version = root.getFormatVersion();
  if (version > schema::CURRENT_FORMAT_VERSION) {
    fail(path, "format version " + std::to_string(version) + " (written by troupe " + printable(s.troupe_version) +
                   ") is newer than this build (troupe " + TROUPE_VERSION + ") reads, up to format version " +
                   std::to_string(schema::CURRENT_FORMAT_VERSION));
  }
  if (version == 0) fail(path, "invalid format version 0");
  s.written_at_unix_ms = root.getWrittenAtUnixMs();

  auto model = root.getModel();
  s.model.name = model.getName();
  s.model.spec = model.getSpec();
  read_buffer(path, "parameters", root.getParameters(), file.size, s.parameters);
  if (root.hasModelState()) {
    const std::string name = root.getModelState().getName();
    if (name != "model state")
      fail(path, "the model state buffer is named '" + printable(name) + "', not 'model state'");
    read_buffer(path, "model state", root.getModelState(), file.size, s.model_state);
  }
  if (model.getParameterCount() != s.parameters.size()) {
    fail(path, "model.parameterCount is " + std::to_string(model.getParameterCount()) +
                   " but the parameter buffer holds " + std::to_string(s.parameters.size()));
  }

  auto optimizer = root.getOptimizer();
  s.optimizer.name = optimizer.getName();
  s.optimizer.spec = optimizer.getSpec();
  read_scalars(path, "optimizer hyper-parameter", optimizer.getHyperParameters(), s.optimizer.hyper_parameters);
  std::set<std::string> names;
  for (auto buffer : optimizer.getState()) {
    NamedBuffer named;
    named.name = buffer.getName();
    if (!names.insert(named.name).second) {
      fail(path, "optimizer state buffer '" + named.name + "' appears twice");
    }
    read_buffer(path, "optimizer state '" + named.name + "'", buffer, file.size, named.values);
    s.optimizer.buffers.push_back(std::move(named));
  }
  read_scalars(path, "optimizer scalar", optimizer.getScalars(), s.optimizer.scalars);

  auto position = root.getPosition();
  s.position.global_step = position.getGlobalStep();
  s.position.epoch = position.getEpoch();
  auto cursor = position.getCursor();
  s.position.cursor.epoch = cursor.getEpoch();
  s.position.cursor.batch_in_epoch = cursor.getBatchInEpoch();
  s.position.cursor.shuffle_seed = cursor.getShuffleSeed();
  if (position.hasReplicaClocks()) {
    for (std::uint64_t c : position.getReplicaClocks()) s.position.replica_clocks.push_back(c);
    if (replica_clocks_crc32(s.position.replica_clocks) != position.getReplicaClocksCrc32())
      fail(path, "replica clocks CRC mismatch (the replicas' data positions are damaged)");
  }
  if (position.hasSegment()) {
    auto segment = position.getSegment();
    Segment& g = s.position.segment;
    g.start_clock = segment.getStartClock();
    g.offset = segment.getOffset();
    g.world = segment.getWorld();
    g.batch = segment.getBatch();
    g.steps_before = segment.getStepsBefore();
    g.epoch_examples = segment.getEpochExamples();
    g.epoch_loss_sum = segment.getEpochLossSum();
    g.epoch_correct = segment.getEpochCorrect();
    g.epoch_unscored = segment.getEpochUnscored();
    if (segment_crc32(g) != position.getSegmentCrc32())
      fail(path, "data segment CRC mismatch (the replicas' data positions are damaged)");
  }

  auto schedule = root.getSchedule();
  s.schedule.spec = schedule.getSpec();
  s.schedule.evaluated_at_step = schedule.getEvaluatedAtStep();
  s.schedule.evaluated_at_epoch = schedule.getEvaluatedAtEpoch();
  s.schedule.learning_rate = schedule.getLearningRate();

  auto rng = root.getRng();
  s.rng.seed = rng.getSeed();
  s.rng.counter = rng.getCounter();

  s.update_mode = root.getUpdateMode();
  s.metrics_note = root.getMetricsNote();

  std::uint32_t computed = metadata_crc32(s, version, s.troupe_version, s.written_at_unix_ms);
  if (computed != root.getMetadataCrc32()) {
    char numbers[64];
    std::snprintf(numbers, sizeof numbers, "stored 0x%08" PRIx32 ", computed 0x%08" PRIx32, root.getMetadataCrc32(),
                  computed);
    fail(path, std::string("metadata CRC mismatch (a step, setting, name or other non-tensor field "
                           "is damaged): ") +
                   numbers);
  }
  return s;
}

// ---- directory -------------------------------------------------------------

constexpr std::string_view kPrefix = "ckpt-";
constexpr std::string_view kSuffix = ".troupe";

std::optional<std::uint64_t> step_of(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size()) return std::nullopt;
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return std::nullopt;
  if (name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) return std::nullopt;
  std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 20 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  errno = 0;
  unsigned long long step = std::strtoull(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return static_cast<std::uint64_t>(step);
}

// Complete = readable, segment table matches the file size, magic present.
bool looks_complete(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return false;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::size_t size = static_cast<std::size_t>(st.st_size);
  std::size_t want = std::min(size, kMagicSearchBytes);
  std::vector<unsigned char> head(want);
  std::size_t got = 0;
  while (got < want) {
    ssize_t n = ::read(fd.get(), head.data() + got, want - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  // check_framing reads the table from the head only, and the table of a
  // one-segment message is 8 bytes; more segments fit in 4 KiB up to 1022.
  return has_magic_near_start(head.data(), got) && check_framing(head.data(), size).empty();
}

}  // namespace

CheckpointError::CheckpointError(const std::string& path, const std::string& what)
    : std::runtime_error(what), path_(path) {}

std::uint32_t format_version() { return schema::CURRENT_FORMAT_VERSION; }

void write(const std::string& path, const State& state) {
  check_names(path, state);
  const std::string dir = parent_dir(path);
  std::string temp = path + ".tmp.XXXXXX";
  int raw_fd = -1;
  if (int error = injected_errno("open")) {
    errno = error;
  } else {
    raw_fd = ::mkstemp(temp.data());
  }
  if (raw_fd < 0) {
    fail(path, "cannot create temporary file " + temp + ": " + errno_text(errno));
  }
  Fd fd(raw_fd);
  try {
    if (::fchmod(fd.get(), 0644) != 0) fail(path, "cannot chmod " + temp + ": " + errno_text(errno));
    {
      capnp::MallocMessageBuilder message(
          static_cast<unsigned>(std::min<std::size_t>(estimate_words(state), (1u << 29) - 1)),
          capnp::AllocationStrategy::GROW_HEURISTICALLY);
      build_message(message, state);
      std::size_t bytes = capnp::computeSerializedSizeInWords(message) * sizeof(capnp::word);
      FdSink sink(fd.get(), path, bytes);
      capnp::writeMessage(sink, message);
    }
    int error = injected_errno("fsync");
    if (error != 0 || ::fsync(fd.get()) != 0) {
      fail(path, "cannot fsync " + temp + ": " + errno_text(error ? error : errno));
    }
    if (::close(fd.release()) != 0) fail(path, "cannot close " + temp + ": " + errno_text(errno));
    error = injected_errno("rename");
    if (error != 0 || ::rename(temp.c_str(), path.c_str()) != 0) {
      fail(path, "cannot rename " + temp + " into place: " + errno_text(error ? error : errno));
    }
  } catch (const kj::Exception& e) {
    ::unlink(temp.c_str());
    fail(path, "cannot encode: Cap'n Proto: " + kj_text(e));
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  fsync_dir(path, dir);
}

State read(const std::string& path) {
  try {
    FileBytes file = read_file(path);
    std::string framing = check_framing(file.bytes(), file.size);
    if (!framing.empty()) fail(path, framing);
    return decode(path, file);
  } catch (const kj::Exception& e) {
    fail(path, "corrupt: Cap'n Proto: " + kj_text(e));
  } catch (const std::bad_alloc&) {
    fail(path, "out of memory while reading");
  }
}

void check_model(const State& state, const std::string& path, const std::string& requested_model,
                 std::optional<std::uint64_t> expected_parameter_count) {
  if (state.model.name != requested_model) {
    throw CheckpointError(path, "checkpoint " + path + " is for model '" + state.model.name + "', but '" +
                                    requested_model + "' was requested");
  }
  if (expected_parameter_count && *expected_parameter_count != state.parameters.size()) {
    throw CheckpointError(path, "checkpoint " + path + " has " + std::to_string(state.parameters.size()) +
                                    " parameters, but model '" + requested_model + "' has " +
                                    std::to_string(*expected_parameter_count));
  }
}

// ---- Directory ---------------------------------------------------------------

Directory::Directory(std::string dir, std::size_t keep_last_k) : dir_(std::move(dir)), keep_last_k_(keep_last_k) {
  if (dir_.empty()) throw CheckpointError(dir_, "checkpoint directory: empty path");
  using Kind = util::FolderProblem::Kind;
  const util::FolderProblem problem = util::check_writable_folder(dir_);
  switch (problem.kind) {
    case Kind::none:
      return;
    case Kind::not_a_folder:
      throw CheckpointError(dir_, "checkpoint directory " + dir_ + ": exists but is not a directory");
    case Kind::cannot_create_folder:
      throw CheckpointError(dir_, "checkpoint directory " + dir_ + ": cannot create: " + problem.reason);
    case Kind::cannot_create_file:
      throw CheckpointError(
          dir_, "checkpoint directory " + dir_ + " is not writable: cannot create a file in it: " + problem.reason);
    case Kind::cannot_write_file:
      throw CheckpointError(
          dir_, "checkpoint directory " + dir_ + " is not writable: cannot write a file in it: " + problem.reason);
  }
}

Directory Directory::existing(std::string dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw CheckpointError(dir, "checkpoint directory " + dir + ": " + (ec ? ec.message() : "not a directory"));
  return Directory(std::move(dir), ReadOnly{});
}

std::string Directory::path_for_step(std::uint64_t step) const {
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%012" PRIu64 ".troupe", step);
  return (fs::path(dir_) / name).string();
}

std::vector<Directory::Entry> Directory::list() const {
  std::vector<Entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (auto step = step_of(it->path().filename().string())) {
      entries.push_back({*step, it->path().string()});
    }
  }
  if (ec) throw CheckpointError(dir_, "checkpoint directory " + dir_ + ": cannot list: " + ec.message());
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.step < b.step || (a.step == b.step && a.path < b.path); });
  return entries;
}

std::optional<std::string> Directory::latest() const {
  std::vector<Entry> entries = list();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (looks_complete(it->path)) return it->path;
  }
  return std::nullopt;
}

std::optional<Directory::Loaded> Directory::newest_valid(std::vector<Skipped>* skipped) const {
  std::vector<Entry> entries = list();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    try {
      Loaded out;
      out.state = read(it->path);
      out.path = it->path;
      return out;
    } catch (const CheckpointError& e) {
      if (skipped) skipped->push_back({it->path, e.what()});
    }
  }
  return std::nullopt;
}

std::string Directory::save(const State& state) {
  std::string path = path_for_step(state.position.global_step);
  write(path, state);
  if (keep_last_k_ == 0) return path;
  std::vector<Entry> entries = list();
  if (entries.size() <= keep_last_k_) return path;
  for (std::size_t i = 0; i + keep_last_k_ < entries.size(); ++i) {
    if (entries[i].path == path) continue;  // never the one just written
    if (::unlink(entries[i].path.c_str()) != 0 && errno != ENOENT) {
      throw CheckpointError(entries[i].path,
                            "checkpoint " + entries[i].path + ": cannot delete old checkpoint: " + errno_text(errno));
    }
  }
  return path;
}

namespace testing {
void set_write_fault_hook(std::function<int(const std::string& step)> hook) { fault_hook() = std::move(hook); }
}  // namespace testing

}  // namespace troupe::checkpoint
