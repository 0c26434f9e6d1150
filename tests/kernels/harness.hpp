// Shared test machinery for the kernels: random inputs, the backends to run
// a test body on, error norms, and Caffe-style finite-difference gradient
// checks.
//
// The pattern of an op test:
//
//   for (auto& backend : backends_under_test()) {      // cpu, and cuda where a GPU is
//     SCOPED_TRACE(backend.name);
//     auto x = random_tensor({7, 33}, seed);           // host, U(-1, 1)
//     auto want = run_ref([&] { ...ops on host tensors... });
//     auto got = backend.run([&](Device d) { ...same ops on x.to(d)... });
//     EXPECT_LE(rel_error(got, want), 1e-5);
//   }
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/math/random.hpp"
#include "kernels/registry.hpp"
#include "kernels/tensor.hpp"

namespace troupe::kernels::testing {

// A host tensor of U(low, high) values, different for each seed.
inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, float low = -1.0f, float high = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::f32, Device::cpu());
  float* p = t.f32();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = low + (high - low) * math::random_uniform(seed ^ 0x5eedULL, static_cast<std::uint64_t>(i));
  return t;
}

// A host i32 tensor of integers in [0, bound).
inline Tensor random_ints(const Shape& shape, std::uint64_t seed, std::int32_t bound) {
  Tensor t = Tensor::empty(shape, DType::i32, Device::cpu());
  std::int32_t* p = t.i32();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<std::int32_t>(math::random_bits(seed ^ 0x1d5ULL, static_cast<std::uint64_t>(i)) %
                                     static_cast<std::uint64_t>(bound));
  return t;
}

// ||got - want|| / max(||want||, 1e-12), over all elements. Both vectors must
// have the same size; a size mismatch or a NaN gives +inf.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    double d = double(got[i]) - double(want[i]);
    diff += d * d;
    norm += double(want[i]) * double(want[i]);
  }
  double r = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-12);
  return std::isnan(r) ? INFINITY : r;
}
inline double rel_error(const Tensor& got, const Tensor& want) { return rel_error(got.to_vector(), want.to_vector()); }

// A backend to test against ref, with the device its tensors live on.
struct BackendUnderTest {
  std::string name;
  Device device;

  // Runs `body` with this backend selected for `device`; inputs must be
  // copied to `device` inside the body (tensor.to(device)).
  template <class Body>
  auto run(Body&& body) const {
    BackendOverride use(device.kind, name);
    return body(device);
  }
};

// Every registered backend except ref that can run here: cpu always (when
// linked), cuda when a GPU is present.
inline std::vector<BackendUnderTest> backends_under_test() {
  std::vector<BackendUnderTest> out;
  auto& registry = Registry::instance();
  for (const auto& name : registry.names()) {
    if (name == "ref") continue;
    Backend& b = registry.get(name);
    if (b.device_count() <= 0) continue;
    out.push_back({name, b.device_kind() == DeviceKind::cuda ? Device::cuda(0) : Device::cpu()});
  }
  return out;
}

// Runs `body` on the reference backend (host tensors).
template <class Body>
auto run_ref(Body&& body) {
  BackendOverride use(DeviceKind::cpu, "ref");
  return body(Device::cpu());
}

// Skips the current test when nothing but ref is available (the GPU test
// binary on a machine without a GPU).
#define TROUPE_REQUIRE_BACKENDS(list)                                   \
  do {                                                                  \
    if ((list).empty())                                                 \
      GTEST_SKIP() << "no backend to compare with ref on this machine " \
                      "(no GPU, and the cpu backend is not linked)";    \
  } while (0)

// Finite-difference gradient check in the style of Caffe's GradientChecker.
//
// `loss` maps the inputs to a scalar (computed in double by the ref
// templates). `analytic` is d loss / d inputs from the backward pass. Each
// element i is perturbed by +-step and the central difference is compared
// with analytic[i] within threshold * max(|computed|, |estimated|, 1). On a
// failure it reports which element and both values.
inline void check_gradient(const std::string& what, std::vector<double>& inputs, const std::vector<double>& analytic,
                           const std::function<double(const std::vector<double>&)>& loss, double step = 1e-6,
                           double threshold = 1e-5, std::size_t max_checked = 4096) {
  ASSERT_EQ(inputs.size(), analytic.size()) << what;
  // Large inputs: check an evenly spread subset to keep the test fast.
  const std::size_t stride = std::max<std::size_t>(1, inputs.size() / max_checked);
  for (std::size_t i = 0; i < inputs.size(); i += stride) {
    const double saved = inputs[i];
    inputs[i] = saved + step;
    const double plus = loss(inputs);
    inputs[i] = saved - step;
    const double minus = loss(inputs);
    inputs[i] = saved;
    const double estimated = (plus - minus) / (2.0 * step);
    const double computed = analytic[i];
    const double scale = std::max({std::fabs(computed), std::fabs(estimated), 1.0});
    ASSERT_NEAR(computed, estimated, threshold * scale)
        << what << ": gradient element " << i << " of " << inputs.size() << " (analytic " << computed
        << ", finite difference " << estimated << ")";
  }
}

// Deterministic double vectors for gradient checks.
inline std::vector<double> random_doubles(std::size_t n, std::uint64_t seed, double low = -1.0, double high = 1.0) {
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = low + (high - low) * double(math::random_uniform(seed ^ 0xd0b1eULL, i));
  return out;
}

}  // namespace troupe::kernels::testing
