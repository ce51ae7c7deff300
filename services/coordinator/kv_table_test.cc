// Tests of KvTable: values, limits, ErasePrefix, and asynchronous waits ended by the last
// key, their deadline (the timer thread), CancelWait or the table's destruction.
#include "services/coordinator/kv_table.h"

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
  ASSERT_OK(kv.Set("jobs/1/a", "one"));
  ASSERT_OK(kv.Set("jobs/1/a", "uno"));
  EXPECT_EQ(kv.Get("jobs/1/a").value_or(""), "uno");
  EXPECT_THAT(kv.Get("jobs/1/b"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("jobs/1/b")));
}

TEST(KvTable, ANewKeyPastTheKeyLimitIsResourceExhaustedButAnUpdateIsNot) {
  KvTable kv(/*max_keys=*/2, /*max_bytes=*/1000);
  ASSERT_OK(kv.Set("a", "1"));
  ASSERT_OK(kv.Set("b", "2"));
  EXPECT_THAT(kv.Set("c", "3"), StatusIs(absl::StatusCode::kResourceExhausted, _));
  EXPECT_THAT(kv.Get("c"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("c")));
  ASSERT_OK(kv.Set("a", "11"));
  EXPECT_EQ(kv.Get("a").value_or(""), "11");
}

TEST(KvTable, PastTheByteLimitASetIsResourceExhaustedAndChangesNothing) {
  KvTable kv(/*max_keys=*/100, /*max_bytes=*/10);
  ASSERT_OK(kv.Set("k", "123456789"));  // 10 bytes with its key
  EXPECT_THAT(kv.Set("j", "x"), StatusIs(absl::StatusCode::kResourceExhausted, _));
  EXPECT_THAT(kv.Set("k", "1234567890"), StatusIs(absl::StatusCode::kResourceExhausted, _));
  EXPECT_EQ(kv.Get("k").value_or(""), "123456789");
  // Replacing a value counts only the new one.
  ASSERT_OK(kv.Set("k", "12"));
  ASSERT_OK(kv.Set("j", "xxxx"));
}

TEST(KvTable, ErasePrefixDropsTheKeysUnderItAndFreesTheirBytes) {
  KvTable kv(/*max_keys=*/4, /*max_bytes=*/1000);
  ASSERT_OK(kv.Set("jobs/1/a", "x"));
  ASSERT_OK(kv.Set("jobs/1/b", "x"));
  ASSERT_OK(kv.Set("jobs/10/a", "x"));
  ASSERT_OK(kv.Set("jobs/2/a", "x"));
  kv.ErasePrefix("jobs/1/");
  EXPECT_THAT(kv.Get("jobs/1/a"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("jobs/1/a")));
  EXPECT_THAT(kv.Get("jobs/1/b"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("jobs/1/b")));
  EXPECT_EQ(kv.Get("jobs/10/a").value_or(""), "x");
  EXPECT_EQ(kv.Get("jobs/2/a").value_or(""), "x");
  ASSERT_OK(kv.Set("jobs/3/a", "x"));  // the two keys erased are free again
  ASSERT_OK(kv.Set("jobs/3/b", "x"));
}

TEST(KvTable, AWaitForKeysAlreadySetEndsAtOnceWithTheValuesInKeyOrder) {
  KvTable kv;
  ASSERT_OK(kv.Set("a", "va"));
  ASSERT_OK(kv.Set("b", "vb"));
  Outcome out;
  kv.WaitAsync({"b", "a"}, absl::Now() + absl::Minutes(1), out.Callback());
  EXPECT_THAT(out.Await(), IsOkAndHoldsValues(ElementsAre("vb", "va")));
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvTable, AWaitEndsWhenItsLastKeyIsSetAndItsCallbackMayUseTheTable) {
  KvTable kv;
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
