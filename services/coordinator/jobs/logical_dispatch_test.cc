// Logical replicas' dispatch: shares of a step, the mean over V in replica order, and the
// evaluation's parts, all independent of how many workers there are.
#include "services/coordinator/jobs/logical_dispatch.h"

#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

StepPlan SomePlan(int v, int rows_per_replica) {
  StepPlan p;
  for (int i = 0; i < v; ++i) p.keys.push_back({static_cast<uint32_t>(i), 7});
  for (int i = 0; i < v * rows_per_replica; ++i) p.indices.push_back(100 + i);
  return p;
}

TEST(ShareStep, EachWorkerGetsItsReplicasRowsAndKeysBackToBack) {
  const StepPlan p = SomePlan(4, 2);
  ASSERT_OK_AND_ASSIGN(std::vector<WorkerShare> three, ShareStep(p, 3, 4));
  ASSERT_EQ(three.size(), 3u);
  // Ranges [0,1), [1,2), [2,4).
  EXPECT_EQ(std::vector<int32_t>(three[0].rows.begin(), three[0].rows.end()),
            (std::vector<int32_t>{100, 101}));
  EXPECT_EQ(std::vector<int32_t>(three[2].rows.begin(), three[2].rows.end()),
            (std::vector<int32_t>{104, 105, 106, 107}));
  ASSERT_EQ(three[2].keys.size(), 2u);
  EXPECT_EQ(three[2].keys[0].k0, 2u);
  EXPECT_EQ(three[2].keys[1].k0, 3u);
  ASSERT_OK_AND_ASSIGN(std::vector<WorkerShare> one, ShareStep(p, 1, 4));
  EXPECT_EQ(one[0].rows.size(), 8u);
  EXPECT_EQ(one[0].keys.size(), 4u);
  EXPECT_THAT(ShareStep(p, 5, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot go to 5 workers")));
}

StepResult Answer(std::vector<float> losses) {
  StepResult r;
  r.replica_accuracies.assign(losses.size(), 0.5f);
  r.replica_losses = std::move(losses);
  return r;
}

TEST(MeanOverReplicas, TheSameBitsWhateverTheWorkers) {
  // Values whose float sum depends on grouping: (a + b) + c != a + (b + c).
  const std::vector<float> l = {1e8f, 1.0f, -1e8f, 3.0f};
  ASSERT_OK_AND_ASSIGN(ReplicaMeans one, MeanOverReplicas({Answer(l)}, 4));
  ASSERT_OK_AND_ASSIGN(ReplicaMeans two,
                       MeanOverReplicas({Answer({l[0], l[1]}), Answer({l[2], l[3]})}, 4));
  ASSERT_OK_AND_ASSIGN(ReplicaMeans three,
                       MeanOverReplicas({Answer({l[0]}), Answer({l[1]}), Answer({l[2], l[3]})}, 4));
  EXPECT_EQ(one.loss, two.loss);
  EXPECT_EQ(one.loss, three.loss);
  EXPECT_EQ(one.losses, l);
  EXPECT_EQ(three.losses, l);
  EXPECT_EQ(one.accuracy, 0.5f);
  EXPECT_THAT(MeanOverReplicas({Answer({1, 2, 3}), Answer({4})}, 4),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank 0 answered for 3")));
}

TEST(OwnerOf, InvertsRangeOf) {
  for (int n = 1; n <= 4; ++n) {
    for (int p = 0; p < 4; ++p) {
      const ReplicaRange range = RangeOf(OwnerOf(p, n, 4), n, 4);
      EXPECT_LE(range.first, p);
      EXPECT_LT(p, range.first + range.count);
    }
  }
}

TEST(EvalParts, CoverTheTestSplitInOrder) {
  int64_t next = 0;
  for (int p = 0; p < 3; ++p) {
    const EvalPart part = EvalPartOf(10, p, 3);
    EXPECT_EQ(part.begin, next);
    next = part.end;
  }
  EXPECT_EQ(next, 10);
  const EvalSums sum = AddInOrder({{1.5, 2, 3}, {0.25, 1, 2}});
  EXPECT_EQ(sum.loss_sum, 1.75);
  EXPECT_EQ(sum.correct, 3);
  EXPECT_EQ(sum.count, 5);
}

}  // namespace
}  // namespace lockstep
