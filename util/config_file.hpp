// Bounded reads of configuration files: the job file, model spec files, the
// cluster spec (--cluster FILE) and the secret file all come through here.
//
// A configuration file is a regular file of at most a limit (1 MiB unless a
// caller says otherwise): `--job /dev/zero` or a model spec path of
// /dev/urandom would otherwise be read until memory runs out, a FIFO would
// block the reader forever, and a directory would read as an empty file.
// The file is opened first (without blocking, so a FIFO cannot hang the
// open) and then checked with fstat on the open descriptor, so what is
// checked is what is read; a file that grows past the limit while it is read
// is refused too.
//
// Why util/: every reader sits in models/ (model specs), net/ (cluster spec,
// secret) or actors/ (job file), and net/ may not include actors/ nor
// anything include cli/. kernels/ is the lowest layer, but it holds tensors
// and ops, and its GPU test binary is meant to carry nothing else; so this
// dependency-free file (C++ standard library and POSIX only) has a folder of
// its own that any layer may include.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace troupe::util {

inline constexpr std::size_t kMaxConfigFileBytes = std::size_t{1} << 20;  // 1 MiB

// Every error names the file as "WHAT 'PATH'" and says what was expected.
// A std::invalid_argument: the command line named a bad file (exit 2).
struct ConfigFileError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// The whole file. `what` names it in errors ("job file", "model spec").
// Throws ConfigFileError when it cannot be opened or read, is not a regular
// file (a directory, a device such as /dev/zero, a FIFO, a socket), or holds
// more than `max_bytes` bytes.
std::string read_config_file(const std::string& path, const std::string& what,
                             std::size_t max_bytes = kMaxConfigFileBytes);

// "1 MiB", "64 KiB", "100 bytes": a limit as messages print it.
std::string size_text(std::size_t bytes);

}  // namespace troupe::util
