// Elastic resize (docs/elastic.md), across real processes: a `replicas: 4` job on 3
// workers {min 1, max 3} whose worker is killed (SIGKILL) mid-job goes on at once with
// the 2 survivors from the state they hold, replaying nothing (only the step in flight is
// computed again); one on 2 of its most 3 grows onto a worker that registers mid-job;
// one on 4 {min 1, max 4} whose worker gets SIGTERM (a pod evicted) lets it go at the next
// step boundary, computing nothing again, and the worker exits 0 once released; one
// shrunk by a job of higher priority (preemption) grows back once that job ended; and a
// job that cannot shrink is SUSPENDED by one of higher priority and resumes bit for bit.
// Each says so in an event and ends with the checksum, losses and evaluations of the
// undisturbed run (`lockstep train`'s loop, which equals any N).
#include <signal.h>

#include <algorithm>
#include <cstdio>

#include "tests/cluster/elastic_testing.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

bool AnyHas(const std::vector<std::string>& reasons, const std::string& what) {
  return std::any_of(reasons.begin(), reasons.end(),
                     [&](const std::string& r) { return r.find(what) != std::string::npos; });
}

TEST(ElasticResize, AKilledWorkerShrinksTheJobWithoutReplayAndTheBitsStayTheSame) {
  constexpr int kSteps = 40;
  const v1::JobSpec spec = ElasticSpec("{min: 1, max: 3}", kSteps);
  const ElasticRun undisturbed = RunLocally(spec);
  ASSERT_EQ(undisturbed.losses.size(), static_cast<size_t>(kSteps));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(3));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(spec));
  ASSERT_OK(cluster->WaitForStep(job.id(), 10, absl::Minutes(5)));
  ASSERT_OK_AND_ASSIGN(int victim, cluster->WorkerOf(job.id()));
  const int64_t killed_ms = absl::ToUnixMillis(absl::Now());
  cluster->KillWorker(victim);
  const ElasticRun got = Follow(*cluster, job.id());
  // For bench/results/elastic.md: worker lost -> next step done on the survivors.
  RecordProperty("shrink_ms", static_cast<int>(got.next_step_ms - killed_ms));
  std::printf("shrink latency (kill -> next step done): %lld ms\n",
              static_cast<long long>(got.next_step_ms - killed_ms));

  EXPECT_TRUE(AnyHas(got.reasons, "resized 3 -> 2 workers")) << cluster->Logs();
  // Whenever the kill falls (even after the step in flight's all-reduce, before the
  // victim's answer: the survivors then report that step from what they hold), nothing is
  // replayed from a snapshot.
  EXPECT_EQ(got.replayed, 0) << "steps replayed: the job went back to a snapshot\n"
                             << cluster->Logs();
  EXPECT_EQ(got.workers, 2);
  ExpectSameRun(got, undisturbed, "killed 1 of 3 workers vs undisturbed");
}

TEST(ElasticResize, AWorkerThatRegistersMidJobJoinsItAndTheBitsStayTheSame) {
  constexpr int kSteps = 40;
  const v1::JobSpec spec = ElasticSpec("{min: 1, max: 3}", kSteps);
  const ElasticRun undisturbed = RunLocally(spec);

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(2));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(spec));
  ASSERT_OK(cluster->WaitForStep(job.id(), 10, absl::Minutes(5)));
  const int64_t added_ms = absl::ToUnixMillis(absl::Now());
  ASSERT_OK(cluster->AddWorker().status());  // returns once it has registered
  const ElasticRun got = Follow(*cluster, job.id());
  RecordProperty("join_ms", static_cast<int>(got.next_step_ms - added_ms));
  std::printf("join latency (worker started -> first step with it done): %lld ms\n",
              static_cast<long long>(got.next_step_ms - added_ms));

  EXPECT_TRUE(AnyHas(got.reasons, "resized 2 -> 3 workers")) << cluster->Logs();
  EXPECT_EQ(got.replayed, 0);
  EXPECT_EQ(got.workers, 3);
  ExpectSameRun(got, undisturbed, "grown from 2 to 3 workers vs undisturbed");
}

TEST(ElasticResize, AWorkerSentSigtermLeavesAtAStepBoundaryAndNothingIsComputedAgain) {
  constexpr int kSteps = 40;
  const v1::JobSpec spec = ElasticSpec("{min: 1, max: 4}", kSteps);
  const ElasticRun undisturbed = RunLocally(spec);

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(4));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(spec));
  ASSERT_OK(cluster->WaitForStep(job.id(), 10, absl::Minutes(5)));
  // Rank 0's: the one the others' state would be fetched from.
  ASSERT_OK_AND_ASSIGN(int leaver, cluster->WorkerOf(job.id()));
  const absl::Time signalled = absl::Now();
  cluster->SignalWorker(leaver, SIGTERM);
  // Released at the next boundary, it exits 0 within its --leave_timeout_s (25 by default).
  absl::StatusOr<int> exit_status = cluster->WaitForWorkerExit(leaver, absl::Seconds(25));
  ASSERT_TRUE(exit_status.ok()) << exit_status.status() << "\n" << cluster->Logs();
  EXPECT_EQ(*exit_status, 0) << cluster->Logs();
  std::printf("leave (SIGTERM -> worker exited): %lld ms\n",
              static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - signalled)));
  const ElasticRun got = Follow(*cluster, job.id());

  EXPECT_TRUE(AnyHas(got.reasons, "resized 4 -> 3 workers: worker ")) << cluster->Logs();
  EXPECT_TRUE(AnyHas(got.reasons, " leaving (SIGTERM); continuing from step ")) << cluster->Logs();
  // Nothing lost, so no step was computed again (a shrink after a loss says "lost"), and
  // no snapshot went back to (no recovery, no replay).
  EXPECT_FALSE(AnyHas(got.reasons, "lost")) << cluster->Logs();
  EXPECT_EQ(got.replayed, 0);
  EXPECT_EQ(got.workers, 3);
  ASSERT_OK_AND_ASSIGN(v1::Job done, cluster->Get(job.id()));
  EXPECT_EQ(done.recoveries(), 0);
  ExpectSameRun(got, undisturbed, "a worker left on SIGTERM (4 -> 3) vs undisturbed");
}

TEST(ElasticResize, AJobOfHigherPriorityShrinksItAndItGrowsBackWithTheSameBits) {
  constexpr int kSteps = 80;
  const v1::JobSpec spec = ElasticSpec("{min: 1, max: 4}", kSteps);
  const ElasticRun undisturbed = RunLocally(spec);

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(4));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(spec));
  ASSERT_OK(cluster->WaitForStep(job.id(), 10, absl::Minutes(5)));
  v1::JobSpec urgent = MlpSpec(2, 10);
  urgent.set_priority(5);
  ASSERT_OK_AND_ASSIGN(v1::Job high, cluster->Submit(urgent));
  absl::StatusOr<v1::Job> high_done = cluster->WaitFor(high.id(), absl::Minutes(5));
  ASSERT_TRUE(high_done.ok()) << high_done.status();
  EXPECT_EQ(high_done->state(), v1::SUCCEEDED) << high_done->failure_reason();
  const ElasticRun got = Follow(*cluster, job.id());

  EXPECT_TRUE(AnyHas(got.reasons, "resized 4 -> 2 workers: workers ")) << cluster->Logs();
  EXPECT_TRUE(AnyHas(got.reasons, absl::StrCat(" preempted by job ", high.id(), " (priority 5)")))
      << cluster->Logs();
  EXPECT_TRUE(AnyHas(got.reasons, "resized 2 -> 4 workers: workers ")) << cluster->Logs();
  EXPECT_EQ(got.replayed, 0);
  EXPECT_EQ(got.workers, 4);
  ExpectSameRun(got, undisturbed, "shrunk 4 -> 2 by a job of priority 5, grown back");
}

TEST(ElasticResize, AJobThatCannotShrinkIsSuspendedByAHigherPriorityAndResumesBitForBit) {
  const v1::JobSpec spec = MlpSpec(2, 1500);  // not elastic: 2 workers exactly
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<LocalCluster> cluster, LocalCluster::Start(2));
  ASSERT_OK_AND_ASSIGN(v1::Job job, cluster->Submit(spec));
  ASSERT_OK(cluster->WaitForStep(job.id(), 10, absl::Minutes(5)));
  v1::JobSpec urgent = MlpSpec(2, 20);
  urgent.set_priority(3);
  ASSERT_OK_AND_ASSIGN(v1::Job high, cluster->Submit(urgent));
  absl::StatusOr<v1::Job> high_done = cluster->WaitFor(high.id(), absl::Minutes(5));
  ASSERT_TRUE(high_done.ok()) << high_done.status();
  EXPECT_EQ(high_done->state(), v1::SUCCEEDED) << high_done->failure_reason();
  const ElasticRun got = Follow(*cluster, job.id());
  // Undisturbed: the same spec on the same 2 workers.
  ASSERT_OK_AND_ASSIGN(v1::Job again, cluster->Submit(spec));
  const ElasticRun undisturbed = Follow(*cluster, again.id());

  EXPECT_TRUE(AnyHas(got.reasons, absl::StrCat("suspended: preempted by job ", high.id(),
                                               " (priority 3): the job continues from its "
                                               "snapshot of step ")))
      << cluster->Logs();
  EXPECT_EQ(got.replayed, 0);  // it resumed from the snapshot of the step it stopped at
  ASSERT_EQ(got.losses.size(), 1500u);
  ExpectSameRun(got, undisturbed, "suspended by a job of priority 3 vs undisturbed");
}

}  // namespace
}  // namespace lockstep::testing
