// Tests of JobManager's core over in-memory workers (job_manager_test.h): a job's states
// from the queue to its end, the queue limit and request ids, cancellation, records across
// a restart, watchers, and what is refused at submit. Limits, retention and recovery have
// test files of their own (job_manager_{limits,retention,recovery}_test.cc).
#include "services/coordinator/scheduling/job_manager.h"

#include <google/protobuf/util/message_differencer.h>

#include <filesystem>
#include <fstream>

#include "services/coordinator/scheduling/job_manager_test.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::_;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST_F(JobManagerTest, RunsAJobToSucceededOnTheRegisteredWorkers) {
  Register(2);
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(Spec(2)));
  std::vector<v1::JobState> states;
  const v1::Job done = AwaitEnd(job.id(), &states);
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_THAT(states, ElementsAre(v1::QUEUED, v1::RUNNING, v1::SUCCEEDED));
  EXPECT_THAT(done.workers(), ElementsAre("w0000", "w0001"));
  EXPECT_EQ(done.step(), 6);
  EXPECT_EQ(done.total_steps(), 6);
  EXPECT_EQ(done.last_loss(), 4.5f);  // the fakes' losses: rank + the shard's 4 samples
  EXPECT_EQ(done.last_eval().step(), 6);
  EXPECT_THAT(Free(), ElementsAre(true, true));
  EXPECT_THAT(jobs_->Cancel(job.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(job.id())));
  EXPECT_THAT(jobs_->Get("job-999999"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("999")));
}

TEST_F(JobManagerTest, MetricsFollowAJobFromTheQueueToItsEnd) {
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(Spec(2)));  // no workers yet: queued
  EXPECT_EQ(Metric("lockstep_jobs", {{"state", "QUEUED"}}), 1);
  EXPECT_EQ(Metric("lockstep_job_queue_length"), 1);
  EXPECT_EQ(Metric("lockstep_job_step", {{"job_id", job.id()}}), -1);  // none before it runs
  Register(2);
  jobs_->Kick();
  const v1::Job done = AwaitEnd(job.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  const prometheus::Labels labels = {{"job_id", job.id()}};
  EXPECT_EQ(Metric("lockstep_jobs", {{"state", "QUEUED"}}), 0);
  EXPECT_EQ(Metric("lockstep_jobs", {{"state", "RUNNING"}}), 0);
  EXPECT_EQ(Metric("lockstep_jobs", {{"state", "SUCCEEDED"}}), 1);
  EXPECT_EQ(Metric("lockstep_jobs_finished_total", {{"state", "SUCCEEDED"}}), 1);
  EXPECT_EQ(Metric("lockstep_job_queue_length"), 0);
  EXPECT_EQ(Metric("lockstep_job_step", labels), 6);
  EXPECT_EQ(Metric("lockstep_job_total_steps", labels), 6);
  EXPECT_EQ(Metric("lockstep_job_loss", labels), 4.5);  // the fakes' losses, as above
  EXPECT_EQ(Metric("lockstep_job_eval_accuracy", labels), done.last_eval().test_accuracy());
  EXPECT_GT(Metric("lockstep_job_samples_per_second", labels), 0);
  EXPECT_EQ(Metric("lockstep_job_samples_total", labels), 6 * 8);  // steps x global batch
  EXPECT_EQ(Metric("lockstep_steps_total"), 6);
  EXPECT_EQ(Metric("lockstep_step_phase_seconds_count", {{"phase", "compute"}}), 6);
  EXPECT_EQ(Metric("lockstep_recoveries_total"), 0);
}

TEST_F(JobManagerTest, AJobWaitsQueuedUntilEnoughWorkersRegister) {
  Register(1);
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(Spec(2)));
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_THAT(job.waiting_for(), HasSubstr("2 cpu workers"));
  EXPECT_EQ(jobs_->Get(job.id()).value_or(v1::Job()).waiting_for(), job.waiting_for());
  Register(1, /*first=*/1);
  jobs_->Kick();
  const v1::Job done = AwaitEnd(job.id());
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.waiting_for(), "");
  EXPECT_THAT(done.workers(), ElementsAre("w0000", "w0001"));
}

TEST_F(JobManagerTest, TheQueueIsBoundedButARetryWithARequestIdGetsItsJob) {
  options_.max_queued_jobs = 2;
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job a, jobs_->Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job b, jobs_->Submit(Spec(1, "req-b")));
  EXPECT_THAT(jobs_->Submit(Spec(1)),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_queued_jobs")));
  ASSERT_OK_AND_ASSIGN(v1::Job retry, jobs_->Submit(Spec(1, "req-b")));
  EXPECT_EQ(retry.id(), b.id());
  ASSERT_OK(jobs_->Cancel(a.id()).status());
  ASSERT_OK_AND_ASSIGN(v1::Job c, jobs_->Submit(Spec(1)));
  EXPECT_THAT(Ids(jobs_->List({})), ElementsAre(c.id(), b.id(), a.id()));
  v1::ListJobsRequest queued;
  queued.add_states(v1::QUEUED);
  EXPECT_THAT(Ids(jobs_->List(queued)), ElementsAre(c.id(), b.id()));
  queued.set_limit(1);
  EXPECT_THAT(Ids(jobs_->List(queued)), ElementsAre(c.id()));
  v1::ListJobsRequest two;  // several states: any of them
  two.add_states(v1::CANCELLED);
  two.add_states(v1::QUEUED);
  EXPECT_THAT(Ids(jobs_->List(two)), ElementsAre(c.id(), b.id(), a.id()));
  two.set_limit(2);
  EXPECT_THAT(Ids(jobs_->List(two)), ElementsAre(c.id(), b.id()));
  v1::ListJobsRequest none;
  none.add_states(v1::RUNNING);
  none.add_states(v1::FAILED);
  EXPECT_THAT(Ids(jobs_->List(none)), ElementsAre());
}

// At 400deec a request id reused with another spec silently returned the first job.
TEST_F(JobManagerTest, ARequestIdReusedWithAnotherSpecIsAlreadyExistsNamingItsJob) {
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job a, jobs_->Submit(Spec(2, "req-a")));
  EXPECT_THAT(
      jobs_->Submit(Spec(4, "req-a")),
      StatusIs(absl::StatusCode::kAlreadyExists, AllOf(HasSubstr("req-a"), HasSubstr(a.id()))));
  // Another owner's request id is theirs; the same spec again is the retry it was.
  EXPECT_NE(jobs_->Submit(Spec(4, "req-a"), {"bob", false}).value_or(v1::Job()).id(), a.id());
  ASSERT_OK(Start());  // also once restarted
  EXPECT_THAT(jobs_->Submit(Spec(4, "req-a")), StatusIs(absl::StatusCode::kAlreadyExists, _));
  EXPECT_EQ(jobs_->Submit(Spec(2, "req-a")).value_or(v1::Job()).id(), a.id());
}

TEST_F(JobManagerTest, CancelOfAQueuedJobIsImmediateAndOfAnEndedOneFailedPrecondition) {
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job cancelled, jobs_->Cancel(job.id()));
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_EQ(cancelled.failure_code(), "CANCELLED");
  EXPECT_EQ(cancelled.failure_reason(), "cancelled by the user");
  std::vector<v1::JobState> states;
  const v1::Job got = AwaitEnd(job.id(), &states);
  EXPECT_EQ(got.state(), v1::CANCELLED);
  EXPECT_THAT(states, ElementsAre(v1::QUEUED, v1::CANCELLED));
  EXPECT_THAT(jobs_->Cancel(job.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(job.id()), HasSubstr("CANCELLED"))));
  EXPECT_THAT(jobs_->Cancel("job-999999"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("999")));
}

TEST_F(JobManagerTest, CancelDuringAHungPrepareEndsTheJobAtOnceAndDropsItsKeys) {
  kv_ = std::make_unique<KvTable>();
  KvTable& kv = *kv_;
  Register(2);
  ASSERT_OK(Start({FakeWorker{.hang_prepare = true}, FakeWorker{.hang_prepare = true}}));
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(Spec(2)));
  // Started by Submit itself, so its clients exist (and are this thread's to look at).
  ASSERT_EQ(job.state(), v1::RUNNING);
  ASSERT_EQ(factory_->clients.size(), 2u);
  for (FakeClient* c : factory_->clients) c->AwaitPrepare();
  // The attempt's namespace was opened before Prepare: its ranks can bootstrap in it.
  const std::string prefix = factory_->clients[0]->rendezvous_prefix();
  EXPECT_THAT(prefix, ::testing::StartsWith(absl::StrCat("jobs/", job.id(), "/")));
  ASSERT_OK(kv.Set(prefix + "rank0", "its"));
  EXPECT_THAT(kv.Set(absl::StrCat("jobs/", job.id(), "/rank0"), "no secret"),
              StatusIs(absl::StatusCode::kPermissionDenied, _));
  ASSERT_OK(jobs_->Cancel(job.id()).status());
  const v1::Job done = AwaitEnd(job.id());
  // Ended by the cancel, not by the minute a hung Prepare lasts.
  for (FakeClient* c : factory_->clients) EXPECT_TRUE(c->prepare_cancelled());
  EXPECT_EQ(done.state(), v1::CANCELLED);
  EXPECT_EQ(done.failure_reason(), "cancelled by the user");
  EXPECT_THAT(Free(), ElementsAre(true, true));
  // Its namespace is closed: the keys are gone and no more can be written.
  EXPECT_EQ(kv.keys(), 0u);
  EXPECT_THAT(kv.Set(prefix + "rank0", "late"), StatusIs(absl::StatusCode::kPermissionDenied, _));
}

TEST_F(JobManagerTest, RecordsSurviveARestart) {
  Register(2);
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job done, jobs_->Submit(Spec(2)));
  ASSERT_EQ(AwaitEnd(done.id()).state(), v1::SUCCEEDED);
  ASSERT_OK_AND_ASSIGN(v1::Job queued, jobs_->Submit(Spec(4, "req-queued")));
  ASSERT_EQ(queued.state(), v1::QUEUED);

  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job a, jobs_->Get(done.id()));
  EXPECT_EQ(a.state(), v1::SUCCEEDED);
  EXPECT_EQ(a.step(), 6);
  ASSERT_OK_AND_ASSIGN(v1::Job b, jobs_->Get(queued.id()));
  EXPECT_EQ(b.state(), v1::QUEUED);  // still waiting, nothing lost
  EXPECT_EQ(b.recoveries(), 0);
  EXPECT_EQ(jobs_->Submit(Spec(4, "req-queued")).value_or(v1::Job()).id(), queued.id());

  ASSERT_OK_AND_ASSIGN(v1::Job c, jobs_->Submit(Spec(2)));
  EXPECT_NE(c.id(), done.id());
  EXPECT_NE(c.id(), queued.id());
  // Waiting for 4 workers while 2 are registered: the queue passes over it.
  EXPECT_EQ(AwaitEnd(c.id()).state(), v1::SUCCEEDED);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> on_disk, JobRecords(options_.records_dir).Load());
  ASSERT_EQ(on_disk.size(), 3u);
  EXPECT_EQ(on_disk[1].id(), queued.id());
  EXPECT_EQ(on_disk[1].state(), v1::QUEUED);
}

// Each event a watcher of the ended job replays, as "state:S", "step:N" or "eval:N".
std::vector<std::string> History(JobManager& jobs, const std::string& id) {
  std::vector<std::string> out;
  absl::StatusOr<std::unique_ptr<JobManager::Watch>> w = jobs.StartWatch(id);
  if (!w.ok()) return {w.status().ToString()};
  const EventLog::Batch b = (*w)->log()->Read(0, 0, (*w)->replay_until(), 100000);
  for (const v1::JobEvent& e : b.events) {
    if (e.has_state()) out.push_back("state:" + v1::JobState_Name(e.state().state()));
    if (e.has_step()) out.push_back(absl::StrCat("step:", e.step().step()));
    if (e.has_eval()) out.push_back(absl::StrCat("eval:", e.eval().step()));
  }
  return out;
}

// At 400deec a finished job's step events were dropped (EventLog::Compact): watch, logs
// and plot_loss.py showed none. Now its StepHistory takes their place, and is on disk
// beside its record (with digests: a damaged file is dropped, not shown).
TEST_F(JobManagerTest, AFinishedJobKeepsItsStepsAcrossARestart) {
  options_.history_steps = 4;  // 6 steps: every 2nd
  Register(2);
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(Spec(2)));
  ASSERT_EQ(AwaitEnd(job.id()).state(), v1::SUCCEEDED);
  const std::vector<std::string> kept = {"state:QUEUED", "state:RUNNING",  "step:2",
                                         "eval:3",       "step:4",         "step:6",
                                         "eval:6",       "state:SUCCEEDED"};
  EXPECT_THAT(History(*jobs_, job.id()), ElementsAreArray(kept));
  ASSERT_OK(Start());  // restarted: the steps come from the disk (states and evals: the last)
  const std::string file = options_.records_dir + "/" + job.id() + ".steps.safetensors";
  ASSERT_TRUE(fs::exists(file));
  EXPECT_THAT(History(*jobs_, job.id()),
              ElementsAre("step:2", "step:4", "step:6", "state:SUCCEEDED"));

  {  // a flipped byte in the losses: found by the file's digests, the history dropped
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-2, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-2, std::ios::end);
    f.put(static_cast<char>(c ^ 0x40));
  }
  ASSERT_OK(Start());
  EXPECT_THAT(History(*jobs_, job.id()), ElementsAre("state:SUCCEEDED"));
  ASSERT_OK_AND_ASSIGN(v1::Job again, jobs_->Get(job.id()));
  EXPECT_EQ(again.step(), 6);  // the record itself is as it was
}

// The bitwise witness (the params checksum at each snapshot) was kept in memory only: a
// restarted coordinator showed none of a finished job's snapshots. Now it is written beside
// the job's record at each snapshot and read back at Start.
TEST_F(JobManagerTest, TheWitnessSurvivesARestart) {
  Register(2);
  ASSERT_OK(Start());  // fakes hold their state: snapshots succeed
  v1::JobSpec spec = Spec(2);
  spec.mutable_recovery()->set_snapshot_every_steps(2);  // 6 steps: snapshots at 2 and 4
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(spec));
  const v1::Job done = AwaitEnd(job.id());
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  ASSERT_OK_AND_ASSIGN(const v1::JobWitness before, jobs_->Witness(job.id()));
  ASSERT_EQ(before.snapshots_size(), 2) << before.DebugString();
  EXPECT_EQ(before.snapshots(0).step(), 2);
  EXPECT_EQ(before.snapshots(1).step(), 4);
  EXPECT_NE(before.snapshots(0).param_checksum(), 0u);
  EXPECT_EQ(before.final_step(), 6);
  EXPECT_EQ(before.final_checksum(), done.param_checksum());

  ASSERT_OK(Start());  // restarted: the marks come from the disk
  ASSERT_OK_AND_ASSIGN(const v1::JobWitness after, jobs_->Witness(job.id()));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(after, before))
      << after.DebugString();
}

TEST_F(JobManagerTest, WatchersAreLimitedPerJobAndInAll) {
  options_.max_watchers_per_job = 1;
  options_.max_watchers = 2;
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job a, jobs_->Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job b, jobs_->Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job c, jobs_->Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobManager::Watch> wa, jobs_->StartWatch(a.id()));
  EXPECT_THAT(jobs_->StartWatch(a.id()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("watchers")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobManager::Watch> wb, jobs_->StartWatch(b.id()));
  EXPECT_THAT(jobs_->StartWatch(c.id()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("watchers")));
  wa.reset();
  ASSERT_OK_AND_ASSIGN(wa, jobs_->StartWatch(a.id()));
  EXPECT_THAT(jobs_->StartWatch("job-999999"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("999")));
}

TEST_F(JobManagerTest, StartIsDataLossNamingAnUnreadableRecord) {
  fs::create_directories(options_.records_dir);
  std::ofstream(options_.records_dir + "/job-000001.json") << "{ torn";
  EXPECT_THAT(Start(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("job-000001.json")));
}

TEST_F(JobManagerTest, AJobTooBigForTheMemoryBudgetsIsRefusedAtSubmitNamingTheField) {
  ASSERT_OK(Start());
  // 784-10000-9000-10 with adam, 97.9M parameters (under max_params): its TrainState is
  // 1.1 GiB, 2.3 GiB measured on a coordinator, whose budget per job is 768 MiB.
  v1::JobSpec big = Spec(1);
  big.mutable_model()->set_hidden(0, 10000);
  big.mutable_model()->add_hidden(9000);
  big.mutable_optimizer()->set_kind("adam");
  EXPECT_THAT(jobs_->Submit(big),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("model.hidden"), HasSubstr("on the coordinator"),
                             HasSubstr("budget of 768 MiB"))));
  // A batch whose activations do not fit a worker.
  v1::JobSpec wide = Spec(1);
  wide.mutable_model()->set_hidden(0, 65536);
  wide.set_global_batch_size(16384);
  EXPECT_THAT(jobs_->Submit(wide),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("global_batch_size"), HasSubstr("on each worker"))));
  EXPECT_EQ(jobs_->List({}).jobs_size(), 0);                         // nothing queued, no id used
  options_.memory.coordinator_per_job = options_.memory.worker = 0;  // no budgets
  ASSERT_OK(Start());
  EXPECT_THAT(jobs_->Submit(big), IsOk());
}

TEST_F(JobManagerTest, ResumeFromIsResolvedAtSubmit) {
  options_.checkpoint_dir = dir_ + "/checkpoints";
  options_.snapshot_dir = dir_ + "/snapshots";
  ASSERT_OK(Start());
  v1::JobSpec spec = Spec(1);
  spec.set_resume_from("job-000042");  // no such job, no state
  EXPECT_THAT(jobs_->Submit(spec), StatusIs(absl::StatusCode::kNotFound, HasSubstr("job-000042")));
  fs::create_directories(options_.checkpoint_dir);
  fs::create_symlink("/etc/passwd", options_.checkpoint_dir + "/passwd");
  spec.set_resume_from("passwd");  // a link out of the folder
  EXPECT_THAT(jobs_->Submit(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("resume_from")));
  EXPECT_EQ(jobs_->List({}).jobs_size(), 0);
}

TEST_F(JobManagerTest, AModelThatCannotTakeTheInstalledDatasetIsRefusedAtSubmit) {
  ASSERT_OK(Start());
  v1::JobSpec spec = Spec(1);
  spec.mutable_model()->clear_input_shape();
  for (int d : {32, 32, 3}) spec.mutable_model()->add_input_shape(d);
  EXPECT_THAT(jobs_->Submit(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.input_shape")));
  EXPECT_EQ(jobs_->List({}).jobs_size(), 0);
}

}  // namespace
}  // namespace lockstep::testing
