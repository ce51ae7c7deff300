#include "services/coordinator/jobs/events.h"

#include <thread>

#include "core/testing.h"

namespace lockstep::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<PoolWorker> Workers(std::initializer_list<const char*> ids) {
  std::vector<PoolWorker> out;
  for (const char* id : ids) out.push_back(PoolWorker{.id = id});
  return out;
}

std::vector<std::string> Ids(const std::vector<PoolWorker>& workers) {
  std::vector<std::string> out;
  for (const PoolWorker& w : workers) out.push_back(w.id);
  return out;
}

TEST(JobEventsTest, ALostWorkerEndsOnlyTheAttemptItWorksFor) {
  JobEvents events;
  std::shared_ptr<CancelToken> attempt = events.NewAttempt(Workers({"w0", "w1"}));
  events.LoseWorker("w9", absl::UnavailableError("w9 is gone"));
  EXPECT_FALSE(attempt->cancelled());
  events.LoseWorker("w1", absl::UnavailableError("w1 is gone"));
  EXPECT_THAT(attempt->status(), StatusIs(absl::StatusCode::kUnavailable, "w1 is gone"));
  EXPECT_FALSE(events.job().cancelled());
  EXPECT_FALSE(events.NewAttempt(Workers({"w0"}))->cancelled());
}

TEST(JobEventsTest, ACancelReachesTheAttemptAndEveryLaterOne) {
  JobEvents events;
  std::shared_ptr<CancelToken> attempt = events.NewAttempt(Workers({"w0"}));
  events.Cancel(absl::CancelledError("cancelled by the user"));
  EXPECT_THAT(attempt->status(), StatusIs(absl::StatusCode::kCancelled, "cancelled by the user"));
  EXPECT_TRUE(events.NewAttempt(Workers({"w1"}))->cancelled());
}

TEST(JobEventsTest, ADrainStopsAJobAtOnceOutsideItsStepLoopAndWaitsInsideIt) {
  JobEvents stepping;
  ASSERT_OK(stepping.SetStepping(true));
  stepping.Drain();
  EXPECT_FALSE(stepping.job().cancelled());  // the step loop snapshots at its next boundary
  EXPECT_TRUE(stepping.draining());
  EXPECT_FALSE(stepping.suspending());

  JobEvents preparing;
  preparing.Drain("suspended: preempted by job j2 (priority 5)");
  EXPECT_TRUE(preparing.suspending());
  EXPECT_THAT(preparing.job().status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       "suspended: preempted by job j2 (priority 5): the job continues from its "
                       "latest snapshot when workers are free"));
  EXPECT_THAT(preparing.SetStepping(true),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("latest snapshot")));
}

TEST(JobEventsTest, ReleasesAreGroupedByReasonInRankOrderUntilDone) {
  JobEvents events;
  events.Release({"w2", "w0"}, "preempted by job j2 (priority 5)");
  events.Release({"w1"}, "leaving (SIGTERM)");
  events.Release({"w7"}, "leaving (SIGTERM)");  // not among them: kept for later
  auto [ids, why] = events.Releasing(Workers({"w0", "w1", "w2", "w3"}));
  EXPECT_THAT(ids, ElementsAre("w0", "w1", "w2"));
  EXPECT_EQ(why, "workers w0, w2 preempted by job j2 (priority 5); worker w1 leaving (SIGTERM)");
  events.Released(ids);
  EXPECT_TRUE(events.Releasing(Workers({"w0", "w1", "w2"})).first.empty());
  EXPECT_THAT(events.Releasing(Workers({"w7"})).first, ElementsAre("w7"));
}

TEST(JobEventsTest, TheWaitForWorkersEndsWithTheWorkersGivenOrWhyNone) {
  JobEvents events;
  std::thread giver([&] { events.GiveWorkers(Workers({"w3", "w4"})); });
  absl::StatusOr<std::vector<PoolWorker>> got = events.AwaitWorkers(absl::Minutes(5));
  giver.join();
  ASSERT_OK(got);
  EXPECT_THAT(Ids(*got), ElementsAre("w3", "w4"));
  events.NoWorkers(absl::DeadlineExceededError("no 2 healthy workers within 1s"));
  EXPECT_THAT(events.AwaitWorkers(absl::Minutes(5)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("no 2 healthy workers")));
}

TEST(JobEventsTest, TheWaitForWorkersEndsOnTheJobsCancelAndIsBounded) {
  JobEvents events;
  std::thread canceller([&] { events.Cancel(absl::CancelledError("cancelled by the user")); });
  EXPECT_THAT(events.AwaitWorkers(absl::Minutes(5)),
              StatusIs(absl::StatusCode::kCancelled, "cancelled by the user"));
  canceller.join();
  JobEvents silent;  // a supply that never answers
  EXPECT_THAT(silent.AwaitWorkers(absl::Milliseconds(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("the coordinator gave neither workers nor a reason")));
}

TEST(JobEventsTest, OffersAreTakenOnceAndDroppedByARecovery) {
  JobEvents events;
  events.Offer(Workers({"w5"}));
  events.Offer(Workers({"w6"}));
  EXPECT_THAT(Ids(events.TakeOffer()), ElementsAre("w5", "w6"));
  EXPECT_TRUE(events.TakeOffer().empty());
  events.Offer(Workers({"w7"}));
  events.DropOffers();
  EXPECT_TRUE(events.TakeOffer().empty());
}

}  // namespace
}  // namespace lockstep::testing
