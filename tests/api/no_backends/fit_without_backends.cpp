// A program that links troupe's API but not troupe_backends (the object
// library whose static initialiser registers the compute backends). It used
// to link fine and then hang forever in fit(); it must fail at once with a
// message that says what is missing. Run by api_tests
// (Api.FitWithoutBackendsFailsAtOnce).
#include <cstdio>
#include <exception>

#include <troupe/troupe.hpp>

int main() {
  try {
    troupe::MirroredStrategy strategy(troupe::parse_devices("cpu:0,cpu:1"));
    troupe::FitConfig c;
    c.model = "mlp";
    c.data = "fashion-mnist";
    c.epochs = 1;
    c.max_steps = 5;
    strategy.fit(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit failed: %s\n", e.what());
    return 3;
  }
  std::fprintf(stderr, "fit returned without a backend\n");
  return 0;
}
