// IDX files (raw and gzipped, detected by magic), IDX directories, and the
// real Fashion-MNIST from Debian's dataset-fashion-mnist.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "models/data/error.hpp"
#include "models/data/fashion_mnist.hpp"
#include "models/data/idx.hpp"
#include "models/data/load.hpp"
#include "tests/models/test_data_files.hpp"

namespace troupe::data {
namespace {

using kernels::Shape;
using testing::error_of;
using testing::idx_images;
using testing::idx_labels;
using testing::TempDir;
using testing::write_file;
using testing::write_gzip;

// Writes an MNIST-layout directory: 5 train and 3 test images of 2x3.
void write_idx_directory(const TempDir& dir, bool gzipped) {
  const auto put = [&](const std::string& stem, const std::string& bytes) {
    if (gzipped) {
      write_gzip(dir.file(stem + ".gz"), bytes);
    } else {
      write_file(dir.file(stem), bytes);
    }
  };
  put("train-images-idx3-ubyte", idx_images(5, 2, 3));
  put("train-labels-idx1-ubyte", idx_labels({0, 1, 9, 3, 4}));
  put("t10k-images-idx3-ubyte", idx_images(3, 2, 3));
  put("t10k-labels-idx1-ubyte", idx_labels({7, 8, 9}));
}

TEST(DataIdx, ReadsRawAndGzippedAlike) {
  TempDir dir;
  write_file(dir.file("raw"), idx_images(4, 2, 3));
  write_gzip(dir.file("packed.bin"), idx_images(4, 2, 3));  // gzip without a .gz name
  write_file(dir.file("raw.gz"), idx_images(4, 2, 3));      // and a raw file with one
  const auto raw = read_idx_images(dir.file("raw"));
  EXPECT_EQ(raw.shape(), (Shape{4, 1, 2, 3}));
  const auto values = raw.to_vector();
  for (std::size_t i = 0; i < values.size(); ++i)
    EXPECT_FLOAT_EQ(values[i], static_cast<float>((i * 7) % 256) / 255.0f);
  EXPECT_EQ(read_idx_images(dir.file("packed.bin")).to_vector(), values);
  EXPECT_EQ(read_idx_images(dir.file("raw.gz")).to_vector(), values);

  write_gzip(dir.file("labels"), idx_labels({3, 0, 9}));
  EXPECT_EQ(read_idx_labels(dir.file("labels")).to_int_vector(), (std::vector<std::int32_t>{3, 0, 9}));
}

TEST(DataIdx, WrongMagicSaysExpectedAndFound) {
  TempDir dir;
  write_file(dir.file("labels-as-images"), idx_labels({1, 2}));
  const std::string message = error_of<DataError>([&] { read_idx_images(dir.file("labels-as-images")); });
  EXPECT_NE(message.find(dir.file("labels-as-images")), std::string::npos) << message;
  EXPECT_NE(message.find("is 0x00000801, expected 0x00000803"), std::string::npos) << message;
  write_gzip(dir.file("text.gz"), "hello, not an IDX file");
  const std::string text = error_of<DataError>([&] { read_idx_labels(dir.file("text.gz")); });
  EXPECT_NE(text.find("expected 0x00000801"), std::string::npos) << text;
  write_file(dir.file("tiny"), "ab");
  EXPECT_THROW(read_idx_labels(dir.file("tiny")), DataError);
}

TEST(DataIdx, TruncatedDataNamesTheOffsetAndExpectedSize) {
  TempDir dir;
  std::string bytes = idx_images(4, 2, 3);  // 16 + 24 bytes
  bytes.resize(30);
  for (const bool gzipped : {false, true}) {
    const std::string path = dir.file(gzipped ? "cut.gz" : "cut");
    if (gzipped) {
      write_gzip(path, bytes);
    } else {
      write_file(path, bytes);
    }
    try {
      read_idx_images(path);
      ADD_FAILURE() << "accepted a truncated file";
    } catch (const DataError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path + ": truncated at offset 30"), std::string::npos) << message;
      EXPECT_NE(message.find("expected 24 bytes of pixels (4 images of 2x3)"), std::string::npos) << message;
      EXPECT_EQ(e.offset(), 30);
      EXPECT_EQ(e.file(), path);
    }
  }
  // Dimensions whose product overflows 64 bits are not taken at their word.
  std::string huge;
  for (const std::uint32_t v : {0x00000803u, 0xffffffffu, 0xffffffffu, 0xffffffffu}) testing::append_be32(huge, v);
  write_file(dir.file("huge"), huge + "pixels");
  const std::string overflow = error_of<DataError>([&] { read_idx_images(dir.file("huge")); });
  EXPECT_NE(overflow.find("truncated at offset 22"), std::string::npos) << overflow;
  std::string header = idx_images(1, 2, 2).substr(0, 10);
  write_file(dir.file("header"), header);
  const std::string message = error_of<DataError>([&] { read_idx_images(dir.file("header")); });
  EXPECT_NE(message.find("header truncated at offset 10"), std::string::npos) << message;
  write_file(dir.file("long"), idx_labels({1, 2}) + "xyz");
  const std::string trailing = error_of<DataError>([&] { read_idx_labels(dir.file("long")); });
  EXPECT_NE(trailing.find("3 unexpected trailing bytes at offset 10"), std::string::npos) << trailing;
}

TEST(DataIdx, CorruptGzipStreamIsReported) {
  TempDir dir;
  write_gzip(dir.file("whole.gz"), idx_images(50, 8, 8));
  std::ifstream in(dir.file("whole.gz"), std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_file(dir.file("cut.gz"), gz.substr(0, gz.size() / 2));
  const std::string message = error_of<DataError>([&] { read_idx_images(dir.file("cut.gz")); });
  EXPECT_NE(message.find(dir.file("cut.gz")), std::string::npos) << message;
  EXPECT_NE(message.find("gzip stream is corrupt or truncated"), std::string::npos) << message;
}

TEST(DataIdx, LabelsOutOfRangeAndCountMismatch) {
  TempDir dir;
  write_file(dir.file("labels"), idx_labels({1, 10, 2}));
  const std::string range = error_of<DataError>([&] { read_idx_labels(dir.file("labels")); });
  EXPECT_NE(range.find("label 10 of example 1 at offset 9 is outside [0, 10)"), std::string::npos) << range;
  EXPECT_EQ(read_idx_labels(dir.file("labels"), 11).to_int_vector(), (std::vector<std::int32_t>{1, 10, 2}));

  write_file(dir.file("images"), idx_images(4, 2, 2));
  const std::string count =
      error_of<DataError>([&] { load_idx_split(dir.file("images"), dir.file("labels"), "t", "train", 11); });
  EXPECT_NE(count.find("holds 4 images but"), std::string::npos) << count;
  EXPECT_NE(count.find("holds 3 labels"), std::string::npos) << count;
}

TEST(DataIdx, DirectoryLoadsGzippedOrRawAndByPath) {
  for (const bool gzipped : {false, true}) {
    TempDir dir;
    write_idx_directory(dir, gzipped);
    EXPECT_TRUE(is_idx_directory(dir.path()));
    const Splits s = load_dataset(dir.path());
    EXPECT_EQ(s.train.size(), 5);
    EXPECT_EQ(s.test.size(), 3);
    EXPECT_EQ(s.train.num_classes, 10);
    EXPECT_EQ(s.test.labels.to_int_vector(), (std::vector<std::int32_t>{7, 8, 9}));
    EXPECT_EQ(s.train.feature_shape(), (Shape{1, 2, 3}));
  }
}

TEST(DataFashionMnist, MissingFilesNameThePackage) {
  TempDir dir;
  testing::write_file(dir.file("train-images-idx3-ubyte.gz"), "");
  const std::string message = error_of<DataError>([&] { load_fashion_mnist(dir.path()); });
  EXPECT_NE(message.find("install the Debian package dataset-fashion-mnist (scripts/setup.sh does)"), std::string::npos)
      << message;
  EXPECT_NE(message.find(dir.path() + "/train-labels-idx1-ubyte"), std::string::npos) << message;
  EXPECT_NE(message.find(dir.path() + "/t10k-images-idx3-ubyte"), std::string::npos) << message;
  EXPECT_EQ(message.find(dir.path() + "/train-images-idx3-ubyte"), std::string::npos) << message;

  // The environment variable redirects the by-name load.
  ::setenv(fashion_mnist_dir_env, dir.path().c_str(), 1);
  const std::string by_env = error_of<DataError>([] { load_dataset("fashion-mnist"); });
  ::unsetenv(fashion_mnist_dir_env);
  EXPECT_NE(by_env.find(dir.path()), std::string::npos) << by_env;
}

TEST(DataFashionMnist, OverrideDirectoryLoadsSmallCopy) {
  TempDir dir;
  write_idx_directory(dir, true);
  LoadOptions options;
  options.fashion_mnist_dir = dir.path();
  const Splits s = load_dataset("fashion-mnist", options);
  EXPECT_EQ(s.train.name, "fashion-mnist");
  EXPECT_EQ(s.train.size(), 5);
  EXPECT_EQ(s.train.class_names.at(9), "Ankle boot");
}

TEST(DataFashionMnist, RealDebianFiles) {
  if (!is_idx_directory(fashion_mnist_default_dir))
    GTEST_SKIP() << fashion_mnist_default_dir << " not present: install dataset-fashion-mnist";
  const Splits s = load_fashion_mnist(fashion_mnist_default_dir);
  EXPECT_EQ(s.train.size(), 60000);
  EXPECT_EQ(s.test.size(), 10000);
  EXPECT_EQ(s.train.num_classes, 10);
  EXPECT_EQ(s.train.features.shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(s.train.labels.i32()[0], 9);  // the first training image is an ankle boot
  EXPECT_EQ(s.test.labels.i32()[0], 9);
  const float* x = s.train.features.f32();
  const auto [lo, hi] = std::minmax_element(x, x + s.train.features.numel());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  // Balanced: 6000 of each class in train.
  std::vector<int> counts(10, 0);
  const std::int32_t* y = s.train.labels.i32();
  for (std::int64_t i = 0; i < s.train.size(); ++i) ++counts[static_cast<std::size_t>(y[i])];
  EXPECT_EQ(counts, std::vector<int>(10, 6000));
}

}  // namespace
}  // namespace troupe::data
