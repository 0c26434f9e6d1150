// Small checks shared by the op tests (test_activation.cpp, test_loss.cpp,
// ...), on top of harness.hpp.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/kernels/harness.hpp"

namespace troupe::kernels::testing {

// The element counts every op is tested at: a single element, sizes that are
// not multiples of any vector width, and one large enough to cross every
// blocking and threading threshold.
inline const std::vector<std::int64_t>& op_sizes() {
  static const std::vector<std::int64_t> sizes{1, 7, 33, 1000, 300000};
  return sizes;
}

// ref first, then every backend under test: for checks against a formula
// (not against ref), which ref itself must pass too.
inline std::vector<BackendUnderTest> ref_and_backends_under_test() {
  std::vector<BackendUnderTest> out{{"ref", Device::cpu()}};
  for (auto& b : backends_under_test()) out.push_back(b);
  return out;
}

// Bit-exact comparison that reports the first differing element, not two
// 300000-element vectors.
inline ::testing::AssertionResult same_values(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && !(std::isnan(got[i]) && std::isnan(want[i])))
      return ::testing::AssertionFailure()
             << "element " << i << " of " << got.size() << ": " << got[i] << " vs " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// `call` must throw std::invalid_argument whose text contains every one of
// `parts` (the op's name and the shapes involved).
inline void expect_invalid_argument(const std::function<void()>& call, std::initializer_list<std::string> parts) {
  try {
    call();
    ADD_FAILURE() << "no exception; expected std::invalid_argument naming " << *parts.begin();
  } catch (const std::invalid_argument& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << e.what() << "' does not mention '" << part << "'";
  }
}

inline std::vector<double> to_doubles(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

}  // namespace troupe::kernels::testing
