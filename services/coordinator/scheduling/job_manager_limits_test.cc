// Tests of JobManager's per-user limits and global caps: one user's burst neither blocks
// nor forgets another's jobs, an administrator is exempt from the per-user limits, the
// record cap makes room from the submitter's own jobs, and the running-jobs limit.
#include <map>

#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_test.h"
#include "services/coordinator/scheduling/user_limits.h"

namespace lockstep::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::_;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

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
  ASSERT_EQ(AwaitEnd(old.id()).state(), v1::SUCCEEDED);
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
  EXPECT_EQ(AwaitEnd(a1.id()).state(), v1::CANCELLED);
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

}  // namespace
}  // namespace lockstep::testing
