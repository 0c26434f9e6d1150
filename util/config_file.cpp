#include "util/config_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace troupe::util {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO or pipe";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string size_text(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 20) && bytes % (std::size_t{1} << 20) == 0)
    return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (std::size_t{1} << 10) && bytes % (std::size_t{1} << 10) == 0)
    return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

std::string read_config_file(const std::string& path, const std::string& what, std::size_t max_bytes) {
  const std::string name = what + " '" + path + "'";
  const std::string expected = "expected a regular file of at most " + size_text(max_bytes);
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)};
  if (file.fd < 0) {
    const int error = errno;
    if (error == EISDIR) throw ConfigFileError(name + " is a directory; " + expected);
    throw ConfigFileError(name + ": cannot open: " + std::strerror(error));
  }
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) throw ConfigFileError(name + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) throw ConfigFileError(name + " is " + file_kind(info.st_mode) + "; " + expected);
  if (info.st_size < 0 || static_cast<std::uintmax_t>(info.st_size) > max_bytes)
    throw ConfigFileError(name + " holds " + std::to_string(info.st_size) + " bytes, more than the limit of " +
                          size_text(max_bytes) + " for a " + what);
  std::string bytes;
  bytes.reserve(static_cast<std::size_t>(info.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t got = ::read(file.fd, chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw ConfigFileError(name + ": read error after " + std::to_string(bytes.size()) +
                            " bytes: " + std::strerror(errno));
    }
    if (got == 0) break;
    // A file that grew since fstat must still end within the limit.
    if (static_cast<std::size_t>(got) > max_bytes - bytes.size())
      throw ConfigFileError(name + " holds more than the limit of " + size_text(max_bytes) + " for a " + what);
    bytes.append(chunk, static_cast<std::size_t>(got));
  }
  return bytes;
}

}  // namespace troupe::util
