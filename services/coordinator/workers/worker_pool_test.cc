// Tests of WorkerPool: registration, heartbeats and their lapse (with explicit times, no
// waiting), identities bound to ids and addresses, revocation (persisted), assignment to
// jobs, release and drop.
#include "services/coordinator/workers/worker_pool.h"

#include <filesystem>
#include <fstream>

#include "core/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::_;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr absl::Duration kTimeout = absl::Seconds(10);

// A moment strictly after every clock reading taken before the call and strictly before
// every one taken after it (the clock is read until it moves on, both sides).
absl::Time Tick() {
  const absl::Time before = absl::Now();
  absl::Time t = absl::Now();
  while (t <= before) t = absl::Now();
  while (absl::Now() <= t) {
  }
  return t;
}

std::vector<std::string> Ids(const std::vector<WorkerView>& views) {
  std::vector<std::string> ids;
  for (const WorkerView& v : views) ids.push_back(v.id);
  return ids;
}

std::vector<bool> Free(const std::vector<WorkerView>& views) {
  std::vector<bool> free;
  for (const WorkerView& v : views) free.push_back(v.free);
  return free;
}

TEST(WorkerPool, RegisterGivesIdsInRegistrationOrder) {
  WorkerPool pool(kTimeout, "");
  EXPECT_EQ(pool.Register("10.0.0.1:7000", "cpu", "alpha", 4), "w0000");
  EXPECT_EQ(pool.Register("10.0.0.2:7000", "cuda:0", "beta", 8), "w0001");
  EXPECT_EQ(pool.Register("10.0.0.3:7000", "cpu", "gamma", 2), "w0002");
  const std::vector<WorkerView> views = pool.Views();
  ASSERT_EQ(views.size(), 3u);
  EXPECT_EQ(views[1].id, "w0001");
  EXPECT_EQ(views[1].device, "cuda:0");
  EXPECT_EQ(views[1].threads, 8u);
  EXPECT_THAT(Free(views), ElementsAre(true, true, true));
}

TEST(WorkerPool, AQuarantinedWorkerGetsNoWorkEvenAfterRegisteringAgain) {
  WorkerPool pool(kTimeout, "");
  const std::string liar = pool.Register("10.0.0.1:50052", "cpu", "a", 1);
  const std::string honest = pool.Register("10.0.0.2:50052", "cpu", "b", 1);
  pool.Quarantine(liar, "audit of step 5 failed");
  pool.Quarantine("w9999", "unknown ids are ignored");
  EXPECT_THAT(Ids(pool.Views()), ElementsAre(honest));  // the scheduler never sees it
  EXPECT_THAT(pool.Assign("job-1", {liar}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is quarantined")));
  const std::vector<v1::WorkerInfo> listed = pool.List();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].quarantined(), "audit of step 5 failed");
  EXPECT_EQ(listed[1].quarantined(), "");
  // Restarted (or dropped by the job's recovery), it registers again from its address:
  // still quarantined.
  pool.Drop(liar);
  const std::string again = pool.Register("10.0.0.1:50052", "cpu", "a", 1);
  EXPECT_NE(again, liar);
  EXPECT_THAT(Ids(pool.Views()), ElementsAre(honest));
  EXPECT_THAT(pool.Assign("job-2", {again}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is quarantined")));
  // With identities, the identity is what stays quarantined, from any address.
  ASSERT_OK_AND_ASSIGN(std::string signed_liar,
                       pool.RegisterAs("worker-c", "10.0.0.3:50052", "cpu", "c", 1));
  pool.Quarantine(signed_liar, "audit of step 10 failed");
  pool.Drop(signed_liar);
  ASSERT_OK_AND_ASSIGN(std::string moved,
                       pool.RegisterAs("worker-c", "10.0.0.4:50052", "cpu", "c", 1));
  EXPECT_THAT(Ids(pool.Views()), ElementsAre(honest));
  EXPECT_THAT(pool.Assign("job-3", {moved}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is quarantined")));
}

TEST(WorkerPool, ListDescribesEveryWorker) {
  WorkerPool pool(kTimeout, "");
  const absl::Time before = absl::Now();
  pool.Register("10.0.0.1:7000", "cpu", "alpha", 4);
  pool.Register("10.0.0.2:7000", "cuda:1", "beta", 8);
  ASSERT_OK(pool.Assign("job-000001", {"w0001"}).status());
  const std::vector<v1::WorkerInfo> list = pool.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id(), "w0000");
  EXPECT_EQ(list[0].address(), "10.0.0.1:7000");
  EXPECT_EQ(list[0].device(), "cpu");
  EXPECT_EQ(list[0].name(), "alpha");
  EXPECT_EQ(list[0].threads(), 4u);
  EXPECT_EQ(list[0].job_id(), "");
  EXPECT_GE(list[0].last_heartbeat_unix_ms(), absl::ToUnixMillis(before));
  EXPECT_EQ(list[1].id(), "w0001");
  EXPECT_EQ(list[1].job_id(), "job-000001");
}

TEST(WorkerPool, ReRegisteringFromTheSameAddressReplacesTheOldEntryAndReportsItLost) {
  WorkerPool pool(kTimeout, "");
  pool.Register("a:1", "cpu", "first", 1);
  pool.Register("a:2", "cpu", "other", 1);
  ASSERT_OK(pool.Assign("job-000001", {"w0000"}).status());
  EXPECT_EQ(pool.Register("a:1", "cpu", "restarted", 1), "w0002");
  EXPECT_THAT(Ids(pool.Views()), ElementsAre("w0001", "w0002"));
  EXPECT_THAT(Free(pool.Views()), ElementsAre(true, true));

  const std::vector<LostWorker> lost = pool.TakeLost(absl::Now());
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].worker.id, "w0000");
  EXPECT_EQ(lost[0].worker.job_id, "job-000001");  // so that its job can fail
  EXPECT_THAT(lost[0].reason, AllOf(HasSubstr("w0000"), HasSubstr("a:1")));
  EXPECT_THAT(pool.TakeLost(absl::Now()), IsEmpty());  // taken once
  EXPECT_THAT(pool.Heartbeat("w0000"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("w0000")));
}

TEST(WorkerPool, HeartbeatOfAnUnknownWorkerIsNotFound) {
  WorkerPool pool(kTimeout, "");
  const std::string id = pool.Register("a:1", "cpu", "alpha", 1);
  ASSERT_OK(pool.Heartbeat(id));
  EXPECT_THAT(pool.Heartbeat("w0042"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("w0042")));
}

TEST(WorkerPool, AWorkerWhoseHeartbeatsLapsedIsLostOnceAndMustRegisterAgain) {
  WorkerPool pool(kTimeout, "");
  pool.Register("a:0", "cpu", "silent", 1);
  pool.Register("a:1", "cpu", "beating", 1);
  ASSERT_OK(pool.Assign("job-000007", {"w0000"}).status());
  const absl::Time mark = Tick();
  ASSERT_OK(pool.Heartbeat("w0001"));
  EXPECT_THAT(pool.TakeLost(mark), IsEmpty());
  EXPECT_THAT(pool.TakeLost(absl::Now() + kTimeout / 2), IsEmpty());

  // kTimeout after the mark: w0000 was last seen before it, w0001 after it.
  const std::vector<LostWorker> lost = pool.TakeLost(mark + kTimeout);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].worker.id, "w0000");
  EXPECT_EQ(lost[0].worker.address, "a:0");
  EXPECT_EQ(lost[0].worker.job_id, "job-000007");
  EXPECT_THAT(lost[0].reason, AllOf(HasSubstr("w0000"), HasSubstr("heartbeat")));
  EXPECT_THAT(Ids(pool.Views()), ElementsAre("w0001"));
  EXPECT_THAT(pool.TakeLost(mark + kTimeout), IsEmpty());
  EXPECT_THAT(pool.Heartbeat("w0000"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("w0000")));
  EXPECT_EQ(pool.Register("a:0", "cpu", "silent", 1), "w0002");
}

TEST(WorkerPool, AssignGivesTheWorkersToTheJob) {
  WorkerPool pool(kTimeout, "");
  for (const char* a : {"a:0", "a:1", "a:2"}) pool.Register(a, "cpu", a, 1);
  ASSERT_OK_AND_ASSIGN(std::vector<PoolWorker> got, pool.Assign("job-1", {"w0002", "w0000"}));
  ASSERT_EQ(got.size(), 2u);  // in the order asked for: rank order
  EXPECT_EQ(got[0].id, "w0002");
  EXPECT_EQ(got[0].address, "a:2");
  EXPECT_EQ(got[0].job_id, "job-1");
  EXPECT_EQ(got[1].id, "w0000");
  EXPECT_THAT(Free(pool.Views()), ElementsAre(false, true, false));
}

TEST(WorkerPool, AssignOfABusyOrGoneWorkerIsFailedPreconditionAndTakesNone) {
  WorkerPool pool(kTimeout, "");
  for (const char* a : {"a:0", "a:1", "a:2"}) pool.Register(a, "cpu", a, 1);
  ASSERT_OK(pool.Assign("job-1", {"w0001"}).status());
  EXPECT_THAT(pool.Assign("job-2", {"w0000", "w0001"}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("w0001")));
  EXPECT_THAT(pool.Assign("job-2", {"w0002", "w0099"}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("w0099")));
  EXPECT_THAT(Free(pool.Views()), ElementsAre(true, false, true));
  EXPECT_EQ(pool.List()[1].job_id(), "job-1");
  ASSERT_OK(pool.Assign("job-2", {"w0000", "w0002"}).status());
}

TEST(WorkerPool, ReleaseFreesOnlyThatJobsWorkers) {
  WorkerPool pool(kTimeout, "");
  for (const char* a : {"a:0", "a:1", "a:2"}) pool.Register(a, "cpu", a, 1);
  ASSERT_OK(pool.Assign("job-1", {"w0000", "w0002"}).status());
  ASSERT_OK(pool.Assign("job-2", {"w0001"}).status());
  pool.Drop("w0002");  // one of job-1's workers is gone meanwhile
  pool.Release("job-1");
  EXPECT_THAT(Ids(pool.Views()), ElementsAre("w0000", "w0001"));
  EXPECT_THAT(Free(pool.Views()), ElementsAre(true, false));
  pool.Release("job-unknown");
  EXPECT_THAT(Free(pool.Views()), ElementsAre(true, false));
}

TEST(WorkerPool, ALeavingWorkerGetsNoWorkIsListedAsLeavingAndLeavesWithoutBeingLost) {
  WorkerPool pool(kTimeout, "");
  for (const char* a : {"a:0", "a:1", "a:2"}) pool.Register(a, "cpu", a, 1);
  ASSERT_OK(pool.Assign("job-1", {"w0000", "w0001"}).status());
  // The first mark names its job; later ones (every heartbeat while it leaves) nothing.
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> job, pool.MarkLeaving("w0001"));
  EXPECT_EQ(job, "job-1");
  ASSERT_OK_AND_ASSIGN(job, pool.MarkLeaving("w0001"));
  EXPECT_EQ(job, std::nullopt);
  ASSERT_OK_AND_ASSIGN(job, pool.MarkLeaving("w0002"));
  EXPECT_EQ(job, "");
  EXPECT_THAT(pool.MarkLeaving("w0009"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("w0009")));
  EXPECT_THAT(pool.MarkLeaving("w0000", "someone-else"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("another identity")));
  EXPECT_THAT(Ids(pool.Views()), ElementsAre("w0000"));  // the scheduler never sees them
  pool.Free({"w0001"});                                  // its job went on without it
  EXPECT_THAT(pool.Assign("job-2", {"w0001"}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("w0001 is leaving")));
  const std::vector<v1::WorkerInfo> list = pool.List();
  EXPECT_FALSE(list[0].leaving());
  EXPECT_TRUE(list[1].leaving());
  EXPECT_EQ(list[1].job_id(), "");
  EXPECT_EQ(list[0].job_id(), "job-1");
  // Their heartbeats stop: the free leaving ones left (not lost); w0000, with a job, is lost.
  const std::vector<LostWorker> lost = pool.TakeLost(absl::Now() + 2 * kTimeout);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].worker.id, "w0000");
  EXPECT_THAT(pool.List(), IsEmpty());
}

TEST(WorkerPool, DropRemovesTheWorkerUntilItRegistersAgain) {
  WorkerPool pool(kTimeout, "");
  pool.Register("a:0", "cpu", "x", 1);
  pool.Register("a:1", "cpu", "y", 1);
  pool.Drop("w0000");
  EXPECT_THAT(Ids(pool.Views()), ElementsAre("w0001"));
  EXPECT_THAT(pool.Heartbeat("w0000"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("w0000")));
  EXPECT_THAT(pool.Assign("job-1", {"w0000"}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("w0000")));
  pool.Drop("w0042");  // unknown: nothing happens
  EXPECT_EQ(pool.Register("a:0", "cpu", "x", 1), "w0002");
  EXPECT_THAT(Ids(pool.Views()), ElementsAre("w0001", "w0002"));
  EXPECT_EQ(pool.List().size(), 2u);
}

TEST(WorkerPool, IdsOfAnotherPoolNeverMatch) {
  // A restarted coordinator's pool: a worker from before the restart is not taken for
  // the one that got its old number.
  WorkerPool before(kTimeout), after(kTimeout);
  const std::string old_id = before.Register("a:0", "cpu", "x", 1);
  const std::string new_id = after.Register("a:1", "cpu", "y", 1);
  EXPECT_THAT(old_id, ::testing::StartsWith("w0000-"));
  EXPECT_NE(old_id, new_id);
  EXPECT_THAT(after.Heartbeat(old_id), StatusIs(absl::StatusCode::kNotFound, HasSubstr(old_id)));
}

TEST(WorkerPool, OnlyTheIdentityThatRegisteredAnIdHeartbeatsForIt) {
  WorkerPool pool(kTimeout, "");
  ASSERT_OK_AND_ASSIGN(const std::string id, pool.RegisterAs("worker-0", "a:0", "cpu", "x", 1));
  ASSERT_OK(pool.Heartbeat(id, "worker-0"));
  EXPECT_THAT(pool.Heartbeat(id, "worker-1"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr(id)));
  EXPECT_THAT(pool.Heartbeat(id), StatusIs(absl::StatusCode::kPermissionDenied, _));
  EXPECT_THAT(pool.CheckIdentity(id, "worker-1"), StatusIs(absl::StatusCode::kPermissionDenied, _));
  ASSERT_OK(pool.CheckIdentity(id, "worker-0"));
}

TEST(WorkerPool, AnAddressHeldByAnotherLiveIdentityCannotBeTakenOver) {
  WorkerPool pool(kTimeout, "");
  ASSERT_OK_AND_ASSIGN(const std::string victim,
                       pool.RegisterAs("worker-0", "10.0.0.1:7000", "cpu", "victim", 1));
  ASSERT_OK(pool.Assign("job-1", {victim}).status());
  EXPECT_THAT(pool.RegisterAs("rogue", "10.0.0.1:7000", "cpu", "rogue", 1),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("10.0.0.1:7000")));
  EXPECT_THAT(Ids(pool.Views()), ElementsAre(victim));
  EXPECT_THAT(pool.TakeLost(absl::Now()), IsEmpty());  // the victim's job goes on
  // The worker itself, restarted, takes its address back; so it does from a new port.
  ASSERT_OK_AND_ASSIGN(const std::string again,
                       pool.RegisterAs("worker-0", "10.0.0.1:7000", "cpu", "victim", 1));
  ASSERT_OK_AND_ASSIGN(const std::string moved,
                       pool.RegisterAs("worker-0", "10.0.0.1:7001", "cpu", "victim", 1));
  EXPECT_THAT(Ids(pool.Views()), ElementsAre(moved));
  const std::vector<LostWorker> lost = pool.TakeLost(absl::Now());
  ASSERT_EQ(lost.size(), 2u);
  EXPECT_EQ(lost[0].worker.id, victim);
  EXPECT_EQ(lost[1].worker.id, again);
}

TEST(WorkerPool, ARevokedIdentityIsDroppedReportedLostAndRefusedAlsoByTheNextPool) {
  const std::string file = ::testing::TempDir() + "/revoked-workers-test";
  std::filesystem::remove(file);
  {
    WorkerPool pool(kTimeout, "");
    ASSERT_OK(pool.UseRevocationFile(file));
    ASSERT_OK_AND_ASSIGN(const std::string id, pool.RegisterAs("worker-0", "a:0", "cpu", "x", 1));
    ASSERT_OK(pool.RegisterAs("worker-1", "a:1", "cpu", "y", 1).status());
    ASSERT_OK(pool.Assign("job-3", {id}).status());
    EXPECT_EQ(pool.Revoke(id).value_or(""), "worker-0");
    const std::vector<LostWorker> lost = pool.TakeLost(absl::Now());
    ASSERT_EQ(lost.size(), 1u);
    EXPECT_EQ(lost[0].worker.job_id, "job-3");  // so that its job recovers
    EXPECT_THAT(lost[0].reason, AllOf(HasSubstr(id), HasSubstr("revoked")));
    EXPECT_THAT(pool.Heartbeat(id, "worker-0"), StatusIs(absl::StatusCode::kNotFound, _));
    EXPECT_THAT(pool.RegisterAs("worker-0", "a:0", "cpu", "x", 1),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("worker-0 is revoked")));
    EXPECT_TRUE(pool.IsRevoked("worker-0"));
    EXPECT_FALSE(pool.IsRevoked("worker-1"));
    // An identity not registered now (a stolen certificate) can be revoked by name.
    EXPECT_EQ(pool.Revoke("worker-7").value_or(""), "worker-7");
    EXPECT_THAT(pool.Revoke("no such/worker"), StatusIs(absl::StatusCode::kNotFound, _));
    const std::string plain = pool.Register("a:9", "cpu", "plain", 1);
    EXPECT_THAT(pool.Revoke(plain), StatusIs(absl::StatusCode::kFailedPrecondition, _));
  }
  WorkerPool restarted(kTimeout, "");
  ASSERT_OK(restarted.UseRevocationFile(file));
  for (const char* identity : {"worker-0", "worker-7"}) {
    EXPECT_THAT(restarted.RegisterAs(identity, "b:0", "cpu", "x", 1),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("revoked")));
  }
  ASSERT_OK(restarted.RegisterAs("worker-1", "b:1", "cpu", "y", 1).status());
  EXPECT_EQ(std::filesystem::status(file).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST(WorkerPool, AMalformedRevocationFileIsInvalidArgumentNamingIt) {
  const std::string file = ::testing::TempDir() + "/revoked-workers-bad";
  std::ofstream(file) << "worker-0\nnot a/name\n";
  WorkerPool pool(kTimeout, "");
  EXPECT_THAT(pool.UseRevocationFile(file),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(file + ":2")));
}

}  // namespace
}  // namespace lockstep::testing
