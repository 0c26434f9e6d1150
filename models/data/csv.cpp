#include "models/data/csv.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "models/data/error.hpp"
#include "models/data/file_bytes.hpp"
#include "util/printable.hpp"

namespace troupe::data {

using kernels::Shape;
using kernels::Tensor;

namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (;;) {
    const auto comma = line.find(',', start);
    fields.push_back(trim(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) return fields;
    start = comma + 1;
  }
}

bool parse_number(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && errno != ERANGE && std::isfinite(value);
}

bool parse_label(const std::string& text, long& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  value = std::strtol(text.c_str(), &end, 10);
  return end == text.c_str() + text.size() && errno != ERANGE && value >= 0 && value <= 1000000;
}

}  // namespace

Splits load_csv(const std::string& path, const CsvOptions& options) {
  const std::string bytes = read_file_bytes(path);
  const auto fail = [&](std::int64_t line, const std::string& what) -> DataError {
    return DataError(path + ":" + std::to_string(line) + ": " + what, path, -1, line);
  };
  // The file's own text in a message: control bytes as '?' (a NUL would cut
  // the message short), and a long field cut, so that one bad cell of a
  // huge line is a readable error.
  const auto shown = [](const std::string& text) { return util::printable(text, 80); };

  std::vector<std::string> header;
  std::int64_t label_col = -1;
  std::vector<float> features;
  std::vector<float> targets;
  std::vector<std::int32_t> labels;
  std::int64_t rows = 0;

  std::int64_t line_number = 0;
  std::size_t start = 0;
  while (start < bytes.size()) {
    auto end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    std::string line = bytes.substr(start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty()) continue;
    std::vector<std::string> fields = split_fields(line);

    if (header.empty()) {
      header = fields;
      if (header.size() < 2)
        throw fail(line_number, "the header names " + std::to_string(header.size()) +
                                    " column; need at least one feature and one label column");
      if (options.label_column.empty()) {
        label_col = static_cast<std::int64_t>(header.size()) - 1;
      } else {
        const auto found = std::find(header.begin(), header.end(), options.label_column);
        // A column's number (from 1, as the errors count them) when no
        // column has that name.
        const std::string& wanted = options.label_column;
        if (found == header.end() && wanted.find_first_not_of("0123456789") == std::string::npos &&
            wanted.size() < 10) {
          const long number = std::strtol(wanted.c_str(), nullptr, 10);
          if (number < 1 || number > static_cast<long>(header.size()))
            throw fail(line_number,
                       "label column " + wanted + ": the header has columns 1 to " + std::to_string(header.size()));
          label_col = number - 1;
          continue;
        }
        if (found == header.end() || std::count(header.begin(), header.end(), options.label_column) > 1) {
          std::string names;
          for (const auto& h : header) names += (names.empty() ? "" : ", ") + shown(h);
          throw fail(line_number, std::string(found == header.end() ? "no" : "more than one") + " column named '" +
                                      shown(options.label_column) + "' in the header (columns: " + names + ")");
        }
        label_col = found - header.begin();
      }
      continue;
    }

    if (fields.size() != header.size())
      throw fail(line_number, "expected " + std::to_string(header.size()) + " columns as in the header, found " +
                                  std::to_string(fields.size()));
    for (std::size_t c = 0; c < fields.size(); ++c) {
      const std::string column = "column " + std::to_string(c + 1) + " (" + shown(header[c]) + ")";
      if (static_cast<std::int64_t>(c) == label_col && options.task == Task::classification) {
        long label = 0;
        if (!parse_label(fields[c], label)) {
          double number = 0;
          const bool a_target = parse_number(fields[c], number);
          throw fail(line_number, column + ": label '" + shown(fields[c]) + "' is not an integer class id >= 0" +
                                      (a_target ? " (a regression target? then give --task regress)" : ""));
        }
        if (options.num_classes > 0 && label >= options.num_classes)
          throw fail(line_number, column + ": label " + shown(fields[c]) + " is outside [0, " +
                                      std::to_string(options.num_classes) + ")");
        labels.push_back(static_cast<std::int32_t>(label));
        continue;
      }
      double value = 0;
      if (!parse_number(fields[c], value))
        throw fail(line_number, column + ": '" + shown(fields[c]) + "' is not a number");
      // Finite as a double is not enough: the tensors hold floats, and 1e39
      // became infinity there (fuzz/csv found it). Below FLT_MAX + half an
      // ulp a double rounds to a finite float.
      if (!(std::fabs(value) < 0x1.ffffffp+127))
        throw fail(line_number,
                   column + ": " + shown(fields[c]) + " is outside the range of a 32-bit float (about +-3.4e38)");
      (static_cast<std::int64_t>(c) == label_col ? targets : features).push_back(static_cast<float>(value));
    }
    ++rows;
  }
  if (header.empty()) throw DataError(path + ": empty CSV file (no header row)", path, 0, 1);

  const auto columns = static_cast<std::int64_t>(header.size()) - 1;
  Dataset all;
  all.name = path;
  all.split = "all";
  all.task = options.task;
  all.features = Tensor::from_vector(Shape{rows, columns}, features);
  if (options.task == Task::classification) {
    all.labels = Tensor::from_vector(Shape{rows}, labels);
    const std::int32_t max_label = labels.empty() ? 0 : *std::max_element(labels.begin(), labels.end());
    all.num_classes = options.num_classes > 0 ? options.num_classes : max_label + 1;
  } else {
    all.labels = Tensor::from_vector(Shape{rows, 1}, targets);
  }
  all.validate();
  return split_train_test(all, options.test_fraction, options.seed);
}

}  // namespace troupe::data
