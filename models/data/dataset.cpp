#include "models/data/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "models/data/epoch_plan.hpp"
#include "models/data/error.hpp"

namespace troupe::data {

using kernels::DType;
using kernels::Shape;
using kernels::Tensor;

namespace {

Shape drop_leading(const Shape& shape) {
  if (shape.rank() == 0) return Shape{};
  return Shape(std::vector<std::int64_t>(shape.dims().begin() + 1, shape.dims().end()));
}

Shape with_leading(std::int64_t n, const Shape& example) {
  std::vector<std::int64_t> dims{n};
  dims.insert(dims.end(), example.dims().begin(), example.dims().end());
  return Shape(std::move(dims));
}

// Bytes of one example's row in a tensor whose leading dimension is N.
std::size_t row_bytes(const Tensor& t) {
  return static_cast<std::size_t>(drop_leading(t.shape()).numel()) * kernels::element_size(t.dtype());
}

void check_output(const char* what, const Tensor& out, const Tensor& source, std::int64_t k) {
  const Shape want = drop_leading(source.shape());
  if (!out.device().is_cpu() || out.dtype() != source.dtype() || out.rank() != source.rank() ||
      drop_leading(out.shape()) != want || out.size(0) < k) {
    throw std::invalid_argument(std::string("Dataset::gather: ") + what + " must be a host " +
                                kernels::to_string(source.dtype()) + " tensor of shape [B" +
                                (want.rank() ? ", " + want.str().substr(1) : std::string("]")) +
                                " with B >= " + std::to_string(k) + ", got " + out.describe());
  }
}

}  // namespace

const char* to_string(Task task) { return task == Task::classification ? "classification" : "regression"; }

std::int64_t Dataset::size() const {
  if (!features.defined() || features.rank() == 0) return 0;
  if (window > 0) return std::max<std::int64_t>(0, (features.size(0) - 1) / window);
  return features.size(0);
}

std::int64_t Dataset::offsets() const {
  if (window <= 0) return size();
  return features.defined() ? std::max<std::int64_t>(0, features.size(0) - window) : 0;
}

Shape Dataset::feature_shape() const { return window > 0 ? Shape{window} : drop_leading(features.shape()); }
Shape Dataset::label_shape() const { return window > 0 ? Shape{window} : drop_leading(labels.shape()); }

void Dataset::validate() const {
  const std::string who = name + "/" + split + ": ";
  if (window > 0) {
    if (!features.defined() || features.rank() != 1 || features.dtype() != DType::i32 || !features.device().is_cpu())
      throw DataError(who + "text must be a host i32 tensor [n] of token ids, got " + features.describe());
    if (features.size(0) < window + 2)
      throw DataError(who + std::to_string(features.size(0)) + " tokens, fewer than the window " +
                      std::to_string(window) + " + 2");
    if (num_classes < 2 || static_cast<int>(vocabulary.size()) != num_classes)
      throw DataError(who + "a text's vocabulary must hold its " + std::to_string(num_classes) +
                      " (>= 2) token ids, one byte each");
    const std::int32_t* ids = features.i32();
    for (std::int64_t i = 0; i < features.size(0); ++i)
      if (ids[i] < 0 || ids[i] >= num_classes)
        throw DataError(who + "token id " + std::to_string(ids[i]) + " at byte " + std::to_string(i) +
                        " is outside [0, " + std::to_string(num_classes) + ")");
    return;
  }
  if (!features.defined() || features.rank() < 2 || !features.device().is_cpu())
    throw DataError(who + "features must be a host tensor [N, ...], got " + features.describe());
  const std::int64_t n = features.size(0);
  if (task == Task::classification) {
    if (labels.dtype() != DType::i32 || labels.shape() != Shape{n})
      throw DataError(who + "classification labels must be i32[" + std::to_string(n) + "], got " + labels.describe());
    if (num_classes < 1) throw DataError(who + "num_classes must be >= 1");
    const std::int32_t* y = labels.i32();
    for (std::int64_t i = 0; i < n; ++i) {
      if (y[i] < 0 || y[i] >= num_classes)
        throw DataError(who + "label " + std::to_string(y[i]) + " of example " + std::to_string(i) +
                        " is outside [0, " + std::to_string(num_classes) + ")");
    }
    if (!class_names.empty() && static_cast<int>(class_names.size()) != num_classes)
      throw DataError(who + std::to_string(class_names.size()) + " class names for " + std::to_string(num_classes) +
                      " classes");
  } else {
    if (labels.dtype() != DType::f32 || labels.rank() != 2 || labels.size(0) != n)
      throw DataError(who + "regression targets must be f32[" + std::to_string(n) + ", d], got " + labels.describe());
  }
}

namespace {

// gather() of a text's windows (Dataset::window).
std::int64_t gather_windows(const Dataset& d, const std::vector<std::int64_t>& offsets_in, const Tensor& features_out,
                            const Tensor& labels_out) {
  const std::int64_t window = d.window;
  const std::string& name = d.name;
  const std::string& split = d.split;
  const auto k = static_cast<std::int64_t>(offsets_in.size());
  for (const Tensor* out : {&features_out, &labels_out}) {
    if (!out->device().is_cpu() || out->dtype() != DType::i32 || out->rank() != 2 || out->size(1) != window ||
        out->size(0) < k)
      throw std::invalid_argument("Dataset::gather: " + name + "/" + split + " needs host i32 tensors of shape [B, " +
                                  std::to_string(window) + "] with B >= " + std::to_string(k) + ", got " +
                                  out->describe());
  }
  const std::int64_t limit = d.offsets();
  const std::int32_t* ids = d.features.i32();
  std::int32_t* x = features_out.i32();
  std::int32_t* y = labels_out.i32();
  const auto row = static_cast<std::size_t>(window);
  for (std::int64_t r = 0; r < k; ++r) {
    const std::int64_t o = offsets_in[static_cast<std::size_t>(r)];
    if (o < 0 || o >= limit)
      throw std::out_of_range("Dataset::gather: " + name + "/" + split + " has window offsets [0, " +
                              std::to_string(limit) + "), offset " + std::to_string(o) + " requested");
    std::memcpy(x + static_cast<std::size_t>(r) * row, ids + o, row * sizeof(std::int32_t));
    std::memcpy(y + static_cast<std::size_t>(r) * row, ids + o + 1, row * sizeof(std::int32_t));
  }
  return k;
}

}  // namespace

std::int64_t Dataset::gather(const std::vector<std::int64_t>& indices, const Tensor& features_out,
                             const Tensor& labels_out) const {
  const auto k = static_cast<std::int64_t>(indices.size());
  if (window > 0) return gather_windows(*this, indices, features_out, labels_out);
  check_output("features_out", features_out, features, k);
  check_output("labels_out", labels_out, labels, k);
  const std::int64_t n = size();
  const std::size_t fx = row_bytes(features), fy = row_bytes(labels);
  const auto* x = static_cast<const unsigned char*>(features.raw());
  const auto* y = static_cast<const unsigned char*>(labels.raw());
  auto* xo = static_cast<unsigned char*>(features_out.raw());
  auto* yo = static_cast<unsigned char*>(labels_out.raw());
  for (std::int64_t row = 0; row < k; ++row) {
    const std::int64_t i = indices[static_cast<std::size_t>(row)];
    if (i < 0 || i >= n)
      throw std::out_of_range("Dataset::gather: " + name + "/" + split + " has " + std::to_string(n) +
                              " examples, index " + std::to_string(i) + " requested");
    std::memcpy(xo + static_cast<std::size_t>(row) * fx, x + static_cast<std::size_t>(i) * fx, fx);
    std::memcpy(yo + static_cast<std::size_t>(row) * fy, y + static_cast<std::size_t>(i) * fy, fy);
  }
  return k;
}

Tensor Dataset::make_feature_batch(std::int64_t batch) const {
  return Tensor::zeros(with_leading(batch, feature_shape()), features.dtype());
}

Tensor Dataset::make_label_batch(std::int64_t batch) const {
  if (window > 0) return Tensor::zeros(with_leading(batch, label_shape()), DType::i32);
  return Tensor::zeros(with_leading(batch, label_shape()), labels.dtype());
}

std::string Dataset::describe() const {
  std::ostringstream out;
  if (window > 0) {
    out << name << "/" << split << ": " << features.size(0) << " bytes (" << size() << " windows of " << window
        << "), vocabulary " << vocabulary.size() << " bytes";
    return out.str();
  }
  out << name << "/" << split << ": " << size() << " examples, features " << features.describe();
  if (task == Task::classification) {
    out << ", " << num_classes << " classes";
  } else {
    out << ", regression targets " << labels.describe();
  }
  if (!vocabulary.empty()) out << ", vocabulary " << vocabulary.size();
  return out.str();
}

PlanOptions plan_options(const Dataset& d, std::int64_t batch, bool shuffle, std::uint64_t seed, bool drop_remainder) {
  PlanOptions o{d.size(), batch, shuffle, seed, drop_remainder};
  if (d.window > 0) o.windows = {d.offsets(), d.window};
  return o;
}

Dataset select_examples(const Dataset& source, const std::vector<std::int64_t>& indices, const std::string& split) {
  Dataset out;
  out.name = source.name;
  out.split = split;
  out.task = source.task;
  out.num_classes = source.num_classes;
  out.class_names = source.class_names;
  out.vocabulary = source.vocabulary;
  const auto k = static_cast<std::int64_t>(indices.size());
  out.features = Tensor::empty(with_leading(k, source.feature_shape()), source.features.dtype());
  out.labels = Tensor::empty(with_leading(k, source.label_shape()), source.labels.dtype());
  source.gather(indices, out.features, out.labels);
  return out;
}

SplitIndices split_indices(std::int64_t n, double test_fraction, std::uint64_t seed) {
  if (!(test_fraction >= 0.0 && test_fraction < 1.0))
    throw std::invalid_argument("train/test split: test_fraction must be in [0, 1), got " +
                                std::to_string(test_fraction));
  const auto test_count = static_cast<std::int64_t>(std::llround(static_cast<double>(n) * test_fraction));
  // A stream of its own ("SPLIT"), apart from the epoch shuffles of `seed`.
  const std::vector<std::int64_t> order = epoch_permutation(n, seed ^ 0x53504c4954ULL, 0, true);
  SplitIndices out;
  out.test.assign(order.begin(), order.begin() + test_count);
  out.train.assign(order.begin() + test_count, order.end());
  std::sort(out.test.begin(), out.test.end());
  std::sort(out.train.begin(), out.train.end());
  return out;
}

Splits split_train_test(const Dataset& all, double test_fraction, std::uint64_t seed) {
  const SplitIndices indices = split_indices(all.size(), test_fraction, seed);
  return {select_examples(all, indices.train, "train"), select_examples(all, indices.test, "test")};
}

}  // namespace troupe::data
