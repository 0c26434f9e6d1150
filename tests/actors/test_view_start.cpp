// Where a sync job's next view starts (actors/coordinator/view_start.hpp): the newest
// clock a survivor reached, who takes whose state, and the examples of
// completed steps whose reports never came.
#include <gtest/gtest.h>

#include <stdexcept>

#include "actors/coordinator/view_start.hpp"

namespace troupe::actors {
namespace {

// Three nodes: the coordinator (index 0) with ranks 0-1, node 3 with rank
// 2, node 5 with ranks 3-4. 1000 examples, batch 10 per replica, a segment
// that began at clock 100 at position 0: step c (clock c) uses global
// positions [(c - 101) * 50, (c - 100) * 50).
ViewEnd end_with(std::vector<std::int64_t> clocks, std::vector<bool> alive) {
  ViewEnd e;
  e.clocks = std::move(clocks);
  e.alive = std::move(alive);
  e.nodes = {NodeInfo{0, "coordinator", "", 0, 2, {}}, NodeInfo{3, "worker/a", "", 2, 1, {}},
             NodeInfo{5, "worker/b", "", 3, 2, {}}};
  e.data.examples = 1000;
  e.data.batch_size = 10;
  e.segment_clock = 100;
  e.segment_offset = 0;
  return e;
}

TEST(ViewStart, EveryoneAtTheSameStepNeedsNothing) {
  const ViewStart s = plan_view_start(end_with({110, 110, 110, 110, 110}, {true, true, true, true, true}));
  EXPECT_EQ(s.clock, 110);
  EXPECT_TRUE(s.behind.empty());
  EXPECT_EQ(s.unreported_examples, 0);
  EXPECT_TRUE(s.undone.empty());
}

TEST(ViewStart, SurvivorsBehindTakeTheStateOfOneThatCompletedTheStep) {
  // Node 3 lost at its step 110 report; ranks 1 and 4 completed step 111,
  // ranks 0 and 3 did not.
  const ViewStart s = plan_view_start(end_with({110, 111, 110, 110, 111}, {true, true, false, true, true}));
  EXPECT_EQ(s.clock, 111);
  EXPECT_EQ(s.source, (ReplicaRef{0, 1}));
  ASSERT_EQ(s.behind.size(), 2u);
  EXPECT_EQ(s.behind[0], (ReplicaRef{0, 0}));
  EXPECT_EQ(s.behind[1], (ReplicaRef{5, 0}));
  // Step 111's batches of ranks 0, 2 (lost) and 3: 10 examples each.
  EXPECT_EQ(s.unreported_examples, 30);
  EXPECT_EQ(s.unreported_batches, 3);
}

TEST(ViewStart, ALostNodeWhoseLastReportsNeverCameCountsEveryCompletedStep) {
  // Rank 2's reports of steps 109 and 110 were lost with it; everyone else
  // completed 110 (so rank 2 had contributed to it).
  const ViewStart s = plan_view_start(end_with({110, 110, 108, 110, 110}, {true, true, false, true, true}));
  EXPECT_EQ(s.clock, 110);
  EXPECT_TRUE(s.behind.empty());
  EXPECT_EQ(s.unreported_examples, 20);
  EXPECT_EQ(s.unreported_batches, 2);
}

TEST(ViewStart, TheLastPartialBatchIsCountedAsTheRankHadIt) {
  // 1000 examples, global batch 60 (6 x 10): 17 steps, the last one holding
  // 40 examples, split by stride: ranks 0-3 get 7, ranks 4-5 get 6.
  ViewEnd e = end_with({17, 16, 17, 17, 17, 16}, {true, true, true, true, true, false});
  e.nodes = {NodeInfo{0, "coordinator", "", 0, 6, {}}};
  e.segment_clock = 0;
  const ViewStart s = plan_view_start(e);
  EXPECT_EQ(s.clock, 17);
  ASSERT_EQ(s.behind.size(), 1u);
  EXPECT_EQ(s.behind[0], (ReplicaRef{0, 1}));
  EXPECT_EQ(s.unreported_examples, 7 + 6);  // rank 1's and rank 5's (lost) last batches
}

TEST(ViewStart, ALostNodesReportOfAStepNobodyCompletedIsTakenBack) {
  // Rank 2 completed step 111 and reported it, then died; no survivor
  // completed 111, so it is redone with its data in the new view.
  const ViewStart s = plan_view_start(end_with({110, 110, 111, 110, 110}, {true, true, false, true, true}));
  EXPECT_EQ(s.clock, 110);
  ASSERT_EQ(s.undone.size(), 1u);
  EXPECT_EQ(s.undone[0], 2u);
  EXPECT_EQ(s.unreported_examples, 0);
}

TEST(ViewStart, ReplicasTwoStepsApartAreRefused) {
  EXPECT_THROW(plan_view_start(end_with({109, 111, 111, 111, 111}, {true, true, true, true, true})), std::logic_error);
  EXPECT_THROW(plan_view_start(end_with({110, 110, 112, 110, 110}, {true, true, false, true, true})), std::logic_error);
}

}  // namespace
}  // namespace troupe::actors
