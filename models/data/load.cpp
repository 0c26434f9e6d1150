#include "models/data/load.hpp"

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

Splits load_dataset(const std::string& name_or_path, const LoadOptions& options) {
  for (const auto& entry : table()) {
    if (name_or_path == entry.name) return entry.load(options);
  }
  if (ends_with(name_or_path, ".csv") || ends_with(name_or_path, ".csv.gz")) return load_csv(name_or_path, options.csv);
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
          ", or a path: a .csv file, images:DIR or an IDX directory (FILE.csv with a header row and the"
          " label last; images:DIR for DIR/<class>/*.png|*.jpg; a directory holding"
          " {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz])",
      name_or_path);
}

}  // namespace troupe::data
