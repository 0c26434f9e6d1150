// Sampling from a language model (models/generate.hpp): the draw's
// distribution against softmax, greedy and top-k, the same text for a seed,
// a window that slides past the context, and prompts the vocabulary cannot
// read.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "models/generate.hpp"
#include "models/spec.hpp"

namespace troupe::models {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Generate, DrawsFollowTheSoftmaxOfTheLogitsOverTheTemperature) {
  const float logits[4] = {2.0f, 0.0f, 1.0f, -1.0f};
  for (float temperature : {1.0f, 0.5f}) {
    double z = 0;
    for (float l : logits) z += std::exp(l / temperature);
    std::map<int, int> counts;
    const int n = 20000;
    for (int i = 0; i < n; ++i) ++counts[sample_token(logits, 4, temperature, 0, (i + 0.5) / n)];
    for (int k = 0; k < 4; ++k)
      EXPECT_NEAR(counts[k] / double(n), std::exp(logits[k] / temperature) / z, 1e-3) << k << " at " << temperature;
  }
  // Greedy, and top-k 1, take the largest; top-k 2 never draws the others.
  EXPECT_EQ(sample_token(logits, 4, 0.0f, 0, 0.99), 0);
  EXPECT_EQ(sample_token(logits, 4, 1.0f, 1, 0.99), 0);
  for (int i = 0; i < 100; ++i) {
    const int t = sample_token(logits, 4, 1.0f, 2, i / 100.0);
    EXPECT_TRUE(t == 0 || t == 2) << t;
  }
}

class GenerateWithAModel : public ::testing::Test {
 protected:
  GenerateWithAModel()
      : model(ModelSpec::parse("name lm\ninput ids 6\nvocabulary hex=" + vocabulary_hex("abc\n") +
                                   "\nembedding vocab=4 dim=8 layout=channels_last init=normal:1\n"
                                   "positional_embedding\nattention heads=2\nlayernorm\ntied_output\n",
                               "lm.spec"),
              Device::cpu()) {
    model.initialize(3);
  }
  Model model;
};

TEST_F(GenerateWithAModel, ASeedGivesTheSameTextAndTheWindowSlidesPastTheContext) {
  SampleOptions o;
  o.tokens = 40;  // the prompt and the bytes drawn pass T = 6 many times
  o.seed = 9;
  const std::string a = generate(model, "ab", o);
  EXPECT_EQ(a.size(), 40u);
  for (char c : a) EXPECT_NE(std::string("abc\n").find(c), std::string::npos);
  EXPECT_EQ(generate(model, "ab", o), a);
  o.seed = 10;
  EXPECT_NE(generate(model, "ab", o), a);
  // A prompt longer than the context: its last 6 bytes are what counts.
  o.seed = 9;
  o.tokens = 5;
  EXPECT_EQ(generate(model, "cccccc" + std::string("abcab\n"), o), generate(model, "abcab\n", o));
  // Causal: a prompt's next-byte logits do not depend on the padding after it.
  o.temperature = 0;
  std::string heard;
  const std::string greedy = generate(model, "a", o, [&](char c) { heard += c; });
  EXPECT_EQ(heard, greedy);
}

TEST_F(GenerateWithAModel, APromptTheVocabularyCannotReadIsNamed) {
  SampleOptions o;
  EXPECT_EQ(error_of([&] { generate(model, "abXcY\xce", o); }),
            "the prompt has bytes outside model lm's vocabulary of 4: 'X' at 2, 'Y' at 4, 0xce at 5");
  EXPECT_EQ(error_of([&] { generate(model, "", o); }), "the prompt is empty: give at least one byte to continue from");
  o.temperature = -1;
  EXPECT_EQ(error_of([&] { generate(model, "a", o); }), "--temperature must be >= 0");
  Model image(ModelSpec::parse("name m\ninput 4\ndense units=3\n", "m.spec"), Device::cpu());
  EXPECT_EQ(error_of([&] { encode_bytes(image.spec(), "a"); }),
            "model m has no byte vocabulary: it was not trained on text (--data kjv or text:FILE)");
}

}  // namespace
}  // namespace troupe::models
