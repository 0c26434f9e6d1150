#include "models/data/linreg.hpp"

#include <stdexcept>
#include <string>

#include <cmath>  // before random.hpp, which uses sqrt/log/cos without including it

#include "kernels/math/random.hpp"

namespace troupe::data {

namespace {

Dataset make_split(const LinregOptions& options, std::int64_t n, const char* split, std::uint64_t stream) {
  if (n < 0) throw std::invalid_argument("linreg: example count must be >= 0, got " + std::to_string(n));
  const std::uint64_t x_seed = kernels::math::random_bits(options.seed, 2 * stream);
  const std::uint64_t noise_seed = kernels::math::random_bits(options.seed, 2 * stream + 1);
  Dataset out;
  out.name = "linreg";
  out.split = split;
  out.task = Task::regression;
  out.features = kernels::Tensor::empty(kernels::Shape{n, 1});
  out.labels = kernels::Tensor::empty(kernels::Shape{n, 1});
  float* x = out.features.f32();
  float* y = out.labels.f32();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::uint64_t>(i);
    x[i] = 2.0f * kernels::math::random_uniform(x_seed, k) - 1.0f;
    y[i] = options.slope * x[i] + options.sigma * kernels::math::random_normal(noise_seed, k);
  }
  out.validate();
  return out;
}

}  // namespace

Splits make_linreg(const LinregOptions& options) {
  if (!(options.sigma >= 0.0f)) throw std::invalid_argument("linreg: sigma must be >= 0");
  return {make_split(options, options.train_examples, "train", 0),
          make_split(options, options.test_examples, "test", 1)};
}

}  // namespace troupe::data
