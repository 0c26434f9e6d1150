// Fashion-MNIST (Zalando; Xiao, Rasul, Vollgraf 2017): 28x28 grey images of
// clothing in 10 classes, 60000 train and 10000 test, in the MNIST IDX
// layout. Debian ships it as package dataset-fashion-mnist in
// /usr/share/datasets/fashion-mnist.
#pragma once

#include <string>

#include "models/data/dataset.hpp"

namespace troupe::data {

constexpr const char* fashion_mnist_default_dir = "/usr/share/datasets/fashion-mnist";
constexpr const char* fashion_mnist_dir_env = "TROUPE_FASHION_MNIST_DIR";

// The directory to read: `directory` when not empty, else the environment
// variable TROUPE_FASHION_MNIST_DIR when set, else the Debian location.
std::string fashion_mnist_directory(const std::string& directory = "");

// Both splits, features f32 [N, 1, 28, 28] in [0, 1], labels i32 [N] in
// [0, 10), with class names. Missing files: a DataError that lists them and
// says to install the Debian package dataset-fashion-mnist.
Splits load_fashion_mnist(const std::string& directory = "");

}  // namespace troupe::data
