// Every layer's backward pass against finite differences of its forward pass,
// for both the input and the parameters, on random data; and the flat-buffer
// layout of a model.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kernels/ops.hpp"
#include "models/layers/layers.hpp"
#include "models/loss.hpp"
#include "models/model.hpp"
#include "models/spec.hpp"
#include "tests/kernels/harness.hpp"

namespace troupe::models {
namespace {

using kernels::testing::check_gradient;
using kernels::testing::random_tensor;

// Loss = sum(forward(x) * r) for a fixed random r, so dL/dy = r. Layers run
// in float, so the finite-difference step is large and the threshold loose;
// the kernels' own gradient checks run in double (tests/kernels/).
struct LayerCheck {
  Layer& layer;
  Shape input;  // per example
  std::int64_t batch = 3;
  Tensor params, grads, x, r;

  LayerCheck(Layer& l, const Shape& in, std::uint64_t seed, float low = -1.0f, float high = 1.0f)
      : layer(l), input(in) {
    Shape out = layer.build(input, Device::cpu());
    const std::int64_t n = std::max<std::int64_t>(layer.parameter_count(), 1);
    params = random_tensor({n}, seed + 1);
    grads = Tensor::zeros({n});
    layer.bind(params.slice(0, {layer.parameter_count()}), grads.slice(0, {layer.parameter_count()}));
    x = random_tensor(batched(batch, input), seed + 2, low, high);
    r = random_tensor(batched(batch, out), seed + 3);
  }

  double loss() {
    const Tensor& y = layer.forward(x, /*training=*/true);
    auto yv = y.to_vector(), rv = r.to_vector();
    double s = 0;
    for (std::size_t i = 0; i < yv.size(); ++i) s += double(yv[i]) * rv[i];
    return s;
  }

  // Perturbs `target` (x or params) element by element.
  void check(const std::string& what, const Tensor& target, bool input_grad) {
    loss();
    const Tensor& dx = layer.backward(r, input_grad);
    std::vector<float> analytic_f = input_grad ? dx.to_vector() : grads.to_vector();
    std::vector<double> analytic(analytic_f.begin(), analytic_f.begin() + target.numel());
    std::vector<double> values;
    for (float v : target.to_vector()) values.push_back(v);
    float* p = target.f32();
    check_gradient(
        what, values, analytic,
        [&](const std::vector<double>& v) {
          for (std::size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
          return loss();
        },
        /*step=*/1e-2, /*threshold=*/2e-2);
    for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<float>(values[i]);
  }
};

TEST(LayerGradients, Dense) {
  Dense layer(5);
  LayerCheck c(layer, {7}, 10);
  c.check("dense input", c.x, true);
  c.check("dense params", c.params.slice(0, {layer.parameter_count()}), false);
}

// On a sequence [length, in] the same kernel and bias apply to every
// position: [4, 7] -> [4, 5], 7 * 5 + 5 parameters.
TEST(LayerGradients, DenseOnEveryPositionOfASequence) {
  Dense layer(5);
  LayerCheck c(layer, {4, 7}, 12);
  EXPECT_EQ(layer.parameter_count(), 7 * 5 + 5);
  EXPECT_EQ(layer.positions(), 4);
  c.check("dense input [4, 7]", c.x, true);
  c.check("dense params [4, 7]", c.params.slice(0, {layer.parameter_count()}), false);
  // Position p of the output is what the flat layer gives position p's input.
  Dense flat(5);
  LayerCheck f(flat, {7}, 12);
  f.params.slice(0, {flat.parameter_count()}).copy_from(c.params.slice(0, {layer.parameter_count()}));
  const auto seq = layer.forward(c.x, false).to_vector();
  const Tensor third = c.x.reshape({c.batch * 4, 7}).slice(2 * 7, {1, 7});  // example 0, position 2
  const auto one = flat.forward(third, false).to_vector();
  for (int j = 0; j < 5; ++j) EXPECT_FLOAT_EQ(seq[2 * 5 + j], one[j]);
}

// Causal self-attention: the input's gradient and every parameter's
// (the fused q/k/v projection, the output projection) through the
// finite-difference checker, on 2 and 3 heads.
TEST(LayerGradients, CausalSelfAttention) {
  for (auto [heads, in] : {std::pair<std::int64_t, Shape>{2, Shape{5, 4}}, {3, Shape{4, 6}}, {1, Shape{1, 3}}}) {
    CausalSelfAttention layer(heads);
    LayerCheck c(layer, in, 90 + static_cast<std::uint64_t>(heads));
    EXPECT_EQ(layer.parameter_count(), in[1] * 3 * in[1] + 3 * in[1] + in[1] * in[1] + in[1]);
    c.check("attention input " + in.str(), c.x, true);
    c.check("attention params " + in.str(), c.params.slice(0, {layer.parameter_count()}), false);
  }
}

// The forward pass against the definition written plainly in double: q, k,
// v = x Wqkv + b split by columns, per head softmax over j <= i of
// q_i k_j / sqrt(d), the weighted v's side by side, then Wout and its bias.
TEST(CausalSelfAttention, ForwardIsTheDefinition) {
  const std::int64_t heads = 2, t = 5, c = 6, d = c / heads, n = 2;
  CausalSelfAttention layer(heads);
  LayerCheck check(layer, {t, c}, 97);
  check.x = random_tensor({n, t, c}, 98);
  const auto y = layer.forward(check.x, false).to_vector();
  const auto x = check.x.to_vector(), p = check.params.to_vector();
  const float* wqkv = p.data();
  const float* bqkv = wqkv + c * 3 * c;
  const float* wout = bqkv + 3 * c;
  const float* bout = wout + c * c;
  for (std::int64_t b = 0; b < n; ++b) {
    std::vector<double> qkv(static_cast<std::size_t>(t * 3 * c)), merged(static_cast<std::size_t>(t * c));
    for (std::int64_t i = 0; i < t; ++i)
      for (std::int64_t o = 0; o < 3 * c; ++o) {
        double s = bqkv[o];
        for (std::int64_t k = 0; k < c; ++k) s += double(x[(b * t + i) * c + k]) * wqkv[k * 3 * c + o];
        qkv[static_cast<std::size_t>(i * 3 * c + o)] = s;
      }
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < t; ++i) {
        std::vector<double> w(static_cast<std::size_t>(i + 1));
        double max = -1e300, sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (std::int64_t e = 0; e < d; ++e)
            s += qkv[static_cast<std::size_t>(i * 3 * c + h * d + e)] *
                 qkv[static_cast<std::size_t>(j * 3 * c + c + h * d + e)];
          w[static_cast<std::size_t>(j)] = s / std::sqrt(double(d));
          max = std::max(max, w[static_cast<std::size_t>(j)]);
        }
        for (auto& v : w) sum += (v = std::exp(v - max));
        for (std::int64_t e = 0; e < d; ++e) {
          double o = 0;
          for (std::int64_t j = 0; j <= i; ++j)
            o += w[static_cast<std::size_t>(j)] / sum * qkv[static_cast<std::size_t>(j * 3 * c + 2 * c + h * d + e)];
          merged[static_cast<std::size_t>(i * c + h * d + e)] = o;
        }
      }
    for (std::int64_t i = 0; i < t; ++i)
      for (std::int64_t o = 0; o < c; ++o) {
        double s = bout[o];
        for (std::int64_t k = 0; k < c; ++k) s += merged[static_cast<std::size_t>(i * c + k)] * wout[k * c + o];
        EXPECT_NEAR(y[static_cast<std::size_t>((b * t + i) * c + o)], s, 1e-5) << "example " << b << ", position " << i;
      }
  }
}

// The causal mask: position i's output does not change when a later
// position's input does; an earlier position's change reaches it.
TEST(CausalSelfAttention, APositionSeesItselfAndTheEarlierOnesOnly) {
  CausalSelfAttention layer(2);
  LayerCheck c(layer, {6, 4}, 95);
  const auto before = layer.forward(c.x, false).to_vector();
  c.x.f32()[4 * 4 + 1] += 0.5f;  // example 0, position 4
  const auto after = layer.forward(c.x, false).to_vector();
  for (int p = 0; p < 6; ++p)
    for (int j = 0; j < 4; ++j) {
      const std::size_t at = static_cast<std::size_t>(p * 4 + j);
      if (p < 4)
        EXPECT_EQ(after[at], before[at]) << "position " << p << " saw position 4";
      else
        EXPECT_NE(after[at], before[at]) << "position " << p << " did not see position 4";
    }
  EXPECT_EQ(layer.spec(), "attention heads=2");
  EXPECT_THROW(CausalSelfAttention(3).build({6, 4}, Device::cpu()), std::invalid_argument);  // 4 into 3 heads
}

// x + table [length, dim]: dx = dy, dtable = the batch's sum of dy.
TEST(LayerGradients, PositionalEmbedding) {
  PositionalEmbedding layer;
  LayerCheck c(layer, {6, 4}, 15);
  EXPECT_EQ(layer.parameter_count(), 24);
  c.check("positional_embedding input", c.x, true);
  c.check("positional_embedding table", c.params.slice(0, {layer.parameter_count()}), false);
  EXPECT_THROW(PositionalEmbedding().build({4}, Device::cpu()), std::invalid_argument);
}

TEST(LayerGradients, Conv2DWithStrideAndSamePadding) {
  Conv2D layer(3, 3, 3, 2, Padding::parse("same"));
  LayerCheck c(layer, {2, 7, 6}, 20);
  c.check("conv2d input", c.x, true);
  c.check("conv2d params", c.params.slice(0, {layer.parameter_count()}), false);
}

// 16 channels in and out: the cpu backend's blocked oneDNN kernels
// (nChw16c, troupe's NCHW reordered in and out) in all three directions.
TEST(LayerGradients, Conv2DWithSixteenChannelsInAndOut) {
  Conv2D layer(16, 3, 3, 1, Padding::parse("same"));
  LayerCheck c(layer, {16, 4, 4}, 21);
  c.check("conv2d input", c.x, true);
  c.check("conv2d params", c.params.slice(0, {layer.parameter_count()}), false);
}

TEST(LayerGradients, Conv1D) {
  Conv1D layer(4, 5);
  LayerCheck c(layer, {3, 11}, 30);
  c.check("conv1d input", c.x, true);
  c.check("conv1d params", c.params.slice(0, {layer.parameter_count()}), false);
}

// Distinct inputs spaced 0.1 apart (a fixed shuffle of a ramp), so the
// finite-difference step of 0.01 never changes which element is a window's
// maximum.
void spread_out(const Tensor& x) {
  float* p = x.f32();
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) p[i] = 0.1f * static_cast<float>((i * 37) % n) - 0.05f * n;
}

TEST(LayerGradients, MaxPool2DAndMaxPool1D) {
  MaxPool2D pool2(2);
  LayerCheck c2(pool2, {2, 5, 6}, 40);
  spread_out(c2.x);
  c2.check("maxpool2d input", c2.x, true);
  MaxPool1D pool1(3, 2);
  LayerCheck c1(pool1, {2, 9}, 41);
  spread_out(c1.x);
  c1.check("maxpool1d input", c1.x, true);
}

TEST(LayerGradients, ReLUAwayFromTheKink) {
  ReLU layer;
  LayerCheck c(layer, {4, 5}, 50, 0.1f, 1.0f);
  // Mix signs but keep |x| >= 0.1 so a step of 1e-2 never crosses 0.
  float* p = c.x.f32();
  for (std::int64_t i = 0; i < c.x.numel(); i += 2) p[i] = -p[i];
  c.check("relu input", c.x, true);
}

TEST(LayerGradients, DropoutWithAFixedSeed) {
  Dropout layer(0.4f);
  LayerCheck c(layer, {50}, 60);
  layer.set_step_seed(1234);
  c.check("dropout input", c.x, true);
  // Inference is the identity.
  EXPECT_EQ(layer.forward(c.x, false).to_vector(), c.x.to_vector());
}

TEST(LayerGradients, EmbeddingTableWithRepeatedIds) {
  Embedding layer(6, 4);
  Shape out = layer.build({5}, Device::cpu());
  EXPECT_EQ(out, (Shape{4, 5}));
  Tensor params = random_tensor({layer.parameter_count()}, 70), grads = Tensor::zeros({layer.parameter_count()});
  layer.bind(params, grads);
  Tensor ids = Tensor::from_vector({2, 5}, std::vector<std::int32_t>{0, 3, 3, 5, 1, 2, 2, 2, 0, 4});
  Tensor r = random_tensor({2, 4, 5}, 71);
  auto loss = [&]() {
    auto y = layer.forward(ids, true).to_vector(), rv = r.to_vector();
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += double(y[i]) * rv[i];
    return s;
  };
  loss();
  layer.backward(r, false);
  std::vector<double> values, analytic;
  for (float v : params.to_vector()) values.push_back(v);
  for (float v : grads.to_vector()) analytic.push_back(v);
  check_gradient(
      "embedding table", values, analytic,
      [&](const std::vector<double>& v) {
        for (std::size_t i = 0; i < v.size(); ++i) params.f32()[i] = static_cast<float>(v[i]);
        return loss();
      },
      1e-2, 2e-2);
  EXPECT_THROW(layer.backward(r, true), std::logic_error);
}

// layout=channels_last: the table's rows as they are, [length, dim], the
// transposition of the channels-first output; the same table gradient.
TEST(LayerGradients, EmbeddingChannelsLastIsTheChannelsFirstOutputTransposed) {
  Embedding first(6, 4), last(6, 4, /*channels_last=*/true);
  EXPECT_EQ(first.build({5}, Device::cpu()), (Shape{4, 5}));
  EXPECT_EQ(last.build({5}, Device::cpu()), (Shape{5, 4}));
  EXPECT_EQ(last.spec(), "embedding vocab=6 dim=4 layout=channels_last");
  EXPECT_EQ(first.spec(), "embedding vocab=6 dim=4");
  Tensor params = random_tensor({first.parameter_count()}, 72);
  Tensor g1 = Tensor::zeros({first.parameter_count()}), g2 = Tensor::zeros({first.parameter_count()});
  first.bind(params, g1);
  last.bind(params, g2);
  const Tensor ids = Tensor::from_vector({2, 5}, std::vector<std::int32_t>{0, 3, 3, 5, 1, 2, 2, 2, 0, 4});
  const auto a = first.forward(ids, true).to_vector(), b = last.forward(ids, true).to_vector();
  for (int n = 0; n < 2; ++n)
    for (int t = 0; t < 5; ++t)
      for (int d = 0; d < 4; ++d) EXPECT_EQ(b[(n * 5 + t) * 4 + d], a[(n * 4 + d) * 5 + t]);
  const Tensor r = random_tensor({2, 4, 5}, 73);
  Tensor rt = Tensor::zeros({2, 5, 4});
  const auto rv = r.to_vector();
  std::vector<float> rtv(rv.size());
  for (int n = 0; n < 2; ++n)
    for (int t = 0; t < 5; ++t)
      for (int d = 0; d < 4; ++d) rtv[(n * 5 + t) * 4 + d] = rv[(n * 4 + d) * 5 + t];
  rt = Tensor::from_vector({2, 5, 4}, rtv);
  first.backward(r, false);
  last.backward(rt, false);
  EXPECT_EQ(g2.to_vector(), g1.to_vector());
}

TEST(LayerGradients, Conv2DWithoutBias) {
  Conv2D layer(2, 3, 3, 1, Padding::parse("same"), /*bias=*/false);
  LayerCheck c(layer, {2, 5, 5}, 25);
  EXPECT_EQ(layer.parameter_count(), 2 * 2 * 3 * 3);
  EXPECT_EQ(layer.spec(), "conv2d filters=2 kernel=3 stride=1 padding=same bias=false");
  c.check("conv2d input", c.x, true);
  c.check("conv2d params", c.params.slice(0, {layer.parameter_count()}), false);
}

TEST(LayerGradients, AvgPool2DAndGlobalAvgPool2D) {
  AvgPool2D pool(2, 1);
  LayerCheck a(pool, {2, 5, 4}, 61);
  a.check("avgpool2d input", a.x, true);
  GlobalAvgPool2D global;
  LayerCheck g(global, {3, 4, 5}, 62);
  g.check("globalavgpool2d input", g.x, true);
}

TEST(LayerGradients, SigmoidTanhGeluSoftmax) {
  for (auto kind :
       {Activation::Kind::sigmoid, Activation::Kind::tanh, Activation::Kind::gelu, Activation::Kind::softmax}) {
    Activation layer(kind);
    LayerCheck c(layer, {3, 7}, 70 + static_cast<std::uint64_t>(kind), -3.0f, 3.0f);
    c.check(layer.spec() + " input", c.x, true);
  }
}

// Training normalises by the batch's statistics, so the input gradient
// goes through the mean and the variance too.
TEST(LayerGradients, BatchNormInTraining) {
  for (const Shape& in : {Shape{3, 4, 5}, Shape{4}}) {
    BatchNorm layer;
    LayerCheck c(layer, in, 80, -2.0f, 2.0f);
    Tensor state = Tensor::zeros({layer.state_count()});
    layer.bind_state(state);
    c.check("batchnorm input " + in.str(), c.x, true);
    c.check("batchnorm gamma and beta " + in.str(), c.params.slice(0, {layer.parameter_count()}), false);
  }
}

// LayerNorm normalises each position's width by its own statistics, in
// training as in evaluation: the input gradient goes through them.
TEST(LayerGradients, LayerNorm) {
  for (const Shape& in : {Shape{5, 8}, Shape{6}, Shape{2, 3, 4}}) {
    LayerNorm layer;
    LayerCheck c(layer, in, 85, -2.0f, 2.0f);
    c.check("layernorm input " + in.str(), c.x, true);
    c.check("layernorm gamma and beta " + in.str(), c.params.slice(0, {layer.parameter_count()}), false);
  }
}

// PyTorch's nn.LayerNorm(4) on two positions, by hand: each row's own mean
// and biased variance; gamma 1 and beta 0 at the start; the spec's text.
TEST(LayerNorm, EachPositionByItsOwnMeanAndBiasedVariance) {
  LayerNorm layer(1e-5f);
  layer.build({2, 4}, Device::cpu());
  Tensor params = Tensor::zeros({layer.parameter_count()}), grads = Tensor::zeros({layer.parameter_count()});
  layer.bind(params, grads);
  layer.initialize(0);
  EXPECT_EQ(params.to_vector(), (std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0}));
  const Tensor x = Tensor::from_vector({1, 2, 4}, std::vector<float>{1, 2, 3, 4, 10, 10, 10, 14});
  const auto y = layer.forward(x, false).to_vector();
  const double s0 = std::sqrt(1.25 + 1e-5), s1 = std::sqrt(3.0 + 1e-5);  // variances 1.25 and 3
  EXPECT_NEAR(y[0], -1.5 / s0, 1e-6);
  EXPECT_NEAR(y[3], 1.5 / s0, 1e-6);
  EXPECT_NEAR(y[4], -1.0 / s1, 1e-6);
  EXPECT_NEAR(y[7], 3.0 / s1, 1e-6);
  EXPECT_EQ(layer.forward(x, true).to_vector(), y);  // no batch statistics: training is the same
  EXPECT_EQ(layer.spec(), "layernorm epsilon=1e-05");
  EXPECT_THROW(LayerNorm(0.0f), std::invalid_argument);
}

// The running estimates follow PyTorch's update (momentum 0.9 in Keras'
// convention is PyTorch's 0.1; the variance unbiased), and evaluation
// normalises by them.
TEST(BatchNorm, RunningStatisticsAreWhatPyTorchKeepsAndEvaluationUsesThem) {
  BatchNorm layer(0.9f, 1e-5f);
  layer.build({2, 3}, Device::cpu());
  Tensor params = Tensor::zeros({layer.parameter_count()}), grads = Tensor::zeros({layer.parameter_count()});
  Tensor state = Tensor::zeros({layer.state_count()});
  layer.bind(params, grads);
  layer.bind_state(state);
  layer.initialize(0);
  EXPECT_EQ(state.to_vector(), (std::vector<float>{0, 0, 1, 1}));   // mean 0, variance 1
  EXPECT_EQ(params.to_vector(), (std::vector<float>{1, 1, 0, 0}));  // gamma 1, beta 0
  // Two examples of [2 channels, 3 positions]: channel 0 holds 1..6, channel 1 holds 2 x (1..6).
  Tensor x = Tensor::from_vector({2, 2, 3}, std::vector<float>{1, 2, 3, 2, 4, 6, 4, 5, 6, 8, 10, 12});
  layer.forward(x, true);
  // Channel 0: mean 3.5, biased variance 17.5/6, unbiased 3.5; channel 1 twice that and four times.
  const auto s = state.to_vector();
  EXPECT_NEAR(s[0], 0.1 * 3.5, 1e-6);
  EXPECT_NEAR(s[1], 0.1 * 7.0, 1e-6);
  EXPECT_NEAR(s[2], 0.9 + 0.1 * 3.5, 1e-5);
  EXPECT_NEAR(s[3], 0.9 + 0.1 * 14.0, 1e-5);
  // Evaluation: (x - running mean) / sqrt(running var + eps), gamma 1, beta 0.
  const auto y = layer.forward(x, false).to_vector();
  EXPECT_NEAR(y[0], (1 - s[0]) / std::sqrt(s[2] + 1e-5), 1e-5);
  EXPECT_NEAR(y[11], (12 - s[1]) / std::sqrt(s[3] + 1e-5), 1e-5);
  EXPECT_EQ(layer.spec(), "batchnorm momentum=0.9 epsilon=1e-05");
}

// Fixed constants per channel: y = (x - mean) / std, against a plain
// reference on random data, on [c, h, w] and on [d]; backward dy / std
// through the finite-difference checker; and the spec text that rebuilds
// the same floats.
TEST(Standardize, IsXMinusTheMeanOverTheDeviationPerChannelAndItsBackwardIsDyOverIt) {
  for (const Shape& in : {Shape{2, 3, 4}, Shape{2}}) {
    Standardize layer({0.5f, -3.25f}, {2.0f, 0.3f});
    LayerCheck c(layer, in, 90, -4.0f, 4.0f);
    const std::vector<float> x = c.x.to_vector(), y = layer.forward(c.x, false).to_vector();
    const std::int64_t positions = in.numel() / 2;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::size_t channel = (i / static_cast<std::size_t>(positions)) % 2;
      const float mean = channel == 0 ? 0.5f : -3.25f, deviation = channel == 0 ? 2.0f : 0.3f;
      EXPECT_NEAR(y[i], (x[i] - mean) / deviation, 1e-5 * (1 + std::fabs(x[i] - mean) / deviation)) << i;
    }
    c.check("standardize input " + in.str(), c.x, true);
    EXPECT_EQ(layer.parameter_count(), 0);
    EXPECT_EQ(layer.state_count(), 0);
  }
}

TEST(Standardize, ItsSpecLineRebuildsTheSameFloatsAndBadConstantsAreRefused) {
  const float third = 1.0f / 3.0f;
  Standardize layer({third, 1e-7f, -123456.789f}, {0.1f, 3e5f, 7.0f});
  const std::string line = layer.spec();
  EXPECT_EQ(normalised_layer_line(line), line);
  auto rebuilt = ModelSpec::parse("input 3\n" + line + "\n", "test").make_graph();
  const auto* again = dynamic_cast<const Standardize*>(rebuilt.at(0).layer.get());
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->mean(), layer.mean());
  EXPECT_EQ(again->deviation(), layer.deviation());
  EXPECT_THROW(Standardize({1, 2}, {1}), std::invalid_argument);
  EXPECT_THROW(Standardize({1}, {0}), std::invalid_argument);
  EXPECT_THROW(Standardize({1}, {-1}), std::invalid_argument);
  EXPECT_THROW(normalised_layer_line("standardize mean=1,x std=1,1"), std::invalid_argument);
  EXPECT_THROW(normalised_layer_line("standardize mean=1"), std::invalid_argument);
  Standardize two({0, 0}, {1, 1});
  EXPECT_THROW(two.build({3}, Device::cpu()), std::invalid_argument);  // 2 constants for 3 channels
}

TEST(LayerGradients, FlattenIsAViewBothWays) {
  Flatten layer;
  EXPECT_EQ(layer.build({2, 3, 4}, Device::cpu()), (Shape{24}));
  Tensor x = random_tensor({5, 2, 3, 4}, 80);
  const Tensor& y = layer.forward(x, true);
  EXPECT_EQ(y.shape(), (Shape{5, 24}));
  EXPECT_EQ(y.raw(), x.raw());
  EXPECT_EQ(layer.backward(y, true).shape(), x.shape());
}

TEST(Model, FlatBuffersAlignedSlicesAndWholeModelGradient) {
  ModelSpec spec = ModelSpec::parse(
      "name tiny\ninput 1 6 6\nconv2d filters=2 kernel=3\nrelu\nmaxpool2d pool=2\nflatten\n"
      "dense units=5\nrelu\ndense units=3\n",
      "test");
  Model model(spec, Device::cpu());
  // conv: 2*1*3*3 + 2 = 20 -> 32 aligned; dense 8*5+5 = 45 -> 48; dense 5*3+3 = 18 -> 32.
  EXPECT_EQ(model.parameter_count(), 32 + 48 + 32);
  EXPECT_EQ(model.output_shape(), (Shape{3}));
  model.initialize(7);
  auto p = model.parameters().to_vector();
  for (int i = 20; i < 32; ++i) EXPECT_EQ(p[i], 0.0f) << "padding element " << i;

  Tensor x = random_tensor({4, 1, 6, 6}, 90);
  Tensor labels = Tensor::from_vector({4}, std::vector<std::int32_t>{0, 2, 1, 2});
  Loss loss = Loss::parse("xent");
  Tensor dlogits = Tensor::empty({4, 3});
  auto objective = [&]() { return loss.sum(model.forward(x, true), labels, Tensor(), 1.0f) / 4.0; };
  loss.sum(model.forward(x, true), labels, dlogits, 0.25f);
  model.backward(dlogits);
  std::vector<double> values, analytic;
  for (float v : model.parameters().to_vector()) values.push_back(v);
  for (float v : model.gradients().to_vector()) analytic.push_back(v);
  float* params = model.parameters().f32();
  check_gradient(
      "whole model", values, analytic,
      [&](const std::vector<double>& v) {
        for (std::size_t i = 0; i < v.size(); ++i) params[i] = static_cast<float>(v[i]);
        return objective();
      },
      1e-2, 2e-2);
}

TEST(Model, RejectsInputsOfTheWrongShapeOrType) {
  Model model(ModelSpec::parse("input 4\ndense units=2\n", "test"), Device::cpu());
  model.initialize(1);
  EXPECT_THROW(model.forward(Tensor::zeros({3, 5}), false), std::invalid_argument);
  EXPECT_THROW(model.forward(Tensor::zeros({3, 4}, DType::i32), false), std::invalid_argument);
  EXPECT_EQ(model.forward(Tensor::zeros({3, 4}), false).shape(), (Shape{3, 2}));
}

TEST(Model, SameSeedSameParameters) {
  ModelSpec spec = zoo_spec("mlp", {Shape{1, 28, 28}, DType::f32, 10});
  Model a(spec, Device::cpu()), b(spec, Device::cpu());
  a.initialize(42);
  b.initialize(42);
  EXPECT_EQ(a.parameters().to_vector(), b.parameters().to_vector());
  b.initialize(43);
  EXPECT_NE(a.parameters().to_vector(), b.parameters().to_vector());
}

}  // namespace
}  // namespace troupe::models
