#include "core/cancel.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using testing::StatusIs;

TEST(CancelToken, IsStickyAndKeepsTheFirstReason) {
  CancelToken t;
  EXPECT_FALSE(t.cancelled());
  ASSERT_OK(t.status());
  t.Cancel(absl::CancelledError("by the user"));
  t.Cancel(absl::UnavailableError("worker lost"));
  EXPECT_TRUE(t.cancelled());
  EXPECT_THAT(t.status(), StatusIs(absl::StatusCode::kCancelled, "by the user"));
}

TEST(CancelToken, CallbacksRunOnCancelAndAtOnceWhenAlreadyCancelled) {
  CancelToken t;
  int runs = 0;
  CancelToken::Callback a = t.OnCancel([&] { ++runs; });
  EXPECT_EQ(runs, 0);
  t.Cancel(absl::OkStatus());  // an OK reason becomes CANCELLED
  EXPECT_EQ(runs, 1);
  EXPECT_THAT(t.status(), StatusIs(absl::StatusCode::kCancelled, "cancelled"));
  CancelToken::Callback b = t.OnCancel([&] { ++runs; });
  EXPECT_EQ(runs, 2);
}

TEST(CancelToken, AnUnregisteredCallbackNeverRuns) {
  CancelToken t;
  bool ran = false;
  {
    CancelToken::Callback c = t.OnCancel([&] { ran = true; });
  }
  t.Cancel(absl::CancelledError("x"));
  EXPECT_FALSE(ran);
}

TEST(CancelToken, UnregisteringWaitsForARunningCallback) {
  CancelToken t;
  absl::Notification started, release;
  std::atomic<bool> finished{false};
  auto c = std::make_unique<CancelToken::Callback>(t.OnCancel([&] {
    started.Notify();
    release.WaitForNotification();
    finished = true;
  }));
  std::thread canceller([&] { t.Cancel(absl::CancelledError("x")); });
  started.WaitForNotification();
  std::thread unregister([&] {
    c.reset();  // must not return before the callback has
    EXPECT_TRUE(finished);
  });
  release.Notify();
  unregister.join();
  canceller.join();
}

TEST(CancelToken, UnregisteringWaitsForARunningCallbackAtMostItsBound) {
  CancelToken t(absl::Milliseconds(20));
  absl::Notification started, release;
  std::atomic<bool> finished{false};
  auto c = std::make_unique<CancelToken::Callback>(t.OnCancel([&] {
    started.Notify();
    release.WaitForNotification();  // overruns the bound: returns only once released below
    finished = true;
  }));
  std::thread canceller([&] { t.Cancel(absl::CancelledError("x")); });
  started.WaitForNotification();
  c.reset();  // returns although the callback still runs
  EXPECT_FALSE(finished);
  release.Notify();
  canceller.join();
  EXPECT_TRUE(finished);
}

TEST(CancelToken, ACallbackMayUnregisterItselfOrOthers) {
  CancelToken t;
  std::unique_ptr<CancelToken::Callback> other;
  CancelToken::Callback first = t.OnCancel([&] { other.reset(); });
  other = std::make_unique<CancelToken::Callback>(t.OnCancel([] {}));
  t.Cancel(absl::CancelledError("x"));
  EXPECT_EQ(other, nullptr);
}

TEST(CancelToken, WaitForReturnsWhenCancelledOrTimedOut) {
  CancelToken t;
  EXPECT_FALSE(t.WaitFor(absl::Milliseconds(1)));
  std::thread canceller([&] { t.Cancel(absl::CancelledError("x")); });
  EXPECT_TRUE(t.WaitFor(absl::Minutes(1)));
  canceller.join();
}

}  // namespace
}  // namespace lockstep
