// CSV tables: a header row naming the columns, then one example per line.
// Every column but the label (classification) or target (regression) column
// is a feature; all must be numbers. Fields are separated by commas and may
// be padded with spaces; quoting is not supported; blank lines are skipped;
// "\r\n" line ends are accepted. A gzipped file is read too (by its magic).
//
//   sepal_length,sepal_width,species
//   5.1,3.5,0
#pragma once

#include <cstdint>
#include <string>

#include "models/data/dataset.hpp"

namespace troupe::data {

struct CsvOptions {
  // The label / target column's name, or its number from 1 when no column
  // has that name; empty: the last column.
  std::string label_column;
  Task task = Task::classification;
  int num_classes = 0;       // classification: 0 means max label + 1
  double test_fraction = 0;  // in [0, 1): examples moved to the test split
  std::uint64_t seed = 0;    // chooses the test examples (split_train_test)
};

// Features f32 [N, columns - 1]; labels i32 [N] (integers >= 0) or targets
// f32 [N, 1]. Errors are DataErrors of the form "PATH:LINE: ..." naming the
// column, e.g. "data.csv:7: column 3 (petal_width): 'abc' is not a number".
Splits load_csv(const std::string& path, const CsvOptions& options = {});

}  // namespace troupe::data
