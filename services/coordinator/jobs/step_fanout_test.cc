#include "services/coordinator/jobs/step_fanout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "core/testing.h"
#include "services/coordinator/workers/fake_worker_client.h"

namespace lockstep::testing {
namespace {

using ::testing::HasSubstr;

absl::Status Blame(int rank, const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat("worker w", rank, ": ", st.message()));
}

// With `push`, the streams hand their answers over by themselves (as gRPC's do) and the
// fanout starts no reader thread; without, it reads each with a thread of its own.
std::vector<std::unique_ptr<WorkerClient>> Clients(std::vector<Behaviour> behaviours, bool push) {
  std::vector<std::unique_ptr<WorkerClient>> clients;
  for (size_t r = 0; r < behaviours.size(); ++r) {
    clients.push_back(std::make_unique<FakeClient>(
        static_cast<int>(r), FakeWorker{.steps = behaviours[r], .push = push}));
  }
  return clients;
}

// Step `step` for every worker; worker r's shard has r + 1 indices.
std::vector<StepCommand> Commands(int n, int64_t step) {
  static const int32_t kIndices[] = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<StepCommand> commands(n);
  for (int r = 0; r < n; ++r) {
    commands[r].step = step;
    commands[r].indices = {kIndices, static_cast<size_t>(r + 1)};
  }
  return commands;
}

// Opens a fanout on workers behaving as `behaviours`, sends them `step` and takes the
// answers.
absl::StatusOr<std::vector<StepResult>> SendAndTake(std::vector<Behaviour> behaviours, int64_t step,
                                                    absl::Duration timeout, bool push) {
  auto clients = Clients(behaviours, push);
  CancelToken cancel;
  auto fanout = StepFanout::Open(clients, "job-1", cancel, absl::Seconds(10), Blame);
  if (!fanout.ok()) return fanout.status();
  (*fanout)->Send(Commands(static_cast<int>(clients.size()), step));
  return (*fanout)->Take(step, timeout);
}  // the fanout's destructor cancels what is still open: no hang

class StepFanoutTest : public ::testing::TestWithParam<bool> {};

INSTANTIATE_TEST_SUITE_P(ReaderThreadsAndPushingStreams, StepFanoutTest, ::testing::Bool());

TEST_P(StepFanoutTest, AnswersComeBackInStepOrderPerWorker) {
  auto clients = Clients({Behaviour::kEcho, Behaviour::kEcho, Behaviour::kEcho}, GetParam());
  CancelToken cancel;
  auto fanout = StepFanout::Open(clients, "job-1", cancel, absl::Seconds(10), Blame);
  ASSERT_TRUE(fanout.ok()) << fanout.status();
  for (int64_t s = 0; s < 4; ++s) (*fanout)->Send(Commands(3, s));  // pipelined
  for (int64_t s = 0; s < 4; ++s) {
    auto got = (*fanout)->Take(s, absl::Seconds(10));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), 3u);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ((*got)[r].step, s);
      EXPECT_EQ((*got)[r].loss, 2 * r + 1);  // its own rank and shard
    }
  }
  EXPECT_TRUE((*fanout)->Close(absl::Seconds(10)).ok());  // every stream ended cleanly
}

TEST_P(StepFanoutTest, ASilentWorkerIsADeadlineNamingIt) {
  const absl::Time t0 = absl::Now();
  auto got = SendAndTake({Behaviour::kEcho, Behaviour::kSilent, Behaviour::kSilent}, 0,
                         absl::Milliseconds(100), GetParam());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(got.status().message(), HasSubstr("worker w1: did not answer step 0 within 100ms"));
  EXPECT_THAT(got.status().message(), HasSubstr("nor did 1 other worker"));
}

TEST_P(StepFanoutTest, AFailedStreamEndsTheWaitAtOnce) {
  const absl::Time t0 = absl::Now();
  auto got = SendAndTake({Behaviour::kSilent, Behaviour::kFail}, 0, absl::Seconds(30), GetParam());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(got.status().message(), "worker w1: connection reset");
}

TEST_P(StepFanoutTest, AStreamEndedWithoutAnAnswerIsUnavailable) {
  auto got =
      SendAndTake({Behaviour::kEcho, Behaviour::kEndEarly}, 0, absl::Seconds(30), GetParam());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(got.status().message(), "worker w1: ended its step stream early");
}

TEST_P(StepFanoutTest, AnAnswerToTheWrongStepIsInternal) {
  auto got =
      SendAndTake({Behaviour::kEcho, Behaviour::kWrongStep}, 7, absl::Seconds(30), GetParam());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(got.status().message(), "worker w1: answered step 8 when step 7 was due");
}

TEST_P(StepFanoutTest, CloseGivesUpOnAWorkerThatDoesNotEndItsStream) {
  auto clients = Clients({Behaviour::kEcho, Behaviour::kHang}, GetParam());
  CancelToken cancel;
  auto fanout = StepFanout::Open(clients, "job-1", cancel, absl::Seconds(10), Blame);
  ASSERT_TRUE(fanout.ok());
  const absl::Time t0 = absl::Now();
  const absl::Status st = (*fanout)->Close(absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kDeadlineExceeded,
                           "worker w1: did not end its step stream within 100ms"));
}

TEST_P(StepFanoutTest, TheJobsCancelTokenWakesAWaitingTake) {
  auto clients = Clients({Behaviour::kSilent, Behaviour::kSilent}, GetParam());
  CancelToken cancel;
  auto fanout = StepFanout::Open(clients, "job-1", cancel, absl::Seconds(10), Blame);
  ASSERT_TRUE(fanout.ok());
  (*fanout)->Send(Commands(2, 0));
  // Whether the cancel lands before or during the wait, the wait ends with it.
  std::thread canceller([&] { cancel.Cancel(absl::CancelledError("by the user")); });
  const absl::Time t0 = absl::Now();
  auto got = (*fanout)->Take(0, absl::Seconds(30));
  canceller.join();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled);
}

TEST_P(StepFanoutTest, OpenNamesTheWorkerThatRefused) {
  std::vector<std::unique_ptr<WorkerClient>> clients;
  clients.push_back(std::make_unique<FakeClient>(0, FakeWorker{.push = GetParam()}));
  clients.push_back(
      std::make_unique<FakeClient>(1, FakeWorker{.push = GetParam(), .refuse_steps = true}));
  CancelToken cancel;
  auto fanout = StepFanout::Open(clients, "job-1", cancel, absl::Seconds(10), Blame);
  EXPECT_EQ(fanout.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fanout.status().message(), "worker w1: connection refused");
}

}  // namespace
}  // namespace lockstep::testing
