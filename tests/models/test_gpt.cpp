// The zoo's gpt (anchors/torch_gpt.py's network), the output layer tied to
// the token embedding (its backward against finite differences: the
// table's gradient is the sum of its two uses), and the byte vocabulary a
// language model's spec carries.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "kernels/math/random.hpp"
#include "models/data/text_corpus.hpp"
#include "models/model.hpp"
#include "models/spec.hpp"
#include "models/trainer.hpp"
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

std::int64_t trainable(const Model& m) {
  std::int64_t n = 0;
  for (const auto& [offset, count] : m.layer_ranges()) n += count;
  return n;
}

DataShape kjv_like(std::int64_t context) { return DataShape{Shape{context}, DType::i32, 73, 1, 73}; }

TEST(ZooGpt, TheDefaultIsTheAnchorsNetworkOf810880Parameters) {
  ModelSpec spec = zoo_spec("gpt", kjv_like(64));
  EXPECT_TRUE(ModelSpec::parse(spec.text(), "checkpoint") == spec);
  Model m(spec, Device::cpu());
  EXPECT_EQ(trainable(m), 810880);
  EXPECT_EQ(m.output_shape(), (Shape{64, 73}));
  // Weight decay's ranges: both embedding tables and every kernel, as the
  // anchor's p.dim() >= 2: 73x128 + 64x128 + 4 x (128x384 + 128x128 + 128x512 + 512x128).
  std::int64_t decayed = 0;
  for (const auto& [offset, count] : m.decayed_ranges()) decayed += count;
  EXPECT_EQ(decayed, 73 * 128 + 64 * 128 + 4 * (128 * 384 + 128 * 128 + 128 * 512 + 512 * 128));
  // Init: the token table N(0, 0.02); the residual projections N(0, 0.02 / sqrt(8)).
  m.initialize(5);
  const auto p = m.parameters().to_vector();
  double sq = 0;
  for (int i = 0; i < 73 * 128; ++i) sq += double(p[static_cast<std::size_t>(i)]) * p[static_cast<std::size_t>(i)];
  EXPECT_NEAR(std::sqrt(sq / (73 * 128)), 0.02, 0.001);
  EXPECT_NE(spec.text().find(" out=normal:0.00707107"), std::string::npos) << spec.text();
}

TEST(ZooGpt, SizesMakeNanoGptsGpuRun) {
  ZooSizes big;
  big.layers = 6;
  big.heads = 6;
  big.width = 384;
  Model m(zoo_spec("gpt", kjv_like(256), big), Device::cpu());
  EXPECT_EQ(trainable(m), 10773888);
  EXPECT_EQ(m.output_shape(), (Shape{256, 73}));
  ZooSizes odd = big;
  odd.heads = 5;
  EXPECT_EQ(error_of([&] { zoo_spec("gpt", kjv_like(256), odd); }),
            "model 'gpt': --layers 6 --heads 5 --width 384: each must be >= 1 and the width a multiple of the heads");
  EXPECT_EQ(error_of([&] {
              zoo_spec("gpt", DataShape{Shape{1, 28, 28}, DType::f32, 10});
            }),
            "model 'gpt' needs a text's token ids (--data kjv or --data text:FILE)");
}

// Loss = sum(model(ids) * r), its gradient with respect to every
// parameter: the token table gets the embedding's rows and the tied
// output's x^T dy, summed.
TEST(TiedOutput, BackwardMatchesFiniteDifferencesThroughBothUsesOfTheTable) {
  const ModelSpec spec = ModelSpec::parse(
      "name tied\ninput ids 5\nembedding vocab=7 dim=4 layout=channels_last init=normal:0.5\n"
      "positional_embedding\nlayernorm\ntied_output\n",
      "tied.spec");
  Model m(spec, Device::cpu());
  m.initialize(11);
  EXPECT_EQ(trainable(m), 7 * 4 + 5 * 4 + 8);  // the output has no parameters of its own
  kernels::Tensor ids = kernels::Tensor::empty(Shape{3, 5}, DType::i32);
  for (int i = 0; i < 15; ++i) ids.i32()[i] = (i * 5 + 2) % 7;
  kernels::Tensor r = random_tensor({3, 5, 7}, 12);
  auto loss = [&]() {
    auto y = m.forward(ids, true).to_vector();
    auto rv = r.to_vector();
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += double(y[i]) * rv[i];
    return s;
  };
  loss();
  m.backward(r);
  // Twice: the tied gradient is added after the embedding's, not kept
  // from the step before.
  loss();
  m.backward(r);
  std::vector<float> g = m.gradients().to_vector();
  std::vector<double> analytic(g.begin(), g.end());
  std::vector<double> values;
  for (float v : m.parameters().to_vector()) values.push_back(v);
  float* p = m.parameters().f32();
  check_gradient(
      "tied model parameters", values, analytic,
      [&](const std::vector<double>& v) {
        for (std::size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
        return loss();
      },
      /*step=*/1e-3, /*threshold=*/1e-2);
}

TEST(TiedOutput, MistakesAreNamed) {
  auto build = [](const std::string& text) {
    return error_of([&] { Model(ModelSpec::parse("name m\n" + text, "m.spec"), Device::cpu()); });
  };
  EXPECT_EQ(build("input 4\ndense units=3\ntied_output\n"),
            "model 'm', layer 2 'tied_output': tied_output needs an embedding (token ids in) to tie to");
  EXPECT_EQ(build("input ids 4\nembedding vocab=9 dim=6 layout=channels_last\ndense units=5\ntied_output\n"),
            "model 'm', layer 3 'tied_output': tied_output takes width 5, but the embedding it ties to has dim 6");
  // The text CNN's channels-first embedding [dim, length] has a sequence's
  // rank; positional_embedding names it rather than mixing the two up.
  EXPECT_EQ(build("input ids 4\nembedding vocab=9 dim=4\npositional_embedding\n"),
            "model 'm', layer 2 'positional_embedding': its input, layer 1 'embedding vocab=9 dim=4', is "
            "channels-first [dim, length] (the text CNN's layout); give that embedding layout=channels_last for a "
            "sequence [length, dim]");
}

TEST(SpecVocabulary, ALanguageModelsBytesRoundTripThroughItsText) {
  const ModelSpec spec = ModelSpec::parse(
      "name lm\ninput ids 4\nvocabulary hex=0a2041ff\nembedding vocab=4 dim=2 layout=channels_last\ntied_output\n",
      "lm.spec");
  EXPECT_EQ(spec.vocabulary, std::string("\n A\xff", 4));
  EXPECT_NE(spec.text().find("vocabulary hex=0a2041ff\n"), std::string::npos);
  EXPECT_TRUE(ModelSpec::parse(spec.text(), "again") == spec);
  auto parse = [](const std::string& text) { return error_of([&] { ModelSpec::parse(text, "m.spec"); }); };
  EXPECT_EQ(parse("input ids 4\nvocabulary hex=0a2\n"), "m.spec:2: vocabulary hex: an odd number of digits");
  EXPECT_EQ(parse("input ids 4\nvocabulary hex=0a0a\n"), "m.spec:2: vocabulary hex: byte 0a twice");
  EXPECT_EQ(parse("input ids 4\nvocabulary hex=0g\n"), "m.spec:2: vocabulary hex: 'g' is not a hex digit");
  EXPECT_EQ(parse("input ids 4\nvocabulary 0a20\n"),
            "m.spec:2: vocabulary takes hex=BYTES (two hex digits a byte, in token-id order)");
}

TEST(SpecVocabulary, TrainingOnTextWritesItAndRefusesAnotherOne) {
  const data::Splits s =
      data::text_splits(std::string(30, 'a') + std::string(30, 'b') + "ab\nba", "t.txt", data::TextOptions{4});
  const ModelSpec bare = zoo_spec("gpt", DataShape{Shape{4}, DType::i32, 3, 1, 3});
  const ModelSpec with = with_vocabulary(bare, s.train);
  EXPECT_EQ(with.vocabulary, "\nab");
  EXPECT_TRUE(with_vocabulary(with, s.train) == with);
  ModelSpec other = with;
  other.vocabulary = "xyz";
  EXPECT_EQ(error_of([&] { with_vocabulary(other, s.train); }),
            "model gpt was made for a vocabulary of 3 bytes, but t.txt has 3 other ones: its token ids would mean "
            "other bytes (train it anew on this text)");
}

// --precision bf16 and fp16 (mixed precision): the same gpt and data
// trained 300 steps with its matmuls in bf16, or in fp16 with the dynamic
// loss scale, reaches fp32's validation loss within 2%; its parameters stay
// fp32 and differ from fp32's (the matmuls did round).
TEST(ZooGpt, Bf16AndFp16TrainToFp32sValidationLossWithinTwoPercent) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("troupe-gpt-bf16-" + std::to_string(::getpid()) + ".txt")).string();
  {
    std::ofstream out(path, std::ios::binary);
    const char* words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ",
                           "a ",   "lazy ",  "dog.\n", "and ", "then "};
    for (int i = 0; i < 20000; ++i) out << words[(i * 7 + i / 3 + (i * i) % 5) % 11];
  }
  auto run = [&](const std::string& precision) {
    TrainConfig c;
    c.model = "gpt";
    c.data = "text:" + path;
    c.data_options.text.context = 32;
    c.zoo.layers = 2;
    c.zoo.heads = 2;
    c.zoo.width = 64;
    c.batch = 12;
    c.max_steps = 300;
    c.epochs = 10;
    c.optimizer.name = "adamw";
    c.optimizer.beta2 = 0.99f;
    c.optimizer.weight_decay = 0.1f;
    c.optimizer.clip_norm = 1.0f;
    c.lr = 1e-3f;
    c.warmup_steps = 30;
    c.schedule = "warmup-cosine:/0.1";
    c.precision = precision;
    c.seed = 3;
    Trainer t(c);
    const TrainResult r = t.run();
    return std::make_pair(r.final.test_loss, t.model().parameters().to_vector());
  };
  const auto [fp32_loss, fp32_params] = run("fp32");
  const auto [bf16_loss, bf16_params] = run("bf16");
  const auto [fp16_loss, fp16_params] = run("fp16");  // with its dynamic loss scale
  EXPECT_LT(fp32_loss, 2.0) << "fp32 did not learn the text";
  EXPECT_NEAR(bf16_loss, fp32_loss, 0.02 * fp32_loss) << "bf16 " << bf16_loss << " against fp32 " << fp32_loss;
  EXPECT_NE(bf16_params, fp32_params) << "bf16 trained fp32's model: nothing was rounded";
  EXPECT_NEAR(fp16_loss, fp32_loss, 0.02 * fp32_loss) << "fp16 " << fp16_loss << " against fp32 " << fp32_loss;
  EXPECT_NE(fp16_params, fp32_params) << "fp16 trained fp32's model: nothing was rounded";
  std::filesystem::remove(path);
  EXPECT_EQ(parse_precision("fp16"), kernels::ops::MatmulPrecision::fp16);
  EXPECT_EQ(error_of([] { parse_precision("int8"); }), "--precision 'int8': expected fp32, bf16 or fp16");
}

}  // namespace
}  // namespace troupe::models
