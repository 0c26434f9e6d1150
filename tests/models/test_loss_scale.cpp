// fp16's dynamic loss scale (models/loss_scale.hpp): its rules on real
// gradients, its state among the optimizer's scalars, and --precision fp16
// through the Trainer: an overflow skips the step and halves the scale, the
// run resumes exactly, and it learns what fp32 learns.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "kernels/ops.hpp"
#include "models/loss_scale.hpp"
#include "models/optimizer.hpp"
#include "models/step.hpp"
#include "models/trainer.hpp"

namespace troupe::models {
namespace {

using kernels::Tensor;

TEST(LossScale, OffItScalesNothingAndExportsNothing) {
  LossScale off;
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.factor(), 1.0f);
  EXPECT_TRUE(off.scalars().empty());
  Tensor g = Tensor::full({3}, std::numeric_limits<float>::infinity());
  EXPECT_TRUE(off.unscale(g, 1));  // off: not its decision (the fp32 checks make it)
}

TEST(LossScale, UnscalesFiniteGradientsAndSkipsOverflowsHalvingTheScale) {
  LossScale ls;
  ls.enable();
  EXPECT_EQ(ls.factor(), 65536.0f);
  Tensor g = Tensor::full({4}, 65536.0f * 0.25f);
  EXPECT_TRUE(ls.unscale(g, 1));
  EXPECT_EQ(g.to_vector(), std::vector<float>(4, 0.25f));

  Tensor bad = Tensor::full({4}, 1.0f);
  bad.f32()[2] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(ls.unscale(bad, 2));
  EXPECT_EQ(ls.scale(), 32768.0);
  EXPECT_EQ(ls.skipped(), 1);
  bad.f32()[2] = std::nanf("");
  EXPECT_FALSE(ls.unscale(bad, 3));
  EXPECT_EQ(ls.scale(), 16384.0);
  EXPECT_EQ(ls.skipped(), 2);
}

TEST(LossScale, DoublesAfterTwoThousandFiniteStepsInARow) {
  LossScale ls;
  ls.enable();
  Tensor g = Tensor::full({2}, 1.0f);
  for (std::int64_t i = 0; i < LossScale::kGrowthInterval - 1; ++i) ASSERT_TRUE(ls.unscale(g, i + 1));
  EXPECT_EQ(ls.scale(), 65536.0);
  ASSERT_TRUE(ls.unscale(g, LossScale::kGrowthInterval));
  EXPECT_EQ(ls.scale(), 131072.0);
  // An overflow restarts the count.
  Tensor bad = Tensor::full({2}, std::numeric_limits<float>::infinity());
  EXPECT_FALSE(ls.unscale(bad, 1));
  for (std::int64_t i = 0; i < LossScale::kGrowthInterval - 1; ++i) ASSERT_TRUE(ls.unscale(g, i + 1));
  EXPECT_EQ(ls.scale(), 65536.0);
}

TEST(LossScale, AnOverflowWithTheScaleAtOneIsDivergence) {
  LossScale ls;
  ls.enable();
  ls.set("loss_scale", 1.0);
  Tensor bad = Tensor::full({2}, std::numeric_limits<float>::infinity());
  try {
    ls.unscale(bad, 7, 1);
    FAIL() << "no error";
  } catch (const NonFiniteError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the gradient is not finite at step 7 of replica 1 with the fp16 loss scale already down to "
              "1.000000: training diverged (try a lower --lr, a warm-up, or --precision bf16)");
  }
}

TEST(LossScale, ItsStateIsTheOptimizersAndComesBackThroughSetScalar) {
  Tensor params = Tensor::zeros({5});
  auto opt = make_optimizer(OptimizerConfig{}, params, {});
  EXPECT_EQ(opt->scalars().size(), 1u);  // "steps": off, nothing of the scale
  opt->loss_scale().enable();
  opt->set_scalar("loss_scale", 512.0);
  opt->set_scalar("loss_scale_good_steps", 17.0);
  opt->set_scalar("loss_scale_skipped", 3.0);
  auto other = make_optimizer(OptimizerConfig{}, params, {});
  for (const auto& [name, value] : opt->scalars()) other->set_scalar(name, value);
  EXPECT_FALSE(other->loss_scale().enabled()) << "restoring must not turn scaling on";
  other->loss_scale().enable();
  EXPECT_EQ(other->scalars(), opt->scalars());
  EXPECT_EQ(other->loss_scale().scale(), 512.0);
  EXPECT_EQ(other->loss_scale().skipped(), 3);
  EXPECT_THROW(opt->set_scalar("loss_scales", 1.0), std::invalid_argument);
}

TrainConfig mlp(std::int64_t steps, const std::string& precision) {
  TrainConfig c;
  c.model = "mlp";
  c.data = "fashion-mnist";
  c.batch = 64;
  c.max_steps = steps;
  c.epochs = 1;
  c.seed = 4;
  c.precision = precision;
  return c;
}

// A scale far too large for fp16 (2^40): the first steps overflow, are
// skipped (the optimizer does not step) and halve it until it fits; then
// training goes on and reaches fp32's test loss within 2%.
TEST(LossScale, Fp16TrainingSkipsOverflowingStepsAndLearnsWhatFp32Learns) {
  Trainer fp32(mlp(300, "fp32"));
  const TrainResult want = fp32.run();
  Trainer fp16(mlp(300, "fp16"));
  ASSERT_TRUE(fp16.optimizer().loss_scale().enabled());
  fp16.optimizer().set_scalar("loss_scale", std::ldexp(1.0, 40));
  const TrainResult got = fp16.run();
  EXPECT_EQ(got.steps, 300);
  EXPECT_GT(got.skipped_steps, 0);
  EXPECT_LT(got.loss_scale, std::ldexp(1.0, 40));
  EXPECT_GE(got.loss_scale, 1.0);
  EXPECT_EQ(fp16.optimizer().steps(), 300 - got.skipped_steps) << "a skipped step must not reach the optimizer";
  EXPECT_NEAR(got.final.test_loss, want.final.test_loss, 0.02 * want.final.test_loss);
  EXPECT_NE(fp16.model().parameters().to_vector(), fp32.model().parameters().to_vector())
      << "fp16 trained fp32's model: nothing was rounded";
}

// The scale is checkpointed: a run stopped while it is still coming down
// and resumed takes the same steps as one that never stopped.
TEST(LossScale, AnFp16RunResumesExactlyScaleIncluded) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "troupe_loss_scale_resume";
  fs::remove_all(dir);
  const double huge = std::ldexp(1.0, 40);
  Trainer whole(mlp(60, "fp16"));
  whole.optimizer().set_scalar("loss_scale", huge);
  const TrainResult all = whole.run();
  ASSERT_GT(all.skipped_steps, 5);

  TrainConfig first = mlp(5, "fp16");
  first.checkpoint_dir = dir.string();
  Trainer a(first);
  a.optimizer().set_scalar("loss_scale", huge);
  a.run();
  TrainConfig rest = mlp(60, "fp16");
  rest.checkpoint_dir = dir.string();
  rest.resume = true;
  Trainer b(rest);
  EXPECT_EQ(b.optimizer().loss_scale().scale(), huge / 32) << "the scale after 5 skipped steps";
  const TrainResult resumed = b.run();
  EXPECT_EQ(resumed.skipped_steps, all.skipped_steps);
  EXPECT_EQ(resumed.loss_scale, all.loss_scale);
  EXPECT_EQ(b.model().parameters().to_vector(), whole.model().parameters().to_vector());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace troupe::models
