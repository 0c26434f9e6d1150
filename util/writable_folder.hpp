// Whether this process can write files in a folder, found out before a job
// starts rather than when it first writes there (a checkpoint after an
// hour, a summary at the end). Used by the checkpoint directory
// (models/checkpoint) and the CLI's output flags (--metrics,
// --summary-json, --timeline). Header-only.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

namespace troupe::util {

struct FolderProblem {
  enum class Kind { none, not_a_folder, cannot_create_folder, cannot_create_file, cannot_write_file };
  Kind kind = Kind::none;
  std::string reason;  // the system's words (strerror), for the caller's message
  explicit operator bool() const { return kind != Kind::none; }
};

// Makes `folder` and its parents when missing, then creates a probe file in
// it (mkstemp), writes a byte and removes it. Each caller words the
// problem its own way, naming its flag or its object.
inline FolderProblem check_writable_folder(const std::string& folder) {
  namespace fs = std::filesystem;
  using Kind = FolderProblem::Kind;
  std::error_code ec;
  if (fs::exists(folder, ec) && !fs::is_directory(folder, ec)) return {Kind::not_a_folder, "it is not a directory"};
  fs::create_directories(folder, ec);
  if (ec) return {Kind::cannot_create_folder, ec.message()};
  std::string probe = (fs::path(folder) / ".troupe-write-probe.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return {Kind::cannot_create_file, std::strerror(errno)};
  const char byte = 0;
  const bool wrote = ::write(fd, &byte, 1) == 1;
  const int error = wrote ? 0 : errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (!wrote) return {Kind::cannot_write_file, std::strerror(error)};
  return {};
}

}  // namespace troupe::util
