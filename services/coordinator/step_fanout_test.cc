#include "services/coordinator/step_fanout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// How a fake worker answers its step stream.
enum class Behaviour { kEcho, kSilent, kFail, kEndEarly, kWrongStep };

// An in-memory step stream: answers each request (or not) as its behaviour says.
class FakeStream final : public StepStream {
 public:
  FakeStream(int rank, Behaviour b) : rank_(rank), behaviour_(b) {}

  bool Send(const v1::StepRequest& request) override {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    switch (behaviour_) {
      case Behaviour::kEcho:
      case Behaviour::kWrongStep: {
        v1::StepResponse a;
        a.set_step(request.step() + (behaviour_ == Behaviour::kWrongStep ? 1 : 0));
        a.set_loss(static_cast<float>(rank_ + request.indices_size()));
        answers_.push_back(a);
        break;
      }
      case Behaviour::kFail:
        error_ = absl::UnavailableError("connection reset");
        break;
      case Behaviour::kEndEarly:
        closed_ = true;
        break;
      case Behaviour::kSilent:
        break;
    }
    return true;
  }
  void CloseSend() override {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  absl::StatusOr<v1::StepResponse> Receive() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](FakeStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
          return !s->answers_.empty() || s->closed_ || s->cancelled_ || !s->error_.ok();
        },
        this));
    if (cancelled_) return absl::CancelledError("cancelled");
    if (!error_.ok()) return error_;
    if (answers_.empty()) return absl::OutOfRangeError("ended");
    v1::StepResponse a = answers_.front();
    answers_.pop_front();
    return a;
  }
  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

 private:
  const int rank_;
  const Behaviour behaviour_;
  absl::Mutex mu_;
  std::deque<v1::StepResponse> answers_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

class FakeClient final : public WorkerClient {
 public:
  FakeClient(int rank, Behaviour b, bool refuse = false)
      : rank_(rank), behaviour_(b), refuse_(refuse) {}
  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(absl::Duration) override {
    if (refuse_) return absl::UnavailableError("connection refused");
    return std::unique_ptr<StepStream>(new FakeStream(rank_, behaviour_));
  }
  absl::StatusOr<v1::PrepareResponse> Prepare(const v1::PrepareHeader&, const TrainState&,
                                              absl::Duration) override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<v1::EvaluateResponse> Evaluate(const v1::EvaluateRequest&,
                                                absl::Duration) override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<TrainState> FetchState(const std::string&, absl::Duration) override {
    return absl::UnimplementedError("not used");
  }
  absl::Status Release(const std::string&, const std::string&, absl::Duration) override {
    return absl::OkStatus();
  }
  bool Alive(absl::Duration) override { return true; }
  void CancelCalls() override {}

 private:
  const int rank_;
  const Behaviour behaviour_;
  const bool refuse_;
};

absl::Status Blame(int rank, const absl::Status& st) {
  return absl::Status(st.code(), absl::StrCat("worker w", rank, ": ", st.message()));
}

std::vector<std::unique_ptr<WorkerClient>> Clients(std::vector<Behaviour> behaviours) {
  std::vector<std::unique_ptr<WorkerClient>> clients;
  for (size_t r = 0; r < behaviours.size(); ++r) {
    clients.push_back(std::make_unique<FakeClient>(static_cast<int>(r), behaviours[r]));
  }
  return clients;
}

// Step `step` for every worker; worker r's shard has r + 1 indices.
std::vector<v1::StepRequest> Requests(int n, int64_t step) {
  std::vector<v1::StepRequest> requests(n);
  for (int r = 0; r < n; ++r) {
    requests[r].set_step(step);
    for (int i = 0; i <= r; ++i) requests[r].add_indices(i);
  }
  return requests;
}

TEST(StepFanoutTest, AnswersComeBackInStepOrderPerWorker) {
  auto clients = Clients({Behaviour::kEcho, Behaviour::kEcho, Behaviour::kEcho});
  auto fanout = StepFanout::Open(clients, absl::Seconds(10), Blame);
  ASSERT_TRUE(fanout.ok()) << fanout.status();
  for (int64_t s = 0; s < 4; ++s) (*fanout)->Send(Requests(3, s));  // pipelined
  for (int64_t s = 0; s < 4; ++s) {
    auto got = (*fanout)->Take(s, absl::Seconds(10));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), 3u);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ((*got)[r].step(), s);
      EXPECT_EQ((*got)[r].loss(), 2 * r + 1);  // its own rank and shard
    }
  }
  (*fanout)->Close();  // returns: every stream ended cleanly
}

TEST(StepFanoutTest, ASilentWorkerIsADeadlineNamingIt) {
  auto clients = Clients({Behaviour::kEcho, Behaviour::kSilent, Behaviour::kSilent});
  auto fanout = StepFanout::Open(clients, absl::Seconds(10), Blame);
  ASSERT_TRUE(fanout.ok());
  (*fanout)->Send(Requests(3, 0));
  const absl::Time t0 = absl::Now();
  auto got = (*fanout)->Take(0, absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(got.status().message(), HasSubstr("worker w1: did not answer step 0 within 100ms"));
  EXPECT_THAT(got.status().message(), HasSubstr("nor did 1 other worker"));
}  // the destructor cancels the silent streams: no hang

TEST(StepFanoutTest, AFailedStreamEndsTheWaitAtOnce) {
  auto clients = Clients({Behaviour::kSilent, Behaviour::kFail});
  auto fanout = StepFanout::Open(clients, absl::Seconds(10), Blame);
  ASSERT_TRUE(fanout.ok());
  (*fanout)->Send(Requests(2, 0));
  const absl::Time t0 = absl::Now();
  auto got = (*fanout)->Take(0, absl::Seconds(30));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(got.status().message(), "worker w1: connection reset");
}

TEST(StepFanoutTest, AStreamEndedWithoutAnAnswerIsUnavailable) {
  auto clients = Clients({Behaviour::kEcho, Behaviour::kEndEarly});
  auto fanout = StepFanout::Open(clients, absl::Seconds(10), Blame);
  ASSERT_TRUE(fanout.ok());
  (*fanout)->Send(Requests(2, 0));
  auto got = (*fanout)->Take(0, absl::Seconds(30));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(got.status().message(), "worker w1: ended its step stream early");
}

TEST(StepFanoutTest, AnAnswerToTheWrongStepIsInternal) {
  auto clients = Clients({Behaviour::kEcho, Behaviour::kWrongStep});
  auto fanout = StepFanout::Open(clients, absl::Seconds(10), Blame);
  ASSERT_TRUE(fanout.ok());
  (*fanout)->Send(Requests(2, 7));
  auto got = (*fanout)->Take(7, absl::Seconds(30));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(got.status().message(), "worker w1: answered step 8 when step 7 was due");
}

TEST(StepFanoutTest, CancelWakesAWaitingTake) {
  auto clients = Clients({Behaviour::kSilent, Behaviour::kSilent});
  auto fanout = StepFanout::Open(clients, absl::Seconds(10), Blame);
  ASSERT_TRUE(fanout.ok());
  (*fanout)->Send(Requests(2, 0));
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (*fanout)->Cancel();
  });
  const absl::Time t0 = absl::Now();
  auto got = (*fanout)->Take(0, absl::Seconds(30));
  canceller.join();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled);
}

TEST(StepFanoutTest, OpenNamesTheWorkerThatRefused) {
  std::vector<std::unique_ptr<WorkerClient>> clients;
  clients.push_back(std::make_unique<FakeClient>(0, Behaviour::kEcho));
  clients.push_back(std::make_unique<FakeClient>(1, Behaviour::kEcho, /*refuse=*/true));
  auto fanout = StepFanout::Open(clients, absl::Seconds(10), Blame);
  EXPECT_EQ(fanout.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fanout.status().message(), "worker w1: connection refused");
}

}  // namespace
}  // namespace lockstep
