// The seed tutorial's linear regression (TensorFlow 1's first example):
// y = 2x + noise, x uniform in [-1, 1], noise ~ N(0, sigma), one feature.
// Generated, seeded, identical on every host: x_i and the noise of example i
// are counter-based random numbers (kernels/math/random.hpp).
#pragma once

#include <cstdint>

#include "models/data/dataset.hpp"

namespace troupe::data {

struct LinregOptions {
  std::int64_t train_examples = 1000;
  std::int64_t test_examples = 200;
  float slope = 2.0f;
  float sigma = 0.33f;  // the TF1 example's noise: randn * 0.33
  std::uint64_t seed = 0;
};

// Regression: features f32 [N, 1], targets f32 [N, 1]. Train and test are
// drawn from different streams of the seed.
Splits make_linreg(const LinregOptions& options = {});

}  // namespace troupe::data
