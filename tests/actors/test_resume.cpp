// Resume in the actor runtime: a job stopped in the middle of an epoch and
// resumed from its checkpoint ends where an uninterrupted job ends: the same
// global step count, the same data seen (every replica continues at its own
// clock and data position), and in sync bitwise the same parameters. Also:
// a finished job resumed trains nothing, a directory without a checkpoint is
// refused unless asked to start over, a corrupt newest checkpoint falls back
// to an older one, and a diverged job stops with the last finite state.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "job/job.hpp"
#include "models/checkpoint/checkpoint.hpp"

namespace troupe::actors {
namespace {

namespace fs = std::filesystem;
using kernels::Device;

std::string fresh_dir(const std::string& name) {
  fs::path p = fs::path(::testing::TempDir()) / ("troupe_resume_" + name);
  fs::remove_all(p);
  return p.string();
}

JobConfig job(const std::string& mode, std::int64_t steps, const std::string& dir) {
  JobConfig c;
  c.train.model = "mlp";
  c.train.data = "fashion-mnist";
  c.train.epochs = 1;
  c.train.batch = 32;
  c.train.seed = 5;
  c.train.max_steps = steps;
  c.train.checkpoint_dir = dir;
  c.devices = {Device::cpu(0), Device::cpu(1)};
  c.mode = Mode::parse(mode);
  c.timeout = std::chrono::milliseconds(30000);
  c.collect_replica_parameters = true;
  return c;
}

checkpoint::State newest(const std::string& dir) {
  checkpoint::Directory d(dir, 0);
  auto path = d.latest();
  EXPECT_TRUE(path.has_value()) << "no checkpoint in " << dir;
  return checkpoint::read(*path);
}

std::uint64_t sum(const std::vector<std::uint64_t>& v) { return std::accumulate(v.begin(), v.end(), std::uint64_t{0}); }

// Stops at `stop` (mid-epoch: an epoch has 937 steps), resumes to `end`.
struct Interrupted {
  JobResult first, second;
  std::vector<std::vector<float>> parameters;
  checkpoint::State at_stop, at_end;
};

Interrupted interrupted(const std::string& mode, std::int64_t stop, std::int64_t end, const std::string& dir) {
  Interrupted out;
  {
    Job j(job(mode, stop, dir));
    out.first = j.run();
  }
  out.at_stop = newest(dir);
  JobConfig c = job(mode, end, dir);
  c.train.resume = true;
  Job j(c);
  out.second = j.run();
  out.parameters = j.replica_parameters();
  out.at_end = newest(dir);
  return out;
}

TEST(Resume, SyncMidEpochEqualsAnUninterruptedRunBitwise) {
  const std::string dir = fresh_dir("sync");
  Interrupted r = interrupted("sync", 37, 90, dir);
  ASSERT_TRUE(r.first.error.empty()) << r.first.error;
  ASSERT_TRUE(r.second.error.empty()) << r.second.error;
  EXPECT_EQ(r.at_stop.position.global_step, 37u);
  EXPECT_EQ(r.at_stop.position.replica_clocks, (std::vector<std::uint64_t>{37, 37}));
  EXPECT_EQ(r.second.steps, 90);
  EXPECT_EQ(r.second.sync_steps, 90 - 37) << "the resumed run recomputed steps it had already applied";
  EXPECT_EQ(r.first.examples + r.second.examples, 90 * 64) << "data seen differs from an uninterrupted run";
  EXPECT_EQ(r.at_end.position.replica_clocks, (std::vector<std::uint64_t>{90, 90}));

  Job whole(job("sync", 90, fresh_dir("sync_whole")));
  JobResult w = whole.run();
  ASSERT_TRUE(w.error.empty()) << w.error;
  EXPECT_EQ(w.steps, 90);
  ASSERT_EQ(r.parameters.size(), 2u);
  ASSERT_EQ(whole.replica_parameters().size(), 2u);
  EXPECT_TRUE(r.parameters[0] == whole.replica_parameters()[0])
      << "resumed parameters differ from an uninterrupted run";
  EXPECT_TRUE(r.parameters[1] == whole.replica_parameters()[1]);
}

// In async and ssp every push is one global step of one replica, so the
// replicas' clocks add up to the global step, before and after a resume: a
// replica that restarted from clock 0 (or a job that redid its updates)
// breaks that.
void expect_exact_async_resume(const std::string& mode) {
  const std::string dir = fresh_dir(mode == "async" ? "async" : "ssp");
  Interrupted r = interrupted(mode, 41, 100, dir);
  ASSERT_TRUE(r.first.error.empty()) << r.first.error;
  ASSERT_TRUE(r.second.error.empty()) << r.second.error;
  EXPECT_EQ(r.at_stop.position.global_step, 41u);
  ASSERT_EQ(r.at_stop.position.replica_clocks.size(), 2u);
  EXPECT_EQ(sum(r.at_stop.position.replica_clocks), 41u);
  EXPECT_EQ(r.second.steps, 100);
  EXPECT_EQ(r.second.pushes, 100 - 41) << "the resumed run pushed more gradients than remained";
  EXPECT_EQ(r.second.server.applied, 100 - 41);
  EXPECT_EQ(r.at_end.position.global_step, 100u);
  EXPECT_EQ(sum(r.at_end.position.replica_clocks), 100u) << "replica clocks were not restored";
  EXPECT_EQ(r.first.examples + r.second.examples, 100 * 32) << "data seen differs from an uninterrupted run";
  for (std::size_t i = 0; i < 2; ++i)
    EXPECT_GE(r.at_end.position.replica_clocks[i], r.at_stop.position.replica_clocks[i]);
}

TEST(Resume, AsyncMidEpochContinuesEachReplicaAtItsClock) { expect_exact_async_resume("async"); }
TEST(Resume, SspMidEpochContinuesEachReplicaAtItsClock) { expect_exact_async_resume("ssp:2"); }

// Resumed on another number of replicas in sync, the rest of the epoch is
// split among the new replicas from the first unused example: the epoch
// uses every example once (counted by the coordinator across both runs,
// the checkpoint carries the epoch's count), never the "same fraction of
// the epoch" that reuses or skips some.
TEST(Resume, OnAnotherNumberOfReplicasSyncUsesEveryExampleOnce) {
  const std::string dir = fresh_dir("rescale");
  {
    Job j(job("sync", 37, dir));
    ASSERT_TRUE(j.run().error.empty());
  }
  JobConfig c = job("sync", 0, dir);
  c.train.resume = true;
  c.devices = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};
  ::testing::internal::CaptureStderr();
  JobResult r;
  {
    Job j(c);
    r = j.run();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_NE(err.find("written by 2 replica(s) of batch 32, resuming on 3 of batch 32: the rest of epoch 1 "
                     "(57632 examples after position 2368)"),
            std::string::npos)
      << err;
  // 37 steps of 64, then (60000 - 2368) / 96 = 600 steps of 96 (32 left over).
  EXPECT_EQ(r.steps, 37 + 600);
  EXPECT_NE(err.find("epoch 1 trained on 59968 examples (the data set has 60000)"), std::string::npos) << err;
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_GT(r.epochs[0].test_accuracy, 0.8);
}

TEST(Resume, AFinishedJobTrainsNothingAndSaysSo) {
  const std::string dir = fresh_dir("finished");
  {
    Job j(job("sync", 20, dir));
    ASSERT_TRUE(j.run().error.empty());
  }
  JobConfig c = job("sync", 20, dir);
  c.train.resume = true;
  Job j(c);
  JobResult r = j.run();
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_TRUE(r.already_finished);
  EXPECT_EQ(r.steps, 20);
  EXPECT_EQ(r.sync_steps, 0);
}

TEST(Resume, WithoutACheckpointIsRefusedUnlessAskedToStartOver) {
  const std::string dir = fresh_dir("empty");
  JobConfig c = job("sync", 5, dir);
  c.train.resume = true;
  EXPECT_THROW(
      {
        Job j(c);
        j.run();
      },
      std::invalid_argument);
  c.train.resume_or_start = true;
  Job j(c);
  JobResult r = j.run();
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.steps, 5);
}

TEST(Resume, FallsBackPastACorruptNewestCheckpoint) {
  const std::string dir = fresh_dir("corrupt");
  {
    JobConfig c = job("sync", 30, dir);
    c.train.checkpoint_every = 10;
    Job j(c);
    ASSERT_TRUE(j.run().error.empty());
  }
  checkpoint::Directory d(dir, 0);
  const std::string newest_path = d.path_for_step(30);
  ASSERT_TRUE(fs::exists(newest_path));
  {
    // Flip bytes in the middle of the parameters: the size still matches
    // (latest() would pick it), only the CRCs can tell.
    std::fstream f(newest_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(newest_path) / 2));
    const char junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    f.write(junk, sizeof junk);
  }
  JobConfig c = job("sync", 40, dir);
  c.train.resume = true;
  Job j(c);
  JobResult r = j.run();
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.resumed_from, d.path_for_step(20));
  EXPECT_EQ(r.steps, 40);
  EXPECT_EQ(r.sync_steps, 20);
}

TEST(Resume, ADivergedJobStopsWithTheLastFiniteState) {
  const std::string dir = fresh_dir("diverged");
  JobConfig c = job("sync", 200, dir);
  c.train.optimizer.name = "sgd";
  c.train.lr = 1e6f;
  Job j(c);
  JobResult r = j.run();
  EXPECT_NE(r.error.find("not finite"), std::string::npos) << r.error;
  checkpoint::State s = newest(dir);
  for (float p : s.parameters) ASSERT_TRUE(std::isfinite(p)) << "the checkpoint holds non-finite parameters";
  EXPECT_LT(s.position.global_step, 200u);
}

// Without checkpoint_every a crash used to lose up to an epoch: with a
// checkpoint directory the coordinator also checkpoints by time
// (checkpoint_minutes, 10 by default; a few milliseconds here).
TEST(Resume, ACheckpointDirectoryAlsoCheckpointsByTime) {
  const std::string dir = fresh_dir("by_time");
  JobConfig c = job("sync", 150, dir);
  c.train.checkpoint_minutes = 0.0005;  // 30 ms
  c.train.keep_last = 0;
  Job j(c);
  JobResult r = j.run();
  ASSERT_TRUE(r.error.empty()) << r.error;
  const auto files = checkpoint::Directory(dir, 0).list();
  EXPECT_GE(files.size(), 3u) << "no checkpoints by time (only the final one)";
  for (const auto& f : files) EXPECT_NO_THROW(checkpoint::read(f.path)) << f.path;
}

// The multi-device runtime measures the training accuracy (it reported NaN)
// and the per-step loss it reports is the epoch's mean so far, so the last
// step of an epoch and the epoch's summary agree.
TEST(Resume, TrainingAccuracyIsMeasuredAndTheLastStepLossIsTheEpochMean) {
  JobConfig c = job("sync", 0, "");
  c.train.batch = 500;  // 60 steps of 2 x 500: one epoch
  c.collect_replica_parameters = false;
  double last_step_loss = -1;
  models::Callbacks cb;
  cb.on_step_end = [&](const models::StepEnd& e) { last_step_loss = e.loss; };
  models::EpochResult epoch;
  cb.on_epoch_end = [&](const models::EpochResult& r) { epoch = r; };
  Job j(c);
  JobResult r = j.run(cb);
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.epochs.size(), 1u);
  EXPECT_FALSE(std::isnan(epoch.train_accuracy));
  EXPECT_GT(epoch.train_accuracy, 0.5);
  EXPECT_LE(epoch.train_accuracy, 1.0);
  EXPECT_DOUBLE_EQ(last_step_loss, epoch.train_loss);
}

}  // namespace
}  // namespace troupe::actors
