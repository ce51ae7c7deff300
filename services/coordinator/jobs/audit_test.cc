#include "services/coordinator/jobs/audit.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

v1::JobSpec Audited(uint64_t every, int64_t seed = 7) {
  v1::JobSpec spec;
  spec.set_seed(seed);
  spec.mutable_audit()->set_every_steps(every);
  return spec;
}

TEST(AuditPlan, AuditsEveryKStepsTheSameWayForTheSameSeed) {
  const AuditPlan plan(Audited(5), {1, 1, 1, 1});
  const AuditPlan again(Audited(5), {1, 1, 1, 1});
  std::set<int> audited_ranks;
  for (int64_t step = 0; step < 400; ++step) {
    const std::optional<AuditPick> pick = plan.Pick(step);
    ASSERT_EQ(pick.has_value(), (step + 1) % 5 == 0) << step;
    if (!pick.has_value()) continue;
    const std::optional<AuditPick> replay = again.Pick(step);  // a replay audits alike
    ASSERT_TRUE(replay.has_value());
    EXPECT_EQ(replay->audited, pick->audited);
    EXPECT_EQ(replay->checkers, pick->checkers);
    ASSERT_EQ(pick->checkers.size(), 2u);  // 4 workers: a checker and a tie-breaker
    const std::set<int> distinct{pick->audited, pick->checkers[0], pick->checkers[1]};
    EXPECT_EQ(distinct.size(), 3u);
    audited_ranks.insert(pick->audited);
  }
  EXPECT_EQ(audited_ranks.size(), 4u);  // at random: every rank gets audited
  // Another seed, another sequence.
  const AuditPlan other(Audited(5, 8), {1, 1, 1, 1});
  int same = 0;
  for (int64_t step = 4; step < 400; step += 5)
    same += other.Pick(step)->audited == plan.Pick(step)->audited;
  EXPECT_LT(same, 40);
}

TEST(AuditPlan, ComparesOnlyRanksOfEqualThreadsAndIsOffByDefault) {
  EXPECT_FALSE(AuditPlan(v1::JobSpec(), {1, 1}).Pick(0).has_value());
  // Two workers: the other one checks, no tie-breaker.
  const std::optional<AuditPick> two = AuditPlan(Audited(1), {4, 4}).Pick(0);
  ASSERT_TRUE(two.has_value());
  EXPECT_THAT(two->checkers, ElementsAre(1 - two->audited));
  // Ranks 0 and 2 have 8 threads, 1 has 4: rank 1 is never audited, 0 and 2 check each other.
  const AuditPlan mixed(Audited(1), {8, 4, 8});
  for (int64_t step = 0; step < 100; ++step) {
    const std::optional<AuditPick> pick = mixed.Pick(step);
    if (!pick.has_value()) continue;
    EXPECT_NE(pick->audited, 1);
    EXPECT_THAT(pick->checkers, ElementsAre(2 - pick->audited));
  }
}

TEST(AuditPlan, AuditsEveryStepTheJobSnapshotsAfterWhenTheAuditIsOn) {
  const AuditPlan plan(Audited(100), {1, 1});
  EXPECT_FALSE(plan.Pick(41).has_value());
  const std::optional<AuditPick> at_snapshot = plan.Pick(41, /*snapshot=*/true);
  ASSERT_TRUE(at_snapshot.has_value());
  EXPECT_THAT(at_snapshot->checkers, ElementsAre(1 - at_snapshot->audited));
  const std::optional<AuditPick> replay = plan.Pick(41, true);  // keyed by the step alone
  EXPECT_EQ(replay->audited, at_snapshot->audited);
  EXPECT_FALSE(AuditPlan(Audited(0), {1, 1}).Pick(41, true).has_value());  // off: never
  EXPECT_FALSE(AuditPlan(Audited(100), {1}).Pick(41, true).has_value());   // nobody to check
}

StepResult Fed(uint64_t digest, float loss) {
  StepResult r;
  r.grad_digest = digest;
  r.loss = loss;
  return r;
}
StepResult Recomputed(uint64_t digest, float loss) {
  StepResult r;
  r.audited = true;
  r.audit_digest = digest;
  r.audit_loss = loss;
  return r;
}

const std::vector<std::string> kIds = {"w0", "w1", "w2"};

TEST(JudgeAudit, EqualBitsPass) {
  const AuditVerdict v =
      JudgeAudit({1, {0, 2}}, {Recomputed(42, 0.5f), Fed(42, 0.5f), Recomputed(42, 0.5f)}, kIds);
  EXPECT_TRUE(v.passed);
  EXPECT_THAT(v.liars, IsEmpty());
  EXPECT_THAT(v.detail, HasSubstr("w1 fed digest 000000000000002a"));
}

TEST(JudgeAudit, TheAuditedRankOutvotedByItsTwoCheckersLied) {
  const AuditVerdict v =
      JudgeAudit({1, {0, 2}}, {Recomputed(42, 0.5f), Fed(43, 0.5f), Recomputed(42, 0.5f)}, kIds);
  EXPECT_FALSE(v.passed);
  EXPECT_THAT(v.liars, ElementsAre(1));
  EXPECT_THAT(v.suspects, IsEmpty());
}

TEST(JudgeAudit, ACheckerOutvotedLiedAndALossCountsAsMuchAsTheDigest) {
  // Same digest, the checker's loss one ulp off: it disagrees.
  const AuditVerdict v = JudgeAudit(
      {0, {1, 2}},
      {Fed(42, 0.5f), Recomputed(42, std::nextafter(0.5f, 1.0f)), Recomputed(42, 0.5f)}, kIds);
  EXPECT_FALSE(v.passed);
  EXPECT_THAT(v.liars, ElementsAre(1));
}

TEST(JudgeAudit, TwoWorkersThatDisagreeAreBothSuspectsAndNeitherALiar) {
  const AuditVerdict v = JudgeAudit({0, {1}}, {Fed(42, 0.5f), Recomputed(41, 0.5f)}, kIds);
  EXPECT_FALSE(v.passed);
  EXPECT_THAT(v.liars, IsEmpty());
  EXPECT_THAT(v.suspects, ElementsAre(0, 1));
}

TEST(JudgeAudit, ACheckerThatDidNotRecomputeDisagrees) {
  StepResult silent;  // audited false: an old worker, or one that ignores the audit
  const AuditVerdict v =
      JudgeAudit({0, {1, 2}}, {Fed(42, 0.5f), silent, Recomputed(42, 0.5f)}, kIds);
  EXPECT_FALSE(v.passed);
  EXPECT_THAT(v.liars, ElementsAre(1));
}

TEST(JudgeAudit, WithLogicalReplicasTheLossComparedIsTheAuditedReplicasOwn) {
  StepResult fed = Fed(42, 0.75f);    // the worker's mean over its replicas
  fed.replica_losses = {0.5f, 1.0f};  // its first replica is the audited shard
  EXPECT_TRUE(JudgeAudit({0, {1}}, {fed, Recomputed(42, 0.5f)}, kIds).passed);
  EXPECT_FALSE(JudgeAudit({0, {1}}, {fed, Recomputed(42, 0.75f)}, kIds).passed);
}

TEST(JudgeAudit, ABatchNormModelsStatisticsDigestCountsAsMuchAsTheGradients) {
  StepResult fed = Fed(42, 0.5f), liar = Recomputed(42, 0.5f), honest = Recomputed(42, 0.5f);
  fed.stats_digest = honest.audit_stats_digest = 7;
  liar.audit_stats_digest = 8;  // same gradients and loss, other statistics
  const AuditVerdict v = JudgeAudit({0, {1, 2}}, {fed, liar, honest}, kIds);
  EXPECT_FALSE(v.passed);
  EXPECT_THAT(v.liars, ElementsAre(1));
  EXPECT_THAT(v.detail, HasSubstr("w0 fed digest 000000000000002a loss 3f000000 statistics "
                                  "0000000000000007"));
  EXPECT_THAT(v.detail, HasSubstr("w1 recomputed digest 000000000000002a loss 3f000000 "
                                  "statistics 0000000000000008"));
  liar.audit_stats_digest = 7;
  EXPECT_TRUE(JudgeAudit({0, {1, 2}}, {fed, liar, honest}, kIds).passed);
  // Without BatchNorm (all 0) the detail names no statistics.
  EXPECT_THAT(JudgeAudit({0, {1}}, {Fed(42, 0.5f), Recomputed(42, 0.5f)}, kIds).detail,
              Not(HasSubstr("statistics")));
}

TEST(JudgeAudit, ThreeDifferentAnswersHaveNoMajority) {
  const AuditVerdict v =
      JudgeAudit({2, {0, 1}}, {Recomputed(1, 0.5f), Recomputed(2, 0.5f), Fed(3, 0.5f)}, kIds);
  EXPECT_FALSE(v.passed);
  EXPECT_THAT(v.liars, IsEmpty());
  EXPECT_THAT(v.suspects, ElementsAre(2, 0, 1));
}

}  // namespace
}  // namespace lockstep
