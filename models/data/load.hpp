// One entry point: a dataset by name or path, both splits.
//
//   fashion-mnist      Fashion-MNIST (Debian dataset-fashion-mnist)
//   linreg             generated y = 2x + noise
//   wordnet            WordNet glosses -> lexicographer file (wordnet-base)
//   kjv                the King James Bible's bytes, for a language model (bible-kjv)
//   text:FILE          any file's bytes, for a language model (text_corpus.hpp)
//   PATH.csv[.gz]      a CSV table (csv.hpp)
//   images:DIR         image folders, DIR/<class>/*.png|jpg (images.hpp)
//   DIRECTORY          an IDX directory: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
//
// Adding a dataset: write its loader in its own file, add a line to the
// table in load.cpp (name, one-line description, loader), and a test.
#pragma once

#include <string>
#include <vector>

#include "models/data/csv.hpp"
#include "models/data/dataset.hpp"
#include "models/data/error.hpp"
#include "models/data/images.hpp"
#include "models/data/linreg.hpp"
#include "models/data/text_corpus.hpp"
#include "models/data/wordnet.hpp"

namespace troupe::data {

struct LoadOptions {
  std::string fashion_mnist_dir;  // empty: $TROUPE_FASHION_MNIST_DIR, else the Debian location
  // A second .csv file or images:DIR whose every example is the test
  // split, read with the options of the first (--test-data); empty: the
  // dataset's own test split. Its features must have the training
  // split's shape; in classification both take the larger class count.
  std::string test_data;
  CsvOptions csv;
  ImageOptions images;
  LinregOptions linreg;
  WordnetOptions wordnet;
  TextOptions text;  // kjv, text:FILE: the window (the model's context)
};

// A name that is neither a known dataset nor an existing path: a
// configuration error (the CLI exits 2), where other DataErrors are about
// the data itself.
class UnknownDatasetError : public DataError {
 public:
  using DataError::DataError;
};

// Throws UnknownDatasetError for an unknown name, listing the known names
// and the path forms on one line; otherwise whatever the chosen loader
// reports.
Splits load_dataset(const std::string& name_or_path, const LoadOptions& options = {});

// The names load_dataset knows, in the order of the table.
std::vector<std::string> known_dataset_names();

}  // namespace troupe::data
