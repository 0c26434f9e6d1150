// Model graphs: labels, from=, merges and blocks in the spec text, their
// round trip through the normalised text (what checkpoints store), the
// errors a user sees, and backward over a graph (an output used twice gets
// the sum of its consumers' gradients) against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kernels/ops.hpp"
#include "models/model.hpp"
#include "models/model_builder.hpp"
#include "models/spec.hpp"
#include "tests/kernels/harness.hpp"

namespace troupe::models {
namespace {

using kernels::testing::check_gradient;
using kernels::testing::random_tensor;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kResidual = R"(name tiny_resnet
input 2 6 6
# a residual block, defined once
block basic filters
  conv2d filters=$filters kernel=3 padding=same
  relu
  y: conv2d filters=$filters kernel=3 padding=same
  add from=in,y
  relu
end
stem: conv2d filters=3 kernel=3 padding=same
basic filters=3
b: basic filters=3
flatten
dense units=4
)";

TEST(ModelGraph, ABlockUsedTwiceExpandsWithItsOwnLabels) {
  ModelSpec spec = ModelSpec::parse(kResidual, "tiny.spec");
  EXPECT_FALSE(spec.is_chain());
  ASSERT_EQ(spec.blocks.size(), 1u);
  EXPECT_EQ(spec.blocks[0].lines.size(), 5u);
  std::vector<GraphNode> g = spec.make_graph();
  // stem, 2 x (conv relu conv add relu), flatten, dense
  ASSERT_EQ(g.size(), 13u);
  EXPECT_EQ(g[0].name, "stem");
  EXPECT_EQ(g[0].inputs, (std::vector<int>{-1}));
  EXPECT_EQ(g[3].name, "basic1/y");
  EXPECT_EQ(g[4].layer->spec(), "add");
  EXPECT_EQ(g[4].inputs, (std::vector<int>{0, 3}));  // the block's input (stem) and y
  EXPECT_EQ(g[8].name, "b/y");
  EXPECT_EQ(g[9].inputs, (std::vector<int>{5, 8}));  // the first block's output and b/y
  EXPECT_EQ(g[12].inputs, (std::vector<int>{11}));
}

TEST(ModelGraph, TheNormalisedTextParsesToTheSameGraph) {
  ModelSpec spec = ModelSpec::parse(kResidual, "tiny.spec");
  ModelSpec again = ModelSpec::parse(spec.text(), "checkpoint");
  EXPECT_TRUE(again == spec) << spec.text() << "\n---\n" << again.text();
  EXPECT_EQ(again.text(), spec.text());
  // What the text says, a person can read: the block, then the uses.
  EXPECT_NE(spec.text().find("block basic filters\n  conv2d filters=$filters kernel=3 padding=same\n"),
            std::string::npos)
      << spec.text();
  EXPECT_NE(spec.text().find("b: basic filters=3\n"), std::string::npos) << spec.text();
  Model a(spec, Device::cpu()), b(again, Device::cpu());
  EXPECT_EQ(a.parameter_count(), b.parameter_count());
  EXPECT_EQ(a.summary(), b.summary());
  EXPECT_NE(a.summary().find("add <- stem,basic1/y"), std::string::npos) << a.summary();
}

TEST(ModelGraph, AChainKeepsTheTextOlderCheckpointsStored) {
  const std::string chain = "name mlp\ninput 1 28 28\nflatten\ndense units=256\nrelu\ndense units=10\n";
  ModelSpec spec = ModelSpec::parse(chain, "old checkpoint");
  EXPECT_TRUE(spec.is_chain());
  EXPECT_EQ(spec.text(), chain);
}

// Labels and from= that repeat what a chain does by default build the same
// model: same parameters from the same seed, same outputs and gradients.
TEST(ModelGraph, AChainWrittenAsAGraphComputesTheSame) {
  ModelSpec chain = ModelSpec::parse("input 3 4 4\nconv2d filters=2 kernel=3\nrelu\nflatten\ndense units=3\n", "a");
  ModelSpec graph = ModelSpec::parse(
      "input 3 4 4\nc: conv2d filters=2 kernel=3 from=input\nr: relu from=c\nf: flatten from=r\ndense units=3 from=f\n",
      "b");
  Model a(chain, Device::cpu()), b(graph, Device::cpu());
  a.initialize(5);
  b.initialize(5);
  EXPECT_EQ(a.parameters().to_vector(), b.parameters().to_vector());
  Tensor x = random_tensor({2, 3, 4, 4}, 6);
  EXPECT_EQ(a.forward(x, true).to_vector(), b.forward(x, true).to_vector());
  Tensor dy = random_tensor({2, 3}, 7);
  a.backward(dy);
  b.backward(dy);
  EXPECT_EQ(a.gradients().to_vector(), b.gradients().to_vector());
}

// Loss = sum(model(x) * r): its gradient with respect to every parameter,
// through the branches and the sums of gradients where an output feeds
// two layers (the relu before a block feeds its conv and its add).
void expect_gradients_match_finite_differences(const std::string& text, const Shape& input, std::uint64_t seed) {
  Model m(ModelSpec::parse(text, "graph.spec"), Device::cpu());
  m.initialize(seed);
  Tensor x = random_tensor(batched(2, input), seed + 1);
  Tensor r = random_tensor(batched(2, m.output_shape()), seed + 2);
  auto loss = [&]() {
    auto y = m.forward(x, true).to_vector();
    auto rv = r.to_vector();
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += double(y[i]) * rv[i];
    return s;
  };
  loss();
  m.backward(r);
  std::vector<float> g = m.gradients().to_vector();
  std::vector<double> analytic(g.begin(), g.end());
  std::vector<double> values;
  for (float v : m.parameters().to_vector()) values.push_back(v);
  float* p = m.parameters().f32();
  check_gradient(
      "graph parameters", values, analytic,
      [&](const std::vector<double>& v) {
        for (std::size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
        return loss();
      },
      /*step=*/1e-3, /*threshold=*/2e-2);
}

// ReLU's kinks make finite differences of a deep stack noisy; tanh is
// smooth, and the graph is the same.
std::string smooth(std::string text) {
  for (std::size_t at; (at = text.find("relu")) != std::string::npos;) text.replace(at, 4, "tanh");
  return text;
}

TEST(ModelGraph, BackwardThroughResidualBlocksMatchesFiniteDifferences) {
  expect_gradients_match_finite_differences(smooth(kResidual), Shape{2, 6, 6}, 21);
}

// A projection shortcut (1x1 conv of the block's input), batchnorm in both
// branches, channels joined by concat, and a global average pool head.
TEST(ModelGraph, BackwardThroughBatchNormConcatAndPoolingMatchesFiniteDifferences) {
  const char* text = R"(input 2 6 6
block down filters
  conv2d filters=$filters kernel=3 stride=2 padding=same bias=false
  batchnorm
  tanh
  y: conv2d filters=$filters kernel=3 padding=same bias=false
  conv2d filters=$filters kernel=1 stride=2 bias=false from=in
  s: batchnorm
  add from=y,s
end
a: down filters=3
b: avgpool2d pool=2 from=input
concat from=a,b
gelu
globalavgpool2d
dense units=3
)";
  expect_gradients_match_finite_differences(text, Shape{2, 6, 6}, 41);
}

// Two branches from the model's input, one output feeding three layers,
// and an add of three inputs.
TEST(ModelGraph, BackwardThroughBranchesFromTheInputMatchesFiniteDifferences) {
  const char* text = R"(input 6
a: dense units=5
h: relu
b: dense units=5 from=input
c: dense units=5 from=h
add from=h,b,c
dense units=3
)";
  expect_gradients_match_finite_differences(text, Shape{6}, 31);
}

TEST(ModelGraph, MistakesAreNamedWithTheirLine) {
  auto parse = [](const std::string& text) { return error_of([&] { ModelSpec::parse(text, "m.spec"); }); };
  EXPECT_EQ(parse("input 4\nx: dense units=3\ndense units=3 from=z\n"),
            "m.spec:3: from=: no layer labelled 'z' before this line (known: input, x)");
  EXPECT_EQ(parse("input 4\nx: dense units=3\nx: relu\n"), "m.spec:3: label 'x' is used twice");
  EXPECT_EQ(parse("input 4\nx: dense units=3\nadd from=x\n"),
            "m.spec:3: add joins two or more layers: name them with from=A,B");
  EXPECT_EQ(parse("input 4\nx: dense units=3\ny: relu\nrelu from=x,y\n"),
            "m.spec:4: relu takes one input; from= names 2");
  EXPECT_EQ(parse("input 4\nx: dense units=3\nrelu\ndense units=2 from=x\n"),
            "m.spec:3: the output of layer 2 'relu' is used by no other layer (only the last layer gives the "
            "model's output)");
  EXPECT_EQ(parse("input 4\nin: dense units=3\n"),
            "m.spec:2: label 'in' is reserved (the model's input, a block's input)");
  EXPECT_EQ(parse("input 4\nblock b n\n  dense units=$n\nend\nb\n"), "m.spec:5: block b: missing n=");
  EXPECT_EQ(parse("input 4\nblock b n\n  dense units=$n\nend\nb n=2 m=3\n"),
            "m.spec:5: block b has no parameter 'm'; its parameters: n");
  EXPECT_EQ(parse("input 4\nblock b n\n  dense units=$m\nend\nb n=2\n"),
            "m.spec:5: block b, its line 1 'dense units=$m': block b has no parameter '$m'; its parameters: n");
  EXPECT_EQ(parse("input 4\nblock b n\n  dense units=$n\nend\nb n=two\n"),
            "m.spec:5: block b, its line 1 'dense units=$n': dense units 'two' is not an integer");
  EXPECT_EQ(parse("input 4\nblock b\n  relu\n"), "m.spec:3: block b (line 2) has no 'end'");
  EXPECT_EQ(parse("input 4\nend\n"), "m.spec:2: 'end' without a block");
  EXPECT_EQ(parse("input 4\nblock dense\n  relu\nend\n"),
            "m.spec:2: block dense is defined already (or is a layer's name)");
  EXPECT_NE(parse("input 4\nblock bb\n  relu\nend\nbasic\n").find("unknown layer 'basic'; known: dense"),
            std::string::npos);
  EXPECT_NE(parse("input 4\nblock bb\n  relu\nend\nbasic\n").find("; blocks defined above: bb"), std::string::npos);
}

TEST(ModelGraph, ShapesThatDoNotFitNameTheLayerAndTheShapes) {
  const std::string text = "name m\ninput 4\nx: dense units=3\ny: dense units=5\nadd from=x,y\n";
  EXPECT_EQ(error_of([&] { Model(ModelSpec::parse(text, "m.spec"), Device::cpu()); }),
            "model 'm', layer 3 'add': add: input 2 is [5] but input 1 is [3] (every input of an add has one shape)");
  const std::string embedding_late =
      "name t\ninput ids 8\nx: embedding vocab=10 dim=4\nembedding vocab=10 dim=4 from=x\n";
  EXPECT_NE(error_of([&] {
              Model(ModelSpec::parse(embedding_late, "t.spec"), Device::cpu());
            }).find("layer 2 'embedding vocab=10 dim=4': an embedding takes token ids"),
            std::string::npos);
}

// The zoo's residual network is the anchor's, layer for layer: 174,970
// trainable parameters (anchors/torch_resnet.py), 1,056 values of running
// statistics (mean and variance of 2 x (16 + 16*4 + 32*4 + 64*4) channels
// without the padding), a graph that re-parses to itself, and shapes
// 16x28x28 -> 32x14x14 -> 64x7x7 -> 64 -> 10.
TEST(ModelGraph, TheZooResnetIsTheAnchorsNetwork) {
  DataShape images{Shape{1, 28, 28}, DType::f32, 10};
  ModelSpec spec = zoo_spec("resnet", images);
  EXPECT_TRUE(ModelSpec::parse(spec.text(), "checkpoint") == spec);
  Model m(spec, Device::cpu());
  std::int64_t trainable = 0;
  for (const auto& [offset, count] : m.layer_ranges()) trainable += count;
  EXPECT_EQ(trainable, 174970);
  EXPECT_EQ(m.output_shape(), (Shape{10}));
  const std::string summary = m.summary();
  EXPECT_NE(summary.find("[32, 14, 14]"), std::string::npos) << summary;
  EXPECT_NE(summary.find("[64, 7, 7]"), std::string::npos) << summary;
  EXPECT_NE(summary.find("down1/s: batchnorm"), std::string::npos) << summary;
  // He normal over the fan-out: the stem's 144 weights have std sqrt(2 / (16 * 9)).
  m.initialize(3);
  auto p = m.parameters().to_vector();
  double sq = 0;
  for (int i = 0; i < 144; ++i) sq += double(p[i]) * p[i];
  EXPECT_NEAR(std::sqrt(sq / 144), std::sqrt(2.0 / 144), 0.03);
  Model vgg(zoo_spec("vgg", images), Device::cpu());
  EXPECT_EQ(vgg.output_shape(), (Shape{10}));
  Model wide(zoo_spec("wide", images), Device::cpu());
  std::int64_t wide_count = 0;
  for (const auto& [offset, count] : wide.layer_ranges()) wide_count += count;
  EXPECT_EQ(wide_count, 784 * 2048 + 2048 + 2048 * 2048 + 2048 + 2048 * 10 + 10);
}

// The C++ builder: a block is a function; its spec's text re-parses to the
// same graph, and computes what the hand-written spec with a block does.
ModelBuilder::Output basic(ModelBuilder& m, ModelBuilder::Output x, std::int64_t filters) {
  auto y = m.relu(m.conv2d(x, filters, 3, 1, "same"));
  y = m.conv2d(y, filters, 3, 1, "same");
  return m.relu(m.add({x, y}));
}

TEST(ModelBuilder, AFunctionalGraphIsTheSameModelAsItsSpecText) {
  ModelBuilder b("tiny_resnet", {2, 6, 6});
  auto x = b.layer("conv2d filters=3 kernel=3 padding=same", b.input(), "stem");
  x = basic(b, basic(b, x, 3), 3);
  b.dense(b.flatten(x), 4);
  ModelSpec built = b.spec();
  EXPECT_FALSE(built.is_chain());
  EXPECT_TRUE(ModelSpec::parse(built.text(), "checkpoint") == built) << built.text();
  EXPECT_NE(built.text().find("add from=stem,conv2d_1\n"), std::string::npos) << built.text();

  Model from_builder(built, Device::cpu()), by_hand(ModelSpec::parse(kResidual, "tiny.spec"), Device::cpu());
  ASSERT_EQ(from_builder.parameter_count(), by_hand.parameter_count());
  from_builder.initialize(9);
  by_hand.initialize(9);
  EXPECT_EQ(from_builder.parameters().to_vector(), by_hand.parameters().to_vector());
  Tensor in = random_tensor({3, 2, 6, 6}, 10);
  EXPECT_EQ(from_builder.forward(in, false).to_vector(), by_hand.forward(in, false).to_vector());
}

// A pre-norm transformer block written with the builder (GPT-2's: x +
// attention(layernorm(x)), then x + mlp(layernorm(x))) is the model its spec
// text describes, and re-parses to the same graph.
TEST(ModelBuilder, ATransformerBlockIsTheModelOfItsSpecText) {
  ModelBuilder b("tiny_gpt", {8}, DType::i32);
  auto x = b.positional_embedding(b.embedding(b.input(), 11, 6));
  x = b.add({x, b.attention(b.layernorm(x), 2)});
  x = b.add({x, b.dense(b.gelu(b.dense(b.layernorm(x), 24)), 6)});
  b.tied_output(b.layernorm(x));
  const ModelSpec built = b.spec();
  EXPECT_TRUE(ModelSpec::parse(built.text(), "checkpoint") == built) << built.text();
  EXPECT_NE(built.text().find("attention heads=2"), std::string::npos) << built.text();
  EXPECT_NE(built.text().find("tied_output"), std::string::npos) << built.text();
  Model m(built, Device::cpu());
  EXPECT_EQ(m.output_shape(), (Shape{8, 11}));  // logits at every position
  m.initialize(3);
  const Tensor ids =
      Tensor::from_vector({2, 8}, std::vector<std::int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 9, 8, 7, 6, 5, 4});
  const auto y = m.forward(ids, false).to_vector();
  ASSERT_EQ(y.size(), 2u * 8u * 11u);
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
}

TEST(ModelBuilder, MistakesAreNamed) {
  ModelBuilder b("m", {4});
  auto x = b.dense(b.input(), 3);
  EXPECT_EQ(error_of([&] { b.layer("conv3d filters=2", x); }),
            "ModelBuilder 'm', layer 2 'conv3d filters=2': unknown layer 'conv3d'; known: dense, conv2d, conv1d, "
            "maxpool2d, maxpool1d, avgpool2d, globalavgpool2d, embedding, positional_embedding, attention, "
            "tied_output, flatten, relu, sigmoid, tanh, gelu, softmax, dropout, batchnorm, layernorm, standardize, "
            "add, concat");
  EXPECT_EQ(error_of([&] { b.layer("relu", ModelBuilder::Output{7}); }),
            "ModelBuilder 'm', layer 2 'relu': its input is no output of this builder");
  auto y = b.dense(x, 3);
  b.dense(x, 3);  // y is left unused
  (void)y;
  EXPECT_NE(error_of([&] { b.spec(); }).find("ModelBuilder 'm':4: the output of layer 2 'dense units=3'"),
            std::string::npos)
      << error_of([&] { b.spec(); });
}

}  // namespace
}  // namespace troupe::models
