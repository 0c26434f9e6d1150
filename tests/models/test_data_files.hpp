// Small real files for the data tests: a temporary directory removed at the
// end of the test, raw and gzipped writers, and IDX byte builders.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace troupe::data::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "troupe-data-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

inline void append_be32(std::string& bytes, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>((value >> shift) & 0xff));
}

// An IDX images file of `count` rows x cols images; pixel i is (i * 7) % 256.
inline std::string idx_images(std::uint32_t count, std::uint32_t rows, std::uint32_t cols) {
  std::string bytes;
  append_be32(bytes, 0x00000803);
  append_be32(bytes, count);
  append_be32(bytes, rows);
  append_be32(bytes, cols);
  for (std::uint32_t i = 0; i < count * rows * cols; ++i) bytes.push_back(static_cast<char>((i * 7) % 256));
  return bytes;
}

inline std::string idx_labels(const std::vector<std::uint8_t>& labels) {
  std::string bytes;
  append_be32(bytes, 0x00000801);
  append_be32(bytes, static_cast<std::uint32_t>(labels.size()));
  for (const auto label : labels) bytes.push_back(static_cast<char>(label));
  return bytes;
}

// Runs `body`, which must throw E; returns the message (empty + a failure
// if it did not throw).
template <typename E, typename Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception thrown";
  return {};
}

}  // namespace troupe::data::testing
