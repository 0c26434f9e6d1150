// Dataset: gathering batches, validation, train/test splits; the linreg
// generator; the by-name entry point's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "models/data/dataset.hpp"
#include "models/data/error.hpp"
#include "models/data/linreg.hpp"
#include "models/data/load.hpp"
#include "tests/models/test_data_files.hpp"

namespace troupe::data {
namespace {

using kernels::DType;
using kernels::Shape;
using kernels::Tensor;
using testing::error_of;

// 6 examples of 2x2 features valued 10*i + j, label i % 3.
Dataset small_dataset() {
  Dataset d;
  d.name = "small";
  d.split = "train";
  d.num_classes = 3;
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) x.push_back(static_cast<float>(10 * i + j));
    y.push_back(i % 3);
  }
  d.features = Tensor::from_vector(Shape{6, 2, 2}, x);
  d.labels = Tensor::from_vector(Shape{6}, y);
  d.validate();
  return d;
}

TEST(DataDataset, GatherCopiesRowsIntoPreallocatedTensors) {
  const Dataset d = small_dataset();
  EXPECT_EQ(d.size(), 6);
  EXPECT_EQ(d.feature_shape(), (Shape{2, 2}));
  Tensor x = d.make_feature_batch(4);
  Tensor y = d.make_label_batch(4);
  EXPECT_EQ(x.shape(), (Shape{4, 2, 2}));
  EXPECT_EQ(y.shape(), (Shape{4}));
  EXPECT_EQ(d.gather({5, 0, 3}, x, y), 3);
  const auto xs = x.to_vector();
  EXPECT_EQ(std::vector<float>(xs.begin(), xs.begin() + 4), (std::vector<float>{50, 51, 52, 53}));
  EXPECT_EQ(std::vector<float>(xs.begin() + 4, xs.begin() + 8), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(std::vector<float>(xs.begin() + 12, xs.end()), (std::vector<float>{0, 0, 0, 0}));  // untouched
  EXPECT_EQ(y.to_int_vector(), (std::vector<std::int32_t>{2, 0, 0, 0}));
  EXPECT_EQ(d.gather({}, x, y), 0);
}

TEST(DataDataset, GatherRejectsBadOutputsAndIndices) {
  const Dataset d = small_dataset();
  Tensor x = d.make_feature_batch(2), y = d.make_label_batch(2);
  EXPECT_THROW(d.gather({0, 1, 2}, x, y), std::invalid_argument);  // batch too small
  EXPECT_THROW(d.gather({0}, Tensor::zeros(Shape{2, 4}), y), std::invalid_argument);
  EXPECT_THROW(d.gather({0}, x, Tensor::zeros(Shape{2})), std::invalid_argument);  // f32 labels
  const std::string message = error_of<std::out_of_range>([&] { d.gather({6}, x, y); });
  EXPECT_NE(message.find("index 6"), std::string::npos) << message;
}

TEST(DataDataset, ValidateChecksLabelRange) {
  Dataset d = small_dataset();
  d.num_classes = 2;
  const std::string message = error_of<DataError>([&] { d.validate(); });
  EXPECT_NE(message.find("label 2 of example 2 is outside [0, 2)"), std::string::npos) << message;
  d.num_classes = 3;
  d.labels.i32()[4] = -1;
  EXPECT_THROW(d.validate(), DataError);
}

TEST(DataDataset, SplitIsSeededSortedAndComplete) {
  Dataset d = small_dataset();
  const auto a = split_indices(100, 0.2, 9);
  EXPECT_EQ(a.test.size(), 20u);
  EXPECT_EQ(a.train.size(), 80u);
  EXPECT_TRUE(std::is_sorted(a.test.begin(), a.test.end()));
  std::vector<std::int64_t> all = a.train;
  all.insert(all.end(), a.test.begin(), a.test.end());
  std::sort(all.begin(), all.end());
  for (std::int64_t i = 0; i < 100; ++i) EXPECT_EQ(all[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(split_indices(100, 0.2, 9).test, a.test);
  EXPECT_NE(split_indices(100, 0.2, 10).test, a.test);
  EXPECT_THROW(split_indices(10, 1.0, 0), std::invalid_argument);

  const Splits s = split_train_test(d, 0.5, 1);
  EXPECT_EQ(s.train.size(), 3);
  EXPECT_EQ(s.test.size(), 3);
  EXPECT_EQ(s.test.split, "test");
  EXPECT_EQ(s.test.num_classes, 3);
  const Splits none = split_train_test(d, 0.0, 1);
  EXPECT_EQ(none.test.size(), 0);
  EXPECT_EQ(none.train.features.to_vector(), d.features.to_vector());
}

TEST(DataLinreg, SeededSlopeTwoWithNoise) {
  LinregOptions options;
  options.seed = 3;
  const Splits s = make_linreg(options);
  EXPECT_EQ(s.train.size(), 1000);
  EXPECT_EQ(s.test.size(), 200);
  EXPECT_EQ(s.train.task, Task::regression);
  EXPECT_EQ(s.train.features.shape(), (Shape{1000, 1}));
  EXPECT_EQ(s.train.labels.shape(), (Shape{1000, 1}));
  const auto x = s.train.features.to_vector(), y = s.train.labels.to_vector();
  // Least-squares slope and the residual spread recover 2 and sigma.
  double sxy = 0, sxx = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_GE(x[i], -1.0f);
    EXPECT_LT(x[i], 1.0f);
    sxy += x[i] * y[i];
    sxx += x[i] * x[i];
  }
  const double slope = sxy / sxx;
  EXPECT_NEAR(slope, 2.0, 0.1);
  double residual = 0;
  for (std::size_t i = 0; i < x.size(); ++i) residual += (y[i] - slope * x[i]) * (y[i] - slope * x[i]);
  EXPECT_NEAR(std::sqrt(residual / static_cast<double>(x.size())), 0.33, 0.03);

  EXPECT_EQ(make_linreg(options).train.labels.to_vector(), y);
  EXPECT_NE(s.test.features.to_vector()[0], x[0]);
  options.seed = 4;
  EXPECT_NE(make_linreg(options).train.features.to_vector(), x);
}

TEST(DataLoad, ByNameAndUnknownNames) {
  const Splits s = load_dataset("linreg");
  EXPECT_EQ(s.train.name, "linreg");
  EXPECT_EQ(known_dataset_names(), (std::vector<std::string>{"fashion-mnist", "linreg", "wordnet", "kjv"}));
  const std::string message = error_of<DataError>([] { load_dataset("imagenet"); });
  for (const char* part : {"unknown dataset 'imagenet'", "fashion-mnist", "linreg", "wordnet", ".csv", "images-idx3"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " missing from: " << message;
  }
  const std::string missing_csv = error_of<DataError>([] { load_dataset("/nonexistent/table.csv"); });
  EXPECT_NE(missing_csv.find("/nonexistent/table.csv: cannot open"), std::string::npos) << missing_csv;
}

}  // namespace
}  // namespace troupe::data
