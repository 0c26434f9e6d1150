// What a cluster test compares with: the mlp on Fashion-MNIST (seed 5,
// sgd) trained in one process, on the CPU, with the cluster's global batch.
// Replicas in sync that split that batch take the same steps.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "models/trainer.hpp"

namespace troupe::testing {

// ||a - b|| / ||b||; infinite when the sizes differ (never a pass).
inline double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d) / std::sqrt(n);
}

inline std::vector<float> single_process_mlp_parameters(std::int64_t global_batch, std::int64_t steps, float lr) {
  models::TrainConfig one;
  one.model = "mlp";
  one.data = "fashion-mnist";
  one.seed = 5;
  one.batch = global_batch;
  one.max_steps = steps;
  one.optimizer.name = "sgd";
  one.lr = lr;
  models::Trainer single(one);
  single.run();
  return single.model().parameters().to_vector();
}

}  // namespace troupe::testing
