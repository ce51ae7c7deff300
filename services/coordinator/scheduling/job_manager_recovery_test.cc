// Tests of JobManager's recovery: lost workers (by heartbeat, through the simulated clock),
// failing steps, restarts running out, a job waiting RECOVERING for workers when the
// manager stops or drains, and the reasons a failed recovery gives.
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_test.h"
#include "services/coordinator/storage/job_records.h"

namespace lockstep::testing {
namespace {

using ::testing::_;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST_F(JobManagerTest, AWorkerLostByHeartbeatFailsItsJobWithUnavailableNamingIt) {
  pool_ = std::make_unique<WorkerPool>(absl::Milliseconds(400), "", &clock_);  // no one beats
  ASSERT_OK(
      Start({FakeWorker{.steps = Behaviour::kSilent}, FakeWorker{.steps = Behaviour::kSilent}}));
  Register(2);
  v1::JobSpec spec = Spec(2);
  spec.mutable_recovery()->set_max_restarts(0);  // fail fast
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(spec));
  ASSERT_EQ(job.state(), v1::RUNNING);  // no time passed: the heartbeats have not lapsed
  clock_.Advance(absl::Seconds(1));
  jobs_->Kick();  // the scheduler's next round finds them lapsed
  const v1::Job done = AwaitEnd(job.id());
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_EQ(done.failure_code(), "UNAVAILABLE");
  EXPECT_THAT(done.failure_reason(),
              AllOf(HasSubstr("worker w0000 at fake:0"), HasSubstr("heartbeats")));
  EXPECT_EQ(pool_->List().size(), 0u);  // both lost
  EXPECT_EQ(Metric("lockstep_workers_lost_total"), 2);
  EXPECT_EQ(Metric("lockstep_jobs_finished_total", {{"state", "FAILED"}}), 1);
}

TEST_F(JobManagerTest, AJobWhoseStepsFailRecoversAndSucceeds) {
  // The first attempt's streams break (a lost connection); the next attempt's work.
  ASSERT_OK(Start({FakeWorker{.steps = Behaviour::kFail}, FakeWorker{.steps = Behaviour::kFail}}));
  Register(2);
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(Spec(2)));
  const v1::Job done = AwaitEnd(job.id());
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.recoveries(), 1);
  EXPECT_EQ(done.step(), 6);
  EXPECT_TRUE(done.failure_reason().empty());
  EXPECT_EQ(Metric("lockstep_recoveries_total"), 1);
  EXPECT_EQ(Metric("lockstep_steps_total") - Metric("lockstep_replayed_steps_total"), 6);
}

TEST_F(JobManagerTest, AJobOutOfRestartsFailsWithTheHistory) {
  ASSERT_OK(Start({FakeWorker{.steps = Behaviour::kFail}, FakeWorker{.steps = Behaviour::kFail},
                   FakeWorker{.steps = Behaviour::kFail}, FakeWorker{.steps = Behaviour::kFail}}));
  Register(2);
  v1::JobSpec spec = Spec(2);
  spec.mutable_recovery()->set_max_restarts(1);
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(spec));
  const v1::Job done = AwaitEnd(job.id());
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_EQ(done.recoveries(), 1);
  EXPECT_THAT(done.failure_reason(),
              AllOf(HasSubstr("connection reset"), HasSubstr("after 1 recoveries from")));
}

// Two workers lost by heartbeat and none left: the job waits RECOVERING (300 s by default).
class RecoveringTest : public JobManagerTest {
 protected:
  v1::Job StartRecovering() {
    pool_ = std::make_unique<WorkerPool>(absl::Milliseconds(400), "", &clock_);
    // The recovery's 300 s pass on this clock only: a wait that ends did not time out.
    options_.clock = &clock_;
    EXPECT_OK(
        Start({FakeWorker{.steps = Behaviour::kSilent}, FakeWorker{.steps = Behaviour::kSilent}}));
    Register(2);
    absl::StatusOr<v1::Job> job = jobs_->Submit(Spec(2));
    EXPECT_OK(job.status());
    clock_.Advance(absl::Seconds(1));
    jobs_->Kick();
    return AwaitState(job.value_or(v1::Job()).id(), v1::RECOVERING);
  }
};

TEST_F(RecoveringTest, StoppingTheManagerWhileAJobWaitsForWorkersIsPromptAndKeepsTheJob) {
  const v1::Job recovering = StartRecovering();
  ASSERT_EQ(recovering.state(), v1::RECOVERING);
  EXPECT_EQ(recovering.spec().recovery().recovery_timeout_seconds(), 300u);
  jobs_.reset();  // waited out the recovery timeout at 400deec
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> on_disk, JobRecords(options_.records_dir).Load());
  ASSERT_EQ(on_disk.size(), 1u);
  EXPECT_EQ(on_disk[0].state(), v1::RECOVERING);  // to continue, not CANCELLED
  EXPECT_THAT(on_disk[0].failure_reason(), HasSubstr("the coordinator is stopping"));

  // A restarted manager shows it RECOVERING (not QUEUED) until it has workers, and a
  // cancel of it then is immediate.
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job resumed, jobs_->Get(recovering.id()));
  EXPECT_EQ(resumed.state(), v1::RECOVERING);
  EXPECT_THAT(resumed.failure_reason(), HasSubstr("the coordinator restarted: the job continues"));
  EXPECT_EQ(resumed.recoveries(), 2);  // the heartbeats, the restart
  ASSERT_OK_AND_ASSIGN(v1::Job cancelled, jobs_->Cancel(recovering.id()));
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
}

TEST_F(RecoveringTest, ADrainEndsAWaitForWorkersAtOnceStartsNothingAndEndsTheWatchers) {
  const v1::Job recovering = StartRecovering();
  ASSERT_EQ(recovering.state(), v1::RECOVERING);
  ASSERT_OK_AND_ASSIGN(v1::Job queued, jobs_->Submit(Spec(1)));
  ASSERT_EQ(queued.state(), v1::QUEUED);  // no worker left
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobManager::Watch> watch, jobs_->StartWatch(queued.id()));
  // OK: every job settled before the drain's abort time, its wait ended by the drain.
  ASSERT_OK(jobs_->Drain(absl::Now() + absl::Seconds(20)));
  Register(1, 2);  // a worker comes during the drain: the queued job is not started
  jobs_->Kick();
  ASSERT_OK_AND_ASSIGN(v1::Job kept, jobs_->Get(recovering.id()));
  EXPECT_EQ(kept.state(), v1::RECOVERING);
  EXPECT_THAT(kept.failure_reason(), HasSubstr("the coordinator is stopping (drain)"));
  EXPECT_EQ(jobs_->Get(queued.id())->state(), v1::QUEUED);
  EXPECT_THAT(jobs_->Submit(Spec(1)), StatusIs(absl::StatusCode::kUnavailable,
                                               HasSubstr("the coordinator is shutting down")));
  EXPECT_THAT(jobs_->StartWatch(queued.id()),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("watch again")));
  const EventLog::Batch b = watch->log()->Read(watch->replay_until(), 0, 0, 100);
  EXPECT_TRUE(b.closed);
  EXPECT_THAT(b.interrupted,
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("the coordinator is stopping")));
}

TEST_F(JobManagerTest, AFailedRecoveryEndsWithItsReasonAndNoEmptyHistory) {
  pool_ = std::make_unique<WorkerPool>(absl::Milliseconds(400), "", &clock_);
  ASSERT_OK(
      Start({FakeWorker{.steps = Behaviour::kSilent}, FakeWorker{.steps = Behaviour::kSilent}}));
  Register(2);
  v1::JobSpec spec = Spec(2);
  spec.mutable_recovery()->set_recovery_timeout_seconds(1);  // no workers come
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(spec));
  clock_.Advance(absl::Seconds(1));
  jobs_->Kick();
  const v1::Job done = AwaitEnd(job.id());
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_THAT(done.failure_reason(), HasSubstr("recovery failed: no 2 healthy workers within 1s"));
  EXPECT_THAT(done.failure_reason(), Not(HasSubstr("recoveries from")));  // was ": )"
  EXPECT_EQ(done.recoveries(), 1);
}

TEST_F(JobManagerTest, ARecoveringReasonNamesTheDeadWorkerNotItsPeersLaterError) {
  // Rank 0's stream fails first (its all-reduce lost its peer); rank 1 is dead.
  ASSERT_OK(Start({FakeWorker{.steps = Behaviour::kFail},
                   FakeWorker{.steps = Behaviour::kSilent, .alive = false}}));
  Register(2);
  v1::JobSpec spec = Spec(2);
  spec.mutable_recovery()->set_max_restarts(0);
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(spec));
  const v1::Job done = AwaitEnd(job.id());
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_THAT(done.failure_reason(),
              StartsWith("worker w0001 (fake:1, rank 1): is unreachable (no answer); its peers "
                         "failed after it: worker w0000"));
  EXPECT_THAT(done.failure_reason(), Not(HasSubstr("first error")));
}

}  // namespace
}  // namespace lockstep::testing
