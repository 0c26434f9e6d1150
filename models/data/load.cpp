#include "models/data/load.hpp"

#include <algorithm>
#include <functional>

#include "models/data/error.hpp"
#include "models/data/fashion_mnist.hpp"
#include "models/data/file_bytes.hpp"
#include "models/data/idx.hpp"
#include "models/data/images.hpp"

namespace troupe::data {

namespace {

struct NamedDataset {
  const char* name;
  const char* description;
  std::function<Splits(const LoadOptions&)> load;
};

const std::vector<NamedDataset>& table() {
  static const std::vector<NamedDataset> datasets = {
      {"fashion-mnist", "Fashion-MNIST, 28x28 images, 10 classes (Debian dataset-fashion-mnist)",
       [](const LoadOptions& o) { return load_fashion_mnist(o.fashion_mnist_dir); }},
      {"linreg", "generated y = 2x + N(0, sigma) regression, 1 feature",
       [](const LoadOptions& o) { return make_linreg(o.linreg); }},
      {"wordnet", "WordNet glosses labelled by lexicographer file, 45 classes (Debian wordnet-base)",
       [](const LoadOptions& o) { return load_wordnet(o.wordnet); }},
      {"kjv", "the King James Bible's 4.3 MB of bytes, for a language model (Debian bible-kjv)",
       [](const LoadOptions& o) { return load_kjv(o.text); }},
  };
  return datasets;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> known_dataset_names() {
  std::vector<std::string> names;
  for (const auto& entry : table()) names.emplace_back(entry.name);
  return names;
}

namespace {
Splits load_one(const std::string& name_or_path, const LoadOptions& options);
}  // namespace

// --test-data: the second source's examples, all of them, are the test split.
Splits load_dataset(const std::string& name_or_path, const LoadOptions& options) {
  if (options.test_data.empty()) return load_one(name_or_path, options);
  const std::string& test_path = options.test_data;
  const bool test_is_table = ends_with(test_path, ".csv") || ends_with(test_path, ".csv.gz");
  const bool test_is_images = test_path.compare(0, 7, "images:") == 0;
  if (!test_is_table && !test_is_images)
    throw UnknownDatasetError("test data '" + test_path +
                                  "': give a .csv file or images:DIR (read as the training data "
                                  "is, every example of it the test split)",
                              test_path);
  if (options.csv.test_fraction > 0 || options.images.test_fraction > 0)
    throw UnknownDatasetError(
        "test data '" + test_path + "' and a test fraction together: the test split is one or the other", test_path);
  LoadOptions test_options = options;
  test_options.test_data.clear();
  Splits splits = load_one(name_or_path, test_options);
  if (splits.test.size() > 0)
    throw UnknownDatasetError("dataset '" + name_or_path + "' has a test split of its own (" +
                                  std::to_string(splits.test.size()) + " examples); test data '" + test_path +
                                  "' would replace it: leave one out",
                              test_path);
  Splits other = load_one(test_path, test_options);
  Dataset test = std::move(other.train);
  const Dataset& train = splits.train;
  if (test.size() == 0) throw DataError("test data " + test_path + ": no examples", test_path);
  if (test.feature_shape() != train.feature_shape() || test.features.dtype() != train.features.dtype() ||
      test.task != train.task || test.label_shape() != train.label_shape())
    throw DataError("test data " + test_path + " gives " + test.describe() + ", but the training data " + name_or_path +
                        " gives " + train.describe() +
                        ": both must have the same columns (or image size "
                        "and colour) and task",
                    test_path);
  if (train.task == Task::classification) {
    const int classes = std::max(train.num_classes, test.num_classes);
    splits.train.num_classes = classes;
    test.num_classes = classes;
    if (!train.class_names.empty() && test.class_names != train.class_names)
      throw DataError("test data " + test_path + ": its class folders are not the training data's (" +
                          std::to_string(test.class_names.size()) + " against " +
                          std::to_string(train.class_names.size()) + ", or named otherwise)",
                      test_path);
  }
  test.split = "test";
  splits.test = std::move(test);
  splits.test.validate();
  return splits;
}

namespace {

Splits load_one(const std::string& name_or_path, const LoadOptions& options) {
  for (const auto& entry : table()) {
    if (name_or_path == entry.name) return entry.load(options);
  }
  if (ends_with(name_or_path, ".csv") || ends_with(name_or_path, ".csv.gz")) return load_csv(name_or_path, options.csv);
  const std::string text_prefix = "text:";
  if (name_or_path.compare(0, text_prefix.size(), text_prefix) == 0)
    return load_text_file(name_or_path.substr(text_prefix.size()), options.text);
  const std::string images_prefix = "images:";
  if (name_or_path.compare(0, images_prefix.size(), images_prefix) == 0)
    return load_image_folders(name_or_path.substr(images_prefix.size()), options.images);
  if (directory_exists(name_or_path)) {
    // A folder of class folders read as IDX would only report four missing
    // files: say what it looks like instead.
    const bool images = !is_idx_directory(name_or_path) && looks_like_image_folders(name_or_path);
    return load_idx_directory(
        name_or_path, name_or_path, 10,
        images ? "it holds class folders of images: for those, give --data images:" + name_or_path : std::string());
  }

  // One line, as every error the CLI prints, so that whoever reads only the
  // first line (a log, a scheduler's summary) still sees the names.
  std::string known;
  for (const auto& entry : table()) known += std::string(known.empty() ? " " : ", ") + entry.name;
  throw UnknownDatasetError(
      "unknown dataset '" + name_or_path + "'; known names:" + known +
          ", or a path: a .csv file, images:DIR, text:FILE or an IDX directory (FILE.csv with a header row and"
          " the label last; images:DIR for DIR/<class>/*.png|*.jpg; text:FILE for a language model on FILE's bytes;"
          " a directory holding"
          " {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz])",
      name_or_path);
}

}  // namespace

}  // namespace troupe::data
