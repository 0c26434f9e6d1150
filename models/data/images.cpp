#include "models/data/images.hpp"

// jpeglib.h uses FILE without declaring it.
#include <cstdio>

#include <jpeglib.h>  // defines: jpeg_decompress_struct, jpeg_error_mgr (libjpeg62-turbo-dev)
#include <png.h>      // defines: png_image, the simplified read API (libpng-dev)

#include <algorithm>
#include <cctype>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "models/data/error.hpp"
#include "models/data/file_bytes.hpp"

namespace troupe::data {

namespace {

namespace fs = std::filesystem;

// At most 2^28 samples per image (16384 x 16384 grey, about 9460 x 9460
// rgb): a header that claims more is refused before anything is allocated,
// so that a corrupt or hostile file cannot ask for gigabytes.
constexpr std::uint64_t max_samples = std::uint64_t{1} << 28;

std::string dims(int height, int width) { return std::to_string(height) + "x" + std::to_string(width); }

void check_samples(std::uint64_t height, std::uint64_t width, std::uint64_t channels, const std::string& path,
                   const char* kind) {
  if (height == 0 || width == 0)
    throw DataError(path + ": " + kind + " of " + std::to_string(height) + "x" + std::to_string(width) +
                        " pixels: both must be positive",
                    path);
  if (height * width * channels > max_samples)
    throw DataError(path + ": " + kind + " of " + std::to_string(height) + "x" + std::to_string(width) + "x" +
                        std::to_string(channels) + " samples, more than the " + std::to_string(max_samples) +
                        " an image may have",
                    path);
}

// PNG through libpng's simplified API (png_image): it catches libpng's
// errors itself (its own setjmp inside libpng) and returns 0 with a message,
// so no longjmp ever crosses this C++ code.
DecodedImage decode_png(const std::string& bytes, const std::string& path) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  struct Free {
    png_image* image;
    ~Free() { png_image_free(image); }
  } free_image{&image};
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()))
    throw DataError(path + ": not a readable PNG: libpng: " + image.message, path);
  // A 16-bit file without gAMA or sRGB is read as sRGB, as the 8-bit ones
  // are, so that its values are scaled (v * 255 / 65535), not gamma-encoded.
  image.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  const bool colour = (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  const int channels = colour ? 3 : 1;
  check_samples(image.height, image.width, channels, path, "PNG");
  // deflate expands at most about 1032:1: a header whose rows could not
  // come out of this file's bytes is truncated or corrupt, refused before
  // its rows are allocated.
  const std::uint64_t raw = std::uint64_t{image.height} * image.width * PNG_IMAGE_PIXEL_CHANNELS(image.format) *
                            (PNG_IMAGE_PIXEL_COMPONENT_SIZE(image.format));
  if (raw > std::uint64_t{bytes.size()} * 1100 + 65536)
    throw DataError(path + ": PNG of " + dims(static_cast<int>(image.height), static_cast<int>(image.width)) +
                        " pixels cannot come out of " + std::to_string(bytes.size()) + " bytes: truncated or corrupt",
                    path);
  // Read with alpha where the file has it, and drop it below: asking for a
  // format without alpha would composite onto a background instead.
  image.format = colour ? PNG_FORMAT_RGBA : PNG_FORMAT_GA;
  std::vector<std::uint8_t> buffer(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, buffer.data(), 0, nullptr))
    throw DataError(path + ": corrupt or truncated PNG: libpng: " + image.message, path);
  DecodedImage out;
  out.height = static_cast<int>(image.height);
  out.width = static_cast<int>(image.width);
  out.channels = channels;
  const std::size_t pixels = std::size_t{image.height} * image.width;
  out.pixels.resize(pixels * static_cast<std::size_t>(channels));
  const std::size_t stride = colour ? 4 : 2;
  for (std::size_t i = 0; i < pixels; ++i)
    for (int c = 0; c < channels; ++c) out.pixels[i * channels + c] = buffer[i * stride + c];
  return out;
}

// libjpeg reports errors through error_exit, which must not return: it
// longjmps back into the C-only functions below, whose frames hold no C++
// objects (a longjmp over a destructor is undefined behaviour). The C++
// caller owns everything and destroys the decompressor.
struct JpegErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings (level -1) are libjpeg's word for damaged data: "Premature end
// of JPEG file" (truncated, the rest filled grey), "Corrupt JPEG data".
// Both are errors here; trace messages (level >= 0) are ignored.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_fail(cinfo);
}

bool jpeg_begin(jpeg_decompress_struct* cinfo, JpegErrors* errors, const unsigned char* data, unsigned long size) {
  if (setjmp(errors->jump)) return false;
  jpeg_create_decompress(cinfo);
  // Progressive files buffer every coefficient: bounded by max_samples'
  // check before jpeg_start, and by this in case the bound is wrong.
  cinfo->mem->max_memory_to_use = 1L << 30;
  jpeg_mem_src(cinfo, data, size);
  jpeg_read_header(cinfo, TRUE);
  return true;
}

bool jpeg_start(jpeg_decompress_struct* cinfo, JpegErrors* errors) {
  if (setjmp(errors->jump)) return false;
  cinfo->out_color_space = cinfo->num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(cinfo);
  return true;
}

bool jpeg_row(jpeg_decompress_struct* cinfo, JpegErrors* errors, unsigned char* row) {
  if (setjmp(errors->jump)) return false;
  JSAMPROW rows[1] = {row};
  if (jpeg_read_scanlines(cinfo, rows, 1) == 1) return true;
  // A memory source never suspends: no row and no warning is not expected,
  // but must not loop.
  std::snprintf(errors->message, sizeof errors->message, "no row decoded");
  return false;
}

bool jpeg_end(jpeg_decompress_struct* cinfo, JpegErrors* errors) {
  if (setjmp(errors->jump)) return false;
  jpeg_finish_decompress(cinfo);
  return true;
}

DecodedImage decode_jpeg(const std::string& bytes, const std::string& path) {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  std::memset(&cinfo, 0, sizeof cinfo);
  std::memset(&errors, 0, sizeof errors);
  cinfo.err = jpeg_std_error(&errors.pub);
  errors.pub.error_exit = jpeg_fail;
  errors.pub.emit_message = jpeg_message;
  struct Destroy {
    jpeg_decompress_struct* cinfo;
    ~Destroy() { jpeg_destroy_decompress(cinfo); }
  } destroy{&cinfo};
  const auto fail = [&](const char* what) {
    return DataError(path + ": " + what + ": libjpeg: " + errors.message, path);
  };
  if (!jpeg_begin(&cinfo, &errors, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()))
    throw fail("not a readable JPEG");
  const int channels = cinfo.num_components == 1 ? 1 : 3;
  check_samples(cinfo.image_height, cinfo.image_width, static_cast<std::uint64_t>(channels), path, "JPEG");
  if (!jpeg_start(&cinfo, &errors)) throw fail("unsupported or corrupt JPEG");
  DecodedImage out;
  out.height = static_cast<int>(cinfo.output_height);
  out.width = static_cast<int>(cinfo.output_width);
  out.channels = static_cast<int>(cinfo.output_components);
  const std::size_t row = static_cast<std::size_t>(out.width) * static_cast<std::size_t>(out.channels);
  // Rows are appended as they decode, so that a truncated file claiming a
  // large image fails before its whole buffer is allocated.
  std::vector<unsigned char> line(row);
  while (cinfo.output_scanline < cinfo.output_height) {
    if (!jpeg_row(&cinfo, &errors, line.data()))
      throw fail(("corrupt or truncated JPEG at row " + std::to_string(cinfo.output_scanline)).c_str());
    out.pixels.insert(out.pixels.end(), line.begin(), line.end());
  }
  if (!jpeg_end(&cinfo, &errors)) throw fail("corrupt JPEG after its last row");
  return out;
}

std::string lower(std::string text) {
  for (char& ch : text) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return text;
}

bool is_image_name(const fs::path& file) {
  const std::string ext = lower(file.extension().string());
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// Sub-folders of `directory`, sorted by name; hidden ones (".git") skipped.
std::vector<std::string> sub_folders(const std::string& directory) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    std::error_code ignored;
    if (!name.empty() && name[0] != '.' && it->is_directory(ignored)) names.push_back(name);
  }
  if (error) throw DataError(directory + ": cannot list the folder: " + error.message(), directory);
  std::sort(names.begin(), names.end());
  return names;
}

// Image files of a class folder, sorted by name; `others` counts the rest.
std::vector<std::string> image_files(const std::string& folder, std::size_t& others) {
  std::vector<std::string> files;
  others = 0;
  std::error_code error;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    std::error_code ignored;
    if (it->is_directory(ignored)) continue;
    // Hidden files are skipped: macOS leaves "._name.png" resource forks
    // beside every copied image, and they are not images.
    if (it->path().filename().string().compare(0, 1, ".") == 0) continue;
    if (is_image_name(it->path()))
      files.push_back(it->path().filename().string());
    else
      ++others;
  }
  if (error) throw DataError(folder + ": cannot list the class folder: " + error.message(), folder);
  std::sort(files.begin(), files.end());
  return files;
}

bool holds_images(const std::string& folder) {
  std::error_code error;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error))
    if (is_image_name(it->path())) return true;
  return false;
}

struct Decoded {
  std::string path;
  std::string class_name;
  int label = 0;
  DecodedImage image;
};

// Every image of one split root (DIR or DIR/train): classes sorted, files
// sorted within each.
std::vector<Decoded> decode_split(const std::string& root, const std::vector<std::string>& classes) {
  std::vector<Decoded> out;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    const std::string folder = root + "/" + classes[c];
    std::size_t others = 0;
    const std::vector<std::string> files = image_files(folder, others);
    if (files.empty())
      throw DataError(folder + ": class folder '" + classes[c] + "' holds no .png, .jpg or .jpeg images" +
                          (others > 0 ? " (" + std::to_string(others) + " other files)" : std::string()),
                      folder);
    for (const std::string& file : files) {
      Decoded d;
      d.path = folder + "/" + file;
      d.class_name = classes[c];
      d.label = static_cast<int>(c);
      d.image = decode_image(read_file_bytes(d.path), d.path);
      out.push_back(std::move(d));
    }
  }
  return out;
}

Dataset to_dataset(const std::vector<Decoded>& images, const std::string& name, const std::string& split,
                   const std::vector<std::string>& classes, int height, int width, int channels, bool resize) {
  Dataset out;
  out.name = name;
  out.split = split;
  out.task = Task::classification;
  out.num_classes = static_cast<int>(classes.size());
  out.class_names = classes;
  const auto n = static_cast<std::int64_t>(images.size());
  out.features = kernels::Tensor::empty(kernels::Shape{n, channels, height, width});
  out.labels = kernels::Tensor::empty(kernels::Shape{n}, kernels::DType::i32);
  const std::size_t plane = static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  float* features = out.features.f32();
  std::int32_t* labels = out.labels.i32();
  std::vector<float> values;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const DecodedImage& image = images[i].image;
    if (resize) {
      values = resize_bilinear(image, height, width);
    } else {
      values.assign(image.pixels.begin(), image.pixels.end());
    }
    // Interleaved HWC in [0, 255] to planar CHW in [0, 1], converting grey
    // and rgb as the header says.
    float* example = features + i * plane * static_cast<std::size_t>(channels);
    const auto in_channels = static_cast<std::size_t>(image.channels);
    for (std::size_t p = 0; p < plane; ++p) {
      const float* px = values.data() + p * in_channels;
      if (channels == 1) {
        const float grey = in_channels == 1 ? px[0] : 0.299f * px[0] + 0.587f * px[1] + 0.114f * px[2];
        example[p] = grey * (1.0f / 255.0f);
      } else {
        for (std::size_t c = 0; c < 3; ++c) example[c * plane + p] = px[in_channels == 1 ? 0 : c] * (1.0f / 255.0f);
      }
    }
    labels[i] = images[i].label;
  }
  out.validate();
  return out;
}

}  // namespace

DecodedImage decode_image(const std::string& bytes, const std::string& path) {
  static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() >= 8 && std::memcmp(b, png_magic, 8) == 0) return decode_png(bytes, path);
  if (bytes.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return decode_jpeg(bytes, path);
  if (bytes.empty()) throw DataError(path + ": empty file, expected a PNG or JPEG image", path, 0);
  std::string found;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 4); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02x", b[i]);
    found += std::string(i ? " " : "") + hex;
  }
  throw DataError(path + ": unsupported image format: starts with bytes " + found +
                      ", expected a PNG (89 50 4e 47) or a JPEG (ff d8 ff)",
                  path, 0);
}

std::vector<float> resize_bilinear(const DecodedImage& image, int out_height, int out_width) {
  const int in_h = image.height, in_w = image.width, ch = image.channels;
  std::vector<float> out(static_cast<std::size_t>(out_height) * static_cast<std::size_t>(out_width) *
                         static_cast<std::size_t>(ch));
  const double scale_y = static_cast<double>(in_h) / out_height, scale_x = static_cast<double>(in_w) / out_width;
  // Per output column: the two input columns and the weight, as
  // tensorflow/core/kernels/image/resize_bilinear_op.cc computes them with
  // HalfPixelScaler.
  std::vector<int> x0(static_cast<std::size_t>(out_width)), x1(x0.size());
  std::vector<float> fx(x0.size());
  for (int x = 0; x < out_width; ++x) {
    const double sx = std::max(0.0, (x + 0.5) * scale_x - 0.5);
    const int lo = std::min(static_cast<int>(std::floor(sx)), in_w - 1);
    x0[x] = lo;
    x1[x] = std::min(lo + 1, in_w - 1);
    fx[x] = static_cast<float>(sx - lo);
  }
  const std::uint8_t* in = image.pixels.data();
  for (int y = 0; y < out_height; ++y) {
    const double sy = std::max(0.0, (y + 0.5) * scale_y - 0.5);
    const int y0 = std::min(static_cast<int>(std::floor(sy)), in_h - 1);
    const int y1 = std::min(y0 + 1, in_h - 1);
    const auto fy = static_cast<float>(sy - y0);
    const std::uint8_t* top = in + static_cast<std::size_t>(y0) * in_w * ch;
    const std::uint8_t* bottom = in + static_cast<std::size_t>(y1) * in_w * ch;
    float* row = out.data() + static_cast<std::size_t>(y) * out_width * ch;
    for (int x = 0; x < out_width; ++x) {
      for (int c = 0; c < ch; ++c) {
        const float tl = top[x0[x] * ch + c], tr = top[x1[x] * ch + c];
        const float bl = bottom[x0[x] * ch + c], br = bottom[x1[x] * ch + c];
        const float t = tl + (tr - tl) * fx[x];
        const float b = bl + (br - bl) * fx[x];
        row[x * ch + c] = t + (b - t) * fy;
      }
    }
  }
  return out;
}

bool looks_like_image_folders(const std::string& directory) {
  if (!directory_exists(directory)) return false;
  std::string root = directory;
  if (directory_exists(directory + "/train")) root = directory + "/train";
  try {
    for (const std::string& name : sub_folders(root))
      if (holds_images(root + "/" + name)) return true;
  } catch (const DataError&) {}
  return false;
}

Splits load_image_folders(const std::string& directory, const ImageOptions& options) {
  const std::string name = "images:" + directory;
  if (!directory_exists(directory))
    throw DataError(name + ": no such folder (expected DIR/<class>/*.png|*.jpg or DIR/train/<class>/...)", directory);
  if ((options.height == 0) != (options.width == 0) || options.height < 0 || options.width < 0)
    throw DataError(name + ": image size " + dims(options.height, options.width) +
                        ": give both a positive height and width, or neither",
                    directory);
  if (!(options.test_fraction >= 0 && options.test_fraction < 1))
    throw DataError(name + ": test fraction " + std::to_string(options.test_fraction) + " is outside [0, 1)",
                    directory);
  const bool split_folders = directory_exists(directory + "/train");
  const std::string train_root = split_folders ? directory + "/train" : directory;
  const std::string test_root = directory + "/test";
  const bool has_test = split_folders && directory_exists(test_root);
  if (has_test && options.test_fraction > 0)
    throw DataError(name + ": " + test_root + " is the test split; a test fraction applies only without a test/ folder",
                    directory);

  const std::vector<std::string> classes = sub_folders(train_root);
  if (classes.empty())
    throw DataError(train_root + ": no class folders" +
                        (holds_images(train_root) ? " (the images lie directly in it; put each class's in a folder "
                                                    "of its own: " +
                                                        train_root + "/<class>/*.png)"
                                                  : std::string(" (expected ") + train_root + "/<class>/*.png|*.jpg)"),
                    train_root);
  std::vector<Decoded> train = decode_split(train_root, classes);
  std::vector<Decoded> test;
  if (has_test) {
    const std::vector<std::string> test_classes = sub_folders(test_root);
    if (test_classes != classes) {
      std::string listed;
      for (const auto& c : test_classes) listed += (listed.empty() ? "" : ", ") + c;
      std::string expected;
      for (const auto& c : classes) expected += (expected.empty() ? "" : ", ") + c;
      throw DataError(
          test_root + ": class folders (" + listed + ") differ from " + train_root + "'s (" + expected + ")",
          test_root);
    }
    test = decode_split(test_root, classes);
  }

  const bool resize = options.height > 0;
  const int height = resize ? options.height : train.front().image.height;
  const int width = resize ? options.width : train.front().image.width;
  bool any_colour = false;
  for (const auto* split : {&train, &test}) {
    for (const Decoded& d : *split) {
      any_colour = any_colour || d.image.channels == 3;
      if (!resize && (d.image.height != height || d.image.width != width))
        throw DataError(d.path + " (class '" + d.class_name + "'): " + dims(d.image.height, d.image.width) +
                            " pixels, but the first image " + train.front().path + " is " + dims(height, width) +
                            "; give --image-size HxW to resize every image",
                        d.path);
    }
  }
  const int channels = options.color == ImageColor::rgb    ? 3
                       : options.color == ImageColor::grey ? 1
                       : any_colour                        ? 3
                                                           : 1;

  Splits splits;
  splits.train = to_dataset(train, name, "train", classes, height, width, channels, resize);
  if (has_test) {
    splits.test = to_dataset(test, name, "test", classes, height, width, channels, resize);
  } else if (options.test_fraction > 0) {
    splits = split_train_test(splits.train, options.test_fraction, options.seed);
  } else {
    splits.test = to_dataset({}, name, "test", classes, height, width, channels, resize);
  }
  return splits;
}

}  // namespace troupe::data
