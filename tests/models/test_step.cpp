// models/step: the one training step every driver takes (the Trainer, the
// device actor, the custom loop): the seed of a replica's step, forward,
// loss and backward exactly as a hand-written step gives them, and the
// finite checks' messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>

#include "kernels/math/random.hpp"
#include "models/loss.hpp"
#include "models/model.hpp"
#include "models/spec.hpp"
#include "models/step.hpp"

namespace troupe::models {
namespace {

using kernels::Device;
using kernels::DType;
using kernels::Shape;

const char* kSpec = "name step\ninput 6\ndense units=8\nrelu\ndropout rate=0.5\ndense units=3\n";

Tensor random_features(std::int64_t n, std::uint64_t seed) {
  Tensor x = Tensor::empty(Shape{n, 6}, DType::f32, Device::cpu());
  float* p = x.f32();
  for (std::int64_t i = 0; i < x.numel(); ++i)
    p[i] = static_cast<float>(kernels::math::random_bits(seed, static_cast<std::uint64_t>(i)) % 2001) / 1000.0f - 1.0f;
  return x;
}

Tensor labels(std::int64_t n) {
  Tensor y = Tensor::empty(Shape{n}, DType::i32, Device::cpu());
  for (std::int64_t i = 0; i < n; ++i) y.i32()[i] = static_cast<std::int32_t>(i % 3);
  return y;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), static_cast<std::size_t>(a.numel()) * 4) == 0;
}

TEST(Step, SeedsDifferByReplicaAndStepAndRepeatForTheSame) {
  std::set<std::uint64_t> seen;
  for (int rank = 0; rank < 4; ++rank)
    for (std::int64_t step = 0; step < 50; ++step) seen.insert(step_seed(7, rank, step));
  EXPECT_EQ(seen.size(), 200u);
  EXPECT_EQ(step_seed(7, 2, 9), step_seed(7, 2, 9));
  EXPECT_NE(step_seed(7, 0, 9), step_seed(8, 0, 9));
}

// forward_backward is forward, the loss and backward, nothing else: the
// same bits as those three called by hand with the same step seed.
TEST(Step, ForwardBackwardIsTheHandWrittenStep) {
  const ModelSpec spec = ModelSpec::parse(kSpec, "test");
  Model a(spec, Device::cpu()), b(spec, Device::cpu());
  a.initialize(3);
  b.initialize(3);
  Loss la(LossKind::sparse_categorical_crossentropy), lb(LossKind::sparse_categorical_crossentropy);
  const Tensor x = random_features(5, 11), y = labels(5);
  Tensor dout_a, dout_b;

  a.set_step_seed(step_seed(1, 0, 4));
  StepTimes times;
  const StepResult r = forward_backward(a, la, x, y, 0.2f, dout_a, &times);

  b.set_step_seed(step_seed(1, 0, 4));
  const Tensor& out = b.forward(x, true);
  dout_b = Tensor::empty(out.shape(), DType::f32, Device::cpu());
  const double loss_sum = lb.sum(out, y, dout_b, 0.2f);
  b.backward(dout_b);

  EXPECT_EQ(r.loss_sum, loss_sum);
  ASSERT_NE(r.output, nullptr);
  EXPECT_TRUE(same_bits(*r.output, out));
  EXPECT_TRUE(same_bits(dout_a, dout_b));
  EXPECT_TRUE(same_bits(a.gradients(), b.gradients()));
  EXPECT_LE(times.forward, times.backward);
  EXPECT_LE(times.backward, times.end);

  // Another step seed draws another dropout mask: another gradient.
  a.set_step_seed(step_seed(1, 1, 4));
  forward_backward(a, la, x, y, 0.2f, dout_a);
  EXPECT_FALSE(same_bits(a.gradients(), b.gradients()));
}

// The last, partial batch of an epoch has another shape: the output's
// gradient buffer follows it.
TEST(Step, TheOutputGradientBufferFollowsTheBatch) {
  Tensor dout;
  const Tensor out8 = Tensor::zeros(Shape{8, 3}), out5 = Tensor::zeros(Shape{5, 3});
  EXPECT_EQ(output_gradient_buffer(dout, out8).shape(), (Shape{8, 3}));
  const void* first = dout.raw();
  output_gradient_buffer(dout, out8);
  EXPECT_EQ(dout.raw(), first);  // kept while the shape holds
  EXPECT_EQ(output_gradient_buffer(dout, out5).shape(), (Shape{5, 3}));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const NonFiniteError& e) {
    return e.what();
  }
  return "(no NonFiniteError)";
}

TEST(Step, ADivergedStepSaysWhatWhereAndWhatToTry) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(error_of([&] { check_loss_finite(nan, 5, 2); }),
            "the training loss is not finite (nan) at step 5 of replica 2: training diverged (try a lower --lr or a "
            "warm-up)");
  EXPECT_EQ(error_of([&] { check_loss_finite(INFINITY, 12); }),
            "the training loss is not finite (inf) at step 12: training diverged (try a lower --lr or a warm-up)");
  EXPECT_EQ(error_of([] { check_loss_finite(1.5, 1); }), "(no NonFiniteError)");

  Tensor g = Tensor::zeros(Shape{40});
  EXPECT_EQ(error_of([&] { check_gradient_finite(g, 3, 0); }), "(no NonFiniteError)");
  g.f32()[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(error_of([&] { check_gradient_finite(g, 3, 0); }),
            "the gradient is not finite at step 3 of replica 0: training diverged (try a lower --lr or a warm-up)");
}

}  // namespace
}  // namespace troupe::models
