// Image folders in the Keras image_dataset_from_directory layout, decoded
// with libpng and libjpeg-turbo once at load into channels-first floats:
//
//   DIR/<class>/*.png|*.jpg|*.jpeg                     one split (test: --test-fraction)
//   DIR/train/<class>/...  and  DIR/test/<class>/...   both splits
//
// Classes are the sub-folders, sorted by name (byte order, as Python's
// sorted()); the label is the class's index. Files in a class folder are
// sorted by name; extensions match case-insensitively; other files are
// skipped. With both splits, test/ must hold the same class folders.
//
// Features f32 [N, C, H, W], pixels / 255; C is 1 (grey) or 3 (rgb).
//   size   default: the first image's (the first file of the first class);
//          then every image must have it. Given: each image is resized
//          to it, bilinear with half-pixel centres (below).
//   color  default: rgb if any image is colour (a PNG of colour type RGB,
//          RGBA or palette, a JPEG with 3 components), else grey. Grey to
//          rgb repeats the channel; rgb to grey is ITU-R BT.601 luma,
//          0.299 R + 0.587 G + 0.114 B (as tf.image.rgb_to_grayscale).
//          Alpha is dropped (not composited). 16-bit PNGs are reduced to
//          8 bits by libpng's simplified API, read as sRGB when they carry
//          no gAMA or sRGB chunk (257 k becomes k); a file marked linear
//          is gamma-encoded to sRGB. A JPEG's CMYK is refused (libjpeg).
//
// Resize, as tf.image.resize(method="bilinear", antialias=False): output
// pixel (y, x) of an out_h x out_w image samples the input at
//   sy = (y + 0.5) * in_h / out_h - 0.5,   sx likewise,
// clamped below at 0; y0 = floor(sy), y1 = min(y0 + 1, in_h - 1),
// fy = sy - y0, and the value is the bilinear mix of the four neighbours.
// It runs on the 8-bit values as floats, before the / 255.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/data/dataset.hpp"

namespace troupe::data {

enum class ImageColor : std::uint8_t { automatic, grey, rgb };

struct ImageOptions {
  int height = 0;  // 0 with width 0: the first image's size
  int width = 0;
  ImageColor color = ImageColor::automatic;
  double test_fraction = 0;  // in [0, 1): without a test/ folder, examples moved to test
  std::uint64_t seed = 0;    // chooses them (split_train_test)
};

// One decoded image: 8-bit samples, row-major, interleaved channels.
struct DecodedImage {
  int height = 0;
  int width = 0;
  int channels = 0;  // 1 grey, 3 rgb
  std::vector<std::uint8_t> pixels;
};

// Decodes a PNG or JPEG held in `bytes` (chosen by its magic, not its
// name). Throws DataError naming `path` on a corrupt, truncated or
// unsupported image; never crashes on any input.
DecodedImage decode_image(const std::string& bytes, const std::string& path);

// Bilinear resize with half-pixel centres (the convention above) of
// interleaved 8-bit samples into floats in [0, 255], same channel order.
std::vector<float> resize_bilinear(const DecodedImage& image, int out_height, int out_width);

// Whether `directory` holds class folders of images (directly or in
// train/): the IDX loader's error suggests images:DIR then.
bool looks_like_image_folders(const std::string& directory);

// Both splits of the folder `directory`; "images:DIR" in load_dataset.
Splits load_image_folders(const std::string& directory, const ImageOptions& options = {});

}  // namespace troupe::data
