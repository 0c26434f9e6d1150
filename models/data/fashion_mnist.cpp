#include "models/data/fashion_mnist.hpp"

#include <cstdlib>

#include "models/data/idx.hpp"

namespace troupe::data {

std::string fashion_mnist_directory(const std::string& directory) {
  if (!directory.empty()) return directory;
  if (const char* env = std::getenv(fashion_mnist_dir_env); env && *env) return env;
  return fashion_mnist_default_dir;
}

Splits load_fashion_mnist(const std::string& directory) {
  const std::string where = fashion_mnist_directory(directory);
  Splits splits = load_idx_directory(
      where, "fashion-mnist", 10,
      std::string("install the Debian package dataset-fashion-mnist (scripts/setup.sh does), or point ") +
          fashion_mnist_dir_env + " at a directory holding these files");
  const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                          "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  splits.train.class_names = names;
  splits.test.class_names = names;
  return splits;
}

}  // namespace troupe::data
