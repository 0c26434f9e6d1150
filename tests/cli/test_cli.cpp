// The troupe binary as a user runs it: a real process, real files. Bad input
// gets a one-line error naming what was wrong and a non-zero exit, never a
// crash or a partial file.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <png.h>  // defines: png_image_write_to_file, the image-folder test's files
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/config.hpp"
#include "tests/support/ports.hpp"

namespace {

namespace fs = std::filesystem;

struct Result {
  int status;
  std::string output;
};

// The binary under test; TROUPE_TEST_BINARY overrides it (to check that a
// new test fails against an older build).
std::string binary() {
  const char* other = std::getenv("TROUPE_TEST_BINARY");
  return other && *other ? other : TROUPE_BINARY;
}

Result troupe(const std::string& args, const std::string& env = "") {
  std::string cmd = env + " " + binary() + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

std::string temp(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("troupe_cli_" + name);
  fs::remove_all(p);
  return p.string();
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "output was:\n" << (haystack)

// A troupe process of our own, so that its exit status can be read
// (a process started through `sh -c '... &'` belongs to the shell).
struct Process {
  pid_t pid = -1;
  std::string log;  // its stdout and stderr together
};

Process start_troupe(const std::string& args, const std::string& log) {
  const std::string cmd = "exec " + binary() + " " + args + " > " + log + " 2>&1";
  Process p{fork(), log};
  if (p.pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return p;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Waits until `file` has at least `lines` lines; false after `seconds`.
bool wait_for_lines(const std::string& file, std::size_t lines, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    const std::string text = read_text(file);
    if (static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) >= lines) return true;
    usleep(50 * 1000);
  }
  return false;
}

// The exit status (128 + N for a signal N), or -1 (and SIGKILL) when the
// process is still running after `seconds`.
int wait_exit(const Process& p, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < until) {
    if (waitpid(p.pid, &status, WNOHANG) == p.pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    usleep(20 * 1000);
  }
  kill(p.pid, SIGKILL);
  waitpid(p.pid, &status, 0);
  return -1;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

TEST(Cli, HelpListsCommandsAndOptions) {
  Result r = troupe("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_CONTAINS(r.output, "train");
  EXPECT_CONTAINS(r.output, "eval");
  r = troupe("train --help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--model", "--data", "--epochs", "--batch", "--optimizer", "--lr", "--schedule", "--threads",
                           "--seed", "--steps", "--checkpoint-dir", "--resume", "--metrics", "--summary-json"})
    EXPECT_CONTAINS(r.output, flag);
}

// `troupe --version` and `troupe version`: the project's version on the
// first line (as scripts read it), then how the binary was built.
TEST(Cli, VersionPrintsTheVersionAndHowTheBinaryWasBuilt) {
  const Result flag = troupe("--version");
  ASSERT_EQ(flag.status, 0) << flag.output;
  const std::vector<std::string> lines = lines_of(flag.output);
  ASSERT_EQ(lines.size(), 5u) << flag.output;
  EXPECT_EQ(lines[0], std::string("troupe ") + TROUPE_VERSION);
  EXPECT_EQ(lines[1].rfind("build: ", 0), 0u) << flag.output;
  EXPECT_CONTAINS(lines[1], "C++17");
  // This build's own facts, as CMake found them.
  EXPECT_EQ(lines[2].rfind(TROUPE_HAVE_CUDA ? "CUDA: yes (nvcc " : "CUDA: no", 0), 0u) << flag.output;
  EXPECT_EQ(lines[3].rfind(TROUPE_HAVE_CUDA ? "NCCL: yes (" : "NCCL: no", 0), 0u) << flag.output;
  EXPECT_EQ(lines[4], "CAF: 0.17.6");
  EXPECT_EQ(flag.output.find("\n\n"), std::string::npos) << "a blank line:\n" << flag.output;

  const Result command = troupe("version");
  EXPECT_EQ(command.status, 0) << command.output;
  EXPECT_EQ(command.output, flag.output);
  const Result extra = troupe("version --json");
  EXPECT_EQ(extra.status, 2) << extra.output;
  EXPECT_CONTAINS(extra.output, "troupe: ");
}

TEST(Cli, TrainsWritesMetricsSummaryAndCheckpointsThenEvaluates) {
  const std::string dir = temp("run");
  fs::create_directories(dir);
  Result r = troupe("train --model mlp --steps 60 --log-every 20 --checkpoint-dir " + dir + "/ckpt --metrics " + dir +
                    "/m.csv --summary-json " + dir + "/s.json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "test accuracy");
  std::ifstream metrics(dir + "/m.csv");
  std::string header, row;
  std::getline(metrics, header);
  EXPECT_CONTAINS(header, "kind,epoch,step,loss");
  EXPECT_CONTAINS(header, ",seconds,world");
  int rows = 0;
  while (std::getline(metrics, row)) {
    ++rows;
    // One host: the world is its devices, known on every row.
    EXPECT_GE(std::atoi(row.substr(row.rfind(',') + 1).c_str()), 1) << row;
  }
  EXPECT_EQ(rows, 3);  // steps 20, 40, 60
  std::ifstream summary(dir + "/s.json");
  std::string json((std::istreambuf_iterator<char>(summary)), {});
  EXPECT_CONTAINS(json, "\"steps\": 60");
  EXPECT_CONTAINS(json, "\"peak_memory_mib\"");

  std::string ckpt;
  for (auto& e : fs::directory_iterator(dir + "/ckpt")) ckpt = e.path().string();
  ASSERT_FALSE(ckpt.empty());
  r = troupe("eval --checkpoint " + ckpt);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "mlp on fashion-mnist/test (10000 examples, step 60): accuracy");
}

// A parameter server of 3 shards (the mlp's two big layers split
// across them) trains, its checkpoint is the usual one that `troupe eval`
// reads, and a shard count below 1 is a usage error before any data loads.
TEST(Cli, ShardedParameterServerTrainsAndItsCheckpointEvaluates) {
  const std::string dir = temp("ps_shards");
  fs::remove_all(dir);
  Result r = troupe(
      "train --model mlp --steps 60 --mode async --devices cpu:0,cpu:1 --ps-shards 3 "
      "--ps-split-above 10000 --checkpoint-dir " +
      dir);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "test accuracy");
  std::string ckpt;
  for (auto& e : fs::directory_iterator(dir)) ckpt = e.path().string();
  ASSERT_FALSE(ckpt.empty());
  r = troupe("eval --checkpoint " + ckpt);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "mlp on fashion-mnist/test (10000 examples, step 60): accuracy");

  r = troupe("train --model mlp --steps 1 --mode async --ps-shards 0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "troupe: --ps-shards must be at least 1, got 0");
}

TEST(Cli, UnknownNamesListTheKnownOnes) {
  Result r = troupe("train --model resnet50 --steps 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_CONTAINS(r.output, "unknown model 'resnet50'; known: linreg, mlp, wide, cnn, vgg, resnet, textcnn");
  r = troupe("train --optimizer rmsprop");
  EXPECT_EQ(r.status, 2);
  EXPECT_CONTAINS(r.output, "--optimizer");
  r = troupe("train --data imagenet --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "imagenet");
  EXPECT_CONTAINS(r.output, "fashion-mnist");
  r = troupe("train --devices cpu:0,tpu:0 --steps 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_CONTAINS(r.output, "unknown device 'tpu:0'");
  r = troupe("train --schedule linear --steps 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_CONTAINS(r.output, "valid forms");
  r = troupe("train --no-such-flag");
  EXPECT_EQ(r.status, 2);
  r = troupe("");
  EXPECT_EQ(r.status, 2);
}

TEST(Cli, MissingDatasetNamesTheDebianPackage) {
  Result r = troupe("train --steps 1", "TROUPE_FASHION_MNIST_DIR=/nonexistent/fmnist");
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "dataset-fashion-mnist");
}

TEST(Cli, TruncatedIdxNamesFileAndOffset) {
  const std::string dir = temp("truncated");
  fs::create_directories(dir);
  // A raw IDX directory whose training images stop short of their header's count.
  auto be32 = [](std::ofstream& f, std::uint32_t v) {
    unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                          static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
    f.write(reinterpret_cast<char*>(b), 4);
  };
  for (std::string split : {"train", "t10k"}) {
    std::ofstream images(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary);
    be32(images, 0x803);
    be32(images, 10);
    be32(images, 28);
    be32(images, 28);
    images << std::string(split == "train" ? 5 * 784 : 10 * 784, '\x10');
    std::ofstream labels(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary);
    be32(labels, 0x801);
    be32(labels, 10);
    labels << std::string(10, '\x01');
  }
  Result r = troupe("train --steps 1 --data " + dir);
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "train-images-idx3-ubyte");
  EXPECT_CONTAINS(r.output, "offset");
}

// A raw IDX directory of `train` and `test` images of 28x28 with labels
// 0-9 (the pixels vary with the index, so batches differ).
std::string tiny_idx(const std::string& name, std::uint32_t train, std::uint32_t test) {
  const std::string dir = temp(name);
  fs::create_directories(dir);
  auto be32 = [](std::ofstream& f, std::uint32_t v) {
    unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                          static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
    f.write(reinterpret_cast<char*>(b), 4);
  };
  for (const std::string split : {"train", "t10k"}) {
    const std::uint32_t n = split == "train" ? train : test;
    std::ofstream images(dir + "/" + split + "-images-idx3-ubyte", std::ios::binary);
    for (std::uint32_t v : {0x803u, n, 28u, 28u}) be32(images, v);
    for (std::uint32_t i = 0; i < n * 784; ++i) images.put(static_cast<char>((i * 2654435761u) >> 24));
    std::ofstream labels(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary);
    for (std::uint32_t v : {0x801u, n}) be32(labels, v);
    for (std::uint32_t i = 0; i < n; ++i) labels.put(static_cast<char>(i % 10));
  }
  return dir;
}

// The learning rates of the rows of one kind in a --metrics JSON-lines file.
std::vector<double> logged_lrs(const std::string& path, const std::string& kind) {
  std::vector<double> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    if (row.value("kind", "") == kind) out.push_back(row.at("lr").get<double>());
  }
  return out;
}

// `troupe train --model resnet` with no other flag is the anchor's run
// (torch_resnet.py): SGD Nesterov 0.9, lr 0.1 warmed up over the first
// epoch, then cosine to 0 at the last step, batch 128; each flag overrides
// its part.
TEST(Cli, ResnetTrainsWithItsAnchorsRecipeUnlessFlagsSayOtherwise) {
  const std::string dir = tiny_idx("resnet_recipe", 256, 32);
  Result r = troupe("train --model resnet --devices cpu:0 --data " + dir + " --epochs 2 --log-every 1 --metrics " +
                    dir + "/m.jsonl");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output,
                  "model resnet: its recipe, where no flag says otherwise: sgd nesterov momentum 0.9, lr 0.1, "
                  "warm-up 1 epoch(s), schedule warmup-cosine, weight decay 0.0005, batch 128");
  // 256 images of batch 128: 2 steps an epoch, 4 in all; the warm-up gives
  // steps 0 and 1 0.05 and 0.1, then the cosine goes from the peak at step
  // 2 to 0 at step 4: 0.1, 0.05. A step row logs the rate its epoch began
  // with (steps 0 and 2), an epoch row that of its last step (1 and 3).
  const std::vector<double> at_begin = logged_lrs(dir + "/m.jsonl", "step"),
                            at_end = logged_lrs(dir + "/m.jsonl", "epoch");
  ASSERT_EQ(at_begin.size(), 4u) << read_text(dir + "/m.jsonl");
  ASSERT_EQ(at_end.size(), 2u) << read_text(dir + "/m.jsonl");
  EXPECT_NEAR(at_begin[0], 0.05, 1e-6);
  EXPECT_NEAR(at_end[0], 0.1, 1e-6);
  EXPECT_NEAR(at_begin[2], 0.1, 1e-6);
  EXPECT_NEAR(at_end[1], 0.05, 1e-6);

  r = troupe("train --model resnet --devices cpu:0 --data " + dir + " --epochs 1 --lr 0.2 --batch 64 --log-every 1 " +
             "--metrics " + dir + "/m2.jsonl");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output,
                  "its recipe, where no flag says otherwise: sgd nesterov momentum 0.9, warm-up 1 epoch(s), "
                  "schedule warmup-cosine, weight decay 0.0005\n");
  // 4 steps, all of them warm-up, to the given peak.
  const std::vector<double> own = logged_lrs(dir + "/m2.jsonl", "step"), end = logged_lrs(dir + "/m2.jsonl", "epoch");
  ASSERT_EQ(own.size(), 4u);
  ASSERT_EQ(end.size(), 1u);
  EXPECT_NEAR(own[0], 0.05, 1e-6);
  EXPECT_NEAR(end[0], 0.2, 1e-6);

  // Two devices (the actor runtime): an epoch is 256 / (2 x 32) = 4 global
  // steps; warm-up to 0.1 at step 3, then the cosine to step 8.
  r = troupe("train --model resnet --devices cpu:0,cpu:1 --batch 32 --data " + dir + " --epochs 2 --log-every 0 " +
             "--metrics " + dir + "/m3.jsonl");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<double> job = logged_lrs(dir + "/m3.jsonl", "epoch");
  ASSERT_EQ(job.size(), 2u) << read_text(dir + "/m3.jsonl");
  EXPECT_NEAR(job[0], 0.1, 1e-6);                                              // step 3
  EXPECT_NEAR(job[1], 0.05 * (1 + std::cos(3.14159265358979 * 3 / 4)), 1e-6);  // step 7
}

TEST(Cli, BadCsvRowNamesTheLine) {
  const std::string path = temp("bad.csv");
  std::ofstream(path) << "x1,x2,label\n1,2,0\n3,4\n";
  Result r = troupe("train --steps 1 --model mlp --data " + path);
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, path + ":3");
}

// A regression table from the command line: --task regress, the target
// column by name, a held-out fraction, --standardize; MSE and MAE where a
// classifier has accuracy (null in the summary, not 0); eval and predict
// read the checkpoint's standardized model on the same split.
void write_houses(const std::string& path, int rows, int seed) {
  std::ofstream out(path);
  out << "price,rooms,area,age\n";
  for (int i = 0; i < rows; ++i) {
    const int rooms = 1 + (i * 7 + seed) % 6;
    const double area = 30 + (i * 37 + seed) % 220, age = (i * 13 + seed) % 80;
    out << 50 * rooms + 3 * area - 1.5 * age << "," << rooms << "," << area << "," << age << "\n";
  }
}

TEST(CliCsv, RegressionWithATargetColumnAHeldOutFractionAndStandardizedFeatures) {
  const std::string dir = temp("csv_regress");
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_houses(dir + "/houses.csv", 400, 1);
  const std::string data = " --data " + dir + "/houses.csv --task regress --label-column price --test-fraction 0.2";
  Result r = troupe("train --model mlp --devices cpu:0 --epochs 30 --lr 0.01 --standardize --log-every 0" + data +
                    " --checkpoint-dir " + dir + "/ck --summary-json " + dir + "/s.json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "| test mse ");
  EXPECT_CONTAINS(r.output, "standardized: standardize mean=");  // the model summary's first layer
  EXPECT_EQ(r.output.find("accuracy"), std::string::npos) << r.output;
  const auto summary = nlohmann::json::parse(read_text(dir + "/s.json"));
  EXPECT_EQ(summary["task"], "regression");
  EXPECT_EQ(summary["test_examples"], 80);
  EXPECT_TRUE(summary["test_accuracy"].is_null()) << summary.dump();
  EXPECT_TRUE(summary["test_top5"].is_null());
  const double mse = summary["test_loss"], mae = summary["test_mae"];
  // Standardized, the mlp fits the (noise-free, linear) prices: their
  // spread is about 200, an error below 30 is learning.
  EXPECT_LT(mae, 30) << summary.dump();
  EXPECT_GE(mse, mae * mae * 0.99);  // the mean square is at least the squared mean

  std::string ck;
  for (auto& e : fs::directory_iterator(dir + "/ck")) ck = std::max(ck, e.path().string());
  r = troupe("eval --checkpoint " + ck + data);
  ASSERT_EQ(r.status, 0) << r.output;
  char expected[64];
  std::snprintf(expected, sizeof expected, "(80 examples, step 150): mse %.4f  mae %.4f", mse, mae);
  EXPECT_CONTAINS(r.output, expected);
  r = troupe("predict --checkpoint " + ck + data + " --limit 3 --output " + dir + "/p.json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto predictions = nlohmann::json::parse(read_text(dir + "/p.json"));
  EXPECT_EQ(predictions["task"], "regression");
  ASSERT_EQ(predictions["outputs"].size(), 3u);
  // Read as a classifier, the same table is refused, with the way out.
  r = troupe("eval --checkpoint " + ck + " --data " + dir + "/houses.csv --label-column rooms --test-fraction 0.2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "gives 1 output(s)");
  EXPECT_CONTAINS(r.output, "give --task regress");
  // Without --model the default cnn meets a table's rows: the error says
  // which zoo model takes them.
  r = troupe("train --devices cpu:0 --steps 1" + data);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "model 'cnn' needs image data [channels, height, width], got [3]");
  EXPECT_CONTAINS(r.output, "--model mlp, or a model spec");
}

// A job without test data says so, everywhere: no "test loss 0.0000
// accuracy 0.0000", which reads as a result. --test-data gives one.
TEST(CliCsv, NoTestDataIsSaidAndNullAndASecondFileIsTheTestSplit) {
  const std::string dir = temp("csv_no_test");
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream train(dir + "/train.csv"), test(dir + "/test.csv");
    train << "a,b,label\n";
    test << "a,b,label\n";
    for (int i = 0; i < 200; ++i) (i < 150 ? train : test) << i % 10 << "," << (i * 3) % 7 << "," << i % 2 << "\n";
  }
  for (const std::string devices : {"cpu:0", "cpu:0,cpu:1"}) {
    SCOPED_TRACE(devices);
    Result r = troupe("train --model mlp --data " + dir + "/train.csv --devices " + devices +
                      " --epochs 2 --log-every 0 --drop-remainder false --summary-json " + dir + "/s.json --metrics " +
                      dir + "/m.jsonl");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_CONTAINS(r.output, "| no test data |");
    EXPECT_CONTAINS(r.output, "no test data (give --test-fraction or --test-data");
    EXPECT_EQ(r.output.find("test loss"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("0.0000  top-5"), std::string::npos) << r.output;
    const auto summary = nlohmann::json::parse(read_text(dir + "/s.json"));
    EXPECT_EQ(summary["test_examples"], 0);
    EXPECT_TRUE(summary["test_accuracy"].is_null()) << summary.dump();
    EXPECT_TRUE(summary["test_loss"].is_null()) << summary.dump();
    // 150 examples in global batches of 64 (or 2 x 64): the partial last one trains too.
    EXPECT_EQ(summary["steps"], devices == "cpu:0" ? 6 : 4);
    const std::vector<std::string> rows = lines_of(read_text(dir + "/m.jsonl"));
    ASSERT_FALSE(rows.empty());
    const auto epoch = nlohmann::json::parse(rows.back());
    EXPECT_TRUE(epoch["test_accuracy"].is_null()) << rows.back();
  }
  Result r = troupe("train --model mlp --data " + dir + "/train.csv --test-data " + dir +
                    "/test.csv --devices cpu:0 --epochs 1 --log-every 0 --summary-json " + dir + "/s.json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "test accuracy ");
  EXPECT_EQ(nlohmann::json::parse(read_text(dir + "/s.json"))["test_examples"], 50);
  r = troupe("train --model mlp --data " + dir + "/train.csv --test-data " + dir +
             "/test.csv --test-fraction 0.1 --steps 1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "one or the other");
}

TEST(Cli, UnwritableCheckpointDirFailsBeforeTraining) {
  const std::string file = temp("not_a_dir");
  std::ofstream(file) << "x";
  Result r = troupe("train --steps 5 --checkpoint-dir " + file + "/ckpt");
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, file + "/ckpt");
  EXPECT_EQ(r.output.find("epoch 1"), std::string::npos) << "training started:\n" << r.output;
}

TEST(Cli, CorruptTruncatedAndForeignCheckpointsAreRefused) {
  const std::string dir = temp("bad_ckpt");
  fs::create_directories(dir);
  ASSERT_EQ(troupe("train --model mlp --steps 2 --checkpoint-dir " + dir).status, 0);
  std::string good;
  for (auto& e : fs::directory_iterator(dir)) good = e.path().string();
  const auto size = fs::file_size(good);

  const std::string truncated = dir + "/truncated.troupe";
  fs::copy_file(good, truncated);
  fs::resize_file(truncated, size / 2);
  Result r = troupe("eval --checkpoint " + truncated);
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, truncated);

  const std::string corrupt = dir + "/corrupt.troupe";
  fs::copy_file(good, corrupt);
  {
    std::fstream f(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.put('\x5a');
    f.put('\xa5');
  }
  r = troupe("eval --checkpoint " + corrupt);
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, corrupt);

  const std::string foreign = dir + "/foreign.troupe";
  std::ofstream(foreign) << "this is not a checkpoint at all, just some text that is long enough";
  r = troupe("eval --checkpoint " + foreign);
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, foreign);

  r = troupe("eval --checkpoint " + dir + "/missing.troupe");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "missing.troupe");
}

TEST(Cli, ResumingWithAnotherModelIsRefused) {
  const std::string dir = temp("other");
  ASSERT_EQ(troupe("train --model mlp --steps 2 --checkpoint-dir " + dir).status, 0);
  Result r = troupe("train --model cnn --steps 4 --resume --checkpoint-dir " + dir);
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "is for model 'mlp', but 'cnn' was requested");
}

}  // namespace

namespace {

TEST(CliJob, TwoDevicesSwitchScheduleAndControlWithCtl) {
  const std::string dir = temp("job");
  fs::create_directories(dir);
  // Start a job with a control endpoint, drive it with `troupe ctl` from
  // another process, and stop it through the endpoint.
  const std::string port = std::to_string(troupe::testing::free_loopback_port());
  std::string cmd = binary() + " train --model mlp --devices cpu:0,cpu:1 --batch 32 --epochs 3" +
                    " --switch 100:async --control 127.0.0.1:" + port + " --checkpoint-dir " + dir + "/ckpt > " + dir +
                    "/log 2>&1 & echo $!";
  FILE* p = popen(cmd.c_str(), "r");
  char pid[32] = {0};
  ASSERT_TRUE(std::fgets(pid, sizeof pid, p));
  pclose(p);
  Result status{1, ""};
  for (int i = 0; i < 100 && status.output.find("\"replicas\"") == std::string::npos; ++i) {
    usleep(100 * 1000);
    status = troupe("ctl --at 127.0.0.1:" + port + " status");
  }
  ASSERT_EQ(status.status, 0) << status.output;
  EXPECT_CONTAINS(status.output, "\"replicas\":2");
  EXPECT_CONTAINS(status.output, "\"accuracy\":null");  // no evaluation yet (the first epoch is 937 steps)
  Result bad = troupe("ctl --at 127.0.0.1:" + port + " mode fast");
  EXPECT_EQ(bad.status, 1);
  EXPECT_CONTAINS(bad.output, "expected sync, async or ssp:N");
  Result mode = troupe("ctl --at 127.0.0.1:" + port + " mode ssp:2");
  EXPECT_EQ(mode.status, 0) << mode.output;
  Result ckpt = troupe("ctl --at 127.0.0.1:" + port + " checkpoint");
  EXPECT_EQ(ckpt.status, 0) << ckpt.output;
  // Past the scheduled switch at step 100 before the stop (the requests
  // above take effect at once, at the step in flight, so the job may still
  // be before it).
  for (int i = 0; i < 300; ++i) {
    const Result now = troupe("ctl --at 127.0.0.1:" + port + " status");
    const auto at = now.output.find("\"step\":");
    if (now.status == 0 && at != std::string::npos && std::atoll(now.output.c_str() + at + 7) > 100) break;
    usleep(100 * 1000);
  }
  Result stop = troupe("ctl --at 127.0.0.1:" + port + " stop");
  EXPECT_EQ(stop.status, 0) << stop.output;
  // The job exits cleanly within a few seconds of the stop.
  int rc = -1;
  for (int i = 0; i < 100; ++i) {
    usleep(100 * 1000);
    if (kill(std::atoi(pid), 0) != 0) {
      rc = 0;
      break;
    }
  }
  std::ifstream log(dir + "/log");
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_EQ(rc, 0) << "the job did not exit within 10 s of /stop:\n" << text;
  EXPECT_CONTAINS(text, "test accuracy");
  EXPECT_CONTAINS(text, "ssp:2@");
  EXPECT_CONTAINS(text, "step 100: mode async from here\n");  // a switch mid-epoch has its line
  if (rc != 0) kill(std::atoi(pid), SIGKILL);
  Result gone = troupe("ctl --at 127.0.0.1:" + port + " status");
  EXPECT_EQ(gone.status, 1);
  EXPECT_CONTAINS(gone.output, "nothing is listening");
}

// --precision fp16 as a user runs it on a CPU: a note says it is emulated,
// the summary gives the loss scale and the steps it skipped; a first scale
// far too large for half skips steps; async is refused naming why (exit 2).
TEST(Cli, Fp16OnACpuIsEmulatedWithANoteAndItsLossScaleIsInTheSummary) {
  const std::string dir = temp("fp16");
  fs::create_directories(dir);
  Result r = troupe(
      "train --model mlp --devices cpu:0 --steps 40 --precision fp16 --initial-loss-scale 1e12 "
      "--log-every 0 --summary-json " +
      dir + "/s.json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "note: --precision fp16 on cpu:0 is emulated");
  std::ifstream summary(dir + "/s.json");
  const std::string json((std::istreambuf_iterator<char>(summary)), {});
  EXPECT_CONTAINS(json, "\"precision\": \"fp16\"");
  const auto skipped = json.find("\"skipped_steps\": ");
  ASSERT_NE(skipped, std::string::npos) << json;
  EXPECT_GT(std::atoi(json.c_str() + skipped + 17), 0) << json;
  EXPECT_EQ(json.find("\"loss_scale\": null"), std::string::npos) << json;

  r = troupe("train --model mlp --devices cpu:0,cpu:1 --mode async --precision fp16 --steps 5");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "--precision fp16 trains in sync mode only");
}

TEST(CliJob, MoreCpuDevicesThanCoresIsAWarning) {
  const unsigned cores = std::thread::hardware_concurrency();
  std::string devices;
  for (unsigned i = 0; i <= cores; ++i) devices += (i ? ",cpu:" : "cpu:") + std::to_string(i);
  Result r = troupe("train --model mlp --batch 16 --steps 3 --devices " + devices);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "warning: " + std::to_string(cores + 1) + " CPU device(s)");
  EXPECT_CONTAINS(r.output, "test accuracy");
}

TEST(CliJob, SigtermCheckpointsAndExitsWithinFiveSeconds) {
  const std::string dir = temp("sigterm");
  fs::create_directories(dir);
  Process p = start_troupe("train --model mlp --devices cpu:0,cpu:1 --epochs 5 --log-every 1 --metrics " + dir +
                               "/m.csv --checkpoint-dir " + dir + "/ckpt",
                           dir + "/log");
  // Let it load the data and train a little.
  ASSERT_TRUE(wait_for_lines(dir + "/m.csv", 3, 60)) << read_text(p.log);  // the header and two steps
  ASSERT_EQ(kill(p.pid, SIGTERM), 0);
  const int status = wait_exit(p, 5);
  const std::string text = read_text(p.log);
  EXPECT_NE(status, -1) << "no exit within 5 s of SIGTERM:\n" << text;
  EXPECT_EQ(status, 143) << text;  // 128 + SIGTERM (it once was 0)
  EXPECT_CONTAINS(text, "checkpoint: ");
  EXPECT_CONTAINS(text, "stopped by SIGTERM after step ");
  EXPECT_CONTAINS(text, "resume with --resume (checkpoint dir " + dir + "/ckpt)");
  EXPECT_FALSE(fs::is_empty(dir + "/ckpt"));
}

}  // namespace

namespace {

// `--metrics runs/x/metrics.csv` once failed with "cannot create the
// file" when runs/x did not exist; --checkpoint-dir creates its folder.
TEST(CliIssue11, MetricsFileInAMissingFolderIsCreated) {
  const std::string dir = temp("metrics_parent");
  Result r = troupe("train --model linreg --data linreg --devices cpu:0 --steps 3 --log-every 1 --metrics " + dir +
                    "/runs/x/metrics.csv");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> rows = lines_of(read_text(dir + "/runs/x/metrics.csv"));
  ASSERT_EQ(rows.size(), 4u);  // the header, steps 1 to 3
  EXPECT_CONTAINS(rows[0], "kind,epoch,step,loss");
}

// The summary and the timeline are written when the job ends: a folder that
// refuses files is an error before training, naming the flag, not after it
// (each used to train to the end and then fail on "cannot write
// PATH.tmp.N"). /proc refuses new files to root too; --timeline also runs
// the actor job, --summary-json the single-replica trainer.
TEST(CliOutputs, AnOutputThatCannotBeWrittenStopsTheJobBeforeTraining) {
  for (const std::string flag : {"--summary-json", "--timeline", "--metrics"}) {
    Result r = troupe("train --model linreg --data linreg --devices cpu:0 --steps 3 --log-every 1 " + flag +
                      " /proc/troupe-out.json");
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_CONTAINS(r.output, "troupe: " + flag + " /proc/troupe-out.json: cannot create a file in /proc");
    EXPECT_EQ(r.output.find("peak memory"), std::string::npos) << flag << " trained first:\n" << r.output;
    EXPECT_EQ(r.output.find("parameters:"), std::string::npos) << flag << " built the model first:\n" << r.output;
  }
}

// An unknown --data name once printed "known names:" and then nothing
// on its line (the names followed on lines of their own).
TEST(CliIssue11, UnknownDatasetNamesTheKnownOnesOnItsLine) {
  Result r = troupe("train --data imagenet --steps 1");
  EXPECT_EQ(r.status, 2) << r.output;
  const std::vector<std::string> lines = lines_of(r.output);
  ASSERT_EQ(lines.size(), 1u) << r.output;
  EXPECT_CONTAINS(lines[0], "troupe: unknown dataset 'imagenet'; known names: fashion-mnist, linreg, wordnet");
  EXPECT_CONTAINS(lines[0], "a .csv file, images:DIR, text:FILE or an IDX directory");
}

// cli/README.md once listed a `bench` command that does not exist. The
// commands in its table are exactly those `troupe --help` lists.
TEST(CliIssue11, ReadmeListsExactlyTheCommandsTheBinaryHas) {
  Result help = troupe("--help");
  ASSERT_EQ(help.status, 0) << help.output;
  std::vector<std::string> in_help;
  bool in_section = false;
  for (const std::string& line : lines_of(help.output)) {
    if (line.rfind("Subcommands:", 0) == 0) {
      in_section = true;
    } else if (in_section && line.rfind("  ", 0) == 0) {
      std::istringstream words(line);
      std::string name;
      words >> name;
      in_help.push_back(name);
    } else {
      in_section = false;
    }
  }
  ASSERT_FALSE(in_help.empty()) << help.output;
  std::vector<std::string> in_readme;  // rows "| `NAME` | ..."
  for (const std::string& line : lines_of(read_text(TROUPE_SOURCE_DIR "/cli/README.md")))
    if (line.rfind("| `", 0) == 0) in_readme.push_back(line.substr(3, line.find('`', 3) - 3));
  std::sort(in_help.begin(), in_help.end());
  std::sort(in_readme.begin(), in_readme.end());
  EXPECT_EQ(in_readme, in_help);
}

// A seed above 2^64-1 was once taken as 2^64-1 without a word.
TEST(CliIssue11, SeedOutOfRangeIsRefused) {
  for (const char* seed : {"99999999999999999999", "18446744073709551616", "-1", "0x10", "1e3"}) {
    Result r = troupe(std::string("train --model linreg --data linreg --devices cpu:0 --steps 1 --seed ") + seed);
    EXPECT_EQ(r.status, 2) << seed << ": " << r.output;
    EXPECT_CONTAINS(r.output, std::string("--seed: '") + seed + "' is not an integer from 0 to 18446744073709551615");
    EXPECT_EQ(r.output.find("peak memory"), std::string::npos) << "it trained:\n" << r.output;  // the final line's
  }
  Result top = troupe("train --model linreg --data linreg --devices cpu:0 --steps 1 --seed 18446744073709551615");
  EXPECT_EQ(top.status, 0) << top.output;
  EXPECT_CONTAINS(top.output, "test mse");  // linreg: a regression
}

// A typo in a flag or a command once got CLI11's words ("A subcommand
// is required" for `troupe trian`); every error line starts with "troupe:",
// and usage and configuration errors exit 2 in every command.
TEST(CliIssue11, TyposGetTheNearestNameAndEveryErrorSaysTroupe) {
  struct Case {
    const char* args;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"train --epoch 3", "troupe: unknown option --epoch; did you mean --epochs?"},
           {"train --bach=3", "troupe: unknown option --bach; did you mean --batch?"},
           {"trian --epochs 1", "troupe: unknown command 'trian'; did you mean 'train'?"},
           {"evl --checkpoint x", "troupe: unknown command 'evl'; did you mean 'eval'?"},
           {"fly", "troupe: unknown command 'fly'; expected one of: train, eval, predict, export, ctl, node"},
           {"", "troupe: 'troupe' needs a command: train, eval, predict, export, ctl, node, generate, version"},
           {"ctl --at 127.0.0.1:9 stauts", "troupe: unknown ctl command 'stauts'; did you mean 'status'?"},
           {"ctl --at 127.0.0.1:9",
            "troupe: 'troupe ctl' needs a command: status, mode, checkpoint, stop, drain, metrics"},
           {"ctl status", "troupe: --at is required"},
           {"ctl --at nonsense status", "troupe: control address 'nonsense'"},
           {"--epochs 3 train", "troupe: --epochs is an option of 'troupe train': give it after 'train'"},
           {"train --no-such-flag", "troupe: unknown option --no-such-flag for 'troupe train'"},
           {"train --epochs many", "troupe: "},
           {"eval --checkpoint x.troupe --batch 0", "troupe: --batch must be at least 1"},
           {"eval --checkpoint x.troupe --data imagenet", "troupe: unknown dataset 'imagenet'"},
           {"node --lisen 127.0.0.1:9", "troupe: unknown option --lisen; did you mean --listen?"},
           {"node --join 127.0.0.1:9 --threads 0", "troupe: --threads must be at least 1"},
       }) {
    Result r = troupe(c.args);
    EXPECT_EQ(r.status, 2) << c.args << ":\n" << r.output;
    const std::vector<std::string> lines = lines_of(r.output);
    ASSERT_EQ(lines.size(), 1u) << c.args << ":\n" << r.output;
    EXPECT_EQ(lines[0].rfind(c.message, 0), 0u)
        << c.args << ": expected a line starting with\n  " << c.message << "\ngot\n  " << lines[0];
  }
}

// Ctrl-C once stopped training, checkpointed and exited 0. It exits 130
// (128 + SIGINT, as a shell reports it) and says how to go on.
TEST(CliIssue11, CtrlCExits130AndSaysResumeWithResume) {
  const std::string dir = temp("sigint");
  fs::create_directories(dir);
  Process p = start_troupe("train --model mlp --devices cpu:0 --epochs 5 --log-every 1 --metrics " + dir +
                               "/m.csv --checkpoint-dir " + dir + "/ckpt",
                           dir + "/log");
  ASSERT_TRUE(wait_for_lines(dir + "/m.csv", 3, 60))
      << read_text(p.log);  // the header and two steps  // training has begun
  ASSERT_EQ(kill(p.pid, SIGINT), 0);
  const int status = wait_exit(p, 10);
  const std::string log = read_text(p.log);
  EXPECT_EQ(status, 130) << log;
  EXPECT_CONTAINS(log, "stopped by SIGINT after step ");
  EXPECT_CONTAINS(log, "resume with --resume (checkpoint dir " + dir + "/ckpt)");
  ASSERT_TRUE(fs::is_directory(dir + "/ckpt")) << log;
  EXPECT_FALSE(fs::is_empty(dir + "/ckpt")) << log;
}

// A loopback TCP server that answers every connection with `reply` (it
// reads what the client sends first) and closes it: a port that speaks
// something other than HTTP.
class ForeignServer {
 public:
  explicit ForeignServer(std::string reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd_, 4) != 0) return;
    socklen_t len = sizeof addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int client = accept(fd_, nullptr, nullptr);
        if (client < 0) return;  // the listening socket was shut down
        char request[4096];
        (void)!recv(client, request, sizeof request, 0);
        (void)!send(client, reply_.data(), reply_.size(), MSG_NOSIGNAL);
        close(client);
      }
    });
  }
  ~ForeignServer() {
    shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }
  int port() const { return port_; }

 private:
  std::string reply_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// `troupe ctl` pointed at a port that does not speak HTTP once said
// "bad version".
TEST(CliIssue11, CtlAtAPortThatIsNotHttpSaysItIsNoControlEndpoint) {
  ForeignServer ssh("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n\x01\x02garbage");
  ASSERT_GT(ssh.port(), 0);
  const std::string at = "127.0.0.1:" + std::to_string(ssh.port());
  Result r = troupe("ctl --at " + at + " status");
  EXPECT_EQ(r.status, 1) << r.output;
  const std::vector<std::string> lines = lines_of(r.output);
  ASSERT_EQ(lines.size(), 1u) << r.output;
  EXPECT_CONTAINS(lines[0], "troupe: " + at + " is not a troupe control endpoint: it answered \"SSH-2.0-OpenSSH");
  EXPECT_CONTAINS(lines[0], "--control");
  EXPECT_EQ(r.output.find("bad version"), std::string::npos) << r.output;

  ForeignServer silent("");  // accepts, reads, closes without a word
  r = troupe("ctl --at 127.0.0.1:" + std::to_string(silent.port()) + " stop");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "is not a troupe control endpoint: it closed the connection without an HTTP answer");
}

// mlp on wordnet once failed at step 1 with "input i32 must be f32",
// naming neither the model nor the data. Both runtimes check before training.
TEST(CliIssue11, ModelThatCannotTakeTheDataIsRefusedBeforeTraining) {
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1"}) {
    Result r = troupe(std::string("train --model mlp --data wordnet --steps 2 --devices ") + devices);
    EXPECT_EQ(r.status, 2) << devices << ": " << r.output;
    EXPECT_CONTAINS(r.output,
                    "troupe: model mlp takes f32 features of shape [300], but dataset wordnet gives i32 "
                    "token ids of shape [300]: use textcnn");
    EXPECT_EQ(r.output.find("must be f32"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step 1"), std::string::npos) << "training started:\n" << r.output;
  }
  // eval: a checkpoint of mlp on Fashion-MNIST against wordnet.
  const std::string dir = temp("eval_other_data");
  ASSERT_EQ(troupe("train --model mlp --steps 1 --devices cpu:0 --checkpoint-dir " + dir).status, 0);
  const std::string checkpoint = fs::directory_iterator(dir)->path().string();
  Result e = troupe("eval --checkpoint " + checkpoint + " --data wordnet");
  EXPECT_EQ(e.status, 2) << e.output;
  EXPECT_CONTAINS(e.output, "troupe: model mlp takes f32 features of shape [1, 28, 28], but dataset wordnet gives i32");
  // A spec file whose input line is not the data's.
  const std::string spec = temp("wrong_input.spec");
  std::ofstream(spec) << "name flat\ninput 784\ndense units=10\n";
  Result r = troupe("train --model " + spec + " --data fashion-mnist --steps 2 --devices cpu:0");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output,
                  "troupe: model flat takes f32 features of shape [784], but dataset fashion-mnist gives "
                  "f32 features of shape [1, 28, 28]: the model's input line must be 'input 1 28 28'");
}

// An image folder (images:DIR) trains a few steps and its checkpoint
// evaluates on the same folder with the same flags; an IDX reading of it
// suggests images:, and a corrupt image is a data error naming the file.
TEST(CliImages, TrainsOnAnImageFolderAndEvaluates) {
  const std::string dir = temp("images");
  // Two classes of 8x8 grey images: dark and light, 12 of each.
  for (int i = 0; i < 24; ++i) {
    const std::string cls = i < 12 ? "dark" : "light";
    fs::create_directories(dir + "/pics/" + cls);
    std::vector<unsigned char> pixels(64, static_cast<unsigned char>(i < 12 ? 20 + i : 220 - i));
    png_image image;
    std::memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    image.width = 8;
    image.height = 8;
    image.format = PNG_FORMAT_GRAY;
    const std::string path = dir + "/pics/" + cls + "/" + std::to_string(i) + ".png";
    ASSERT_TRUE(png_image_write_to_file(&image, path.c_str(), 0, pixels.data(), 0, nullptr)) << path;
  }
  const std::string flags = " --data images:" + dir + "/pics --image-size 28x28 --test-fraction 0.25";
  Result r = troupe("train --model mlp --epochs 3 --steps 6 --batch 4 --devices cpu:0 --checkpoint-dir " + dir +
                    "/ckpt" + flags);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "test accuracy");
  std::string ckpt;
  for (auto& e : fs::directory_iterator(dir + "/ckpt")) ckpt = e.path().string();
  ASSERT_FALSE(ckpt.empty());
  r = troupe("eval --checkpoint " + ckpt + flags);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "mlp on images:" + dir + "/pics/test (6 examples, step 6): accuracy");
  // predict writes the folders' names as the class names.
  r = troupe("predict --checkpoint " + ckpt + flags + " --limit 2 --output " + dir + "/p.json");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream predictions(dir + "/p.json");
  const nlohmann::json p = nlohmann::json::parse(predictions);
  EXPECT_EQ(p.dump().find("\"dark\",\"light\"") != std::string::npos, true) << p.dump();

  r = troupe("train --model mlp --steps 1 --devices cpu:0 --data " + dir + "/pics");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "it holds class folders of images: for those, give --data images:" + dir + "/pics");

  std::ofstream(dir + "/pics/light/99.png") << "\x89PNG\r\n\x1a\n truncated";
  r = troupe("train --model mlp --steps 1 --devices cpu:0" + flags);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "troupe: " + dir + "/pics/light/99.png: not a readable PNG: libpng:");
  r = troupe("train --model mlp --steps 1 --devices cpu:0 --data images:" + dir + "/pics --image-size 28");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_CONTAINS(r.output, "troupe: --image-size '28': expected HxW");
}

}  // namespace
