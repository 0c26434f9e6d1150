// The training options of PyTorch recipes: AdamW, weight decay by tensor
// rank (and decay=all), SGD with Nesterov momentum and masked decay, global
// gradient-norm clipping, label smoothing, the anchors' warm-up + cosine
// schedule, and the optimizer text that checkpoints keep.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/math/random.hpp"
#include "kernels/ops.hpp"
#include "models/loss.hpp"
#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/recipe.hpp"
#include "models/schedule.hpp"
#include "models/spec.hpp"
#include "models/trainer.hpp"
#include "tests/kernels/harness.hpp"  // random_tensor

namespace troupe::models {
namespace {

using kernels::Device;
using kernels::DType;
using kernels::Shape;

// dense (kernel 6x8 decays, bias 8 does not), batchnorm (gamma, beta: no
// decay), dense (kernel 8x3 decays, bias 3 does not); slices start on
// 16-float boundaries: 0, 64, 80.
const char* kSpec = "name small\ninput 6\ndense units=8\nbatchnorm\nrelu\ndense units=3\n";

std::vector<float> random_values(std::int64_t n, std::uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] =
        scale *
        (static_cast<float>(kernels::math::random_bits(seed, static_cast<std::uint64_t>(i)) % 20001) / 10000.0f - 1.0f);
  return v;
}

std::vector<bool> mask_of(const FlatRanges& ranges, std::int64_t n) {
  std::vector<bool> m(static_cast<std::size_t>(n), false);
  for (const auto& [o, c] : ranges)
    for (std::int64_t i = o; i < o + c; ++i) m[static_cast<std::size_t>(i)] = true;
  return m;
}

TEST(DecayedRanges, AreTheTensorsOfRankTwoAndMore) {
  Model model(ModelSpec::parse(kSpec, "small.spec"), Device::cpu());
  const FlatRanges want{{0, 48}, {80, 24}};
  EXPECT_EQ(model.decayed_ranges(), want);
  // Adjacent kernels merge; a model without biases or batchnorm is one range.
  Model conv(
      ModelSpec::parse("name c\ninput 1 4 4\nconv2d filters=2 kernel=3 bias=false\nflatten\ndense units=2\n", "c.spec"),
      Device::cpu());
  const FlatRanges ranges = conv.decayed_ranges();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0], (std::pair<std::int64_t, std::int64_t>{0, 18}));
  EXPECT_EQ(ranges[1].second, 8 * 2);  // the dense kernel, not its bias
}

// torch.optim.AdamW in double: p *= 1 - lr wd; Adam step with bias correction.
void adamw_reference(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m,
                     std::vector<double>& v, const std::vector<bool>& decayed, double lr, double b1, double b2,
                     double eps, double wd, int t) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (decayed[i]) p[i] *= 1.0 - lr * wd;
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
    p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
  }
}

void expect_adamw_matches(bool decay_all) {
  Model model(ModelSpec::parse(kSpec, "small.spec"), Device::cpu());
  const std::int64_t n = model.parameter_count();
  OptimizerConfig c;
  c.name = "adamw";
  c.beta1 = 0.9f;
  c.beta2 = 0.99f;
  c.epsilon = 1e-8f;
  c.weight_decay = 0.1f;
  c.decay_all = decay_all;
  const std::vector<float> init = random_values(n, 1);
  Tensor params = Tensor::from_vector({n}, init);
  auto opt = make_optimizer(c, params, model.decayed_ranges());
  const std::vector<bool> decayed =
      decay_all ? std::vector<bool>(static_cast<std::size_t>(n), true) : mask_of(model.decayed_ranges(), n);
  std::vector<double> p(init.begin(), init.end()), m(p.size(), 0.0), v(p.size(), 0.0);
  for (int t = 1; t <= 5; ++t) {
    const std::vector<float> grad = random_values(n, 100 + t, 0.5f);
    const float lr = 1e-2f * float(t);
    opt->step(params, Tensor::from_vector({n}, grad), lr);
    adamw_reference(p, std::vector<double>(grad.begin(), grad.end()), m, v, decayed, lr, 0.9, 0.99, 1e-8, 0.1, t);
  }
  const std::vector<float> got = params.to_vector();
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(got[i], p[i], 1e-5 * (1 + std::fabs(p[i]))) << "element " << i;
  EXPECT_EQ(opt->steps(), 5);
}

TEST(AdamW, MatchesTorchAdamWWithDecayOnRankTwoTensorsOnly) { expect_adamw_matches(false); }
TEST(AdamW, DecayAllDecaysEveryElement) { expect_adamw_matches(true); }

TEST(AdamW, DecayIsDecoupledFromTheGradient) {
  // With a zero gradient Adam's step is 0, so only the decay moves p:
  // p (1 - lr wd) exactly, where adam's L2 decay would take a full Adam step.
  OptimizerConfig c;
  c.name = "adamw";
  c.weight_decay = 0.5f;
  Tensor params = Tensor::full({16}, 2.0f);
  auto opt = make_optimizer(c, params, {{0, 8}});
  opt->step(params, Tensor::zeros({16}), 0.1f);
  const std::vector<float> got = params.to_vector();
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(got[static_cast<std::size_t>(i)], 2.0f * (1.0f - 0.05f));
  for (int i = 8; i < 16; ++i) EXPECT_FLOAT_EQ(got[static_cast<std::size_t>(i)], 2.0f);
}

TEST(Sgd, NesterovWithMaskedDecayMatchesTorchSgd) {
  Model model(ModelSpec::parse(kSpec, "small.spec"), Device::cpu());
  const std::int64_t n = model.parameter_count();
  OptimizerConfig c;
  c.name = "sgd";
  c.momentum = 0.9f;
  c.nesterov = true;
  c.weight_decay = 5e-4f;
  const std::vector<float> init = random_values(n, 2);
  Tensor params = Tensor::from_vector({n}, init);
  auto opt = make_optimizer(c, params, model.decayed_ranges());
  const std::vector<bool> decayed = mask_of(model.decayed_ranges(), n);
  std::vector<double> p(init.begin(), init.end()), buf(p.size(), 0.0);
  for (int t = 1; t <= 5; ++t) {
    const std::vector<float> grad = random_values(n, 200 + t);
    const double lr = 0.1;
    opt->step(params, Tensor::from_vector({n}, grad), float(lr));
    for (std::size_t i = 0; i < p.size(); ++i) {  // torch.optim.SGD, nesterov=True
      const double g = grad[i] + (decayed[i] ? 5e-4 : 0.0) * p[i];
      buf[i] = t == 1 ? g : 0.9 * buf[i] + g;
      p[i] -= lr * (g + 0.9 * buf[i]);
    }
  }
  const std::vector<float> got = params.to_vector();
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(got[i], p[i], 1e-5 * (1 + std::fabs(p[i]))) << "element " << i;
}

TEST(Optimizer, PiecesFollowTheDecayedRangesAndBadRangesAreRefused) {
  OptimizerConfig c;
  c.name = "sgd";
  c.weight_decay = 0.1f;
  Tensor params = Tensor::zeros({100});
  auto opt = make_optimizer(c, params, {{10, 20}, {30, 5}, {50, 50}});
  ASSERT_EQ(opt->pieces().size(), 4u);
  EXPECT_FALSE(opt->pieces()[0].decayed);
  EXPECT_EQ(opt->pieces()[1].offset, 10);
  EXPECT_EQ(opt->pieces()[1].count, 25);  // adjacent ranges: one call
  EXPECT_TRUE(opt->pieces()[3].decayed);
  EXPECT_EQ(opt->pieces()[3].offset + opt->pieces()[3].count, 100);
  // No decay, or decay=all: one piece, one fused call.
  c.weight_decay = 0.0f;
  EXPECT_EQ(make_optimizer(c, params, {{10, 20}})->pieces().size(), 1u);
  c.weight_decay = 0.1f;
  c.decay_all = true;
  EXPECT_EQ(make_optimizer(c, params, {{10, 20}})->pieces().size(), 1u);
  c.decay_all = false;
  EXPECT_THROW(make_optimizer(c, params, {{50, 10}, {40, 5}}), std::invalid_argument);
  EXPECT_THROW(make_optimizer(c, params, {{95, 10}}), std::invalid_argument);
  c.clip_norm = -1.0f;
  EXPECT_THROW(make_optimizer(c, params, {}), std::invalid_argument);
}

TEST(SliceRanges, TakesThePartInsideAndShiftsIt) {
  const FlatRanges r{{0, 10}, {20, 10}, {40, 5}};
  EXPECT_EQ(slice_ranges(r, 5, 20), (FlatRanges{{0, 5}, {15, 5}}));
  EXPECT_EQ(slice_ranges(r, 30, 10), FlatRanges{});
  EXPECT_EQ(slice_ranges(r, 0, 100), r);
}

TEST(ClipGradientNorm, ScalesAboveTheThresholdOnly) {
  const std::vector<float> g{3.0f, 4.0f, 0.0f, 12.0f};  // norm 13
  Tensor above = Tensor::from_vector({4}, g);
  EXPECT_DOUBLE_EQ(clip_gradient_norm(above, 6.5f), 13.0);
  const std::vector<float> halved = above.to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(halved[i], g[i] * 6.5 / (13.0 + 1e-6), 1e-6);
  EXPECT_NEAR(kernels::ops::l2_norm(above), 6.5, 1e-5);
  Tensor below = Tensor::from_vector({4}, g);
  EXPECT_DOUBLE_EQ(clip_gradient_norm(below, 20.0f), 13.0);
  EXPECT_EQ(below.to_vector(), g);
  Tensor off = Tensor::from_vector({4}, g);
  EXPECT_EQ(clip_gradient_norm(off, 0.0f), 0.0);  // off: no reduction
  EXPECT_EQ(off.to_vector(), g);
}

TEST(LabelSmoothing, LossAndGradientAsPyTorchAndAccuracyByArgmax) {
  const std::vector<float> x{2.0f, 0.5f, -1.0f, 0.0f, 1.0f, 3.0f};  // 2 rows, 3 classes
  const Tensor logits = Tensor::from_vector({2, 3}, x);
  const Tensor labels = Tensor::from_vector({2}, std::vector<std::int32_t>{0, 1});
  const double e = 0.1;
  double want = 0;
  std::vector<double> want_grad(6);
  for (int r = 0; r < 2; ++r) {
    double z = 0;
    for (int j = 0; j < 3; ++j) z += std::exp(double(x[static_cast<std::size_t>(r * 3 + j)]));
    for (int j = 0; j < 3; ++j) {
      const double p = std::exp(double(x[static_cast<std::size_t>(r * 3 + j)])) / z;
      const double t = (j == r ? 1 - e : 0.0) + e / 3;
      want -= t * std::log(p);
      want_grad[static_cast<std::size_t>(r * 3 + j)] = 0.5 * (p - t);
    }
  }
  Loss loss(LossKind::sparse_categorical_crossentropy, 0.1f);
  Tensor d = Tensor::empty({2, 3});
  EXPECT_NEAR(loss.sum(logits, labels, d, 0.5f), want, 1e-6);
  const std::vector<float> grad = d.to_vector();
  for (std::size_t i = 0; i < 6; ++i) EXPECT_NEAR(grad[i], want_grad[i], 1e-6) << i;
  Metrics metrics;
  metrics.add(logits, labels, want, true);
  EXPECT_EQ(metrics.top1_correct(), 1);  // row 0 right (argmax 0), row 1 wrong (argmax 2)
  EXPECT_THROW(Loss(LossKind::sparse_categorical_crossentropy, 1.5f), std::invalid_argument);
  EXPECT_THROW(Loss(LossKind::sparse_categorical_crossentropy, -0.1f), std::invalid_argument);
}

// A sequence's logits [b, t, classes] with a label at every position: an
// example's loss is the mean over its positions (nats per token, as
// nanoGPT's F.cross_entropy over every position), each position's gradient
// (softmax - onehot) * grad_scale / t, and accuracy counts positions.
TEST(SequenceLoss, TheMeanOverPositionsPerExampleAndAccuracyPerToken) {
  const std::int64_t b = 2, t = 3, c = 4;
  const Tensor logits = kernels::testing::random_tensor({b, t, c}, 31, -2.0f, 2.0f);
  const std::vector<std::int32_t> ids{0, 3, 1, 2, 2, 0};
  const Tensor labels = Tensor::from_vector({b, t}, ids);
  const std::vector<float> x = logits.to_vector();
  const float grad_scale = 0.5f;  // 1 / global batch
  double want = 0;
  std::vector<double> want_grad(x.size());
  std::int64_t right = 0;
  for (std::int64_t r = 0; r < b * t; ++r) {
    double z = 0;
    std::int64_t best = 0;
    for (std::int64_t j = 0; j < c; ++j) {
      z += std::exp(double(x[static_cast<std::size_t>(r * c + j)]));
      if (x[static_cast<std::size_t>(r * c + j)] > x[static_cast<std::size_t>(r * c + best)]) best = j;
    }
    right += best == ids[static_cast<std::size_t>(r)] ? 1 : 0;
    for (std::int64_t j = 0; j < c; ++j) {
      const double p = std::exp(double(x[static_cast<std::size_t>(r * c + j)])) / z;
      const double onehot = j == ids[static_cast<std::size_t>(r)] ? 1.0 : 0.0;
      if (onehot > 0) want -= std::log(p) / double(t);
      want_grad[static_cast<std::size_t>(r * c + j)] = grad_scale * (p - onehot) / double(t);
    }
  }
  Loss loss(LossKind::sparse_categorical_crossentropy);
  Tensor d = Tensor::empty({b, t, c});
  EXPECT_NEAR(loss.sum(logits, labels, d, grad_scale), want, 1e-6);
  const std::vector<float> grad = d.to_vector();
  for (std::size_t i = 0; i < grad.size(); ++i) EXPECT_NEAR(grad[i], want_grad[i], 1e-7) << i;
  EXPECT_NEAR(loss.sum(logits, labels, Tensor(), grad_scale), want, 1e-6);  // no gradient asked for
  Metrics metrics;
  metrics.add(logits, labels, want, true);
  EXPECT_EQ(metrics.examples(), b);
  EXPECT_EQ(metrics.positions(), b * t);
  EXPECT_EQ(metrics.top1_correct(), right);
  EXPECT_DOUBLE_EQ(metrics.accuracy(), double(right) / double(b * t));
  EXPECT_THROW(loss.sum(logits, Tensor::from_vector({b}, std::vector<std::int32_t>{0, 1}), d, 1.0f),
               std::invalid_argument);
}

// The anchors' lr_at(), as written in anchors/torch_resnet.py and torch_gpt.py.
double resnet_lr_at(std::int64_t step, std::int64_t total, std::int64_t warm, double peak) {
  const double pi = 3.14159265358979323846;
  if (step < warm) return peak * double(step + 1) / double(warm);
  return 0.5 * peak * (1 + std::cos(pi * double(step - warm) / double(std::max<std::int64_t>(1, total - warm))));
}
double gpt_lr_at(std::int64_t step, std::int64_t steps, std::int64_t warm = 100, double peak = 1e-3,
                 double low = 1e-4) {
  const double pi = 3.14159265358979323846;
  if (step < warm) return peak * double(step + 1) / double(warm);
  return low + 0.5 * (peak - low) *
                   (1 + std::cos(pi * double(step - warm) / double(std::max<std::int64_t>(1, steps - warm))));
}

TEST(WarmupCosine, GivesTheAnchorsValues) {
  // resnet: 0.1 peak, warm-up one epoch (468 steps of batch 128), 10 epochs.
  const std::int64_t spe = 468, total = 10 * spe;
  LrSchedule resnet("warmup-cosine:" + std::to_string(total), 0.1f, spe);
  for (std::int64_t step = 0; step < total; ++step)
    ASSERT_NEAR(resnet.at(step, step / spe), resnet_lr_at(step, total, spe, 0.1), 1e-7) << "step " << step;
  // gpt: 1e-3 peak, warm-up 100, cosine to 1e-4 = 0.1 x peak at the last step.
  const std::int64_t steps = 3000;
  LrSchedule gpt("warmup-cosine:3000/0.1", 1e-3f, 100);
  for (std::int64_t step = 0; step < steps; ++step)
    ASSERT_NEAR(gpt.at(step, 0), gpt_lr_at(step, steps), 1e-9) << "step " << step;
  EXPECT_NEAR(gpt.at(5000, 0), 1e-4, 1e-9);  // past the end: stays at the floor
  // The peak is reached at the last warm-up step and starts the cosine.
  EXPECT_FLOAT_EQ(gpt.at(99, 0), 1e-3f);
  EXPECT_FLOAT_EQ(gpt.at(100, 0), 1e-3f);
  // Without warm-up it is cosine:TOTAL.
  LrSchedule plain("warmup-cosine:1000", 0.5f, 0), cosine("cosine:1000", 0.5f, 0);
  for (std::int64_t step : {0, 1, 250, 999, 1000}) EXPECT_FLOAT_EQ(plain.at(step, 0), cosine.at(step, 0));
  EXPECT_THROW(LrSchedule("warmup-cosine:100", 0.1f, 200), std::invalid_argument);
  EXPECT_THROW(LrSchedule("warmup-cosine:100/2", 0.1f, 10), std::invalid_argument);
  // The older forms keep their meaning: warm-up multiplies a cosine from step 0.
  LrSchedule multiplied("cosine:1000", 1.0f, 100);
  EXPECT_NEAR(multiplied.at(49, 0), 0.5 * 0.5 * (1 + std::cos(3.14159265358979323846 * 49 / 1000)), 1e-6);
}

// `troupe train --model resnet --steps 20`: the recipe's one-epoch warm-up
// (234 steps) is longer than the training, and a smoke test should run,
// not be refused: the recipe's warm-up becomes a tenth of the training,
// said in warmup_note. A warm-up the user gave stays refused.
TEST(TrainingLength, ARecipesWarmUpLongerThanTheTrainingBecomesATenthOfItAndSaysSo) {
  TrainConfig c;
  c.model = "resnet";
  apply_recipe(c, [](const std::string&) { return false; });
  c.max_steps = 20;
  ASSERT_TRUE(c.warmup_from_recipe);
  resolve_training_length(c, 234);
  EXPECT_EQ(c.warmup_steps, 2);
  EXPECT_EQ(c.schedule, "warmup-cosine:20");
  EXPECT_NE(c.warmup_note.find("the recipe's warm-up (234 steps) is longer than the training (20 steps)"),
            std::string::npos)
      << c.warmup_note;
  LrSchedule(c.schedule, c.lr, c.warmup_steps);  // valid now
  TrainConfig whole;                             // a whole epoch or more: the recipe as it is, no note
  whole.model = "resnet";
  apply_recipe(whole, [](const std::string&) { return false; });
  resolve_training_length(whole, 234);
  EXPECT_EQ(whole.warmup_steps, 234);
  EXPECT_TRUE(whole.warmup_note.empty());
  TrainConfig own;  // --warmup-epochs 1 --steps 20: the user's, refused
  own.model = "resnet";
  apply_recipe(own, [](const std::string& key) { return key == "warmup"; });
  own.warmup_epochs = 1;
  own.schedule = "warmup-cosine";
  own.max_steps = 20;
  resolve_training_length(own, 234);
  EXPECT_EQ(own.warmup_steps, 234);
  EXPECT_THROW(LrSchedule(own.schedule, own.lr, own.warmup_steps), std::invalid_argument);
}

// A cosine without its length ends with the training, and warm-up epochs
// become steps, once the steps of an epoch are known.
TEST(TrainingLength, ACosineWithoutItsLengthEndsAtTheLastStepAndWarmUpEpochsBecomeSteps) {
  EXPECT_TRUE(schedule_ends_with_training("warmup-cosine"));
  EXPECT_TRUE(schedule_ends_with_training("cosine:/0.1"));
  EXPECT_FALSE(schedule_ends_with_training("cosine:100"));
  EXPECT_FALSE(schedule_ends_with_training("constant"));
  TrainConfig c;
  c.epochs = 3;
  c.schedule = "warmup-cosine";
  c.warmup_epochs = 1.5;
  resolve_training_length(c, 100);
  EXPECT_EQ(c.schedule, "warmup-cosine:300");
  EXPECT_EQ(c.warmup_steps, 150);
  EXPECT_EQ(c.warmup_epochs, 0);
  resolve_training_length(c, 7);  // already concrete: nothing changes
  EXPECT_EQ(c.schedule, "warmup-cosine:300");
  EXPECT_EQ(c.warmup_steps, 150);
  TrainConfig limited;  // --steps ends the training first
  limited.epochs = 10;
  limited.max_steps = 250;
  limited.schedule = "cosine:/0.1";
  resolve_training_length(limited, 100);
  EXPECT_EQ(limited.schedule, "cosine:250/0.1");
  EXPECT_EQ(limited.warmup_steps, 0);
  TrainConfig both;
  both.warmup_steps = 10;
  both.warmup_epochs = 1;
  try {
    resolve_training_length(both, 100);
    ADD_FAILURE() << "both warm-up forms were taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("both set the warm-up"), std::string::npos) << e.what();
  }
  // Unresolved, the schedule itself refuses to guess its length.
  try {
    LrSchedule("warmup-cosine", 0.1f, 0);
    ADD_FAILURE() << "an unresolved cosine was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("warmup-cosine:10000"), std::string::npos) << e.what();
  }
}

// resnet's recipe fills what the user did not give; another optimizer
// brings its own settings.
TEST(Recipe, ResnetTakesItsAnchorsRecipeWhereTheUserGaveNothing) {
  TrainConfig c;
  c.model = "resnet";
  const std::string applied = apply_recipe(c, [](const std::string&) { return false; });
  EXPECT_EQ(applied,
            "sgd nesterov momentum 0.9, lr 0.1, warm-up 1 epoch(s), schedule warmup-cosine, weight decay "
            "0.0005, batch 128");
  EXPECT_EQ(c.optimizer.name, "sgd");
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_FLOAT_EQ(c.optimizer.momentum, 0.9f);
  EXPECT_FLOAT_EQ(c.lr, 0.1f);
  EXPECT_FLOAT_EQ(c.optimizer.weight_decay, 5e-4f);
  EXPECT_EQ(c.schedule, "warmup-cosine");
  EXPECT_EQ(c.warmup_epochs, 1);
  EXPECT_EQ(c.batch, 128);

  TrainConfig user;  // --lr 0.05 --batch 64 --warmup 10
  user.model = "resnet";
  user.lr = 0.05f;
  user.batch = 64;
  user.warmup_steps = 10;
  apply_recipe(user, [](const std::string& k) { return k == "lr" || k == "batch" || k == "warmup"; });
  EXPECT_FLOAT_EQ(user.lr, 0.05f);
  EXPECT_EQ(user.batch, 64);
  EXPECT_EQ(user.warmup_epochs, 0);
  EXPECT_EQ(user.warmup_steps, 10);
  EXPECT_EQ(user.optimizer.name, "sgd");

  TrainConfig adam;  // --optimizer adam: the recipe's lr, momentum and decay stay out
  adam.model = "resnet";
  apply_recipe(adam, [](const std::string& k) { return k == "optimizer"; });
  EXPECT_EQ(adam.optimizer.name, "adam");
  EXPECT_FLOAT_EQ(adam.lr, TrainConfig().lr);
  EXPECT_FLOAT_EQ(adam.optimizer.weight_decay, 0.0f);
  EXPECT_EQ(adam.schedule, "warmup-cosine");
  EXPECT_EQ(adam.batch, 128);

  TrainConfig cnn;  // models without a recipe keep the defaults
  cnn.model = "cnn";
  EXPECT_EQ(apply_recipe(cnn, [](const std::string&) { return false; }), "");
  EXPECT_EQ(cnn.optimizer.name, "adam");
  EXPECT_TRUE(zoo_recipe("cnn").empty());
}

TEST(OptimizerConfigText, RoundTripsEveryField) {
  OptimizerConfig a;
  a.name = "adamw";
  a.beta1 = 0.85f;
  a.beta2 = 0.99f;
  a.epsilon = 1e-7f;
  a.weight_decay = 0.1f;
  a.decay_all = true;
  a.clip_norm = 1.5f;
  const OptimizerConfig b = OptimizerConfig::parse(a.text());
  EXPECT_EQ(b.name, "adamw");
  EXPECT_FLOAT_EQ(b.beta1, 0.85f);
  EXPECT_FLOAT_EQ(b.beta2, 0.99f);
  EXPECT_FLOAT_EQ(b.epsilon, 1e-7f);
  EXPECT_FLOAT_EQ(b.weight_decay, 0.1f);
  EXPECT_TRUE(b.decay_all);
  EXPECT_FLOAT_EQ(b.clip_norm, 1.5f);
  EXPECT_EQ(b.text(), a.text());
  OptimizerConfig s;
  s.name = "sgd";
  s.momentum = 0.9f;
  s.nesterov = true;
  s.weight_decay = 5e-4f;
  const OptimizerConfig t = OptimizerConfig::parse(s.text());
  EXPECT_FLOAT_EQ(t.momentum, 0.9f);
  EXPECT_TRUE(t.nesterov);
  EXPECT_FLOAT_EQ(t.weight_decay, 5e-4f);
  EXPECT_FALSE(t.decay_all);
  EXPECT_EQ(t.clip_norm, 0.0f);
  EXPECT_EQ(t.text(), s.text());
  EXPECT_NE(s.text().find("decay=rank"), std::string::npos);
  EXPECT_THROW(OptimizerConfig::parse("adam decay=some"), std::invalid_argument);
  // An older text (no decay or clip_norm) still parses.
  EXPECT_EQ(OptimizerConfig::parse("adam beta1=0.9 beta2=0.999 epsilon=1e-08 weight_decay=0").name, "adam");
}

}  // namespace
}  // namespace troupe::models
