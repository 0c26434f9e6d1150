// Reference losses and metrics: softmax cross-entropy, mean squared error,
// top-k accuracy and the double-accumulated sums. Plain loops over rows, in
// the element type T (double for gradient checks).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace troupe::kernels::ref {

// Labels are data, not shapes, so ops.cpp cannot check them; a label outside
// [0, c) would read past the row, so it is refused with the row named.
inline void check_labels(const char* op, std::int64_t n, std::int64_t c, const std::int32_t* labels) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= c)
      throw std::out_of_range(std::string(op) + ": label " + std::to_string(labels[i]) + " of row " +
                              std::to_string(i) + " is outside [0, " + std::to_string(c) + ")");
  }
}

// loss[i] = logsumexp(row) - sum_j t_j row[j] with the smoothed target
// t = (1 - smoothing) onehot(label) + smoothing / c (t = onehot for 0); the
// row maximum is subtracted before exponentiating so that large logits
// cannot overflow exp.
// dlogits[i] = grad_scale * (softmax(row) - t), skipped when null.
template <class T>
void softmax_xent(std::int64_t n, std::int64_t c, const T* logits, const std::int32_t* labels, T* loss, T* dlogits,
                  T grad_scale, T smoothing = T(0)) {
  check_labels("softmax_xent", n, c, labels);
  const double e = double(smoothing);
  for (std::int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * c;
    T max = row[0];
    for (std::int64_t j = 1; j < c; ++j) max = row[j] > max ? row[j] : max;
    double sum = 0.0, row_sum = 0.0;
    for (std::int64_t j = 0; j < c; ++j) {
      sum += std::exp(double(row[j] - max));
      row_sum += double(row[j]);
    }
    const double log_sum = std::log(sum);
    const double target_dot = (1.0 - e) * double(row[labels[i]]) + (e / double(c)) * row_sum;
    loss[i] = T(double(max) + log_sum - target_dot);
    if (dlogits) {
      T* drow = dlogits + i * c;
      for (std::int64_t j = 0; j < c; ++j) {
        const double softmax = std::exp(double(row[j] - max) - log_sum);
        const double target = (j == labels[i] ? 1.0 - e : 0.0) + e / double(c);
        drow[j] = T(double(grad_scale) * (softmax - target));
      }
    }
  }
}

// loss[i] = mean over the row of (pred - target)^2;
// dpred = grad_scale * 2 * (pred - target) / d, skipped when null.
template <class T>
void mse(std::int64_t n, std::int64_t d, const T* pred, const T* target, T* loss, T* dpred, T grad_scale) {
  for (std::int64_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (std::int64_t j = 0; j < d; ++j) {
      const double diff = double(pred[i * d + j]) - double(target[i * d + j]);
      sum += diff * diff;
    }
    loss[i] = T(sum / double(d));
    if (dpred) {
      for (std::int64_t j = 0; j < d; ++j)
        dpred[i * d + j] = grad_scale * T(2) * (pred[i * d + j] - target[i * d + j]) / T(d);
    }
  }
}

// correct[i] = 1 when fewer than k logits of row i are strictly greater than
// the label's (so ties count in the label's favour only up to k).
template <class T>
void topk_correct(std::int64_t n, std::int64_t c, std::int64_t k, const T* logits, const std::int32_t* labels,
                  T* correct) {
  check_labels("topk_correct", n, c, labels);
  for (std::int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * c;
    const T label_logit = row[labels[i]];
    std::int64_t greater = 0;
    for (std::int64_t j = 0; j < c; ++j)
      if (row[j] > label_logit || std::isnan(row[j])) ++greater;  // a NaN logit outranks everything
    correct[i] = greater < k && !std::isnan(label_logit) ? T(1) : T(0);
  }
}

template <class T>
double reduce_sum(std::size_t n, const T* x) {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += double(x[i]);
  return sum;
}

template <class T>
double reduce_sum_squares(std::size_t n, const T* x) {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  return sum;
}

}  // namespace troupe::kernels::ref
