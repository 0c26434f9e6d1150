#include "models/data/file_bytes.hpp"

#include <zlib.h>

#include <sys/stat.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "models/data/error.hpp"

namespace troupe::data {

namespace {

std::string read_gzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw DataError(path + ": cannot open: " + std::strerror(errno), path);
  gzbuffer(file, 1 << 17);
  std::string bytes;
  char chunk[1 << 16];
  for (;;) {
    const int got = gzread(file, chunk, sizeof chunk);
    if (got > 0) bytes.append(chunk, static_cast<std::size_t>(got));
    if (got < static_cast<int>(sizeof chunk)) {
      int code = Z_OK;
      const char* message = gzerror(file, &code);
      if (got < 0 || (code != Z_OK && code != Z_STREAM_END)) {
        const std::string why = message ? message : "unknown zlib error";
        gzclose(file);
        throw DataError(path + ": gzip stream is corrupt or truncated after " + std::to_string(bytes.size()) +
                            " decompressed bytes (" + why + ")",
                        path, static_cast<std::int64_t>(bytes.size()));
      }
      break;  // a short read means the end of the stream (or the error above)
    }
  }
  gzclose(file);
  return bytes;
}

}  // namespace

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open: " + std::strerror(errno), path);
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  if (in.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b) return read_gzip(path);
  in.clear();
  in.seekg(0);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw DataError(path + ": read error: " + std::strerror(errno), path);
  return bytes;
}

bool file_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

bool directory_exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

}  // namespace troupe::data
