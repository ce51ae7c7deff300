// Tests of CoordinatorMetrics without a JobManager: state counts, per-step series, and the
// bound on per-job series (the most recently ended jobs keep theirs; forgotten jobs lose
// them). job_manager_test.cc checks the values a real job run leaves.
#include "services/coordinator/observability/coordinator_metrics.h"

#include "core/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

class CoordinatorMetricsTest : public ::testing::Test {
 protected:
  double Value(const std::string& name, const prometheus::Labels& labels = {}) {
    absl::StatusOr<double> v = ReadMetric(metrics_.collectables(), name, labels);
    if (v.ok()) return *v;
    ADD_FAILURE() << "no " << name;
    return -1;
  }
  bool Has(const std::string& name, const prometheus::Labels& labels) {
    return ReadMetric(*registry_, name, labels).ok();
  }
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  CoordinatorMetrics metrics_{registry_, /*ended_jobs_kept=*/2};
};

TEST_F(CoordinatorMetricsTest, JobsAreCountedByStateAndFinishedOnesOnce) {
  metrics_.JobStateChanged(v1::JOB_STATE_UNSPECIFIED, v1::QUEUED);
  metrics_.JobStateChanged(v1::JOB_STATE_UNSPECIFIED, v1::QUEUED);
  metrics_.JobStateChanged(v1::QUEUED, v1::RUNNING);
  EXPECT_EQ(Value("lockstep_jobs", {{"state", "QUEUED"}}), 1);
  EXPECT_EQ(Value("lockstep_jobs", {{"state", "RUNNING"}}), 1);
  metrics_.JobStateChanged(v1::RUNNING, v1::SUCCEEDED);
  metrics_.JobStateChanged(v1::QUEUED, v1::CANCELLED);
  // A record reloaded after a restart is known, not newly finished.
  metrics_.JobStateChanged(v1::JOB_STATE_UNSPECIFIED, v1::FAILED);
  EXPECT_EQ(Value("lockstep_jobs", {{"state", "RUNNING"}}), 0);
  EXPECT_EQ(Value("lockstep_jobs", {{"state", "FAILED"}}), 1);
  EXPECT_EQ(Value("lockstep_jobs_finished_total", {{"state", "SUCCEEDED"}}), 1);
  EXPECT_EQ(Value("lockstep_jobs_finished_total", {{"state", "CANCELLED"}}), 1);
  EXPECT_EQ(Value("lockstep_jobs_finished_total", {{"state", "FAILED"}}), 0);
  metrics_.JobStateChanged(v1::SUCCEEDED, v1::JOB_STATE_UNSPECIFIED);  // forgotten
  EXPECT_EQ(Value("lockstep_jobs", {{"state", "SUCCEEDED"}}), 0);
  EXPECT_FALSE(Has("lockstep_jobs", {{"state", "JOB_STATE_UNSPECIFIED"}}));
}

TEST_F(CoordinatorMetricsTest, StepsSetTheJobsSeriesAndCountReplays) {
  JobSeries* s = metrics_.JobStarted("job-000001-aaaa", /*samples_per_step=*/64);
  v1::StepEvent e;
  e.set_loss(2.5);
  e.set_samples_per_sec(1000);
  e.set_total_steps(10);
  e.set_wall_ms(20);
  e.set_compute_ms(8);
  e.set_allreduce_ms(4);
  e.set_update_ms(1);
  for (int64_t step : {1, 2, 3, 2, 3, 4}) {  // a recovery from step 1's snapshot
    e.set_step(step);
    s->OnStep(e);
  }
  v1::EvalResult r;
  r.set_test_accuracy(0.75);
  r.set_test_loss(0.5);
  s->OnEval(r);
  const prometheus::Labels job = {{"job_id", "job-000001-aaaa"}};
  EXPECT_EQ(Value("lockstep_job_step", job), 4);
  EXPECT_EQ(Value("lockstep_job_total_steps", job), 10);
  EXPECT_EQ(Value("lockstep_job_loss", job), 2.5);
  EXPECT_EQ(Value("lockstep_job_samples_per_second", job), 1000);
  EXPECT_EQ(Value("lockstep_job_samples_total", job), 6 * 64);  // replays included
  EXPECT_EQ(Value("lockstep_samples_total"), 6 * 64);
  EXPECT_EQ(Value("lockstep_job_eval_accuracy", job), 0.75);
  EXPECT_EQ(Value("lockstep_job_eval_loss", job), 0.5);
  EXPECT_EQ(Value("lockstep_steps_total"), 6);
  EXPECT_EQ(Value("lockstep_replayed_steps_total"), 2);
  EXPECT_EQ(Value("lockstep_step_seconds_count"), 6);
  EXPECT_NEAR(Value("lockstep_step_seconds_sum"), 0.12, 1e-9);
  EXPECT_NEAR(Value("lockstep_step_phase_seconds_sum", {{"phase", "compute"}}), 0.048, 1e-9);
  EXPECT_NEAR(Value("lockstep_step_phase_seconds_sum", {{"phase", "allreduce"}}), 0.024, 1e-9);
  EXPECT_NEAR(Value("lockstep_step_phase_seconds_sum", {{"phase", "update"}}), 0.006, 1e-9);
}

TEST_F(CoordinatorMetricsTest, SamplesAreACounterThatRateCanTakeAcrossJobs) {
  JobSeries* a = metrics_.JobStarted("a", 32);
  JobSeries* b = metrics_.JobStarted("b", 100);
  v1::StepEvent e;
  for (int64_t step = 1; step <= 3; ++step) {
    e.set_step(step);
    a->OnStep(e);
    b->OnStep(e);
  }
  EXPECT_EQ(Value("lockstep_job_samples_total", {{"job_id", "a"}}), 96);
  EXPECT_EQ(Value("lockstep_job_samples_total", {{"job_id", "b"}}), 300);
  EXPECT_EQ(Value("lockstep_samples_total"), 396);
  // A counter, so that Prometheus' rate() and increase() apply to it.
  for (const prometheus::MetricFamily& f : registry_->Collect()) {
    if (f.name == "lockstep_job_samples_total" || f.name == "lockstep_samples_total") {
      EXPECT_EQ(f.type, prometheus::MetricType::Counter) << f.name;
    }
  }
  // The cluster-wide count outlives the jobs' series.
  metrics_.JobForgotten("a");
  EXPECT_FALSE(Has("lockstep_job_samples_total", {{"job_id", "a"}}));
  EXPECT_EQ(Value("lockstep_samples_total"), 396);
}

TEST_F(CoordinatorMetricsTest, AJobExportsNoValueItNeverHad) {
  // Cancelled before its first step: no step, loss, throughput nor evaluation series (they
  // were exported as 0, a loss and an accuracy it never had).
  metrics_.JobStarted("cancelled", 64);
  metrics_.JobEnded("cancelled");
  for (const char* name : {"lockstep_job_step", "lockstep_job_total_steps", "lockstep_job_loss",
                           "lockstep_job_samples_per_second", "lockstep_job_samples_total",
                           "lockstep_job_eval_accuracy", "lockstep_job_eval_loss"}) {
    EXPECT_FALSE(Has(name, {{"job_id", "cancelled"}})) << name;
  }
  // Steps but no evaluation: its loss, but no accuracy.
  v1::StepEvent e;
  e.set_step(1);
  e.set_loss(2.25);
  metrics_.JobStarted("stepped", 64)->OnStep(e);
  metrics_.JobEnded("stepped");
  EXPECT_EQ(Value("lockstep_job_loss", {{"job_id", "stepped"}}), 2.25);
  EXPECT_FALSE(Has("lockstep_job_eval_accuracy", {{"job_id", "stepped"}}));
  EXPECT_FALSE(Has("lockstep_job_eval_loss", {{"job_id", "stepped"}}));
  // Both go when the job's series are removed.
  metrics_.JobForgotten("stepped");
  EXPECT_FALSE(Has("lockstep_job_loss", {{"job_id", "stepped"}}));
}

TEST_F(CoordinatorMetricsTest, OnlyTheMostRecentlyEndedJobsKeepTheirSeries) {
  for (const char* id : {"a", "b", "c"}) metrics_.JobStarted(id, 1)->OnStep(v1::StepEvent());
  metrics_.JobEnded("a");
  metrics_.JobEnded("b");
  EXPECT_TRUE(Has("lockstep_job_step", {{"job_id", "a"}}));
  metrics_.JobEnded("c");  // a third: the oldest ended goes
  EXPECT_FALSE(Has("lockstep_job_step", {{"job_id", "a"}}));
  EXPECT_FALSE(Has("lockstep_job_loss", {{"job_id", "a"}}));
  EXPECT_TRUE(Has("lockstep_job_step", {{"job_id", "b"}}));
  metrics_.JobForgotten("b");
  EXPECT_FALSE(Has("lockstep_job_step", {{"job_id", "b"}}));
  EXPECT_TRUE(Has("lockstep_job_step", {{"job_id", "c"}}));
  EXPECT_THAT(ReadMetric(*registry_, "lockstep_job_step", {{"job_id", "a"}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("job_id=a")));
}

}  // namespace
}  // namespace lockstep::testing
