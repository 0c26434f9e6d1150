// A user's first troupe program, as docs/BUILDING.md's install example builds it: TF1's linear
// regression (y = 2x + noise) on two CPU replicas in sync, through the public
// API of an installed troupe, then the trained model's forward pass.
//
// Prints "replicas R", "steps N", "test_loss L", "bias B", "slope W" and
// "f(0.5) Y", one a line, for tests/install/install_package.sh to check.
#include <cstdio>
#include <exception>

#include <troupe/troupe.hpp>

int main() {
  try {
    troupe::MirroredStrategy strategy(troupe::parse_devices("cpu:0,cpu:1"));
    troupe::FitConfig config;
    config.model = "linreg";
    config.data = "linreg";
    config.optimizer.name = "sgd";
    config.lr = 0.1f;
    config.batch = 16;  // per replica
    config.epochs = 1000;
    config.max_steps = 150;
    const troupe::History history = strategy.fit(config);
    std::printf("replicas %d\n", strategy.num_replicas_in_sync());
    std::printf("steps %lld\n", static_cast<long long>(history.steps));
    std::printf("test_loss %.4f\n", history.final.test_loss);

    // A forward pass of the trained model on x = 0, 0.5 and 1: the bias, the
    // prediction, and with them the slope it learned.
    troupe::Model& model = *history.model;
    const troupe::Tensor x = troupe::Tensor::from_vector({3, 1}, std::vector<float>{0.0f, 0.5f, 1.0f});
    const std::vector<float> y = model.forward(x, /*training=*/false).to_vector();
    std::printf("bias %.4f\nslope %.4f\nf(0.5) %.4f\n", y.at(0), y.at(2) - y.at(0), y.at(1));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit_linreg: %s\n", e.what());
    return 1;
  }
}
