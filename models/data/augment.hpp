// Data augmentation of image batches, as the resnet anchor's augment()
// (../shared/anchors/torch_resnet.py): a random crop of the image
// zero-padded by P pixels on every side (`crop:P`; the crop keeps the
// image's size), then a horizontal flip with probability 1/2 (`flip`).
// `--augment crop:2,flip` is both, in that order.
//
// An example's crop and flip are a pure function of (seed, epoch, example
// index): not of the replica that draws it, its row in the batch or the
// step, so 1 and 2 replicas, a resume and a view change all see the same
// images, and the anchor's "new draw every epoch" holds. The data-loader
// actors apply it while they prefetch (off the step's critical path);
// models::Trainer (one device) applies it after gathering a batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe::data {

struct Augmentation {
  int crop_padding = 0;  // crop:P (0: no crop)
  bool flip = false;

  // "", "none", "flip", "crop:2", "crop:2,flip" (either order). Throws
  // std::invalid_argument naming the text and the forms.
  static Augmentation parse(const std::string& text);
  bool empty() const { return crop_padding == 0 && !flip; }
  std::string str() const;  // "crop:2,flip"; "none" when empty

  // What one example gets: its crop's offset into the padded image (each in
  // [0, 2P]; P, P is the image itself) and whether it is flipped.
  struct Draw {
    int x = 0, y = 0;
    bool flip = false;
  };
  Draw draw(std::uint64_t seed, std::int64_t epoch, std::int64_t example) const;

  // Augments rows [0, rows) of a host float32 batch [B, C, H, W] in place,
  // row i holding example indices[i]. Throws std::invalid_argument for a
  // batch that is not one of images.
  void apply(const kernels::Tensor& batch, std::int64_t rows, const std::vector<std::int64_t>& indices,
             std::uint64_t seed, std::int64_t epoch) const;

  // Throws std::invalid_argument unless examples of `feature_shape` can be
  // augmented (C, H, W floats, the crop's padding at most H and W).
  void check_images(const kernels::Shape& feature_shape, kernels::DType dtype) const;
};

}  // namespace troupe::data
