// IDX files, the format of MNIST and Fashion-MNIST (LeCun et al.), gzipped
// or raw (detected by the gzip magic, not the name). Big-endian throughout:
//
//   images  u32 magic 0x00000803 (u8 data, 3 dims), u32 count, u32 rows,
//           u32 cols, then count*rows*cols pixels, u8, row-major
//   labels  u32 magic 0x00000801 (u8 data, 1 dim), u32 count, then count
//           labels, u8
//
// A directory in the MNIST layout holds four of them:
//   {train,t10k}-{images-idx3,labels-idx1}-ubyte   (each optionally .gz)
#pragma once

#include <string>

#include "kernels/tensor.hpp"
#include "models/data/dataset.hpp"

namespace troupe::data {

// f32 [count, 1, rows, cols], pixels scaled to [0, 1] (p / 255).
kernels::Tensor read_idx_images(const std::string& path);
// i32 [count], each checked to lie in [0, num_classes).
kernels::Tensor read_idx_labels(const std::string& path, int num_classes = 10);

// One split from an images file and a labels file whose counts must match.
Dataset load_idx_split(const std::string& images_path, const std::string& labels_path, const std::string& name,
                       const std::string& split, int num_classes = 10);

// The path of `stem` (e.g. "train-images-idx3-ubyte") in `directory`, with
// ".gz" or without; empty when neither exists.
std::string find_idx_file(const std::string& directory, const std::string& stem);

// The four files' stems, train images/labels then test images/labels.
const char* const* idx_directory_stems();  // 4 entries

// Whether `directory` holds all four files.
bool is_idx_directory(const std::string& directory);

// Train ("train-*") and test ("t10k-*") splits of an IDX directory. A
// missing file is a DataError listing every missing one; `missing_hint` is
// appended to its message (how to get the files).
Splits load_idx_directory(const std::string& directory, const std::string& name, int num_classes = 10,
                          const std::string& missing_hint = "");

}  // namespace troupe::data
