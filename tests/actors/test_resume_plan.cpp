// plan_resume (actors/coordinator/resume.hpp): where every replica's data continues
// after a resume, from the clocks and the data segment a checkpoint records.
#include <gtest/gtest.h>

#include "actors/coordinator/resume.hpp"

namespace troupe::actors {
namespace {

// 60000 examples, batch 32: 937 steps of 2 x 32, 625 of 3 x 32.
const data::PlanOptions kData{60000, 32, true, 5, true};

checkpoint::State written(std::vector<std::uint64_t> clocks, checkpoint::Segment segment, std::uint64_t epoch = 0) {
  checkpoint::State c;
  c.position.epoch = epoch;
  c.position.replica_clocks = std::move(clocks);
  c.position.segment = segment;
  return c;
}

TEST(ResumePlan, TheSameReplicasContinueInTheirSegmentAfterViewChanges) {
  // Epoch 2 (index 1) had a view change at clock 1000: its segment starts at
  // position 20032 with 2 replicas; async clocks differ.
  const auto c = written({1010, 1013}, {1000, 20032, 2, 32, 60, 21000, 900.5, 18000}, 1);
  const ResumePlan p = plan_resume(c, "ck", 2, 32, kData);
  EXPECT_EQ(p.clocks, (std::vector<std::int64_t>{1010, 1013}));
  ASSERT_EQ(p.cursors.size(), 2u);
  EXPECT_EQ(p.cursors[0], (data::Cursor{1, 10, 20032}));
  EXPECT_EQ(p.cursors[1], (data::Cursor{1, 13, 20032}));
  EXPECT_EQ(p.start.segment_clock, 1000);
  EXPECT_EQ(p.start.offset, 20032);
  EXPECT_EQ(p.start.steps_before, 60);
  EXPECT_EQ(p.start.epoch_examples, 21000);
  EXPECT_EQ(p.start.epoch_loss_sum, 900.5);
  EXPECT_EQ(p.start.epoch_correct, 18000);
  EXPECT_TRUE(p.note.empty()) << p.note;
}

TEST(ResumePlan, AnotherWorldInSyncStartsANewSegmentWhereTheOldOneStood) {
  // 2 replicas of 32 stood 37 steps into a segment that began at position 0.
  const auto c = written({37, 37}, {0, 0, 2, 32, 0, 2368, 10.0, 2000});
  const ResumePlan p = plan_resume(c, "ck", 3, 32, kData);
  EXPECT_EQ(p.clocks, (std::vector<std::int64_t>{37, 37, 37}));
  for (const auto& cursor : p.cursors) EXPECT_EQ(cursor, (data::Cursor{0, 0, 37 * 64}));
  EXPECT_EQ(p.start.segment_clock, 37);
  EXPECT_EQ(p.start.offset, 37 * 64);
  EXPECT_EQ(p.start.steps_before, 37);
  EXPECT_EQ(p.start.epoch_examples, 2368);
  EXPECT_NE(p.note.find("written by 2 replica(s) of batch 32, resuming on 3 of batch 32"), std::string::npos) << p.note;
  EXPECT_NE(p.note.find("(57632 examples after position 2368)"), std::string::npos) << p.note;
  EXPECT_EQ(p.note.find("async"), std::string::npos) << p.note;
}

// The epoch's examples used without a loss (a lost node's last step) come
// back with the rest; more of them than the epoch's examples is a damaged
// file, named.
TEST(ResumePlan, TheUnscoredExamplesComeBackAndMustBeAmongTheEpochs) {
  checkpoint::Segment g{0, 0, 2, 32, 0, 2368, 10.0, 2000};
  g.epoch_unscored = 32;
  EXPECT_EQ(plan_resume(written({37, 37}, g), "ck", 2, 32, kData).start.epoch_unscored, 32);
  g.epoch_unscored = 2369;
  try {
    plan_resume(written({37, 37}, g), "ck.troupe", 2, 32, kData);
    FAIL() << "more unscored examples than the epoch's were accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(
        std::string(e.what()).find("ck.troupe: the data segment counts 2369 examples without a loss among only 2368"),
        std::string::npos)
        << e.what();
  }
}

TEST(ResumePlan, AnotherBatchIsAnotherWorldToo) {
  const auto c = written({10, 10}, {0, 0, 2, 32, 0, 640, 1.0, 500});
  const ResumePlan p = plan_resume(c, "ck", 2, 16, kData);
  for (const auto& cursor : p.cursors) EXPECT_EQ(cursor, (data::Cursor{0, 0, 640}));
}

TEST(ResumePlan, AnotherWorldInAsyncStartsFromTheSlowestReplicaAndSaysWhatIsSeenAgain) {
  const auto c = written({105, 100, 103}, {90, 1000, 3, 32, 5, 2000, 3.0, 1500});
  const ResumePlan p = plan_resume(c, "ck", 2, 32, kData);
  EXPECT_EQ(p.clocks, (std::vector<std::int64_t>{100, 100}));
  for (const auto& cursor : p.cursors) EXPECT_EQ(cursor, (data::Cursor{0, 0, 1000 + 10 * 96}));
  EXPECT_EQ(p.start.steps_before, 5 + 10);
  EXPECT_NE(p.note.find("up to 5 step(s)"), std::string::npos) << p.note;
}

TEST(ResumePlan, WithoutASegmentClocksCountFromEpochBoundaries) {
  checkpoint::State c;
  c.position.replica_clocks = {937 + 40, 937 + 40};
  c.position.cursor = {1, 40, 5};
  ResumePlan p = plan_resume(c, "ck", 2, 32, kData);
  EXPECT_EQ(p.cursors[0], (data::Cursor{1, 40, 0}));
  EXPECT_EQ(p.start.segment_clock, -1);
  EXPECT_TRUE(p.note.empty());
  // On another world: the same fraction of the epoch, and the user is told.
  p = plan_resume(c, "ck", 3, 32, kData);
  EXPECT_EQ(p.cursors[0], (data::Cursor{1, 40 * 625 / 937, 0}));
  EXPECT_NE(p.note.find("records no data segment"), std::string::npos) << p.note;
}

TEST(ResumePlan, PositionsThatContradictEachOtherAreRefusedNamingTheFile) {
  EXPECT_THROW(
      {
        try {
          plan_resume(written({10, 10, 10}, {0, 0, 2, 32, 0, 0, 0, 0}), "runs/ck-10.troupe", 2, 32, kData);
        } catch (const std::runtime_error& e) {
          EXPECT_NE(std::string(e.what()).find("runs/ck-10.troupe: the data segment names 2 replicas but 3"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      std::runtime_error);
  EXPECT_THROW(plan_resume(written({10, 10}, {20, 0, 2, 32, 0, 0, 0, 0}), "ck", 2, 32, kData), std::runtime_error);
}

}  // namespace
}  // namespace troupe::actors
