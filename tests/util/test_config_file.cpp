// util/config_file: configuration files are regular files of bounded size;
// devices, directories and FIFOs are refused at once, never read.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "util/config_file.hpp"

namespace troupe::util {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::string& path, std::size_t limit = kMaxConfigFileBytes) {
  try {
    read_config_file(path, "job file", limit);
  } catch (const ConfigFileError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << "got: " << (haystack)

struct ConfigFile : ::testing::Test {
  void SetUp() override {
    // One folder per test and process: ctest runs the tests of this fixture
    // as parallel processes, which must not remove each other's files.
    dir_ = fs::path(::testing::TempDir()) /
           ("troupe_util_config_file_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
            "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  fs::path dir_;
};

TEST_F(ConfigFile, ReadsARegularFileWhole) {
  const std::string text = std::string("epochs = 2\n") + '\0' + "x\n";  // bytes, not a C string
  EXPECT_EQ(read_config_file(write("job.toml", text), "job file"), text);
  EXPECT_EQ(read_config_file(write("empty.toml", ""), "job file"), "");
}

TEST_F(ConfigFile, TheLimitIsInclusiveAndNamed) {
  const std::string path = write("big.toml", std::string(100, 'x'));
  EXPECT_EQ(read_config_file(path, "job file", 100).size(), 100u);
  const std::string message = error_of(path, 99);
  EXPECT_CONTAINS(message, "job file '" + path + "' holds 100 bytes, more than the limit of 99 bytes");
  const std::string two_mib = write("two-mib.toml", std::string(std::size_t{2} << 20, '#'));
  EXPECT_CONTAINS(error_of(two_mib), "holds 2097152 bytes, more than the limit of 1 MiB for a job file");
}

TEST_F(ConfigFile, DevicesAreRefusedWithoutReading) {
  const auto start = std::chrono::steady_clock::now();
  for (const char* device : {"/dev/zero", "/dev/urandom", "/dev/null"})
    EXPECT_CONTAINS(error_of(device), std::string("job file '") + device +
                                          "' is a character device; expected a regular file of at most 1 MiB");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST_F(ConfigFile, DirectoriesFifosAndMissingFilesAreRefused) {
  EXPECT_CONTAINS(error_of(dir_.string()), "job file '" + dir_.string() + "' is a directory; expected a regular file");
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_CONTAINS(error_of(fifo), "' is a FIFO or pipe; expected a regular file");  // and does not block
  EXPECT_CONTAINS(error_of((dir_ / "nope").string()), "/nope': cannot open: No such file or directory");
}

TEST_F(ConfigFile, ASymlinkToARegularFileIsRead) {
  const std::string target = write("real.toml", "epochs = 1\n");
  const fs::path link = dir_ / "link.toml";
  fs::create_symlink(target, link);
  EXPECT_EQ(read_config_file(link.string(), "job file"), "epochs = 1\n");
  const fs::path to_zero = dir_ / "zero.toml";
  fs::create_symlink("/dev/zero", to_zero);
  EXPECT_CONTAINS(error_of(to_zero.string()), "is a character device");
}

TEST(ConfigFileSize, Text) {
  EXPECT_EQ(size_text(1 << 20), "1 MiB");
  EXPECT_EQ(size_text(64 << 10), "64 KiB");
  EXPECT_EQ(size_text(1000), "1000 bytes");
}

}  // namespace
}  // namespace troupe::util
