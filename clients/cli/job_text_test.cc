// Tests of the human form of a job and of an evaluation (job_text.h, progress.h).
#include "clients/cli/job_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

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
  EXPECT_EQ(JobTable({running, queued}, 181000, /*wide=*/true),
            "ID               STATE    NAME   STEP  LOSS    TEST-ACC  SAMPLES/S  WORKERS      "
            "OWNER  AGE  REASON\n"
            "job-000007-abcd  RUNNING  mnist  3/10  0.5000  -         1234       w0000,w0001  "
            "alice  3m   -\n"
            "job-000008-beef  QUEUED   mnist  -     -       -         -          4            "
            "-      90s  waiting for 4 cpu workers (2 registered)\n");
}

// At 0692893 `list` printed JobText, no header, and a failed job took two lines.
TEST(JobText, TheListIsATableWithAHeaderAndALineAJob) {
  v1::Job failed = Job(v1::FAILED, 2);
  failed.set_failure_code("INVALID_ARGUMENT");
  failed.set_failure_reason("dataset.path: no such file");
  failed.set_created_unix_ms(1000);
  v1::Job elastic = Job(v1::RUNNING, 4);
  elastic.set_id("job-000008-beef");
  elastic.mutable_spec()->set_min_workers(1);
  elastic.add_workers("w0000");
  elastic.add_workers("w0001");
  elastic.set_created_unix_ms(1000);
  EXPECT_EQ(JobTable({failed, elastic}, 61000, /*wide=*/false),
            "ID               STATE    NAME   STEP  LOSS  TEST-ACC  WORKERS    AGE\n"
            "job-000007-abcd  FAILED   mnist  -     -     -         2 workers  60s\n"
            "job-000008-beef  RUNNING  mnist  -     -     -         2 workers  60s\n");
}

// At 0692893 `status` said "4 workers" for an elastic job running on 2.
TEST(JobText, AnElasticJobShowsTheWorkersItRunsOnElseItsRange) {
  v1::Job job = Job(v1::RUNNING, 4);
  job.mutable_spec()->set_min_workers(1);
  job.add_workers("w0000");
  job.add_workers("w0003");
  EXPECT_EQ(WorkersText(job), "2 workers");
  EXPECT_EQ(JobText(job), "job-000007-abcd  RUNNING  mnist  2 workers\n");
  job.clear_workers();
  job.set_state(v1::QUEUED);
  EXPECT_EQ(WorkersText(job), "1-4 workers");
}

// At 0692893 a finished job said nothing of when it ran, and its checksum was decimal in
// the CLI (hex on the dashboard).
TEST(JobText, AFinishedJobSaysWhenItRanAndItsChecksumInHex) {
  v1::Job done = Job(v1::SUCCEEDED, 2);
  done.set_started_unix_ms(1764547200000);   // 2025-12-01T00:00:00Z
  done.set_finished_unix_ms(1764547392400);  // 3m12.4s later
  done.set_param_checksum(17211000012155130117ull);
  EXPECT_EQ(JobText(done),
            "job-000007-abcd  SUCCEEDED  mnist  2 workers\n"
            "  started 2025-12-01T00:00:00.000Z  ended 2025-12-01T00:03:12.400Z  took 3m12s\n"
            "  params checksum eed9c152c1c01105\n");
}

// At 0692893 escape and bell bytes of a job's name reached the terminal raw (issue 44).
TEST(JobText, StringsFromUsersAndServersAreEscaped) {
  v1::Job job = Job(v1::FAILED, 1);
  job.mutable_spec()->set_name("evil\n\x1b]0;owned\x07");
  job.set_owner("bob\x1b[2J");
  job.set_failure_code("INVALID_ARGUMENT");
  job.set_failure_reason("dataset.path: \"/x\ny\"");
  job.set_created_unix_ms(1000);
  EXPECT_EQ(JobText(job),
            "job-000007-abcd  FAILED  evil\\n\\x1b]0;owned\\x07  1 worker  owner bob\\x1b[2J\n"
            "  INVALID_ARGUMENT: dataset.path: \"/x\\ny\"\n");
  for (bool wide : {false, true}) {
    const std::string table = JobTable({job}, 2000, wide);
    EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2) << table;
    EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
    EXPECT_EQ(table.find('\x07'), std::string::npos) << table;
  }
  v1::WorkerInfo w;
  w.set_id("w0000");
  w.set_name("host\x07");
  w.set_device("cpu");
  const std::string workers = WorkersTable({w});
  EXPECT_EQ(workers,
            "ID     NAME      ADDRESS  DEVICE  THREADS  STATUS\n"
            "w0000  host\\x07           cpu     0        free\n");
  v1::JobEvent e;
  e.set_unix_ms(0);
  e.mutable_log()->set_level("error");
  e.mutable_log()->set_source("coordinator");
  e.mutable_log()->set_message("line\n[error] FORGED");
  EXPECT_EQ(EventText(e), "1970-01-01T00:00:00.000Z  error  coordinator: line\\n[error] FORGED");
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
