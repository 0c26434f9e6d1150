// CSV tables: label / target columns by name, splits, and every error with
// its line number and column.
#include <gtest/gtest.h>

#include "models/data/csv.hpp"
#include "models/data/error.hpp"
#include "models/data/load.hpp"
#include "tests/models/test_data_files.hpp"

namespace troupe::data {
namespace {

using kernels::Shape;
using testing::error_of;
using testing::TempDir;
using testing::write_file;

const char* const iris_like =
    "sepal_length, sepal_width ,species\r\n"
    "5.1,3.5,0\r\n"
    "\r\n"
    "4.9,3.0,2\r\n"
    "6.2,-2.9e0,1\r\n";

TEST(DataCsv, LastColumnIsTheLabelByDefault) {
  TempDir dir;
  write_file(dir.file("iris.csv"), iris_like);
  const Splits s = load_dataset(dir.file("iris.csv"));
  EXPECT_EQ(s.train.size(), 3);
  EXPECT_EQ(s.test.size(), 0);
  EXPECT_EQ(s.train.num_classes, 3);
  EXPECT_EQ(s.train.features.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.train.features.to_vector(), (std::vector<float>{5.1f, 3.5f, 4.9f, 3.0f, 6.2f, -2.9f}));
  EXPECT_EQ(s.train.labels.to_int_vector(), (std::vector<std::int32_t>{0, 2, 1}));
}

TEST(DataCsv, GzippedCsvIsReadToo) {
  TempDir dir;
  testing::write_gzip(dir.file("iris.csv.gz"), iris_like);
  EXPECT_EQ(load_dataset(dir.file("iris.csv.gz")).train.size(), 3);
}

TEST(DataCsv, RegressionTargetByName) {
  TempDir dir;
  write_file(dir.file("houses.csv"), "price,rooms,area\n100.5,3,70\n200,5,120\n");
  CsvOptions options;
  options.task = Task::regression;
  options.label_column = "price";
  const Splits s = load_csv(dir.file("houses.csv"), options);
  EXPECT_EQ(s.train.labels.shape(), (Shape{2, 1}));
  EXPECT_EQ(s.train.labels.to_vector(), (std::vector<float>{100.5f, 200.0f}));
  EXPECT_EQ(s.train.features.to_vector(), (std::vector<float>{3, 70, 5, 120}));

  options.label_column = "cost";
  const std::string message = error_of<DataError>([&] { load_csv(dir.file("houses.csv"), options); });
  EXPECT_NE(message.find("no column named 'cost'"), std::string::npos) << message;
  EXPECT_NE(message.find("price, rooms, area"), std::string::npos) << message;
}

// --label-column N: a column's number from 1 when no column has that name;
// a float label in classification suggests regression.
TEST(DataCsv, TheLabelColumnByNumberAndAFloatLabelSuggestsRegression) {
  TempDir dir;
  write_file(dir.file("houses.csv"), "price,rooms,area\n100.5,3,70\n200,5,120\n");
  CsvOptions options;
  options.task = Task::regression;
  options.label_column = "1";
  const Splits s = load_csv(dir.file("houses.csv"), options);
  EXPECT_EQ(s.train.labels.to_vector(), (std::vector<float>{100.5f, 200.0f}));
  EXPECT_EQ(s.train.features.to_vector(), (std::vector<float>{3, 70, 5, 120}));
  options.label_column = "2";
  EXPECT_EQ(load_csv(dir.file("houses.csv"), options).train.labels.to_vector(), (std::vector<float>{3, 5}));
  options.label_column = "4";
  std::string message = error_of<DataError>([&] { load_csv(dir.file("houses.csv"), options); });
  EXPECT_NE(message.find("label column 4: the header has columns 1 to 3"), std::string::npos) << message;
  options = CsvOptions{};
  options.label_column = "price";
  message = error_of<DataError>([&] { load_csv(dir.file("houses.csv"), options); });
  EXPECT_NE(message.find("houses.csv:2: column 1 (price): label '100.5' is not an integer class id"), std::string::npos)
      << message;
  EXPECT_NE(message.find("give --task regress"), std::string::npos) << message;
}

// --test-data: a second file's every example is the test split, read as the
// first; in classification both take the larger class count.
TEST(DataCsv, ASecondFileIsTheTestSplit) {
  TempDir dir;
  write_file(dir.file("train.csv"), "a,b,y\n1,2,0\n3,4,1\n5,6,0\n");
  write_file(dir.file("test.csv"), "a,b,y\n7,8,2\n");
  LoadOptions options;
  options.test_data = dir.file("test.csv");
  const Splits s = load_dataset(dir.file("train.csv"), options);
  EXPECT_EQ(s.train.size(), 3);
  ASSERT_EQ(s.test.size(), 1);
  EXPECT_EQ(s.test.split, "test");
  EXPECT_EQ(s.test.features.to_vector(), (std::vector<float>{7, 8}));
  EXPECT_EQ(s.train.num_classes, 3);
  EXPECT_EQ(s.test.num_classes, 3);

  write_file(dir.file("wide.csv"), "a,b,c,y\n7,8,9,1\n");
  options.test_data = dir.file("wide.csv");
  std::string message = error_of<DataError>([&] { load_dataset(dir.file("train.csv"), options); });
  EXPECT_NE(message.find("same columns"), std::string::npos) << message;
  options.test_data = dir.file("test.csv");
  options.csv.test_fraction = 0.5;
  message = error_of<DataError>([&] { load_dataset(dir.file("train.csv"), options); });
  EXPECT_NE(message.find("one or the other"), std::string::npos) << message;
  options.csv.test_fraction = 0;
  options.test_data = "fashion-mnist";
  message = error_of<DataError>([&] { load_dataset(dir.file("train.csv"), options); });
  EXPECT_NE(message.find("give a .csv file or images:DIR"), std::string::npos) << message;
}

TEST(DataCsv, SeededTestSplit) {
  TempDir dir;
  std::string text = "a,b,label\n";
  for (int i = 0; i < 50; ++i)
    text += std::to_string(i) + "," + std::to_string(2 * i) + "," + std::to_string(i % 4) + "\n";
  write_file(dir.file("t.csv"), text);
  CsvOptions options;
  options.test_fraction = 0.2;
  options.seed = 5;
  const Splits a = load_csv(dir.file("t.csv"), options);
  EXPECT_EQ(a.train.size(), 40);
  EXPECT_EQ(a.test.size(), 10);
  EXPECT_EQ(a.train.num_classes, 4);
  EXPECT_EQ(load_csv(dir.file("t.csv"), options).test.features.to_vector(), a.test.features.to_vector());
  options.seed = 6;
  EXPECT_NE(load_csv(dir.file("t.csv"), options).test.features.to_vector(), a.test.features.to_vector());
}

struct BadCsv {
  const char* text;
  const char* expected;
};

TEST(DataCsv, BadRowsNameLineAndColumn) {
  const BadCsv cases[] = {
      {"x,y,label\n1,2,0\n1,2\n", "bad.csv:3: expected 3 columns as in the header, found 2"},
      {"x,y,label\n1,2,0\n1,2,0,4\n", "bad.csv:3: expected 3 columns as in the header, found 4"},
      {"x,y,label\n1,2,0\n\n1,abc,1\n", "bad.csv:4: column 2 (y): 'abc' is not a number"},
      {"x,y,label\n1,,0\n", "bad.csv:2: column 2 (y): '' is not a number"},
      {"x,y,label\n1,nan,0\n", "bad.csv:2: column 2 (y): 'nan' is not a number"},
      {"x,y,label\n1,2,1.5\n", "bad.csv:2: column 3 (label): label '1.5' is not an integer class id >= 0"},
      {"x,y,label\n1,2,-1\n", "bad.csv:2: column 3 (label): label '-1' is not an integer class id >= 0"},
      {"label\n1\n", "bad.csv:1: the header names 1 column"},
  };
  TempDir dir;
  for (const auto& c : cases) {
    write_file(dir.file("bad.csv"), c.text);
    try {
      load_csv(dir.file("bad.csv"));
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
      EXPECT_EQ(e.file(), dir.file("bad.csv"));
    }
  }
  write_file(dir.file("bad.csv"), "x,label\n1,7\n");
  CsvOptions options;
  options.num_classes = 5;
  const std::string range = error_of<DataError>([&] { load_csv(dir.file("bad.csv"), options); });
  EXPECT_NE(range.find("bad.csv:2: column 2 (label): label 7 is outside [0, 5)"), std::string::npos) << range;
  write_file(dir.file("empty.csv"), "\n\n");
  EXPECT_THROW(load_csv(dir.file("empty.csv")), DataError);
}

// A cell's own text in an error: a NUL cut the message short, an ESC or
// CR reached the terminal, and a 10,000-byte cell made a 10,000-byte error.
// Control bytes are shown as '?', and a cell is cut at 80 bytes.
TEST(DataCsv, ACellsTextInAnErrorIsPrintableAndShort) {
  TempDir dir;
  write_file(dir.file("bad.csv"), std::string("x,y\x1b[2J,label\n1,a\0b\rc,0\n", 24));
  std::string e = error_of<DataError>([&] { load_csv(dir.file("bad.csv")); });
  EXPECT_NE(e.find("bad.csv:2: column 2 (y?[2J): 'a?b?c' is not a number"), std::string::npos) << e;
  write_file(dir.file("bad.csv"), "x,y,label\n1," + std::string(10000, 'z') + ",0\n");
  e = error_of<DataError>([&] { load_csv(dir.file("bad.csv")); });
  EXPECT_NE(e.find("column 2 (y): '" + std::string(80, 'z') + "...' is not a number"), std::string::npos) << e;
  EXPECT_LT(e.size(), 400u) << e;
}

// fuzz/csv found it: a number finite as a double but beyond a float's range
// (1e39, -1e300) became an infinite feature or target in the tensors.
TEST(DataCsv, ANumberBeyondTheFloatRangeIsAnError) {
  TempDir dir;
  write_file(dir.file("big.csv"), "x,y,label\n1,2,0\n1,1e39,1\n");
  std::string e = error_of<DataError>([&] { load_csv(dir.file("big.csv")); });
  EXPECT_NE(e.find("big.csv:3: column 2 (y): 1e39 is outside the range of a 32-bit float"), std::string::npos) << e;
  write_file(dir.file("big.csv"), "x,target\n1,-1e300\n");
  CsvOptions regression;
  regression.task = Task::regression;
  e = error_of<DataError>([&] { load_csv(dir.file("big.csv"), regression); });
  EXPECT_NE(e.find("big.csv:2: column 2 (target): -1e300 is outside the range"), std::string::npos) << e;
  // The largest float, and a double below the smallest normal float, still read.
  write_file(dir.file("big.csv"), "x,target\n3.4028234e38,1e-40\n");
  const Splits s = load_csv(dir.file("big.csv"), regression);
  EXPECT_EQ(s.train.features.to_vector(), (std::vector<float>{3.4028234e38f}));
}

}  // namespace
}  // namespace troupe::data
