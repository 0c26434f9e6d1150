// Dataset: one split of a labelled dataset, held in host memory.
//
//   features  f32 [N, ...feature shape]   (images: [N, 1, 28, 28]; tabular:
//             [N, d]); text datasets hold i32 token ids [N, length] instead
//   labels    i32 [N] with values in [0, num_classes)   (classification)
//             f32 [N, d] targets                        (regression)
//   text      a language model's text (window > 0): features i32 [n] token
//             ids, no labels stored; an example is a window (below)
//
// Fashion-MNIST's 60000 x 784 floats are 188 MB, so everything here is
// in memory; batches are gathered by example index into tensors the caller
// preallocates (a data-loader actor reuses them step after step).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"
#include "models/data/epoch_plan.hpp"

namespace troupe::data {

enum class Task : std::uint8_t { classification, regression };

const char* to_string(Task task);

struct Dataset {
  std::string name;   // "fashion-mnist", "linreg", "wordnet", a file path
  std::string split;  // "train" or "test"
  Task task = Task::classification;
  kernels::Tensor features;
  kernels::Tensor labels;
  int num_classes = 0;                   // classification only
  std::vector<std::string> class_names;  // optional, one per class
  std::vector<std::string> vocabulary;   // text only: id -> word (0 pad, 1 unknown); of windows: id -> its one byte

  // A language model's text (text_corpus.hpp) when > 0: features holds the
  // split's n token ids, and an example is a window of this many ids, T,
  // at an offset o, whose labels are the T ids at o + 1 (the next byte at
  // every position). gather() takes offsets in [0, offsets()), which the
  // epoch plan draws at random (PlanOptions::windows); size() counts the
  // windows that tile the split, (n - 1) / T, which is an epoch of text and
  // what an evaluation reads: example i in order is tile(i) = i * T.
  std::int64_t window = 0;
  std::int64_t offsets() const;
  std::int64_t tile(std::int64_t i) const { return window > 0 ? i * window : i; }

  std::int64_t size() const;
  // The shape of one example's features / label, without the leading N.
  kernels::Shape feature_shape() const;
  kernels::Shape label_shape() const;

  // Checks shapes, dtypes and the label range; throws DataError naming the
  // dataset. Every loader calls it before returning.
  void validate() const;

  // Copies examples `indices` (each in [0, size())) into rows 0..k-1 of the
  // host tensors `features_out` [B, ...feature shape] and `labels_out`
  // [B, ...label shape], B >= k = indices.size(), with this dataset's dtypes.
  // Rows k..B-1 are left as they are. Returns k. Throws std::invalid_argument
  // on a shape, dtype or device mismatch, std::out_of_range on a bad index.
  std::int64_t gather(const std::vector<std::int64_t>& indices, const kernels::Tensor& features_out,
                      const kernels::Tensor& labels_out) const;

  // New host tensors of batch dimension `batch` for gather().
  kernels::Tensor make_feature_batch(std::int64_t batch) const;
  kernels::Tensor make_label_batch(std::int64_t batch) const;

  // "fashion-mnist/train: 60000 examples, features f32[60000, 1, 28, 28], 10 classes"
  std::string describe() const;
};

// The epoch plan of training on `d`: its examples, or its text's windows
// (PlanOptions::windows).
PlanOptions plan_options(const Dataset& d, std::int64_t batch, bool shuffle, std::uint64_t seed, bool drop_remainder);

// Both splits of a loaded dataset. `test` may be empty (0 examples).
struct Splits {
  Dataset train;
  Dataset test;
};

// The rows `indices` of `source` as a new owning dataset with split name
// `split` (used to cut train/test splits out of one table).
Dataset select_examples(const Dataset& source, const std::vector<std::int64_t>& indices, const std::string& split);

// Which examples of n go to train and which to test: test takes
// round(n * test_fraction) chosen by a seeded permutation (the same on every
// run and host); both lists are sorted. test_fraction in [0, 1).
struct SplitIndices {
  std::vector<std::int64_t> train;
  std::vector<std::int64_t> test;
};
SplitIndices split_indices(std::int64_t n, double test_fraction, std::uint64_t seed);

// Cuts `all` into train and test: test takes round(n * test_fraction)
// examples chosen by a seeded permutation (the same on every run and host);
// both keep the original order. test_fraction in [0, 1).
Splits split_train_test(const Dataset& all, double test_fraction, std::uint64_t seed);

}  // namespace troupe::data
