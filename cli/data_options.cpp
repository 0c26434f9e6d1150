// How train, eval and predict read the data: the image folders' options
// (models/data/images.hpp), the CSV table's task and label column
// (models/data/csv.hpp), and where the test split comes from. eval and
// predict must read the data as training did, or the model's input or the
// test split differ: they take the same flags.
#include <cstdio>
#include <string>

#include "cli/commands.hpp"
#include "models/data/load.hpp"

namespace troupe::cli {

void add_data_options(CLI::App& command, DataFlags& flags) {
  command
      .add_option("--task", flags.task,
                  "A .csv file's task: classify (the label column holds class ids 0, 1, ...) or regress (it holds "
                  "float targets; the loss is the mean squared error, reported with the mean absolute error)")
      ->check(CLI::IsMember({"classify", "regress"}))
      ->capture_default_str();
  command.add_option("--label-column", flags.label_column,
                     "A .csv file's label or target column: its name in the header, or its number from 1 "
                     "(default: the last column)");
  command
      .add_option("--test-fraction", flags.test_fraction,
                  "A .csv file, or images:DIR without a test/ folder: this fraction of the examples (chosen by a "
                  "fixed seeded permutation, the same on every run and host) is the test split")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  command.add_option("--test-data", flags.test_data,
                     "A second .csv file (or images:DIR) whose every example is the test split, read as --data is");
  command.add_option("--image-size", flags.size,
                     "images:DIR: resize every image to HxW (bilinear, half-pixel centres, as tf.image.resize); "
                     "default: the first image's size, which every image must then have");
  command
      .add_option("--color", flags.color,
                  "images:DIR: grey (1 channel) or rgb (3); auto: rgb if any image has colour, else grey")
      ->check(CLI::IsMember({"auto", "grey", "gray", "rgb"}))
      ->capture_default_str();
  command
      .add_option("--context", flags.context,
                  "kjv, text:FILE: bytes a language model sees at once (T: each example is T bytes and the T bytes "
                  "after them)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
}

void apply_data_options(const DataFlags& flags, data::LoadOptions& options) {
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
  options.csv.test_fraction = flags.test_fraction;
  options.csv.task = flags.task == "regress" ? data::Task::regression : data::Task::classification;
  options.csv.label_column = flags.label_column;
  if (!flags.test_data.empty() && flags.test_fraction > 0)
    throw UsageError("--test-data " + flags.test_data + " and --test-fraction " + std::to_string(flags.test_fraction) +
                     ": the test split is one or the other");
  options.test_data = flags.test_data;
  options.text.context = flags.context;
}

}  // namespace troupe::cli
