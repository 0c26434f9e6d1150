// The troupe binary as a user runs it: a real process, real files. Bad input
// gets a one-line error naming what was wrong and a non-zero exit, never a
// crash or a partial file.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct Result {
  int status;
  std::string output;
};

Result troupe(const std::string& args, const std::string& env = "") {
  std::string cmd = env + " " TROUPE_BINARY " " + args + " 2>&1";
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

TEST(Cli, HelpListsCommandsAndOptions) {
  Result r = troupe("--help");
  EXPECT_EQ(r.status, 0);
  EXPECT_CONTAINS(r.output, "train");
  EXPECT_CONTAINS(r.output, "eval");
  r = troupe("train --help");
  EXPECT_EQ(r.status, 0);
  for (const char* flag : {"--model", "--data", "--epochs", "--batch", "--optimizer", "--lr", "--schedule",
                           "--threads", "--seed", "--steps", "--checkpoint-dir", "--resume", "--metrics",
                           "--summary-json"})
    EXPECT_CONTAINS(r.output, flag);
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
  int rows = 0;
  while (std::getline(metrics, row)) ++rows;
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

TEST(Cli, UnknownNamesListTheKnownOnes) {
  Result r = troupe("train --model resnet --steps 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_CONTAINS(r.output, "unknown model 'resnet'; known: linreg, mlp, cnn, textcnn");
  r = troupe("train --optimizer rmsprop");
  EXPECT_EQ(r.status, 2);
  EXPECT_CONTAINS(r.output, "--optimizer");
  r = troupe("train --data imagenet --steps 1");
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "imagenet");
  EXPECT_CONTAINS(r.output, "fashion-mnist");
  r = troupe("train --device tpu:0 --steps 1");
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
    be32(images, 0x803); be32(images, 10); be32(images, 28); be32(images, 28);
    images << std::string(split == "train" ? 5 * 784 : 10 * 784, '\x10');
    std::ofstream labels(dir + "/" + split + "-labels-idx1-ubyte", std::ios::binary);
    be32(labels, 0x801); be32(labels, 10);
    labels << std::string(10, '\x01');
  }
  Result r = troupe("train --steps 1 --data " + dir);
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "train-images-idx3-ubyte");
  EXPECT_CONTAINS(r.output, "offset");
}

TEST(Cli, BadCsvRowNamesTheLine) {
  const std::string path = temp("bad.csv");
  std::ofstream(path) << "x1,x2,label\n1,2,0\n3,4\n";
  Result r = troupe("train --steps 1 --model mlp --data " + path);
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, path + ":3");
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
