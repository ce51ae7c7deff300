// Tests of the human form of a job and of an evaluation (job_text.h, progress.h).
#include "clients/cli/job_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "clients/cli/progress.h"

namespace lockstep::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Job Job(v1::JobState state, int workers) {
  v1::Job job;
  job.set_id("job-000007-abcd");
  job.set_state(state);
  job.mutable_spec()->set_name("mnist");
  job.mutable_spec()->set_workers(workers);
  return job;
}

// At 400deec: "job-... QUEUED mnist step 0/0 ... workers 1".
TEST(JobText, AJobThatHasNotRunShowsNoStepsAndOneWorkerIsSingular) {
  v1::Job queued = Job(v1::QUEUED, 1);
  queued.set_waiting_for("1 free cpu worker");
  EXPECT_EQ(JobText(queued),
            "job-000007-abcd  QUEUED  mnist  1 worker\n  waiting for 1 free cpu worker\n");
  v1::Job failed = Job(v1::FAILED, 2);
  failed.set_failure_code("INVALID_ARGUMENT");
  failed.set_failure_reason("dataset.path: no such file");
  EXPECT_EQ(JobText(failed),
            "job-000007-abcd  FAILED  mnist  2 workers\n"
            "  INVALID_ARGUMENT: dataset.path: no such file\n");
  v1::Job running = Job(v1::RUNNING, 2);
  running.set_step(3);
  running.set_total_steps(10);
  running.set_last_loss(0.5f);
  EXPECT_EQ(JobText(running),
            "job-000007-abcd  RUNNING  mnist  step 3/10  loss 0.5000  2 workers\n");
  EXPECT_EQ(Count(0, "worker"), "0 workers");
}

TEST(JobText, ASuspendedJobSaysByWhomAndWhatItWaitsFor) {
  v1::Job suspended = Job(v1::SUSPENDED, 2);
  suspended.set_step(12);
  suspended.set_total_steps(40);
  suspended.set_last_loss(0.25f);
  suspended.set_snapshot_step(12);
  suspended.set_waiting_for("2 free cpu workers");
  suspended.set_failure_code("UNAVAILABLE");
  suspended.set_failure_reason("suspended: preempted by job job-000009-ffff (priority 5)");
  EXPECT_EQ(JobText(suspended),
            "job-000007-abcd  SUSPENDED  mnist  step 12/40  loss 0.2500  2 workers\n"
            "  waiting for 2 free cpu workers\n"
            "  recoveries 0  last snapshot at step 12\n"
            "  UNAVAILABLE: suspended: preempted by job job-000009-ffff (priority 5)\n");
}

// At 400deec the text said "epoch 1" for the evaluation whose JSON says "epoch": "0".
TEST(JobText, EpochsAreCountedFromZeroAsInTheJson) {
  EXPECT_EQ(FormatEval(0, 6, 0.25, 0.5),
            "epoch 0 (step 6): test loss 0.2500  test accuracy 0.5000");
  EXPECT_THAT(FormatEval(2, 18, 0.25, 0.5), Not(HasSubstr("epoch 3")));
}

// At 400deec `list` had no -o wide.
TEST(JobText, TheWideTableHasAColumnEachAndALineAJob) {
  v1::Job running = Job(v1::RUNNING, 2);
  running.set_step(3);
  running.set_total_steps(10);
  running.set_last_loss(0.5f);
  running.set_samples_per_sec(1234.4);
  running.add_workers("w0000");
  running.add_workers("w0001");
  running.set_owner("alice");
  running.set_created_unix_ms(1000);
  v1::Job queued = Job(v1::QUEUED, 4);
  queued.set_id("job-000008-beef");
  queued.set_waiting_for("4 cpu workers (2 registered)");
  queued.set_created_unix_ms(91000);
  EXPECT_EQ(WideTable({running, queued}, 181000),
            "ID               STATE    NAME   STEP  LOSS    TEST-ACC  SAMPLES/S  WORKERS      "
            "OWNER  AGE  REASON\n"
            "job-000007-abcd  RUNNING  mnist  3/10  0.5000  -         1234       w0000,w0001  "
            "alice  3m   -\n"
            "job-000008-beef  QUEUED   mnist  -     -       -         -          4            "
            "-      90s  waiting for 4 cpu workers (2 registered)\n");
}

// At 400deec a job that could never start (more workers than registered) was queued for good.
TEST(JobText, AJobThatNoRegisteredWorkersCanRunDoesNotFit) {
  std::vector<v1::WorkerInfo> workers(3);
  for (auto& w : workers) {
    w.set_device("cpu");
    w.set_threads(2);
  }
  workers[2].set_quarantined("lied");
  v1::JobSpec spec;
  spec.set_workers(2);
  EXPECT_TRUE(CheckCanFit(spec, workers).ok());
  spec.set_workers(3);
  const absl::Status three = CheckCanFit(spec, workers);
  EXPECT_EQ(three.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(three.message()),
              HasSubstr("workers: the job needs 3 cpu workers; the cluster has 2 registered"));
  spec.set_min_workers(2);  // elastic, {min: 2, max: 3}: it starts on 2
  EXPECT_TRUE(CheckCanFit(spec, workers).ok());
  spec.set_min_workers(0);
  spec.set_workers(1);
  spec.set_threads(4);
  EXPECT_THAT(std::string(CheckCanFit(spec, workers).message()),
              HasSubstr("needs 1 cpu (4 threads) worker; the cluster has 0 registered"));
  spec.set_threads(0);
  spec.set_device("cuda");
  EXPECT_FALSE(CheckCanFit(spec, workers).ok());
  workers[0].set_device("cuda:1");
  EXPECT_TRUE(CheckCanFit(spec, workers).ok());
  EXPECT_FALSE(CheckCanFit(spec, {}).ok());  // no workers at all
}

// At 400deec only full ids were accepted.
TEST(JobText, AJobIsNamedByItsIdOrAUniquePrefix) {
  const std::vector<std::string> ids = {"job-000007-abcd", "job-000010-ffff", "job-000011-0000"};
  EXPECT_EQ(MatchJobId(ids, "job-000007").value_or(""), "job-000007-abcd");
  EXPECT_EQ(MatchJobId(ids, "job-000010-ffff").value_or(""), "job-000010-ffff");
  EXPECT_EQ(MatchJobId({"job-1", "job-10"}, "job-1").value_or(""), "job-1");  // exact wins
  const absl::StatusOr<std::string> two = MatchJobId(ids, "job-00001");
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(two.status().message()),
              HasSubstr("job-00001 names 2 jobs (job-000010-ffff, job-000011-0000)"));
  EXPECT_EQ(MatchJobId(ids, "job-9").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(MatchJobId(ids, "").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace lockstep::cli
