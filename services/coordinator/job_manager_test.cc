// Tests of JobManager over in-memory workers (fake_worker_client.h): scheduling, the queue
// limit, cancellation, records across a restart, request ids, watchers, forgetting old
// jobs and failing a job whose worker stops heartbeating. A job's end is awaited through
// its event log, never by sleeping.
#include "services/coordinator/job_manager.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "core/spec/spec.h"
#include "core/testing.h"
#include "services/coordinator/fake_worker_client.h"
#include "services/coordinator/snapshot_store.h"
#include "services/coordinator/user_limits.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::_;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAre;

constexpr absl::Duration kPatience = absl::Seconds(30);  // for what should take a second

v1::JobSpec Spec(int workers, const std::string& request_id = "") {
  auto spec = ParseSpec(absl::StrCat("model: {kind: mlp, hidden: [8]}\n"
                                     "optimizer: {kind: sgd, learning_rate: 0.1}\n"
                                     "global_batch_size: 8\nsteps: 6\neval: {every_steps: 3}\n"
                                     "workers: ",
                                     workers),
                        "test spec");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->set_request_id(request_id);
  return *spec;
}

std::vector<std::string> Ids(const v1::ListJobsResponse& resp) {
  std::vector<std::string> ids;
  for (const v1::Job& j : resp.jobs()) ids.push_back(j.id());
  return ids;
}

// Waits for the job's event log to close and returns the job then: an empty one, and a
// test failure, if it does not end. `states` gets the state events seen. A watcher of its
// own: it counts against the watcher limits.
v1::Job AwaitEnd(JobManager& jobs, const std::string& id,
                 std::vector<v1::JobState>* states = nullptr) {
  absl::StatusOr<std::unique_ptr<JobManager::Watch>> watch = jobs.StartWatch(id);
  if (!watch.ok()) {
    ADD_FAILURE() << watch.status();
    return {};
  }
  // The flag outlives `wake`: a wake-up under way may still run once after it is dropped.
  auto woken = std::make_shared<std::pair<absl::Mutex, bool>>();
  EventLog::Wake wake = (*watch)->log()->Subscribe([woken] {
    absl::MutexLock lock(&woken->first);
    woken->second = true;
  });
  const absl::Time end = absl::Now() + kPatience;
  for (int64_t cursor = 0;;) {
    EventLog::Batch b = (*watch)->log()->Read(cursor, 0, 0, 1000);
    cursor = b.next;
    for (const v1::JobEvent& e : b.events) {
      if (e.has_state() && states != nullptr) states->push_back(e.state().state());
    }
    if (b.closed) return jobs.Get(id).value_or(v1::Job());
    absl::MutexLock lock(&woken->first);
    if (!woken->first.AwaitWithDeadline(absl::Condition(&woken->second), end)) {
      ADD_FAILURE() << id << " did not end";
      return {};
    }
    woken->second = false;
  }
}

// Waits until the job's event log shows `state` (a state event) and returns the job then;
// an empty one, and a test failure, if it does not come.
v1::Job AwaitState(JobManager& jobs, const std::string& id, v1::JobState state) {
  absl::StatusOr<std::unique_ptr<JobManager::Watch>> watch = jobs.StartWatch(id);
  if (!watch.ok()) {
    ADD_FAILURE() << watch.status();
    return {};
  }
  auto woken = std::make_shared<std::pair<absl::Mutex, bool>>();
  EventLog::Wake wake = (*watch)->log()->Subscribe([woken] {
    absl::MutexLock lock(&woken->first);
    woken->second = true;
  });
  const absl::Time end = absl::Now() + kPatience;
  for (int64_t cursor = 0;;) {
    EventLog::Batch b = (*watch)->log()->Read(cursor, 0, 0, 1000);
    cursor = b.next;
    for (const v1::JobEvent& e : b.events) {
      if (e.has_state() && e.state().state() == state) return jobs.Get(id).value_or(v1::Job());
    }
    if (b.closed) {
      ADD_FAILURE() << id << " ended before " << v1::JobState_Name(state);
      return {};
    }
    absl::MutexLock lock(&woken->first);
    if (!woken->first.AwaitWithDeadline(absl::Condition(&woken->second), end)) {
      ADD_FAILURE() << id << " did not reach " << v1::JobState_Name(state);
      return {};
    }
    woken->second = false;
  }
}

// A manager over fake workers, with its records in a folder under /tmp removed at the end.
class JobManagerTest : public ::testing::Test {
 protected:
  JobManagerTest() {
    std::string templ = "/tmp/job_manager_test.XXXXXX";
    EXPECT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    options_.records_dir = dir_ + "/jobs";
  }
  ~JobManagerTest() override {
    jobs_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // (Re)starts the manager: a new one over the same pool and records, as after a restart.
  absl::Status Start(std::vector<FakeWorker> fakes = {}) {
    jobs_.reset();
    factory_ = std::make_unique<FakeClientFactory>(std::move(fakes));
    registry_ = std::make_shared<prometheus::Registry>();  // a restarted process's
    metrics_ = std::make_unique<CoordinatorMetrics>(registry_);
    jobs_ = std::make_unique<JobManager>(options_, pool_.get(), kv_.get(), factory_.get(),
                                         metrics_.get());
    return jobs_->Start();
  }
  // Workers at "fake:<first>".. (FakeClientFactory connects its i-th Connect to rank i).
  void Register(int n, int first = 0) {
    for (int i = first; i < first + n; ++i) {
      pool_->Register(absl::StrCat("fake:", i), "cpu", absl::StrCat("fake-", i), 1);
    }
  }
  std::vector<bool> Free() {
    std::vector<bool> free;
    for (const WorkerView& v : pool_->Views()) free.push_back(v.free);
    return free;
  }
  // The job records (one JSON file each; next_id beside them is not one).
  std::vector<std::string> RecordFiles() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(options_.records_dir)) {
      if (e.path().extension() == ".json") names.push_back(e.path().filename());
    }
    return names;
  }

  std::string dir_;
  SimulatedClock rate_clock_;  // the submit rate's (options_.clock when a test sets it)
  CoordinatorOptions options_;
  SimulatedClock clock_;  // the pool's: heartbeats lapse when a test advances it
  std::unique_ptr<WorkerPool> pool_ = std::make_unique<WorkerPool>(absl::Hours(1), "", &clock_);
  std::unique_ptr<KvTable> kv_;  // none unless a test makes one
  std::unique_ptr<FakeClientFactory> factory_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<CoordinatorMetrics> metrics_;  // outlives jobs_
  std::unique_ptr<JobManager> jobs_;
  // The value of a metric of the manager's (CoordinatorMetrics), -1 if it has none.
  double Metric(const std::string& name, const prometheus::Labels& labels = {}) {
    return ReadMetric(metrics_->collectables(), name, labels).value_or(-1);
  }
};

TEST_F(JobManagerTest, RunsAJobToSucceededOnTheRegisteredWorkers) {
  Register(2);
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(Spec(2)));
  std::vector<v1::JobState> states;
  const v1::Job done = AwaitEnd(*jobs_, job.id(), &states);
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
  const v1::Job done = AwaitEnd(*jobs_, job.id());
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
  const v1::Job done = AwaitEnd(*jobs_, job.id());
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

TEST_F(JobManagerTest, CancelOfAQueuedJobIsImmediateAndOfAnEndedOneFailedPrecondition) {
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs_->Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job cancelled, jobs_->Cancel(job.id()));
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_EQ(cancelled.failure_code(), "CANCELLED");
  EXPECT_EQ(cancelled.failure_reason(), "cancelled by the user");
  std::vector<v1::JobState> states;
  const v1::Job got = AwaitEnd(*jobs_, job.id(), &states);
  EXPECT_EQ(got.state(), v1::CANCELLED);
  EXPECT_THAT(states, ElementsAre(v1::QUEUED, v1::CANCELLED));
  EXPECT_THAT(jobs_->Cancel(job.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(job.id()), HasSubstr("CANCELLED"))));
  EXPECT_THAT(jobs_->Cancel("job-999999"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("999")));
}

TEST_F(JobManagerTest, CancelDuringAHungPrepareEndsTheJobWithinTwoSecondsAndDropsItsKeys) {
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
  const absl::Time t0 = absl::Now();
  ASSERT_OK(jobs_->Cancel(job.id()).status());
  const v1::Job done = AwaitEnd(*jobs_, job.id());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
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
  ASSERT_EQ(AwaitEnd(*jobs_, done.id()).state(), v1::SUCCEEDED);
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
  EXPECT_EQ(AwaitEnd(*jobs_, c.id()).state(), v1::SUCCEEDED);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> on_disk, JobRecords(options_.records_dir).Load());
  ASSERT_EQ(on_disk.size(), 3u);
  EXPECT_EQ(on_disk[1].id(), queued.id());
  EXPECT_EQ(on_disk[1].state(), v1::QUEUED);
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

TEST_F(JobManagerTest, FinishedJobsBeyondTheOwnersRetentionAreForgottenWithTheirRecords) {
  options_.user_limits = UserLimitsTable({.max_jobs_kept = 1}, {});
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job a, jobs_->Submit(Spec(1)));
  ASSERT_OK(jobs_->Cancel(a.id()).status());
  ASSERT_OK_AND_ASSIGN(v1::Job b, jobs_->Submit(Spec(1)));
  ASSERT_OK(jobs_->Cancel(b.id()).status());
  ASSERT_OK_AND_ASSIGN(v1::Job c, jobs_->Submit(Spec(1)));  // two ended, one kept: the oldest goes
  EXPECT_THAT(jobs_->Get(a.id()), StatusIs(absl::StatusCode::kNotFound, HasSubstr(a.id())));
  EXPECT_THAT(Ids(jobs_->List({})), ElementsAre(c.id(), b.id()));
  EXPECT_EQ(Metric("lockstep_jobs", {{"state", "CANCELLED"}}), 1);  // a is forgotten
  EXPECT_EQ(Metric("lockstep_jobs", {{"state", "QUEUED"}}), 1);
  jobs_.reset();  // every write and erase done
  EXPECT_THAT(RecordFiles(), UnorderedElementsAre(b.id() + ".json", c.id() + ".json"));
  ASSERT_OK(Start());
  EXPECT_THAT(jobs_->Get(a.id()), StatusIs(absl::StatusCode::kNotFound, HasSubstr(a.id())));
  EXPECT_THAT(Ids(jobs_->List({})), ElementsAre(c.id(), b.id()));
}

// BUG: Start() takes the next id from the records it finds, so the id of a forgotten job
// newer than every kept one is given out again after a restart.
TEST_F(JobManagerTest, TheIdOfAForgottenJobIsNotReusedAfterARestart) {
  options_.user_limits = UserLimitsTable({.max_jobs_kept = 0}, {});
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job waiting, jobs_->Submit(Spec(2)));  // no workers: queued for good
  ASSERT_OK_AND_ASSIGN(v1::Job forgotten, jobs_->Submit(Spec(1)));
  ASSERT_OK(jobs_->Cancel(forgotten.id()).status());
  jobs_->Kick();   // the scheduler forgets it, the one ended job past max_jobs_kept 0
  absl::Mutex mu;  // polled: no event tells that a job was forgotten
  absl::MutexLock lock(&mu);
  static const bool kNever = false;
  for (int i = 0; i < 1000 && jobs_->Get(forgotten.id()).ok(); ++i) {
    mu.AwaitWithTimeout(absl::Condition(&kNever), absl::Milliseconds(10));
  }
  ASSERT_THAT(jobs_->Get(forgotten.id()), StatusIs(absl::StatusCode::kNotFound, _));
  ASSERT_OK(Start());
  EXPECT_THAT(RecordFiles(), ElementsAre(waiting.id() + ".json"));
  ASSERT_OK_AND_ASSIGN(v1::Job next, jobs_->Submit(Spec(1)));
  EXPECT_NE(next.id(), forgotten.id());
}

// Two users (alice, bob) and an administrator (root) as a tokens file names them, with the
// coordinator's default per-user limits but a retention of `kept` finished jobs each.
UserLimitsTable TwoUsersAndAnAdmin(int kept) {
  std::map<std::string, Caller> callers;
  callers["alice"] = Caller{.admin = false};
  callers["bob"] = Caller{.admin = false};
  callers["root"] = Caller{.admin = true};
  return UserLimitsTable({.max_queued_jobs = 20,
                          .max_running_jobs = 4,
                          .submits_per_minute = 60,
                          .max_jobs_kept = kept},
                         callers);
}

const Principal kAlice{"alice", false};
const Principal kBob{"bob", false};
const Principal kRoot{"root", true};

// Issue 22, item 2: alice submits 1,000 jobs in 5 s (then, with her queue emptied, submits
// and cancels 1,000 more); bob submits throughout and reads his old finished job. At
// 400deec alice's jobs filled the global queue (bob: "1000 jobs are queued") and evicted
// bob's finished record (GetJob NOT_FOUND, resume_from PERMISSION_DENIED).
TEST_F(JobManagerTest, OneUsersBurstNeitherBlocksNorForgetsAnotherUsersJobs) {
  options_.clock = &rate_clock_;
  options_.user_limits = TwoUsersAndAnAdmin(/*kept=*/50);
  Register(1);
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job old, jobs_->Submit(Spec(1), kBob));
  ASSERT_EQ(AwaitEnd(*jobs_, old.id()).state(), v1::SUCCEEDED);
  // Its state on disk, for GetCheckpoint and resume_from to find: the fakes' states cannot
  // be saved, so a stand-in file where a snapshot of it goes, seen after a restart.
  options_.checkpoint_dir = dir_ + "/checkpoints";
  options_.snapshot_dir = dir_ + "/snapshots";
  const std::string state_file = SnapshotStore(options_.snapshot_dir + "/" + old.id(), 1).PathOf(6);
  fs::create_directories(fs::path(state_file).parent_path());
  std::ofstream(state_file) << "its state";
  ASSERT_OK(Start());
  auto bob_is_served = [&] {
    // A job too big for the one worker: it stays queued, and is cancelled at once.
    absl::StatusOr<v1::Job> job = jobs_->Submit(Spec(2), kBob);
    ASSERT_OK(job.status());
    ASSERT_OK(jobs_->Cancel(job->id()).status());
    ASSERT_OK_AND_ASSIGN(v1::Job got, jobs_->Get(old.id()));
    EXPECT_EQ(got.state(), v1::SUCCEEDED);
    ASSERT_OK_AND_ASSIGN(JobManager::StateFile file, jobs_->CheckpointFile(old.id(), std::nullopt));
    EXPECT_EQ(file.path, state_file);
  };

  // 1,000 submits in 5 s: 20 queue, the rest are refused naming her queued-jobs limit.
  std::vector<std::string> queued;
  for (int i = 0; i < 1000; ++i) {
    rate_clock_.Advance(absl::Milliseconds(5));
    absl::StatusOr<v1::Job> job = jobs_->Submit(Spec(2), kAlice);
    if (job.ok()) {
      queued.push_back(job->id());
    } else {
      ASSERT_THAT(job.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                         HasSubstr("user alice: 20 queued jobs (limit "
                                                   "--max_queued_jobs_per_user 20)")));
    }
    if (i % 100 == 0) bob_is_served();
  }
  EXPECT_EQ(queued.size(), 20u);
  for (const std::string& id : queued) ASSERT_OK(jobs_->Cancel(id).status());
  // Submit and cancel as fast as she can: her minute's 60 and one a second over the 10 s
  // since her first submit, less the 20 above; the rest refused naming her rate limit.
  int accepted = 0;
  for (int i = 0; i < 1000; ++i) {
    rate_clock_.Advance(absl::Milliseconds(5));
    absl::StatusOr<v1::Job> job = jobs_->Submit(Spec(2), kAlice);
    if (job.ok()) {
      ++accepted;
      ASSERT_OK(jobs_->Cancel(job->id()).status());
    } else {
      ASSERT_THAT(job.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                         HasSubstr("user alice: 60 submits in the last minute "
                                                   "(limit --submits_per_minute_per_user 60)")));
    }
    if (i % 100 == 0) bob_is_served();
  }
  EXPECT_EQ(accepted, 60 + 9 - 20);
  // An hour later her minute's worth is back.
  rate_clock_.Advance(absl::Hours(1));
  ASSERT_OK_AND_ASSIGN(v1::Job later, jobs_->Submit(Spec(2), kAlice));
  ASSERT_OK(jobs_->Cancel(later.id()).status());

  // Retention per owner, also as reloaded from the disk: alice's own 50 newest finished
  // jobs stay (her oldest are forgotten); bob's old job is untouched, and his to resume.
  ASSERT_OK(Start());
  v1::ListJobsRequest hers;
  hers.set_owner("alice");
  const v1::ListJobsResponse alice_jobs = jobs_->List(hers);
  ASSERT_EQ(alice_jobs.jobs_size(), 50);
  EXPECT_EQ(alice_jobs.jobs(0).id(), later.id());  // newest first
  EXPECT_THAT(jobs_->Get(queued[0]), StatusIs(absl::StatusCode::kNotFound, HasSubstr(queued[0])));
  bob_is_served();
  v1::ListJobsRequest his;
  his.set_owner("bob");
  EXPECT_EQ(jobs_->List(his).jobs_size(), 1 + 20 + 1);  // all his, well within 50
  v1::JobSpec resume = Spec(2);  // queued (one worker): it would read the stand-in
  resume.set_resume_from(old.id());
  ASSERT_OK_AND_ASSIGN(v1::Job resumed, jobs_->Submit(resume, kBob));  // not PERMISSION_DENIED
  EXPECT_EQ(resumed.state(), v1::QUEUED);
}

TEST_F(JobManagerTest, AnAdministratorIsExemptFromThePerUserLimitsButNotTheGlobalCaps) {
  options_.clock = &rate_clock_;
  options_.user_limits = TwoUsersAndAnAdmin(/*kept=*/50);
  options_.max_queued_jobs = 70;
  ASSERT_OK(Start());
  for (int i = 0; i < 70; ++i) ASSERT_THAT(jobs_->Submit(Spec(2), kRoot), IsOk()) << i;
  EXPECT_THAT(jobs_->Submit(Spec(2), kRoot),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("70 jobs are queued, the coordinator's limit "
                                 "(--max_queued_jobs 70)")));
}

TEST_F(JobManagerTest, AtTheGlobalRecordCapASubmitForgetsOnlyTheSubmittersOwnOldestJob) {
  options_.user_limits = TwoUsersAndAnAdmin(/*kept=*/50);
  options_.max_jobs_kept = 3;
  ASSERT_OK(Start());
  ASSERT_OK_AND_ASSIGN(v1::Job mine, jobs_->Submit(Spec(2), kAlice));
  ASSERT_OK(jobs_->Cancel(mine.id()).status());
  ASSERT_OK_AND_ASSIGN(v1::Job b1, jobs_->Submit(Spec(2), kBob));
  ASSERT_OK_AND_ASSIGN(v1::Job b2, jobs_->Submit(Spec(2), kBob));
  EXPECT_THAT(jobs_->Submit(Spec(2), kBob),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("3 job records (limit --max_jobs_kept 3)"),
                             HasSubstr("none of them a finished job of user bob"))));
  EXPECT_OK(jobs_->Get(mine.id()).status());  // not bob's to forget
  ASSERT_OK_AND_ASSIGN(v1::Job again, jobs_->Submit(Spec(2), kAlice));
  EXPECT_THAT(jobs_->Get(mine.id()), StatusIs(absl::StatusCode::kNotFound, _));
  EXPECT_THAT(Ids(jobs_->List({})), ElementsAre(again.id(), b2.id(), b1.id()));
  jobs_.reset();  // every write and erase done
  EXPECT_THAT(RecordFiles(),
              UnorderedElementsAre(b1.id() + ".json", b2.id() + ".json", again.id() + ".json"));
}

TEST_F(JobManagerTest, AUserAtTheRunningLimitWaitsWithoutHoldingBackOthers) {
  std::map<std::string, Caller> callers;
  callers["alice"] = Caller{.admin = false, .limits = {.max_running_jobs = 1}};
  options_.user_limits = UserLimitsTable({.max_queued_jobs = 20, .max_jobs_kept = 50}, callers);
  Register(3);
  ASSERT_OK(Start({FakeWorker{.hang_prepare = true}, FakeWorker{.hang_prepare = true},
                   FakeWorker{.hang_prepare = true}}));
  ASSERT_OK_AND_ASSIGN(v1::Job a1, jobs_->Submit(Spec(1), kAlice));
  EXPECT_EQ(a1.state(), v1::RUNNING);
  ASSERT_OK_AND_ASSIGN(v1::Job a2, jobs_->Submit(Spec(1), kAlice));
  EXPECT_EQ(a2.state(), v1::QUEUED);
  EXPECT_EQ(a2.waiting_for(),
            "user alice: 1 running jobs (limit max_running_jobs=1 in the tokens file)");
  ASSERT_OK_AND_ASSIGN(v1::Job b, jobs_->Submit(Spec(1), kBob));  // behind hers, it starts
  EXPECT_EQ(b.state(), v1::RUNNING);
  ASSERT_OK(jobs_->Cancel(a1.id()).status());
  EXPECT_EQ(AwaitEnd(*jobs_, a1.id()).state(), v1::CANCELLED);
  jobs_->Kick();
  // Her next job starts once her first one is over: watched until it runs.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobManager::Watch> watch, jobs_->StartWatch(a2.id()));
  auto woken = std::make_shared<std::pair<absl::Mutex, bool>>();
  EventLog::Wake wake = watch->log()->Subscribe([woken] {
    absl::MutexLock lock(&woken->first);
    woken->second = true;
  });
  const absl::Time end = absl::Now() + kPatience;
  while (jobs_->Get(a2.id()).value_or(v1::Job()).state() != v1::RUNNING) {
    absl::MutexLock lock(&woken->first);
    ASSERT_TRUE(woken->first.AwaitWithDeadline(absl::Condition(&woken->second), end));
    woken->second = false;
  }
  ASSERT_OK(jobs_->Cancel(a2.id()).status());
  ASSERT_OK(jobs_->Cancel(b.id()).status());
}

TEST_F(JobManagerTest, StartIsDataLossNamingAnUnreadableRecord) {
  fs::create_directories(options_.records_dir);
  std::ofstream(options_.records_dir + "/job-000001.json") << "{ torn";
  EXPECT_THAT(Start(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("job-000001.json")));
}

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
  const v1::Job done = AwaitEnd(*jobs_, job.id());
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
  const v1::Job done = AwaitEnd(*jobs_, job.id());
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
  const v1::Job done = AwaitEnd(*jobs_, job.id());
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_EQ(done.recoveries(), 1);
  EXPECT_THAT(done.failure_reason(),
              AllOf(HasSubstr("connection reset"), HasSubstr("after 1 recoveries from")));
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

}  // namespace
}  // namespace lockstep::testing

namespace lockstep::testing {
namespace {

// Two workers lost by heartbeat and none left: the job waits RECOVERING (300 s by default).
class RecoveringTest : public JobManagerTest {
 protected:
  v1::Job StartRecovering() {
    pool_ = std::make_unique<WorkerPool>(absl::Milliseconds(400), "", &clock_);
    EXPECT_OK(
        Start({FakeWorker{.steps = Behaviour::kSilent}, FakeWorker{.steps = Behaviour::kSilent}}));
    Register(2);
    absl::StatusOr<v1::Job> job = jobs_->Submit(Spec(2));
    EXPECT_OK(job.status());
    clock_.Advance(absl::Seconds(1));
    jobs_->Kick();
    return AwaitState(*jobs_, job.value_or(v1::Job()).id(), v1::RECOVERING);
  }
};

TEST_F(RecoveringTest, StoppingTheManagerWhileAJobWaitsForWorkersIsPromptAndKeepsTheJob) {
  const v1::Job recovering = StartRecovering();
  ASSERT_EQ(recovering.state(), v1::RECOVERING);
  EXPECT_EQ(recovering.spec().recovery().recovery_timeout_seconds(), 300u);
  const absl::Time t0 = absl::Now();
  jobs_.reset();  // waited out the recovery timeout at 400deec
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
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
  const absl::Time t0 = absl::Now();
  ASSERT_OK(jobs_->Drain(t0 + absl::Seconds(20)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
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
  const v1::Job done = AwaitEnd(*jobs_, job.id());
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
  const v1::Job done = AwaitEnd(*jobs_, job.id());
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_THAT(done.failure_reason(),
              StartsWith("worker w0001 (fake:1, rank 1): is unreachable (no answer); its peers "
                         "failed after it: worker w0000"));
  EXPECT_THAT(done.failure_reason(), Not(HasSubstr("first error")));
}

}  // namespace
}  // namespace lockstep::testing
