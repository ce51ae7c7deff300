// Tests of JobManager over in-memory workers (fake_worker_client.h): scheduling, the queue
// limit, cancellation, records across a restart, request ids, watchers, forgetting old
// jobs and failing a job whose worker stops heartbeating. Jobs' ends are awaited through
// their event logs, never by sleeping.
#include "services/coordinator/job_manager.h"

#include <stdlib.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/spec/spec.h"
#include "core/testing.h"
#include "services/coordinator/fake_worker_client.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr absl::Duration kPatience = absl::Seconds(30);  // for what should take a second

v1::JobSpec Spec(int workers, const std::string& request_id = "") {
  auto spec = ParseSpec(absl::StrCat(R"(
model: {kind: mlp, hidden: [8]}
optimizer: {kind: sgd, learning_rate: 0.1}
global_batch_size: 8
steps: 6
eval: {every_steps: 3}
workers: )",
                                     workers),
                        "test spec");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->set_request_id(request_id);
  return *spec;
}

// Workers at "fake:0".. (FakeClientFactory connects the i-th Connect to rank i).
void RegisterWorkers(WorkerPool& pool, int n, int first = 0) {
  for (int i = first; i < first + n; ++i) {
    pool.Register(absl::StrCat("fake:", i), "cpu", absl::StrCat("fake-", i), 1);
  }
}

std::vector<bool> Free(WorkerPool& pool) {
  std::vector<bool> free;
  for (const WorkerView& v : pool.Views()) free.push_back(v.free);
  return free;
}

std::vector<std::string> Ids(const v1::ListJobsResponse& resp) {
  std::vector<std::string> ids;
  for (const v1::Job& j : resp.jobs()) ids.push_back(j.id());
  return ids;
}

// Waits for the job's event log to close, then returns the job; `states` gets the state
// events seen. A watcher of its own, so it counts against the watcher limits.
absl::StatusOr<v1::Job> AwaitEnd(JobManager& jobs, const std::string& id,
                                 std::vector<v1::JobState>* states = nullptr) {
  ASSIGN_OR_RETURN(std::unique_ptr<JobManager::Watch> watch, jobs.StartWatch(id));
  // Shared with the wake-up, which may still run once after `wake` is dropped.
  struct Woken {
    absl::Mutex mu;
    bool woke = false;
  };
  auto woken = std::make_shared<Woken>();
  EventLog::Wake wake = watch->log()->Subscribe([woken] {
    absl::MutexLock lock(&woken->mu);
    woken->woke = true;
  });
  const absl::Time end = absl::Now() + kPatience;
  for (int64_t cursor = 0;;) {
    EventLog::Batch b = watch->log()->Read(cursor, 0, 0, 1000);
    cursor = b.next;
    for (const v1::JobEvent& e : b.events) {
      if (e.has_state() && states != nullptr) states->push_back(e.state().state());
    }
    if (b.closed) return jobs.Get(id);
    absl::MutexLock lock(&woken->mu);
    if (!woken->mu.AwaitWithDeadline(absl::Condition(&woken->woke), end)) {
      return absl::DeadlineExceededError(absl::StrCat(id, " did not end"));
    }
    woken->woke = false;
  }
}

// A folder under /tmp, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string templ = "/tmp/job_manager_test.XXXXXX";
    EXPECT_NE(mkdtemp(templ.data()), nullptr);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string Path(const std::string& rel) const { return path_ + "/" + rel; }
  std::vector<std::string> Files(const std::string& rel) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(Path(rel))) names.push_back(e.path().filename());
    return names;
  }

 private:
  std::string path_;
};

TEST(JobManager, RunsAJobToSucceededOnTheRegisteredWorkers) {
  WorkerPool pool(absl::Hours(1));
  RegisterWorkers(pool, 2);
  FakeClientFactory factory;
  JobManager jobs(CoordinatorOptions(), &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs.Submit(Spec(2)));
  std::vector<v1::JobState> states;
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(jobs, job.id(), &states));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_THAT(states, ElementsAre(v1::QUEUED, v1::RUNNING, v1::SUCCEEDED));
  EXPECT_THAT(done.workers(), ElementsAre("w0000", "w0001"));
  EXPECT_EQ(done.step(), 6);
  EXPECT_EQ(done.total_steps(), 6);
  EXPECT_EQ(done.last_loss(), 4.5f);  // the fakes' losses: rank + the shard's 4 samples
  EXPECT_EQ(done.last_eval().step(), 6);
  EXPECT_GE(done.started_unix_ms(), done.created_unix_ms());
  EXPECT_GE(done.finished_unix_ms(), done.started_unix_ms());
  EXPECT_THAT(Free(pool), ElementsAre(true, true));
  EXPECT_THAT(jobs.Cancel(job.id()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(job.id())));
  EXPECT_THAT(jobs.Get("job-999999"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("job-999999")));
}

TEST(JobManager, AJobWaitsQueuedUntilEnoughWorkersRegister) {
  WorkerPool pool(absl::Hours(1));
  RegisterWorkers(pool, 1);
  FakeClientFactory factory;
  JobManager jobs(CoordinatorOptions(), &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs.Submit(Spec(2)));
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_THAT(job.waiting_for(), HasSubstr("2 cpu workers"));
  ASSERT_OK_AND_ASSIGN(v1::Job got, jobs.Get(job.id()));
  EXPECT_EQ(got.state(), v1::QUEUED);
  EXPECT_EQ(got.waiting_for(), job.waiting_for());

  RegisterWorkers(pool, 1, /*first=*/1);
  jobs.Kick();
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(jobs, job.id()));
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
  EXPECT_EQ(done.waiting_for(), "");
  EXPECT_THAT(done.workers(), ElementsAre("w0000", "w0001"));
}

TEST(JobManager, TheQueueIsBoundedAndListsNewestFirst) {
  WorkerPool pool(absl::Hours(1));
  FakeClientFactory factory;
  CoordinatorOptions options;
  options.max_queued_jobs = 2;
  JobManager jobs(options, &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job a, jobs.Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job b, jobs.Submit(Spec(1)));
  EXPECT_THAT(jobs.Submit(Spec(1)),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("max_queued_jobs")));
  ASSERT_OK(jobs.Cancel(a.id()).status());
  ASSERT_OK_AND_ASSIGN(v1::Job c, jobs.Submit(Spec(1)));

  EXPECT_THAT(Ids(jobs.List({})), ElementsAre(c.id(), b.id(), a.id()));
  v1::ListJobsRequest queued;
  queued.add_states(v1::QUEUED);
  EXPECT_THAT(Ids(jobs.List(queued)), ElementsAre(c.id(), b.id()));
  queued.set_limit(1);
  EXPECT_THAT(Ids(jobs.List(queued)), ElementsAre(c.id()));
}

TEST(JobManager, SubmitRejectsACheckpointPathOutsideTheCheckpointFolder) {
  WorkerPool pool(absl::Hours(1));
  FakeClientFactory factory;
  JobManager jobs(CoordinatorOptions(), &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  for (const char* path : {"/etc/model.ckpt", "../model.ckpt", "a/../../model.ckpt"}) {
    v1::JobSpec spec = Spec(1);
    spec.set_checkpoint_path(path);
    EXPECT_THAT(jobs.Submit(spec),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("checkpoint_path")));
  }
  EXPECT_THAT(jobs.List({}).jobs(), IsEmpty());
}

TEST(JobManager, CancelOfAQueuedJobIsImmediateAndOfAnEndedOneFailedPrecondition) {
  WorkerPool pool(absl::Hours(1));
  FakeClientFactory factory;
  JobManager jobs(CoordinatorOptions(), &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs.Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job cancelled, jobs.Cancel(job.id()));
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_EQ(cancelled.failure_code(), "CANCELLED");
  EXPECT_EQ(cancelled.failure_reason(), "cancelled by the user");
  std::vector<v1::JobState> states;
  ASSERT_OK_AND_ASSIGN(v1::Job got, AwaitEnd(jobs, job.id(), &states));
  EXPECT_EQ(got.state(), v1::CANCELLED);
  EXPECT_THAT(states, ElementsAre(v1::QUEUED, v1::CANCELLED));
  EXPECT_THAT(jobs.Cancel(job.id()), StatusIs(absl::StatusCode::kFailedPrecondition,
                                              AllOf(HasSubstr(job.id()), HasSubstr("CANCELLED"))));
  EXPECT_THAT(jobs.Cancel("job-999999"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("job-999999")));
}

TEST(JobManager, CancelDuringAHungPrepareEndsTheJobWithinTwoSeconds) {
  WorkerPool pool(absl::Hours(1));
  RegisterWorkers(pool, 2);
  FakeClientFactory factory({FakeWorker{.hang_prepare = true}, FakeWorker{.hang_prepare = true}});
  JobManager jobs(CoordinatorOptions(), &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs.Submit(Spec(2)));
  // Started by Submit itself, so its clients exist (and are this thread's to look at).
  ASSERT_EQ(job.state(), v1::RUNNING);
  ASSERT_EQ(factory.clients.size(), 2u);
  for (FakeClient* c : factory.clients) c->AwaitPrepare();
  const absl::Time t0 = absl::Now();
  ASSERT_OK(jobs.Cancel(job.id()).status());
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(jobs, job.id()));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  EXPECT_EQ(done.state(), v1::CANCELLED);
  EXPECT_EQ(done.failure_reason(), "cancelled by the user");
  EXPECT_THAT(Free(pool), ElementsAre(true, true));
}

TEST(JobManager, JobsOnDisjointWorkersRunAtOnceAndAQueuedOneTakesTheFirstFreed) {
  WorkerPool pool(absl::Hours(1));
  RegisterWorkers(pool, 2);
  FakeClientFactory factory({FakeWorker{.hang_prepare = true}, FakeWorker{.hang_prepare = true}});
  JobManager jobs(CoordinatorOptions(), &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job a, jobs.Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job b, jobs.Submit(Spec(1)));
  ASSERT_EQ(a.state(), v1::RUNNING);
  ASSERT_EQ(b.state(), v1::RUNNING);
  ASSERT_EQ(factory.clients.size(), 2u);
  factory.clients[0]->AwaitPrepare();  // both preparing at once
  factory.clients[1]->AwaitPrepare();
  ASSERT_OK_AND_ASSIGN(v1::Job c, jobs.Submit(Spec(1)));
  EXPECT_EQ(c.state(), v1::QUEUED);
  EXPECT_THAT(c.waiting_for(), HasSubstr("1 free cpu workers"));

  ASSERT_OK(jobs.Cancel(a.id()).status());  // c runs on a's worker, rank 2 of the fakes: echo
  ASSERT_OK_AND_ASSIGN(v1::Job a_done, AwaitEnd(jobs, a.id()));
  EXPECT_EQ(a_done.state(), v1::CANCELLED);
  ASSERT_OK_AND_ASSIGN(v1::Job c_done, AwaitEnd(jobs, c.id()));
  EXPECT_EQ(c_done.state(), v1::SUCCEEDED) << c_done.failure_reason();
  EXPECT_THAT(c_done.workers(), ElementsAre("w0000"));
  ASSERT_OK_AND_ASSIGN(v1::Job b_now, jobs.Get(b.id()));
  EXPECT_EQ(b_now.state(), v1::RUNNING);
}

TEST(JobManager, RecordsSurviveARestart) {
  TempDir tmp;
  CoordinatorOptions options;
  options.records_dir = tmp.Path("jobs");
  WorkerPool pool(absl::Hours(1));
  RegisterWorkers(pool, 2);
  v1::Job done, queued;
  {
    FakeClientFactory factory;
    JobManager jobs(options, &pool, nullptr, &factory);
    ASSERT_OK(jobs.Start());
    ASSERT_OK_AND_ASSIGN(v1::Job a, jobs.Submit(Spec(2)));
    ASSERT_OK_AND_ASSIGN(done, AwaitEnd(jobs, a.id()));
    ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.failure_reason();
    ASSERT_OK_AND_ASSIGN(queued, jobs.Submit(Spec(4, "req-queued")));
    ASSERT_EQ(queued.state(), v1::QUEUED);
  }
  FakeClientFactory factory;
  JobManager jobs(options, &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job a, jobs.Get(done.id()));
  EXPECT_EQ(a.state(), v1::SUCCEEDED);
  EXPECT_EQ(a.step(), 6);
  ASSERT_OK_AND_ASSIGN(v1::Job b, AwaitEnd(jobs, queued.id()));  // its watchers see the end
  EXPECT_EQ(b.state(), v1::FAILED);
  EXPECT_EQ(b.failure_code(), "UNAVAILABLE");
  EXPECT_EQ(b.failure_reason(), "the coordinator restarted while the job was QUEUED");
  ASSERT_OK_AND_ASSIGN(v1::Job again, jobs.Submit(Spec(4, "req-queued")));
  EXPECT_EQ(again.id(), queued.id());
  EXPECT_EQ(again.state(), v1::FAILED);

  ASSERT_OK_AND_ASSIGN(v1::Job c, jobs.Submit(Spec(2)));
  EXPECT_NE(c.id(), done.id());
  EXPECT_NE(c.id(), queued.id());
  ASSERT_OK_AND_ASSIGN(v1::Job c_done, AwaitEnd(jobs, c.id()));
  EXPECT_EQ(c_done.state(), v1::SUCCEEDED) << c_done.failure_reason();
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Job> on_disk, JobRecords(options.records_dir).Load());
  ASSERT_EQ(on_disk.size(), 3u);
  EXPECT_EQ(on_disk[1].id(), queued.id());
  EXPECT_EQ(on_disk[1].state(), v1::FAILED);  // the new state was written
}

TEST(JobManager, ARequestIdSeenBeforeReturnsItsJob) {
  WorkerPool pool(absl::Hours(1));
  FakeClientFactory factory;
  CoordinatorOptions options;
  options.max_queued_jobs = 2;
  JobManager jobs(options, &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job first, jobs.Submit(Spec(1, "req-1")));
  ASSERT_OK_AND_ASSIGN(v1::Job other, jobs.Submit(Spec(1, "req-2")));
  EXPECT_NE(other.id(), first.id());
  // The queue is full, yet a retry of a submitted job gets that job.
  ASSERT_OK_AND_ASSIGN(v1::Job retry, jobs.Submit(Spec(1, "req-1")));
  EXPECT_EQ(retry.id(), first.id());
  EXPECT_EQ(jobs.List({}).jobs_size(), 2);
}

TEST(JobManager, WatchersAreLimitedPerJobAndInAll) {
  WorkerPool pool(absl::Hours(1));
  FakeClientFactory factory;
  CoordinatorOptions options;
  options.max_watchers_per_job = 1;
  options.max_watchers = 2;
  JobManager jobs(options, &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  ASSERT_OK_AND_ASSIGN(v1::Job a, jobs.Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job b, jobs.Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(v1::Job c, jobs.Submit(Spec(1)));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobManager::Watch> wa, jobs.StartWatch(a.id()));
  EXPECT_THAT(jobs.StartWatch(a.id()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("watchers")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobManager::Watch> wb, jobs.StartWatch(b.id()));
  EXPECT_THAT(jobs.StartWatch(c.id()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("watchers")));
  wa.reset();
  ASSERT_OK_AND_ASSIGN(wa, jobs.StartWatch(a.id()));
  EXPECT_THAT(jobs.StartWatch("job-999999"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("job-999999")));
}

TEST(JobManager, FinishedJobsBeyondMaxJobsKeptAreForgottenWithTheirRecords) {
  TempDir tmp;
  CoordinatorOptions options;
  options.records_dir = tmp.Path("jobs");
  options.max_jobs_kept = 2;
  WorkerPool pool(absl::Hours(1));
  FakeClientFactory factory;
  v1::Job a, b, c;
  {
    JobManager jobs(options, &pool, nullptr, &factory);
    ASSERT_OK(jobs.Start());
    ASSERT_OK_AND_ASSIGN(a, jobs.Submit(Spec(1)));
    ASSERT_OK(jobs.Cancel(a.id()).status());
    ASSERT_OK_AND_ASSIGN(b, jobs.Submit(Spec(1)));
    ASSERT_OK(jobs.Cancel(b.id()).status());
    ASSERT_OK_AND_ASSIGN(c, jobs.Submit(Spec(1)));  // a third job: the oldest ended one goes
    EXPECT_THAT(jobs.Get(a.id()), StatusIs(absl::StatusCode::kNotFound, HasSubstr(a.id())));
    EXPECT_THAT(Ids(jobs.List({})), ElementsAre(c.id(), b.id()));
  }
  EXPECT_THAT(tmp.Files("jobs"), UnorderedElementsAre(b.id() + ".json", c.id() + ".json"));
  JobManager jobs(options, &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  EXPECT_THAT(jobs.Get(a.id()), StatusIs(absl::StatusCode::kNotFound, HasSubstr(a.id())));
  EXPECT_THAT(Ids(jobs.List({})), ElementsAre(c.id(), b.id()));
}

TEST(JobManager, AWorkerLostByHeartbeatFailsItsJobWithUnavailableNamingIt) {
  WorkerPool pool(absl::Milliseconds(400));  // and no worker ever heartbeats
  FakeClientFactory factory(
      {FakeWorker{.steps = Behaviour::kSilent}, FakeWorker{.steps = Behaviour::kSilent}});
  JobManager jobs(CoordinatorOptions(), &pool, nullptr, &factory);
  ASSERT_OK(jobs.Start());
  RegisterWorkers(pool, 2);
  ASSERT_OK_AND_ASSIGN(v1::Job job, jobs.Submit(Spec(2)));
  ASSERT_EQ(job.state(), v1::RUNNING);  // before its workers' heartbeats lapse
  ASSERT_OK_AND_ASSIGN(v1::Job done, AwaitEnd(jobs, job.id()));
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_EQ(done.failure_code(), "UNAVAILABLE");
  EXPECT_THAT(done.failure_reason(),
              AllOf(HasSubstr("worker w0000 at fake:0"), HasSubstr("heartbeats")));
  EXPECT_THAT(pool.List(), IsEmpty());
}

}  // namespace
}  // namespace lockstep::testing
