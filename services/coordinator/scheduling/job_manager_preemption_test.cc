// Tests of JobManager taking workers from running jobs, over fake workers: a worker
// leaving on SIGTERM (WorkerLeaving), and priorities (job_manager_preemption.cc): a job of
// higher priority takes workers from a running elastic job of lower priority, which goes
// on smaller, or suspends one that cannot shrink, which resumes from its snapshot; each
// ends with the checksum of an undisturbed run. A gate (FakeGate) holds the running job
// mid-run while the test acts: no sleeps.
#include <algorithm>

#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_test.h"
#include "services/coordinator/scheduling/job_manager_testing.h"

namespace lockstep::testing {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// 12 steps of an MLP, an evaluation every 4; elastic ("{min: 1, max: 3}") or not ("2").
v1::JobSpec LowSpec(const std::string& workers, bool elastic) {
  auto spec = ParseSpec(absl::StrCat("model: {kind: mlp, hidden: [8]}\n"
                                     "optimizer: {kind: sgd, learning_rate: 0.1}\n"
                                     "global_batch_size: 12\nsteps: 12\neval: {every_steps: 4}\n",
                                     elastic ? "replicas: 4\n" : "", "workers: ", workers),
                        "low spec");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.value_or(v1::JobSpec());
}

// The job's events until it ends, and the job then.
v1::Job Follow(JobManager& jobs, const std::string& id, std::vector<v1::JobEvent>* events) {
  absl::StatusOr<v1::Job> job = AwaitEnd(jobs, id, kPatience, events);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(v1::Job());
}

std::vector<std::string> Reasons(const std::vector<v1::JobEvent>& events) {
  std::vector<std::string> out;
  for (const v1::JobEvent& e : events) {
    if (e.has_state())
      out.push_back(v1::JobState_Name(e.state().state()) + ": " + e.state().reason());
  }
  return out;
}

int Replays(const std::vector<v1::JobEvent>& events) {
  return static_cast<int>(std::count_if(events.begin(), events.end(), [](const v1::JobEvent& e) {
    return e.has_step() && e.step().replay();
  }));
}

class PreemptionTest : public JobManagerTest {
 protected:
  // The first `n` workers' answers are held back from the lower job's third step on.
  absl::Status StartGated(int n) {
    gate_->from = 2;
    std::vector<FakeWorker> fakes(n);
    for (FakeWorker& f : fakes) f.gate = gate_;
    return Start(std::move(fakes));
  }
  // Waits until `id` completed its second step (the gate holds the third).
  void AwaitSecondStep(const std::string& id) {
    ASSERT_OK(AwaitEvent(*jobs_, id, kPatience, [](const v1::JobEvent& e) {
                return e.has_step() && e.step().step() == 2;
              }).status());
  }
  // `spec` run alone now, the gate open: its checksum.
  uint64_t Undisturbed(const v1::JobSpec& spec) {
    absl::StatusOr<v1::Job> job = jobs_->Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    const v1::Job done = AwaitEnd(job.value_or(v1::Job()).id());
    EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
    EXPECT_NE(done.param_checksum(), 0u);
    return done.param_checksum();
  }
  std::shared_ptr<FakeGate> gate_ = std::make_shared<FakeGate>();
};

TEST_F(PreemptionTest, AHigherPriorityJobShrinksALowerElasticJobWhichGoesOnWithTheSameBits) {
  ASSERT_OK(StartGated(3));
  Register(3);
  const v1::JobSpec low_spec = LowSpec("{min: 1, max: 3}", true);
  ASSERT_OK_AND_ASSIGN(v1::Job low, jobs_->Submit(low_spec));
  ASSERT_EQ(low.state(), v1::RUNNING);
  ASSERT_EQ(low.workers_size(), 3);
  AwaitSecondStep(low.id());
  v1::JobSpec high_spec = Spec(2);
  high_spec.set_priority(5);
  ASSERT_OK_AND_ASSIGN(v1::Job high, jobs_->Submit(high_spec));
  EXPECT_EQ(high.state(), v1::QUEUED);  // until low lets 2 workers go at a step boundary
  EXPECT_EQ(Metric("lockstep_preemptions_total", {{"action", "shrink"}}), 1);
  gate_->open.Notify();

  EXPECT_EQ(AwaitEnd(high.id()).state(), v1::SUCCEEDED);
  std::vector<v1::JobEvent> events;
  const v1::Job done = Follow(*jobs_, low.id(), &events);
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.recoveries(), 0);
  EXPECT_EQ(Replays(events), 0);
  EXPECT_THAT(Reasons(events),
              Contains(MatchesRegex(absl::StrCat(
                  "RUNNING: resized 3 -> 1 workers: workers w0001, w0002 preempted by job ",
                  high.id(), " \\(priority 5\\); continuing from step [3-9]"))));
  EXPECT_GE(Metric("lockstep_job_resizes_total"), 1);
  EXPECT_EQ(Metric("lockstep_preemptions_total", {{"action", "suspend"}}), 0);
  EXPECT_EQ(done.param_checksum(), Undisturbed(low_spec));
}

TEST_F(PreemptionTest, AHigherPriorityJobSuspendsALowerJobThatResumesFromItsSnapshot) {
  options_.snapshot_dir = dir_ + "/snapshots";  // where a suspended job continues from
  ASSERT_OK(StartGated(2));
  Register(2);
  const v1::JobSpec low_spec = LowSpec("2", false);
  ASSERT_OK_AND_ASSIGN(v1::Job low, jobs_->Submit(low_spec));
  ASSERT_EQ(low.state(), v1::RUNNING);
  AwaitSecondStep(low.id());
  v1::JobSpec high_spec = Spec(2);
  high_spec.set_priority(1);
  ASSERT_OK_AND_ASSIGN(v1::Job high, jobs_->Submit(high_spec));
  EXPECT_EQ(high.state(), v1::QUEUED);
  EXPECT_EQ(Metric("lockstep_preemptions_total", {{"action", "suspend"}}), 1);
  gate_->open.Notify();

  EXPECT_EQ(AwaitEnd(high.id()).state(), v1::SUCCEEDED);
  std::vector<v1::JobEvent> events;
  const v1::Job done = Follow(*jobs_, low.id(), &events);
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  const std::vector<std::string> reasons = Reasons(events);
  EXPECT_THAT(reasons, Contains(MatchesRegex(absl::StrCat(
                           "SUSPENDED: suspended: preempted by job ", high.id(),
                           " \\(priority 1\\): the job continues from its snapshot of step "
                           "[3-9] when workers are free"))));
  EXPECT_EQ(Replays(events), 0);  // resumed from the snapshot of the step it stopped at
  EXPECT_EQ(done.step(), 12);
  EXPECT_EQ(done.param_checksum(), Undisturbed(low_spec));
  EXPECT_EQ(Metric("lockstep_jobs", {{"state", "SUSPENDED"}}), 0);
}

TEST_F(PreemptionTest, AWorkerLeavingOnSigtermLeavesItsJobAtAStepBoundary) {
  ASSERT_OK(StartGated(3));
  Register(4);  // w0003 stays idle
  const v1::JobSpec spec = LowSpec("{min: 1, max: 3}", true);
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(spec));
  AwaitSecondStep(job.id());
  EXPECT_THAT(jobs_->WorkerLeaving("w0009"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("w0009")));
  ASSERT_OK(jobs_->WorkerLeaving("w0001"));
  ASSERT_OK(jobs_->WorkerLeaving("w0001"));  // every heartbeat while it leaves says so
  ASSERT_OK(jobs_->WorkerLeaving("w0003"));  // idle: nothing to leave
  gate_->open.Notify();
  std::vector<v1::JobEvent> events;
  const v1::Job done = Follow(*jobs_, job.id(), &events);
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_THAT(done.workers(), ElementsAre("w0000", "w0002"));  // nobody joined: none was free
  EXPECT_EQ(done.recoveries(), 0);
  EXPECT_EQ(Replays(events), 0);
  EXPECT_THAT(Reasons(events),
              Contains(MatchesRegex("RUNNING: resized 3 -> 2 workers: worker w0001 leaving "
                                    "\\(SIGTERM\\); continuing from step [3-9]")));
  const std::vector<v1::WorkerInfo> workers = pool_->List();
  ASSERT_EQ(workers.size(), 4u);
  EXPECT_TRUE(workers[1].leaving());
  EXPECT_EQ(workers[1].job_id(), "");  // back in the pool, never given out again
  EXPECT_TRUE(workers[3].leaving());
  EXPECT_FALSE(workers[0].leaving());
  EXPECT_EQ(done.param_checksum(), Undisturbed(spec));
}

TEST_F(PreemptionTest, NoJobOfEqualPriorityIsPreempted) {
  ASSERT_OK(StartGated(3));
  Register(3);
  ASSERT_OK_AND_ASSIGN(v1::Job low, jobs_->Submit(LowSpec("{min: 1, max: 3}", true)));
  AwaitSecondStep(low.id());
  ASSERT_OK_AND_ASSIGN(v1::Job same, jobs_->Submit(Spec(2)));  // priority 0 too
  EXPECT_EQ(same.state(), v1::QUEUED);
  EXPECT_EQ(Metric("lockstep_preemptions_total", {{"action", "shrink"}}), 0);
  gate_->open.Notify();
  std::vector<v1::JobEvent> events;
  EXPECT_EQ(Follow(*jobs_, low.id(), &events).workers_size(), 3);
  for (const std::string& r : Reasons(events)) EXPECT_THAT(r, ::testing::Not(HasSubstr("resized")));
  EXPECT_EQ(AwaitEnd(same.id()).state(), v1::SUCCEEDED);
}

}  // namespace
}  // namespace lockstep::testing
