// --image-size, --color and --test-fraction: the image folders' options
// (models/data/images.hpp), given to train, eval and predict alike.
#include <cstdio>
#include <string>

#include "cli/commands.hpp"
#include "models/data/load.hpp"

namespace troupe::cli {

void add_image_options(CLI::App& command, ImageFlags& flags) {
  command.add_option("--image-size", flags.size,
                     "images:DIR: resize every image to HxW (bilinear, half-pixel centres, as tf.image.resize); "
                     "default: the first image's size, which every image must then have");
  command
      .add_option("--color", flags.color,
                  "images:DIR: grey (1 channel) or rgb (3); auto: rgb if any image has colour, else grey")
      ->check(CLI::IsMember({"auto", "grey", "gray", "rgb"}))
      ->capture_default_str();
  command
      .add_option("--test-fraction", flags.test_fraction,
                  "images:DIR without a test/ folder: this fraction of the images (chosen by a fixed seeded "
                  "permutation of the sorted file list, the same on every run and host) is the test split")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
}

void apply_image_options(const ImageFlags& flags, data::LoadOptions& options) {
  data::ImageOptions& images = options.images;
  if (!flags.size.empty()) {
    int height = 0, width = 0;
    char end = 0;
    if (std::sscanf(flags.size.c_str(), "%dx%d%c", &height, &width, &end) != 2 || height < 1 || width < 1 ||
        height > 16384 || width > 16384)
      throw UsageError("--image-size '" + flags.size + "': expected HxW, e.g. 28x28, each in [1, 16384]");
    images.height = height;
    images.width = width;
  }
  images.color = flags.color == "rgb"                             ? data::ImageColor::rgb
                 : flags.color == "grey" || flags.color == "gray" ? data::ImageColor::grey
                                                                  : data::ImageColor::automatic;
  images.test_fraction = flags.test_fraction;
}

}  // namespace troupe::cli
