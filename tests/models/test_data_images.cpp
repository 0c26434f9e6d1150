// Image folders (models/data/images.hpp): both layouts, the sort orders,
// grey and rgb, the resize against hand-computed values, the split, and
// every error naming its file. The images are real PNG and JPEG files,
// written here through libpng and libjpeg.
#include <gtest/gtest.h>
// jpeglib.h uses FILE without declaring it.
#include <cstdio>

#include <jpeglib.h>  // defines: jpeg_compress_struct, to write the JPEG files
#include <png.h>      // defines: png_image_write_to_file, to write the PNG files

#include <cstring>
#include <filesystem>

#include "models/data/error.hpp"
#include "models/data/images.hpp"
#include "models/data/load.hpp"
#include "tests/models/test_data_files.hpp"

namespace troupe::data {
namespace {

namespace fs = std::filesystem;
using kernels::Shape;
using testing::error_of;
using testing::TempDir;
using testing::write_file;

// `pixels`: height * width * channels samples, interleaved; channels 1 or 3.
void write_png(const std::string& path, int height, int width, int channels, const std::vector<std::uint8_t>& pixels) {
  fs::create_directories(fs::path(path).parent_path());
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  ASSERT_TRUE(png_image_write_to_file(&image, path.c_str(), 0, pixels.data(), 0, nullptr)) << path << image.message;
}

// A grey PNG whose every pixel is `value`.
void write_flat_png(const std::string& path, int height, int width, std::uint8_t value) {
  write_png(path, height, width, 1, std::vector<std::uint8_t>(static_cast<std::size_t>(height * width), value));
}

void write_jpeg(const std::string& path, int height, int width, int channels, const std::vector<std::uint8_t>& pixels) {
  fs::create_directories(fs::path(path).parent_path());
  FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  jpeg_compress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, file);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 100, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels.data() + cinfo.next_scanline * width * channels);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(file);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST(DataImages, ClassesAndFilesAreSortedByName) {
  TempDir dir;
  // Classes b, a, c written out of order; files named so that byte order
  // (1, 10, 2) differs from numeric order.
  write_flat_png(dir.file("b/2.png"), 4, 3, 40);
  write_flat_png(dir.file("b/10.png"), 4, 3, 30);
  write_flat_png(dir.file("b/1.PNG"), 4, 3, 20);
  write_flat_png(dir.file("a/x.png"), 4, 3, 10);
  write_flat_png(dir.file("c/y.png"), 4, 3, 255);
  write_file(dir.file("c/notes.txt"), "not an image");
  write_file(dir.file("c/._y.png"), "a macOS resource fork, no PNG");
  fs::create_directories(dir.file(".hidden"));
  const Splits s = load_dataset("images:" + dir.path());
  EXPECT_EQ(s.train.class_names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(s.train.num_classes, 3);
  EXPECT_EQ(s.train.features.shape(), (Shape{5, 1, 4, 3}));
  EXPECT_EQ(s.train.labels.to_int_vector(), (std::vector<std::int32_t>{0, 1, 1, 1, 2}));
  const std::vector<float> f = s.train.features.to_vector();
  const float expected[5] = {10, 20, 30, 40, 255};  // a/x, b/1.PNG, b/10, b/2, c/y
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(f[static_cast<std::size_t>(i * 12)], expected[i] / 255.0f) << i;
  EXPECT_EQ(s.test.size(), 0);
  EXPECT_EQ(s.test.class_names, s.train.class_names);
}

TEST(DataImages, TrainAndTestFolders) {
  TempDir dir;
  for (const char* split : {"train", "test"})
    for (const char* cls : {"dog", "cat"})
      for (int i = 0; i < (std::string(split) == "train" ? 3 : 2); ++i)
        write_flat_png(dir.file(std::string(split) + "/" + cls + "/" + std::to_string(i) + ".png"), 2, 2, 7);
  const Splits s = load_dataset("images:" + dir.path());
  EXPECT_EQ(s.train.size(), 6);
  EXPECT_EQ(s.test.size(), 4);
  EXPECT_EQ(s.test.split, "test");
  EXPECT_EQ(s.test.class_names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(s.test.labels.to_int_vector(), (std::vector<std::int32_t>{0, 0, 1, 1}));

  // test/ must name the same classes.
  fs::create_directories(dir.file("test/bird"));
  write_flat_png(dir.file("test/bird/0.png"), 2, 2, 7);
  const std::string e = error_of<DataError>([&] { load_dataset("images:" + dir.path()); });
  EXPECT_NE(
      e.find(dir.file("test") + ": class folders (bird, cat, dog) differ from " + dir.file("train") + "'s (cat, dog)"),
      std::string::npos)
      << e;
}

TEST(DataImages, ColourIsRgbWhenAnyImageHasItAndGreyOnRequest) {
  TempDir dir;
  write_flat_png(dir.file("a/0.png"), 1, 2, 100);
  write_png(dir.file("b/0.png"), 1, 2, 3, {255, 0, 0, 0, 0, 255});  // red, blue
  const Splits rgb = load_dataset("images:" + dir.path());
  ASSERT_EQ(rgb.train.features.shape(), (Shape{2, 3, 1, 2}));
  const std::vector<float> f = rgb.train.features.to_vector();
  // Grey repeats its value in every channel; channels first.
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(f[static_cast<std::size_t>(i)], 100 / 255.0f);
  EXPECT_EQ(std::vector<float>(f.begin() + 6, f.end()), (std::vector<float>{1, 0, 0, 0, 0, 1}));

  LoadOptions options;
  options.images.color = ImageColor::grey;
  const Splits grey = load_dataset("images:" + dir.path(), options);
  ASSERT_EQ(grey.train.features.shape(), (Shape{2, 1, 1, 2}));
  const std::vector<float> g = grey.train.features.to_vector();
  EXPECT_FLOAT_EQ(g[2], 0.299f);  // BT.601 luma of red
  EXPECT_FLOAT_EQ(g[3], 0.114f);  // and of blue

  // All grey files: one channel by default.
  fs::remove(dir.file("b/0.png"));
  write_flat_png(dir.file("b/0.png"), 1, 2, 100);
  EXPECT_EQ(load_dataset("images:" + dir.path()).train.features.shape(), (Shape{2, 1, 1, 2}));
}

// A 16-bit grey PNG without gAMA or sRGB, through libpng's own writer (the
// simplified one writes 16-bit files only as linear light): 257 k reads
// back as k.
TEST(DataImages, SixteenBitPngIsScaledToEightBits) {
  TempDir dir;
  fs::create_directories(dir.file("a"));
  const std::string path = dir.file("a/deep.png");
  FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, file);
  png_set_IHDR(png, info, 3, 1, 16, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  // Big-endian samples: 0, 257 * 128, 65535.
  unsigned char row[6] = {0x00, 0x00, 0x80, 0x80, 0xff, 0xff};
  png_write_row(png, row);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(file);
  const Splits s = load_dataset("images:" + dir.path());
  ASSERT_EQ(s.train.features.shape(), (Shape{1, 1, 1, 3}));
  EXPECT_EQ(s.train.features.to_vector(), (std::vector<float>{0, 128 / 255.0f, 1}));
}

TEST(DataImages, JpegGreyAndColour) {
  TempDir dir;
  // Flat 8x8 blocks come back within a step or two of what was written.
  write_jpeg(dir.file("grey/0.jpg"), 8, 8, 1, std::vector<std::uint8_t>(64, 90));
  std::vector<std::uint8_t> green;
  for (int i = 0; i < 64; ++i) green.insert(green.end(), {20, 200, 60});
  write_jpeg(dir.file("green/0.JPEG"), 8, 8, 3, green);
  const Splits s = load_dataset("images:" + dir.path());
  ASSERT_EQ(s.train.features.shape(), (Shape{2, 3, 8, 8}));
  EXPECT_EQ(s.train.class_names, (std::vector<std::string>{"green", "grey"}));
  const std::vector<float> f = s.train.features.to_vector();
  EXPECT_NEAR(f[0], 20 / 255.0f, 3 / 255.0f);
  EXPECT_NEAR(f[64], 200 / 255.0f, 3 / 255.0f);
  EXPECT_NEAR(f[128], 60 / 255.0f, 3 / 255.0f);
  EXPECT_NEAR(f[192], 90 / 255.0f, 2 / 255.0f);  // grey, repeated in the three channels
  EXPECT_NEAR(f[192 + 128], 90 / 255.0f, 2 / 255.0f);
}

TEST(DataImages, BilinearResizeMatchesHandComputedHalfPixelValues) {
  // 2x2 -> 4x4: sy = (y + 0.5) / 2 - 0.5 = -0.25 (clamped to 0), 0.25,
  // 0.75, 1.25 (both rows clamp to 1), likewise sx. The top row [0, 100]
  // becomes [0, 25, 75, 100], the bottom [200, 50] becomes
  // [200, 162.5, 87.5, 50], and rows 1 and 2 mix them 3:1 and 1:3.
  DecodedImage square{2, 2, 1, {0, 100, 200, 50}};
  EXPECT_EQ(resize_bilinear(square, 4, 4), (std::vector<float>{0, 25, 75, 100,                 //
                                                               50, 59.375f, 78.125f, 87.5f,    //
                                                               150, 128.125f, 84.375f, 62.5f,  //
                                                               200, 162.5f, 87.5f, 50}));
  // 1x4 -> 1x2: sx = (x + 0.5) * 2 - 0.5 = 0.5, 2.5: midpoints, as
  // tf.image.resize([[0, 40, 80, 120]], [1, 2]) gives [20, 100].
  DecodedImage row{1, 4, 1, {0, 40, 80, 120}};
  EXPECT_EQ(resize_bilinear(row, 1, 2), (std::vector<float>{20, 100}));
  // Channels stay interleaved and are resized apart.
  DecodedImage rgb{1, 2, 3, {0, 10, 20, 100, 110, 120}};
  EXPECT_EQ(resize_bilinear(rgb, 1, 1), (std::vector<float>{50, 60, 70}));

  // Through the loader: --image-size 4x4 on a 2x2 PNG, then / 255.
  TempDir dir;
  write_png(dir.file("a/0.png"), 2, 2, 1, {0, 100, 200, 50});
  write_flat_png(dir.file("a/1.png"), 3, 5, 9);  // another size is fine when resizing
  LoadOptions options;
  options.images.height = 4;
  options.images.width = 4;
  const Splits s = load_dataset("images:" + dir.path(), options);
  ASSERT_EQ(s.train.features.shape(), (Shape{2, 1, 4, 4}));
  EXPECT_FLOAT_EQ(s.train.features.to_vector()[5], 59.375f / 255.0f);
  EXPECT_FLOAT_EQ(s.train.features.to_vector()[16], 9 / 255.0f);
}

TEST(DataImages, TestFractionIsASeededSplitOfTheSortedFiles) {
  TempDir dir;
  for (int i = 0; i < 10; ++i)
    write_flat_png(dir.file(std::string(i < 5 ? "a" : "b") + "/" + std::to_string(i) + ".png"), 1, 1,
                   static_cast<std::uint8_t>(i));
  LoadOptions options;
  options.images.test_fraction = 0.3;
  const Splits s = load_dataset("images:" + dir.path(), options);
  ASSERT_EQ(s.train.size(), 7);
  ASSERT_EQ(s.test.size(), 3);
  // The examples split_indices(10, 0.3, seed 0) names, in file order.
  const SplitIndices expected = split_indices(10, 0.3, 0);
  const std::vector<float> test = s.test.features.to_vector();
  for (std::size_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(test[i] * 255.0f, static_cast<float>(expected.test[i])) << i;
  EXPECT_EQ(s.test.class_names, (std::vector<std::string>{"a", "b"}));
  // Stable: the same again.
  EXPECT_EQ(load_dataset("images:" + dir.path(), options).test.features.to_vector(), test);

  // Not with a test/ folder.
  TempDir split;
  write_flat_png(split.file("train/a/0.png"), 1, 1, 0);
  write_flat_png(split.file("test/a/0.png"), 1, 1, 0);
  EXPECT_NE(error_of<DataError>([&] {
              load_dataset("images:" + split.path(), options);
            }).find("a test fraction applies only without a test/ folder"),
            std::string::npos);
}

// Each error names the file (or folder) and what was wrong.
void expect_error(const std::string& dir, const std::string& needle, const LoadOptions& options = {}) {
  const std::string e = error_of<DataError>([&] { load_dataset("images:" + dir, options); });
  EXPECT_NE(e.find(needle), std::string::npos) << "error was: " << e;
}

TEST(DataImages, CorruptTruncatedAndUnsupportedFilesAreNamed) {
  TempDir dir;
  // Noisy images, so that the pixel data is most of each file and cutting
  // it in half lands there, not in the headers.
  std::vector<std::uint8_t> noise(64 * 64 * 3);
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<std::uint8_t>((i * 37 + i / 7) % 251);
  write_png(dir.file("a/good.png"), 64, 64, 1, std::vector<std::uint8_t>(noise.begin(), noise.begin() + 64 * 64));
  const std::string png = read_bytes(dir.file("a/good.png"));
  write_jpeg(dir.file("a/good2.jpg"), 64, 64, 3, noise);
  const std::string jpeg = read_bytes(dir.file("a/good2.jpg"));
  fs::remove_all(dir.file("a"));

  const auto only = [&](const std::string& name, const std::string& bytes) {
    fs::remove_all(dir.file("a"));
    fs::create_directories(dir.file("a"));
    write_file(dir.file("a/" + name), bytes);
  };
  only("t.png", png.substr(0, png.size() / 2));
  expect_error(dir.path(), dir.file("a/t.png") + ": corrupt or truncated PNG: libpng:");
  std::string flipped = png;
  flipped[flipped.size() - 20] = static_cast<char>(flipped[flipped.size() - 20] ^ 0x55);  // in IDAT: a bad CRC
  only("c.png", flipped);
  expect_error(dir.path(), dir.file("a/c.png") + ": corrupt or truncated PNG: libpng:");
  only("h.png", png.substr(0, 20));
  expect_error(dir.path(), dir.file("a/h.png") + ": not a readable PNG: libpng:");
  only("t.jpg", jpeg.substr(0, jpeg.size() / 2));
  expect_error(dir.path(), dir.file("a/t.jpg") + ": corrupt or truncated JPEG at row");
  only("h.jpg", jpeg.substr(0, 30));
  expect_error(dir.path(), dir.file("a/h.jpg") + ": not a readable JPEG: libjpeg:");
  only("gif.png", "GIF89a\x01\x00\x01\x00");
  expect_error(dir.path(),
               dir.file("a/gif.png") +
                   ": unsupported image format: starts with bytes 47 49 46 38, expected a PNG (89 50 4e 47)");
  only("empty.jpg", "");
  expect_error(dir.path(), dir.file("a/empty.jpg") + ": empty file");

  // An unreadable file: a link to nothing (root reads any mode).
  fs::remove_all(dir.file("a"));
  fs::create_directories(dir.file("a"));
  fs::create_symlink(dir.file("nowhere.png"), dir.file("a/gone.png"));
  expect_error(dir.path(), dir.file("a/gone.png"));
}

TEST(DataImages, FolderErrorsAreNamed) {
  TempDir dir;
  expect_error(dir.file("missing"), "images:" + dir.file("missing") + ": no such folder");
  expect_error(dir.path(), dir.path() + ": no class folders (expected " + dir.path() + "/<class>/*.png|*.jpg)");
  write_flat_png(dir.file("loose.png"), 2, 2, 0);
  expect_error(dir.path(), dir.path() + ": no class folders (the images lie directly in it");
  fs::remove(dir.file("loose.png"));

  write_flat_png(dir.file("a/0.png"), 2, 2, 0);
  fs::create_directories(dir.file("b"));
  write_file(dir.file("b/readme.txt"), "x");
  expect_error(dir.path(), dir.file("b") + ": class folder 'b' holds no .png, .jpg or .jpeg images (1 other files)");
  fs::remove_all(dir.file("b"));

  // Mixed sizes without --image-size name both files and both sizes.
  write_flat_png(dir.file("b/0.png"), 3, 2, 0);
  expect_error(dir.path(), dir.file("b/0.png") + " (class 'b'): 3x2 pixels, but the first image " +
                               dir.file("a/0.png") + " is 2x2; give --image-size HxW to resize every image");
}

TEST(DataImages, IdxErrorOnAFolderOfClassFoldersSuggestsImages) {
  TempDir dir;
  write_flat_png(dir.file("cat/0.png"), 2, 2, 0);
  const std::string e = error_of<DataError>([&] { load_dataset(dir.path()); });
  EXPECT_NE(e.find("it holds class folders of images: for those, give --data images:" + dir.path()), std::string::npos)
      << e;
}

}  // namespace
}  // namespace troupe::data
