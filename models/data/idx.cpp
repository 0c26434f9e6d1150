#include "models/data/idx.hpp"

#include <cstdint>
#include <sstream>

#include "models/data/error.hpp"
#include "models/data/file_bytes.hpp"

namespace troupe::data {

using kernels::Shape;
using kernels::Tensor;

namespace {

constexpr std::uint32_t images_magic = 0x00000803;
constexpr std::uint32_t labels_magic = 0x00000801;

std::string hex(std::uint32_t value) {
  std::ostringstream out;
  out << "0x";
  out.width(8);
  out.fill('0');
  out << std::hex << value;
  return out.str();
}

// The big-endian u32 at `offset`; the caller has checked the header length.
std::uint32_t be32(const std::string& bytes, std::size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + offset;
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

// Reads `path` and checks its header: magic, then `dims` u32 dimensions.
// Returns the dimensions; the data starts at 4 + 4 * dims.
std::vector<std::uint32_t> read_header(const std::string& path, const std::string& bytes, std::uint32_t magic,
                                       const char* kind) {
  const std::size_t dims = magic & 0xff;
  const std::size_t header = 4 + 4 * dims;
  if (bytes.size() < 4)
    throw DataError(path + ": not an IDX " + kind + " file: " + std::to_string(bytes.size()) +
                        " bytes, shorter than the 4-byte magic",
                    path, 0);
  const std::uint32_t found = be32(bytes, 0);
  if (found != magic)
    throw DataError(path + ": not an IDX " + kind + " file: magic at offset 0 is " + hex(found) + ", expected " +
                        hex(magic) + (found == (magic ^ 0x2u) ? " (this looks like the other kind of IDX file)" : ""),
                    path, 0);
  if (bytes.size() < header)
    throw DataError(path + ": IDX " + kind + " header truncated at offset " + std::to_string(bytes.size()) +
                        ": expected " + std::to_string(header) + " header bytes",
                    path, static_cast<std::int64_t>(bytes.size()));
  std::vector<std::uint32_t> out;
  for (std::size_t d = 0; d < dims; ++d) out.push_back(be32(bytes, 4 + 4 * d));
  return out;
}

// Checks that the data after the header is exactly `expected` bytes.
void check_data_size(const std::string& path, const std::string& bytes, std::size_t header, std::uint64_t expected,
                     const std::string& what) {
  const std::uint64_t have = bytes.size() - header;
  if (have < expected)
    throw DataError(path + ": truncated at offset " + std::to_string(bytes.size()) + ": expected " +
                        std::to_string(expected) + " bytes of " + what + " from offset " + std::to_string(header) +
                        " (file size " + std::to_string(header + expected) + "), found " + std::to_string(have),
                    path, static_cast<std::int64_t>(bytes.size()));
  if (have > expected)
    throw DataError(path + ": " + std::to_string(have - expected) + " unexpected trailing bytes at offset " +
                        std::to_string(header + expected) + " after " + std::to_string(expected) + " bytes of " + what,
                    path, static_cast<std::int64_t>(header + expected));
}

}  // namespace

Tensor read_idx_images(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  const auto dims = read_header(path, bytes, images_magic, "images");
  const std::uint64_t count = dims[0], rows = dims[1], cols = dims[2];
  if (rows == 0 || cols == 0)
    throw DataError(path + ": IDX images of " + std::to_string(rows) + "x" + std::to_string(cols) +
                        " pixels (offset 8): rows and cols must be positive",
                    path, 8);
  // Each dimension is below 2^32, so rows * cols cannot overflow; the
  // product with count can, and must not wrap round to the file's size.
  if (count > 0 && rows * cols > bytes.size() / count + 1)
    throw DataError(path + ": truncated at offset " + std::to_string(bytes.size()) + ": " + std::to_string(count) +
                        " images of " + std::to_string(rows) + "x" + std::to_string(cols) +
                        " cannot fit in a file of " + std::to_string(bytes.size()) + " bytes",
                    path, static_cast<std::int64_t>(bytes.size()));
  const std::size_t header = 16;
  check_data_size(
      path, bytes, header, count * rows * cols,
      "pixels (" + std::to_string(count) + " images of " + std::to_string(rows) + "x" + std::to_string(cols) + ")");
  Tensor images = Tensor::empty(
      Shape{static_cast<std::int64_t>(count), 1, static_cast<std::int64_t>(rows), static_cast<std::int64_t>(cols)});
  const auto* pixels = reinterpret_cast<const unsigned char*>(bytes.data()) + header;
  float* out = images.f32();
  const std::size_t n = static_cast<std::size_t>(count * rows * cols);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(pixels[i]) * (1.0f / 255.0f);
  return images;
}

Tensor read_idx_labels(const std::string& path, int num_classes) {
  const std::string bytes = read_file_bytes(path);
  const auto dims = read_header(path, bytes, labels_magic, "labels");
  const std::uint64_t count = dims[0];
  const std::size_t header = 8;
  check_data_size(path, bytes, header, count, "labels (" + std::to_string(count) + " labels)");
  Tensor labels = Tensor::empty(Shape{static_cast<std::int64_t>(count)}, kernels::DType::i32);
  const auto* values = reinterpret_cast<const unsigned char*>(bytes.data()) + header;
  std::int32_t* out = labels.i32();
  for (std::size_t i = 0; i < count; ++i) {
    if (values[i] >= num_classes)
      throw DataError(path + ": label " + std::to_string(values[i]) + " of example " + std::to_string(i) +
                          " at offset " + std::to_string(header + i) + " is outside [0, " +
                          std::to_string(num_classes) + ")",
                      path, static_cast<std::int64_t>(header + i));
    out[i] = values[i];
  }
  return labels;
}

Dataset load_idx_split(const std::string& images_path, const std::string& labels_path, const std::string& name,
                       const std::string& split, int num_classes) {
  Dataset out;
  out.name = name;
  out.split = split;
  out.task = Task::classification;
  out.num_classes = num_classes;
  out.features = read_idx_images(images_path);
  out.labels = read_idx_labels(labels_path, num_classes);
  if (out.features.size(0) != out.labels.size(0))
    throw DataError(images_path + " holds " + std::to_string(out.features.size(0)) + " images but " + labels_path +
                        " holds " + std::to_string(out.labels.size(0)) + " labels; the counts must match",
                    images_path);
  out.validate();
  return out;
}

const char* const* idx_directory_stems() {
  static const char* const stems[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                       "t10k-labels-idx1-ubyte"};
  return stems;
}

std::string find_idx_file(const std::string& directory, const std::string& stem) {
  for (const std::string& candidate : {directory + "/" + stem + ".gz", directory + "/" + stem}) {
    if (file_exists(candidate)) return candidate;
  }
  return {};
}

bool is_idx_directory(const std::string& directory) {
  if (!directory_exists(directory)) return false;
  for (int i = 0; i < 4; ++i) {
    if (find_idx_file(directory, idx_directory_stems()[i]).empty()) return false;
  }
  return true;
}

Splits load_idx_directory(const std::string& directory, const std::string& name, int num_classes,
                          const std::string& missing_hint) {
  std::string paths[4];
  std::string missing;
  for (int i = 0; i < 4; ++i) {
    paths[i] = find_idx_file(directory, idx_directory_stems()[i]);
    if (paths[i].empty())
      missing += std::string(missing.empty() ? "" : ", ") + directory + "/" + idx_directory_stems()[i] + "[.gz]";
  }
  if (!missing.empty())
    throw DataError(name + ": missing " + missing + (missing_hint.empty() ? "" : "; " + missing_hint), directory);
  Splits splits;
  splits.train = load_idx_split(paths[0], paths[1], name, "train", num_classes);
  splits.test = load_idx_split(paths[2], paths[3], name, "test", num_classes);
  return splits;
}

}  // namespace troupe::data
