// Model specs, the zoo, learning-rate schedules and optimizer configuration:
// parsing, round trips, and the errors users see.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "models/model.hpp"
#include "models/optimizer.hpp"
#include "models/schedule.hpp"
#include "models/spec.hpp"
#include "models/warm_up.hpp"

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

TEST(ModelSpec, ZooModelsHaveTheSeedsArchitectures) {
  DataShape images{Shape{1, 28, 28}, DType::f32, 10};
  Model mlp(zoo_spec("mlp", images), Device::cpu());
  EXPECT_EQ(mlp.output_shape(), (Shape{10}));
  // 784*256+256 + 256*128+128 + 128*10+10 = 235146 parameters.
  std::int64_t expect = 0;
  for (std::int64_t n : {784 * 256 + 256, 256 * 128 + 128, 128 * 10 + 10}) expect += (n + 15) / 16 * 16;
  EXPECT_EQ(mlp.parameter_count(), expect);

  Model cnn(zoo_spec("cnn", images), Device::cpu());
  EXPECT_NE(cnn.summary().find("conv2d filters=32 kernel=3"), std::string::npos) << cnn.summary();
  EXPECT_NE(cnn.summary().find("[32, 13, 13]"), std::string::npos) << cnn.summary();

  DataShape text{Shape{300}, DType::i32, 45, 1, 10000};
  Model textcnn(zoo_spec("textcnn", text), Device::cpu());
  EXPECT_EQ(textcnn.output_shape(), (Shape{45}));
  EXPECT_NE(textcnn.summary().find("embedding vocab=10000 dim=7"), std::string::npos);

  Model linreg(zoo_spec("linreg", {Shape{1}, DType::f32, 0, 1}), Device::cpu());
  EXPECT_EQ(linreg.parameter_count(), 16);  // w and b, padded to one aligned slice
}

TEST(ModelSpec, TextRoundTrips) {
  ModelSpec a = zoo_spec("cnn", {Shape{1, 28, 28}, DType::f32, 10});
  ModelSpec b = ModelSpec::parse(a.text(), "round trip");
  EXPECT_EQ(a.text(), b.text());
  EXPECT_EQ(b.input, (Shape{1, 28, 28}));
}

TEST(ModelSpec, ErrorsNameSourceLineAndProblem) {
  EXPECT_NE(error_of([] {
              ModelSpec::parse("input 4\nconv3d filters=2\n", "my.spec");
            }).find("my.spec:2: unknown layer 'conv3d'; known: dense"),
            std::string::npos);
  EXPECT_NE(error_of([] { ModelSpec::parse("input 4\ndense units=x\n", "m"); }).find("m:2:"), std::string::npos);
  EXPECT_NE(error_of([] { ModelSpec::parse("input 4\ndense\n", "m"); }).find("missing units="), std::string::npos);
  EXPECT_NE(
      error_of([] { ModelSpec::parse("input 4\ndense units=3 color=red\n", "m"); }).find("unknown option 'color'"),
      std::string::npos);
  EXPECT_NE(error_of([] { ModelSpec::parse("dense units=3\n", "m"); }).find("no 'input' line"), std::string::npos);
  EXPECT_NE(error_of([] { ModelSpec::parse("input 4\ndropout rate=1.5\n", "m"); }).find("[0, 1)"), std::string::npos);
  // A spec is text: a control byte (here a NUL in the name, which cut every
  // message naming the model short; fuzz/model_spec.cpp) is refused where
  // it stands. Tabs and a CRLF line end are text.
  EXPECT_NE(error_of([] {
              ModelSpec::parse(std::string("name ab\0c\ninput 4\ndense units=3\n", 32), "m");
            }).find("m:1: a control character (byte 0x00) at column 8"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ModelSpec::parse("input 4\ndense\x1b units=3\n", "m");
            }).find("m:2: a control character (byte 0x1b) at column 6"),
            std::string::npos);
  EXPECT_EQ(ModelSpec::parse("name\tx\r\ninput 4\r\ndense units=3\r\n", "m").name, "x");
  EXPECT_NE(error_of([] {
              ModelSpec::parse("input ids 5\nembedding vocab=3 dim=2 layout=rows\n", "m");
            }).find("embedding layout 'rows': expected channels_first ([dim, length], for conv1d) or channels_last"),
            std::string::npos);
  // Shapes that do not fit fail when the model is built, naming the layer.
  EXPECT_NE(error_of([] {
              Model m(ModelSpec::parse("input 1 28 28\ndense units=3\n", "m"), Device::cpu());
            }).find("put a flatten layer before it"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Model m(ModelSpec::parse("input ids 5\nembedding vocab=3 dim=2\nflatten\npositional_embedding\n", "m"),
                      Device::cpu());
            }).find("positional_embedding: expects a sequence [length, dim], got [10]"),
            std::string::npos);
}

// A spec that parses can still describe a model that cannot be: a layer
// that does not fit what comes before it, a size whose element count would
// overflow, a model larger than the host's memory. Each is an error naming
// the model and, where it is one layer's, the layer, before anything is
// allocated (a bare std::bad_alloc, or the process killed for memory, is
// all a user saw of the last two).
TEST(ModelSpec, AModelThatCannotBeBuiltNamesTheLayerOrItsSize) {
  const auto build = [](const std::string& text) {
    return error_of([&] { Model m(ModelSpec::parse(text, "test.spec"), Device::cpu()); });
  };
  const std::string kernel = build("name k\ninput 1 28 28\nconv2d filters=4 kernel=99\nflatten\ndense units=10\n");
  EXPECT_NE(kernel.find("model 'k', layer 1 'conv2d filters=4 kernel=99"), std::string::npos) << kernel;
  EXPECT_NE(kernel.find("does not fit input [1, 1, 28, 28]"), std::string::npos) << kernel;

  // 784 x (2^63 - 1) weights: the count itself would overflow int64.
  const std::string overflow = build("name o\ninput 1 28 28\nflatten\ndense units=9223372036854775807\n");
  EXPECT_NE(overflow.find("model 'o', layer 2 'dense units=9223372036854775807'"), std::string::npos) << overflow;
  EXPECT_NE(overflow.find("more than 2^56 elements"), std::string::npos) << overflow;

  // 7 x 10^16 weights and as many biases: each a shape, their sum not
  // (fuzz/model_spec.cpp).
  const std::string sum = build("name s\ninput 1\ndense units=70000000000000000\n");
  EXPECT_NE(sum.find("model 's', layer 1 'dense units=70000000000000000': more than 2^56 parameters in one layer"),
            std::string::npos)
      << sum;

  // 784 x 10^13 weights are a shape, but in no host's memory.
  const std::string huge = build("name h\ninput 1 28 28\nflatten\ndense units=10000000000000\n");
  EXPECT_NE(huge.find("model 'h' has 7850000000000000 parameters"), std::string::npos) << huge;
  EXPECT_NE(huge.find("GiB, more than this host's"), std::string::npos) << huge;

  // Token ids and embeddings go together, first, or not at all (found while
  // writing fuzz/model_spec.cpp: both failed only at the first step, in an op).
  const std::string late = build("name e\ninput 1 28 28\nflatten\nembedding vocab=10 dim=4\nflatten\ndense units=2\n");
  EXPECT_NE(late.find("model 'e', layer 2 'embedding vocab=10 dim=4': an embedding takes token ids"), std::string::npos)
      << late;
  const std::string ids = build("name i\ninput ids 300\nflatten\ndense units=2\n");
  EXPECT_NE(ids.find("model 'i', layer 1 'flatten': the input is token ids"), std::string::npos) << ids;

  // What fits still builds.
  EXPECT_EQ(build("name ok\ninput 1 28 28\nflatten\ndense units=10\n"), "(no error)");
}

// A model spec path of /dev/zero used to be read until memory ran out.
TEST(ModelSpec, SpecFilesAreBoundedRegularFiles) {
  for (const char* path : {"/dev/zero", "/dev/urandom"})
    EXPECT_NE(error_of([&] { resolve_model(path, {}); })
                  .find(std::string("model spec '") + path +
                        "' is a character device; expected a regular file of at most 1 MiB"),
              std::string::npos)
        << error_of([&] { resolve_model(path, {}); });
  const std::string big = ::testing::TempDir() + "/troupe_test_big.spec";
  std::ofstream(big) << std::string((1 << 20) + 10, '#');
  EXPECT_NE(error_of([&] { resolve_model(big, {}); }).find("holds 1048586 bytes, more than the limit of 1 MiB"),
            std::string::npos)
      << error_of([&] { resolve_model(big, {}); });
  std::remove(big.c_str());
}

TEST(ModelSpec, UnknownZooNameListsKnownOnes) {
  std::string e = error_of([] { zoo_spec("resnet50", {Shape{1, 28, 28}, DType::f32, 10}); });
  EXPECT_NE(e.find("unknown model 'resnet50'; known: linreg, mlp, wide, cnn, vgg, resnet, textcnn"), std::string::npos)
      << e;
  e = error_of([] { zoo_spec("textcnn", {Shape{1, 28, 28}, DType::f32, 10}); });
  EXPECT_NE(e.find("token-id data"), std::string::npos) << e;
}

TEST(ModelSpec, SpecFilesByPath) {
  const std::string path = ::testing::TempDir() + "/troupe_test_model.spec";
  std::ofstream(path) << "# my model\nname mine\ninput 1 28 28\nflatten\ndense units=10 # logits\n";
  ModelSpec spec = resolve_model(path, {Shape{1, 28, 28}, DType::f32, 10});
  EXPECT_EQ(spec.name, "mine");
  EXPECT_EQ(spec.layers.size(), 2u);
  EXPECT_NE(
      error_of([] { resolve_model("/nonexistent/x.spec", {}); }).find("model spec '/nonexistent/x.spec': cannot open"),
      std::string::npos);
}

TEST(LrSchedule, SeedTutorialDecay) {
  LrSchedule s("piecewise:3=1e-4,7=1e-5", 1e-3f);
  EXPECT_FLOAT_EQ(s.at(0, 0), 1e-3f);
  EXPECT_FLOAT_EQ(s.at(100000, 2), 1e-3f);
  EXPECT_FLOAT_EQ(s.at(0, 3), 1e-4f);
  EXPECT_FLOAT_EQ(s.at(0, 6), 1e-4f);
  EXPECT_FLOAT_EQ(s.at(0, 7), 1e-5f);
  EXPECT_FLOAT_EQ(s.at(0, 11), 1e-5f);
}

TEST(LrSchedule, ExponentialCosineStepsAndWarmup) {
  EXPECT_NEAR(LrSchedule("exponential:0.5/10", 1.0f).at(10, 0), 0.5, 1e-6);
  EXPECT_NEAR(LrSchedule("exponential:0.5/10", 1.0f).at(5, 0), std::sqrt(0.5), 1e-6);
  EXPECT_NEAR(LrSchedule("exponential:0.5/10/staircase", 1.0f).at(19, 0), 0.5, 1e-6);
  EXPECT_NEAR(LrSchedule("cosine:100", 2.0f).at(50, 0), 1.0, 1e-6);
  EXPECT_NEAR(LrSchedule("cosine:100", 2.0f).at(500, 0), 0.0, 1e-6);
  EXPECT_NEAR(LrSchedule("cosine:100/0.1", 1.0f).at(100, 0), 0.1, 1e-6);
  EXPECT_NEAR(LrSchedule("piecewise-steps:10=0.5", 1.0f).at(10, 0), 0.5, 1e-6);
  LrSchedule warm("constant", 1.0f, 4);
  EXPECT_NEAR(warm.at(0, 0), 0.25, 1e-6);
  EXPECT_NEAR(warm.at(3, 0), 1.0, 1e-6);
  EXPECT_NEAR(warm.at(100, 0), 1.0, 1e-6);
}

TEST(LrSchedule, BadSpecsListValidForms) {
  for (const char* bad : {"linear", "piecewise:", "piecewise:3", "piecewise:3=a", "piecewise:7=1,3=2",
                          "exponential:0.5", "cosine:0", "constant:1", "exponential:0.5/10/stairs"}) {
    std::string e = error_of([&] { LrSchedule(bad, 1e-3f); });
    EXPECT_NE(e.find(std::string("'") + bad + "'"), std::string::npos) << e;
    EXPECT_NE(e.find("valid forms"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([] { LrSchedule("constant", -1.0f); }).find("positive"), std::string::npos);
}

// fuzz/job_file found it (a schedule is a job key): a step count or a
// boundary at or past 2^63 was converted to int64, which is undefined
// (UBSan: "1.02222e+37 is outside the range of representable values").
TEST(LrSchedule, CountsBeyondInt64AreRefused) {
  for (const char* bad : {"cosine:1e37", "cosine:9223372036854775808/0.5", "exponential:0.5/1e19",
                          "piecewise:1e300=0.1", "piecewise-steps:3=0.1,9.3e18=0.01"}) {
    const std::string e = error_of([&] { LrSchedule(bad, 1e-3f); });
    EXPECT_NE(e.find("too large (at most 2^63 - 1)"), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("'") + bad + "'"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([] { LrSchedule("piecewise:2=1e39", 1e-3f); }).find("'1e39' is beyond a 32-bit float"),
            std::string::npos);
  // The largest double below 2^63 is still a count.
  EXPECT_NEAR(LrSchedule("cosine:9223372036854774784", 1.0f).at(0, 0), 1.0, 1e-6);
}

TEST(OptimizerConfig, TextRoundTripAndUnknownNames) {
  OptimizerConfig c;
  c.name = "sgd";
  c.momentum = 0.9f;
  c.nesterov = true;
  OptimizerConfig d = OptimizerConfig::parse(c.text());
  EXPECT_EQ(d.name, "sgd");
  EXPECT_FLOAT_EQ(d.momentum, 0.9f);
  EXPECT_TRUE(d.nesterov);
  OptimizerConfig bad;
  bad.name = "rmsprop";
  EXPECT_NE(error_of([&] { make_optimizer(bad, Tensor::zeros({4}), {}); }).find("known: sgd, adam, adamw, nadam"),
            std::string::npos);
}

// The GPU warm-up has nothing to do on a CPU device (tests/gpu/test_warm_up.cpp
// checks it on a GPU).
TEST(WarmUp, DoesNothingOnACpuDevice) {
  const ModelSpec spec = zoo_spec("cnn", {Shape{1, 28, 28}, DType::f32, 10});
  EXPECT_EQ(warm_up_device(spec, Device::cpu(), 64, 1000, false), WarmUp::not_a_gpu);
  EXPECT_EQ(warm_up_device(spec, Device::cpu(), 64, 1000, false), WarmUp::not_a_gpu);
}

}  // namespace
}  // namespace troupe::models
