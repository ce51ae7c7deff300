// Tests of KvTable: namespaces (who may use them, their budgets, their end), values, and
// asynchronous waits ended by the last key, their deadline (the timer thread), CancelWait,
// their namespace's end or the table's destruction.
#include "services/coordinator/workers/kv_table.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::_;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

MATCHER_P(IsOkAndHoldsValues, matcher, "") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(matcher, *arg, result_listener);
}

constexpr absl::Duration kPatience = absl::Seconds(10);  // for what should take milliseconds

// Records one waiter's outcome and how many times it was called back.
struct Outcome {
  absl::Mutex mu;
  int calls ABSL_GUARDED_BY(mu) = 0;
  absl::StatusOr<std::vector<std::string>> result ABSL_GUARDED_BY(mu) = absl::UnknownError("");
  absl::Notification done;

  KvTable::Done Callback() {
    return [this](absl::StatusOr<std::vector<std::string>> r) {
      {
        absl::MutexLock lock(&mu);
        result = std::move(r);
        if (++calls > 1) return;
      }
      done.Notify();
    };
  }
  absl::StatusOr<std::vector<std::string>> Await() {
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(kPatience)) << "the waiter never ended";
    absl::MutexLock lock(&mu);
    return result;
  }
  int Calls() {
    absl::MutexLock lock(&mu);
    return calls;
  }
};

TEST(KvTable, SetsAndGetsValuesAndGetOfAMissingKeyIsNotFound) {
  KvTable kv;
  kv.Open("job-1", "jobs/1/", {});
  ASSERT_OK(kv.Set("jobs/1/a", "one"));
  ASSERT_OK(kv.Set("jobs/1/a", "uno"));
  EXPECT_EQ(kv.Get("jobs/1/a").value_or(""), "uno");
  EXPECT_THAT(kv.Get("jobs/1/b"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("jobs/1/b")));
}

TEST(KvTable, ANewKeyPastTheJobsKeyBudgetIsResourceExhaustedButAnUpdateIsNot) {
  KvTable kv(/*max_keys_per_job=*/2, /*max_bytes_per_job=*/1000);
  kv.Open("job-1", "", {});
  ASSERT_OK(kv.Set("a", "1"));
  ASSERT_OK(kv.Set("b", "2"));
  EXPECT_THAT(kv.Set("c", "3"),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("job job-1")));
  EXPECT_THAT(kv.Get("c"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("c")));
  ASSERT_OK(kv.Set("a", "11"));
  EXPECT_EQ(kv.Get("a").value_or(""), "11");
}

TEST(KvTable, PastTheJobsByteBudgetASetIsResourceExhaustedAndChangesNothing) {
  KvTable kv(/*max_keys_per_job=*/100, /*max_bytes_per_job=*/10);
  kv.Open("job-1", "", {});
  ASSERT_OK(kv.Set("k", "123456789"));  // 10 bytes with its key
  EXPECT_THAT(kv.Set("j", "x"),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("job job-1")));
  EXPECT_THAT(kv.Set("k", "1234567890"), StatusIs(absl::StatusCode::kResourceExhausted, _));
  EXPECT_EQ(kv.Get("k").value_or(""), "123456789");
  // Replacing a value counts only the new one.
  ASSERT_OK(kv.Set("k", "12"));
  ASSERT_OK(kv.Set("j", "xxxx"));
}

TEST(KvTable, KeysInNoOpenNamespaceAreRefusedAndNeverStored) {
  KvTable kv;
  EXPECT_THAT(kv.Set("junk/0", "x"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("no running job")));
  kv.Open("job-1", "jobs/job-1/1-secret/", {});
  // Without the attempt's secret part, or under another job's name: refused too.
  EXPECT_THAT(kv.Set("jobs/job-1/0", "x"), StatusIs(absl::StatusCode::kPermissionDenied, _));
  EXPECT_THAT(kv.Set("jobs/job-2/1-secret/0", "x"),
              StatusIs(absl::StatusCode::kPermissionDenied, _));
  EXPECT_THAT(kv.Get("junk/0"), StatusIs(absl::StatusCode::kPermissionDenied, _));
  Outcome out;
  kv.WaitAsync({"jobs/job-1/1-secret/a", "junk/0"}, absl::Now() + absl::Minutes(1), out.Callback());
  EXPECT_THAT(out.Await(), StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("junk/0")));
  EXPECT_EQ(kv.keys(), 0u);
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvTable, OnlyTheJobsWorkersMayWriteOrReadItsKeys) {
  KvTable kv;
  kv.Open("job-1", "jobs/job-1/1-s/", {"worker-0", "worker-1"});
  ASSERT_OK(kv.Set("jobs/job-1/1-s/rank0", "10.0.0.1:4000", "worker-0"));
  EXPECT_THAT(kv.Set("jobs/job-1/1-s/rank0", "attacker:1", "rogue"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("job-1")));
  EXPECT_THAT(kv.Get("jobs/job-1/1-s/rank0", "rogue"),
              StatusIs(absl::StatusCode::kPermissionDenied, _));
  Outcome rogue;
  kv.WaitAsync({"jobs/job-1/1-s/rank0"}, absl::Now() + absl::Minutes(1), rogue.Callback(), "rogue");
  EXPECT_THAT(rogue.Await(), StatusIs(absl::StatusCode::kPermissionDenied, _));
  EXPECT_EQ(kv.Get("jobs/job-1/1-s/rank0", "worker-1").value_or(""), "10.0.0.1:4000");
}

TEST(KvTable, AJobOverItsBudgetLeavesAnotherJobsBootstrapWorkingAndIsFreedWhenItEnds) {
  KvTable kv(/*max_keys_per_job=*/1000, /*max_bytes_per_job=*/1 << 10);
  kv.Open("job-a", "jobs/job-a/1-x/", {"rogue"});
  kv.Open("job-b", "jobs/job-b/1-y/", {"worker-0", "worker-1"});
  // The rogue fills its own job's namespace to the brim...
  int stored = 0;
  absl::Status full;
  for (; full.ok(); ++stored) {
    full = kv.Set(absl::StrCat("jobs/job-a/1-x/", stored), std::string(100, 'x'), "rogue");
  }
  EXPECT_THAT(full, StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("job job-a")));
  EXPECT_GT(stored, 5);
  // ...and the other job bootstraps as if nothing happened.
  Outcome rank1;
  kv.WaitAsync({"jobs/job-b/1-y/rank0"}, absl::Now() + absl::Minutes(1), rank1.Callback(),
               "worker-1");
  ASSERT_OK(kv.Set("jobs/job-b/1-y/rank0", std::string(900, 'a'), "worker-0"));
  EXPECT_THAT(rank1.Await(), IsOkAndHoldsValues(ElementsAre(std::string(900, 'a'))));
  // Its end frees everything it held.
  kv.Close("job-a");
  EXPECT_EQ(kv.keys(), 1u);
  EXPECT_THAT(kv.Set("jobs/job-a/1-x/0", "x", "rogue"),
              StatusIs(absl::StatusCode::kPermissionDenied, _));
  kv.Close("job-b");
  EXPECT_EQ(kv.keys(), 0u);
}

TEST(KvTable, ANewAttemptDeletesThePreviousAttemptsKeysAndAbortsItsWaiters) {
  KvTable kv(/*max_keys_per_job=*/2, /*max_bytes_per_job=*/1000);
  kv.Open("job-1", "jobs/job-1/1-a/", {});
  ASSERT_OK(kv.Set("jobs/job-1/1-a/rank0", "x"));
  ASSERT_OK(kv.Set("jobs/job-1/1-a/rank1", "x"));
  Outcome waiting;
  kv.WaitAsync({"jobs/job-1/1-a/rank2"}, absl::Now() + absl::Hours(1), waiting.Callback());
  kv.Open("job-1", "jobs/job-1/2-b/", {});
  EXPECT_THAT(waiting.Await(), StatusIs(absl::StatusCode::kAborted, HasSubstr("job-1")));
  EXPECT_THAT(kv.Get("jobs/job-1/1-a/rank0"), StatusIs(absl::StatusCode::kPermissionDenied, _));
  EXPECT_EQ(kv.keys(), 0u);
  // The new attempt has the whole budget.
  ASSERT_OK(kv.Set("jobs/job-1/2-b/rank0", "x"));
  ASSERT_OK(kv.Set("jobs/job-1/2-b/rank1", "x"));
}

TEST(KvTable, AWaitForKeysAlreadySetEndsAtOnceWithTheValuesInKeyOrder) {
  KvTable kv;
  kv.Open("job-1", "", {});
  ASSERT_OK(kv.Set("a", "va"));
  ASSERT_OK(kv.Set("b", "vb"));
  Outcome out;
  kv.WaitAsync({"b", "a"}, absl::Now() + absl::Minutes(1), out.Callback());
  EXPECT_THAT(out.Await(), IsOkAndHoldsValues(ElementsAre("vb", "va")));
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvTable, AWaitEndsWhenItsLastKeyIsSetAndItsCallbackMayUseTheTable) {
  KvTable kv;
  kv.Open("job-1", "", {});
  absl::Notification done;
  absl::StatusOr<std::vector<std::string>> got = absl::UnknownError("not called");
  absl::StatusOr<std::string> inside = absl::UnknownError("not called");
  kv.WaitAsync({"a", "b"}, absl::Now() + absl::Minutes(1), [&](auto r) {
    got = std::move(r);
    inside = kv.Get("b");  // callbacks run without the table's lock
    done.Notify();
  });
  ASSERT_OK(kv.Set("a", "va"));
  EXPECT_FALSE(done.HasBeenNotified());
  EXPECT_EQ(kv.waiters(), 1u);
  ASSERT_OK(kv.Set("b", "vb"));
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_THAT(got, IsOkAndHoldsValues(ElementsAre("va", "vb")));
  EXPECT_EQ(inside.value_or(""), "vb");
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvTable, AtItsDeadlineAWaitIsDeadlineExceededNamingTheMissingKeys) {
  KvTable kv;
  kv.Open("job-1", "", {});
  ASSERT_OK(kv.Set("present-key", "x"));
  Outcome out;
  kv.WaitAsync({"present-key", "missing-1", "missing-2"}, absl::Now() + absl::Milliseconds(50),
               out.Callback());
  EXPECT_THAT(out.Await(), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                    AllOf(HasSubstr("missing-1"), HasSubstr("missing-2"),
                                          Not(HasSubstr("present-key")))));
  EXPECT_EQ(kv.waiters(), 0u);
  ASSERT_OK(kv.Set("missing-1", "late"));  // after the end: no second call
  ASSERT_OK(kv.Set("missing-2", "late"));
  EXPECT_EQ(out.Calls(), 1);
}

TEST(KvTable, AShortDeadlineBehindALongOneStillEndsOnTime) {
  KvTable kv;
  kv.Open("job-1", "", {});
  Outcome long_wait, short_wait;
  const int64_t long_id = kv.WaitAsync({"x"}, absl::Now() + absl::Hours(1), long_wait.Callback());
  kv.WaitAsync({"y"}, absl::Now() + absl::Milliseconds(50), short_wait.Callback());
  EXPECT_THAT(short_wait.Await(), StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("y")));
  EXPECT_FALSE(long_wait.done.HasBeenNotified());
  kv.CancelWait(long_id, absl::CancelledError("test over"));
  EXPECT_THAT(long_wait.Await(), StatusIs(absl::StatusCode::kCancelled, "test over"));
}

TEST(KvTable, CancelWaitEndsAWaitWithTheStatusGivenAndIsANoOpAfterwards) {
  KvTable kv;
  kv.Open("job-1", "", {});
  Outcome out;
  const int64_t id = kv.WaitAsync({"a"}, absl::Now() + absl::Minutes(1), out.Callback());
  EXPECT_EQ(kv.waiters(), 1u);
  kv.CancelWait(id, absl::AbortedError("the job ended"));
  EXPECT_THAT(out.Await(), StatusIs(absl::StatusCode::kAborted, "the job ended"));
  EXPECT_EQ(kv.waiters(), 0u);
  kv.CancelWait(id, absl::InternalError("again"));
  ASSERT_OK(kv.Set("a", "va"));
  EXPECT_EQ(out.Calls(), 1);
  EXPECT_THAT(out.Await(), StatusIs(absl::StatusCode::kAborted, "the job ended"));

  // Cancelling a wait that ended already changes nothing either.
  Outcome ended;
  const int64_t ended_id = kv.WaitAsync({"a"}, absl::Now() + absl::Minutes(1), ended.Callback());
  EXPECT_THAT(ended.Await(), IsOkAndHoldsValues(ElementsAre("va")));
  kv.CancelWait(ended_id, absl::CancelledError("too late"));
  EXPECT_EQ(ended.Calls(), 1);
}

TEST(KvTable, EveryWaiterIsCalledBackExactlyOnceUnderRacingSetsCancelsAndDeadlines) {
  constexpr int kWaiters = 300, kKeys = 20;
  auto kv = std::make_unique<KvTable>();
  kv->Open("job-1", "", {});
  std::vector<std::unique_ptr<Outcome>> outs;
  std::vector<int64_t> ids;
  for (int i = 0; i < kWaiters; ++i) {
    outs.push_back(std::make_unique<Outcome>());
    const absl::Duration wait = i % 3 == 0 ? absl::Milliseconds(i % 7) : absl::Minutes(1);
    ids.push_back(kv->WaitAsync({absl::StrCat("k", i % kKeys), absl::StrCat("k", (i + 1) % kKeys)},
                                absl::Now() + wait, outs.back()->Callback()));
  }
  std::thread setter([&] {
    for (int k = 0; k < kKeys; ++k) ASSERT_OK(kv->Set(absl::StrCat("k", k), "v"));
  });
  std::thread canceller([&] {
    for (int i = 0; i < kWaiters; i += 2) kv->CancelWait(ids[i], absl::CancelledError("c"));
  });
  setter.join();
  canceller.join();
  for (auto& o : outs) ASSERT_TRUE(o->done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(kv->waiters(), 0u);
  kv.reset();
  for (auto& o : outs) EXPECT_EQ(o->Calls(), 1);
}

TEST(KvTable, DestroyingTheTableEndsPendingWaitsWithUnavailable) {
  Outcome a, b;
  {
    KvTable kv;
    kv.Open("job-1", "", {});
    kv.WaitAsync({"a"}, absl::Now() + absl::Hours(1), a.Callback());
    kv.WaitAsync({"b"}, absl::InfiniteFuture(), b.Callback());
    EXPECT_EQ(kv.waiters(), 2u);
  }
  EXPECT_THAT(a.Await(), StatusIs(absl::StatusCode::kUnavailable, _));
  EXPECT_THAT(b.Await(), StatusIs(absl::StatusCode::kUnavailable, _));
  EXPECT_EQ(a.Calls(), 1);
  EXPECT_EQ(b.Calls(), 1);
}

}  // namespace
}  // namespace lockstep::testing
