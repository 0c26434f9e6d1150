// DataError: every failure to read or build a dataset. The message names the
// file and says what was expected and what was found; the structured fields
// let callers (the CLI, tests) point at the place without parsing text.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace troupe::data {

class DataError : public std::runtime_error {
 public:
  // `file` may be empty (a generated dataset, an unknown name). `offset` is
  // a byte offset (in the decompressed stream for gzipped files), -1 when it
  // does not apply; `line` is 1-based, 0 when it does not apply.
  explicit DataError(const std::string& message, std::string file = {}, std::int64_t offset = -1, std::int64_t line = 0)
      : std::runtime_error(message), file_(std::move(file)), offset_(offset), line_(line) {}

  const std::string& file() const { return file_; }
  std::int64_t offset() const { return offset_; }
  std::int64_t line() const { return line_; }

 private:
  std::string file_;
  std::int64_t offset_;
  std::int64_t line_;
};

}  // namespace troupe::data
