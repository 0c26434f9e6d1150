// `troupe predict` and `troupe export` as a user runs them: the JSON and
// .npy files predict writes, and the errors of both, which name the file
// and leave an earlier output as it was (no half-written file). Whether
// the exported ONNX gives troupe's outputs is tests/export/'s (onnxruntime,
// PyTorch).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

namespace fs = std::filesystem;

struct Result {
  int status;
  std::string output;
};

Result troupe(const std::string& args) {
  const char* other = std::getenv("TROUPE_TEST_BINARY");
  const std::string cmd = std::string(other && *other ? other : TROUPE_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// ctest runs each test in its own process, in parallel, and each process
// makes the suite's checkpoint: the process id keeps their folders apart.
std::string temp(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("troupe_predict_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "output was:\n" << (haystack)

// A checkpoint of the mlp after 2 steps, made once for the tests below.
class PredictExport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = temp("ckpt");
    const Result r = troupe("train --model mlp --steps 2 --devices cpu:0 --checkpoint-dir " + dir + "/ckpt");
    ASSERT_EQ(r.status, 0) << r.output;
    for (const auto& e : fs::directory_iterator(dir + "/ckpt")) checkpoint = e.path().string();
  }
  // This process's folders go with it.
  static void TearDownTestSuite() {
    const std::string mine = "troupe_predict_" + std::to_string(::getpid()) + "_";
    for (const auto& e : fs::directory_iterator(::testing::TempDir()))
      if (e.path().filename().string().rfind(mine, 0) == 0) fs::remove_all(e.path());
  }
  inline static std::string checkpoint;
};

TEST_F(PredictExport, PredictWritesShapeClassNamesLabelsAndOutputsAndTheInputsAsNpy) {
  ASSERT_FALSE(checkpoint.empty());
  const std::string out = temp("json");
  const Result r = troupe("predict --checkpoint " + checkpoint + " --limit 7 --output " + out + "/p.json --inputs " +
                          out + "/x.npy");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "mlp on fashion-mnist/test: outputs [7,10] of 7 examples");
  const nlohmann::json p = nlohmann::json::parse(read_text(out + "/p.json"));
  EXPECT_EQ(p["format"], "troupe-predictions");
  EXPECT_EQ(p["model"], "mlp");
  EXPECT_EQ(p["step"], 2);
  EXPECT_EQ(p["task"], "classification");
  EXPECT_EQ(p["shape"], nlohmann::json::array({7, 10}));
  ASSERT_EQ(p["classes"].size(), 10u);
  EXPECT_EQ(p["classes"][0], "T-shirt/top");
  EXPECT_EQ(p["labels"], nlohmann::json::array({9, 2, 1, 1, 6, 1, 4}));  // Fashion-MNIST's first test labels
  ASSERT_EQ(p["outputs"].size(), 7u);
  for (const auto& row : p["outputs"]) {
    ASSERT_EQ(row.size(), 10u);
    for (const auto& v : row) EXPECT_TRUE(v.is_number()) << row;
  }
  // NumPy's .npy 1.0: magic, a header padded to 64 bytes, then the floats.
  const std::string npy = read_text(out + "/x.npy");
  ASSERT_GT(npy.size(), 64u);
  EXPECT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t header = 10 + static_cast<unsigned char>(npy[8]) + 256u * static_cast<unsigned char>(npy[9]);
  EXPECT_EQ(header % 64, 0u);
  EXPECT_CONTAINS(npy.substr(0, header), "'descr': '<f4', 'fortran_order': False, 'shape': (7, 1, 28, 28), }");
  EXPECT_EQ(npy.size(), header + 7u * 784u * 4u);
}

TEST_F(PredictExport, ExportWritesAnOnnxFileAndSaysItsInputAndOutput) {
  ASSERT_FALSE(checkpoint.empty());
  const std::string out = temp("onnx");
  const Result r = troupe("export --checkpoint " + checkpoint + " --format onnx --output " + out + "/m.onnx");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output,
                  "mlp (step 2): ONNX opset 17, input \"input\" f32 [batch, 1, 28, 28], output \"output\" f32 [batch, "
                  "10]");
  const std::string bytes = read_text(out + "/m.onnx");
  EXPECT_GT(bytes.size(), 235146u * 4u);  // the parameters are in it
  EXPECT_CONTAINS(bytes, "troupe.spec");
}

// --checkpoint may name a job's --checkpoint-dir: eval, predict and export
// read its newest complete checkpoint (a truncated newer one, as a job
// killed mid-write would leave without the atomic rename, is passed over)
// and say which; a folder without one is an error naming it.
TEST_F(PredictExport, ACheckpointFolderMeansItsNewestCompleteCheckpoint) {
  ASSERT_FALSE(checkpoint.empty());
  const std::string dir = temp("folder");
  const std::string good = dir + "/ckpt-000000000002.troupe";
  fs::copy_file(checkpoint, good);
  const std::string bytes = read_text(checkpoint);
  std::ofstream(dir + "/ckpt-000000000009.troupe", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  const std::string said = "checkpoint: " + good + " (the newest in " + dir + ")";

  Result r = troupe("predict --checkpoint " + dir + " --limit 2 --output " + dir + "/p.json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, said);
  EXPECT_EQ(nlohmann::json::parse(read_text(dir + "/p.json"))["checkpoint"], good);
  r = troupe("export --checkpoint " + dir + " --output " + dir + "/m.onnx");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, said);
  EXPECT_CONTAINS(r.output, "mlp (step 2): ONNX opset 17");
  r = troupe("eval --checkpoint " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, said);

  const std::string empty = temp("empty");
  for (const std::string& command :
       {"eval --checkpoint " + empty, "predict --checkpoint " + empty + " --output " + dir + "/x.json",
        "export --checkpoint " + empty + " --output " + dir + "/x.onnx"}) {
    r = troupe(command);
    EXPECT_EQ(r.status, 1) << command << "\n" << r.output;
    EXPECT_CONTAINS(r.output, "troupe: checkpoint directory " + empty + ": no complete checkpoint");
  }
}

// A failed predict or export leaves the file that was there before as it
// was, and no temporary file beside it.
TEST_F(PredictExport, ErrorsNameTheFileAndLeaveAnEarlierOutputAlone) {
  ASSERT_FALSE(checkpoint.empty());
  const std::string out = temp("errors");
  std::ofstream(out + "/keep.json") << "earlier";
  std::ofstream(out + "/bad.troupe") << "not a checkpoint";
  struct Case {
    std::string args;
    int status;
    std::string message;
  };
  const Case cases[] = {
      {"export --checkpoint " + checkpoint + " --format tflite --output " + out + "/keep.json", 2,
       "troupe: --format 'tflite': the one format troupe exports is onnx"},
      {"export --checkpoint " + out + "/missing.troupe --output " + out + "/keep.json", 1,
       "troupe: checkpoint " + out + "/missing.troupe: cannot open"},
      {"export --checkpoint " + out + "/bad.troupe --output " + out + "/keep.json", 1,
       "troupe: checkpoint " + out + "/bad.troupe"},
      {"predict --checkpoint " + out + "/bad.troupe --output " + out + "/keep.json", 1,
       "troupe: checkpoint " + out + "/bad.troupe"},
      {"predict --checkpoint " + checkpoint + " --data wordnet --output " + out + "/keep.json", 2,
       "troupe: model mlp takes f32 features of shape [1, 28, 28], but dataset wordnet gives i32 token ids"},
      {"predict --checkpoint " + checkpoint + " --limit -1 --output " + out + "/keep.json", 2,
       "troupe: --limit must be 0 (all) or more"},
      {"predict --checkpoint " + checkpoint + " --output /proc/p.json", 1, "troupe: --output /proc/p.json"},
  };
  for (const Case& c : cases) {
    const Result r = troupe(c.args);
    EXPECT_EQ(r.status, c.status) << c.args << "\n" << r.output;
    EXPECT_CONTAINS(r.output, c.message);
    EXPECT_EQ(read_text(out + "/keep.json"), "earlier") << c.args;
  }
  int files = 0;
  for (const auto& e : fs::directory_iterator(out)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2);  // keep.json and bad.troupe: no temporary file left
}

}  // namespace

// troupe generate on a checkpoint of a small gpt trained on a text file:
// the prompt, then the bytes asked for; the same seed, the same text; a
// prompt byte the text never had is an error naming it (exit 2).
TEST(Generate, ContinuesThePromptFromALanguageModelsCheckpoint) {
  const std::string dir = temp("gpt");
  {
    std::ofstream text(dir + "/text.txt", std::ios::binary);
    for (int i = 0; i < 3000; ++i) text << (i % 3 ? "ab " : "ba\n");
  }
  const Result trained = troupe("train --model gpt --data text:" + dir +
                                "/text.txt --context 16 --layers 1 --heads 2 --width 16 --steps 20 --devices cpu:0 "
                                "--checkpoint-dir " +
                                dir + "/ckpt --log-every 0");
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_CONTAINS(trained.output, "perplexity");
  EXPECT_CONTAINS(trained.output, "tokens/s");
  const auto sample = [&](const std::string& flags) {
    const char* other = std::getenv("TROUPE_TEST_BINARY");
    const std::string cmd = std::string(other && *other ? other : TROUPE_BINARY) + " generate --checkpoint " + dir +
                            "/ckpt " + flags + " 2>/dev/null";
    FILE* pipe = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
    EXPECT_EQ(pclose(pipe), 0) << cmd;
    return out;
  };
  const std::string a = sample("--prompt 'ab ba' --tokens 50 --seed 4");
  ASSERT_EQ(a.size(), 5u + 50u + 1u) << a;  // the prompt, 50 bytes, a newline
  EXPECT_EQ(a.substr(0, 5), "ab ba");
  for (char c : a.substr(5, 50)) EXPECT_NE(std::string("ab \n").find(c), std::string::npos) << a;
  EXPECT_EQ(sample("--prompt 'ab ba' --tokens 50 --seed 4"), a);
  // predict on the text: the windows that tile the validation split, each
  // with its next byte at every position.
  const Result predicted = troupe("predict --checkpoint " + dir + "/ckpt --data text:" + dir +
                                  "/text.txt --context 16 --limit 2 --output " + dir + "/p.json");
  ASSERT_EQ(predicted.status, 0) << predicted.output;
  const nlohmann::json p = nlohmann::json::parse(read_text(dir + "/p.json"));
  EXPECT_EQ(p["shape"], nlohmann::json::array({2, 16, 4}));
  ASSERT_EQ(p["labels"].size(), 2u);
  ASSERT_EQ(p["labels"][0].size(), 16u);
  ASSERT_EQ(p["outputs"][0].size(), 16u * 4u);
  const Result bad = troupe("generate --checkpoint " + dir + "/ckpt --prompt 'abz'");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_CONTAINS(bad.output, "the prompt has bytes outside model gpt's vocabulary of 4: 'z' at 2");
  fs::remove_all(dir);
}
