// RankCalls: answers given by the clients' own threads and by blocking calls on threads of
// their own, gathered in call order; a call unanswered by the bound is DEADLINE_EXCEEDED,
// and its answer coming later touches nothing of the caller's.
#include "services/coordinator/jobs/rank_calls.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "core/testing.h"

namespace lockstep {
namespace {

using testing::StatusIs;

TEST(RankCalls, GathersAsynchronousAndBlockingAnswersInOrder) {
  std::vector<std::thread> answering;  // a client's own threads
  {
    RankCalls<absl::StatusOr<int>> calls(3);
    for (int i = 0; i < 3; ++i) {
      const bool asynchronous = i != 1;
      calls.Start(
          i,
          [&, i, asynchronous](RankCalls<absl::StatusOr<int>>::Done done) {
            if (!asynchronous) return false;
            answering.emplace_back([i, done = std::move(done)] { done(10 * i); });
            return true;
          },
          [i] { return absl::StatusOr<int>(10 * i + 1); });
    }
    std::vector<absl::StatusOr<int>> got = calls.Wait(absl::Minutes(1));
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(*got[0], 0);
    EXPECT_EQ(*got[1], 11);  // the blocking call's
    EXPECT_EQ(*got[2], 20);
  }
  for (std::thread& t : answering) t.join();
}

TEST(RankCalls, SeenIsShownEachAnswerFirst) {
  RankCalls<absl::Status> calls(2);
  std::vector<absl::Status> seen(2);
  for (int i = 0; i < 2; ++i) {
    calls.Start(
        i,
        [i](RankCalls<absl::Status>::Done done) {
          if (i == 1) return false;
          done(absl::UnavailableError("gone"));
          return true;
        },
        [] { return absl::OkStatus(); }, [&seen, i](const absl::Status& st) { seen[i] = st; });
  }
  std::vector<absl::Status> got = calls.Wait(absl::Minutes(1));
  EXPECT_THAT(got[0], StatusIs(absl::StatusCode::kUnavailable, "gone"));
  EXPECT_TRUE(got[1].ok());
  EXPECT_EQ(seen, got);
}

TEST(RankCalls, AnUnansweredCallIsDeadlineExceededAndItsLateAnswerIsDropped) {
  absl::Notification waited;
  std::thread late;
  {
    RankCalls<absl::StatusOr<int>> calls(2);
    calls.Start(
        0,
        [](RankCalls<absl::StatusOr<int>>::Done done) {
          done(7);
          return true;
        },
        [] { return absl::StatusOr<int>(0); });
    calls.Start(
        1,
        [&](RankCalls<absl::StatusOr<int>>::Done done) {
          late = std::thread([&waited, done = std::move(done)] {
            waited.WaitForNotificationWithTimeout(absl::Minutes(1));
            done(8);  // after the caller gave up, and after its RankCalls went
          });
          return true;
        },
        [] { return absl::StatusOr<int>(0); });
    std::vector<absl::StatusOr<int>> got = calls.Wait(absl::Milliseconds(50));
    EXPECT_EQ(*got[0], 7);
    EXPECT_THAT(got[1], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                 ::testing::HasSubstr("no answer within 50ms")));
  }
  waited.Notify();
  late.join();
}

}  // namespace
}  // namespace lockstep
