// JoinWithRetries with ranks as threads over a MemoryStore and scripted attempts (the
// injected faults): every rank retries together when one fails for a transport reason,
// a peer still waiting is aborted rather than left to its timeout, a configuration error
// ends every rank at once, and attempts and time are bounded.
#include "workers/gloo/bootstrap_retry.h"

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/testing.h"

namespace lockstep::gloo_internal {
namespace {

using ::lockstep::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// What rank R's attempt K does: return `result` at once, or (blocks) wait until aborted,
// as a rank waiting for a peer's connection would.
struct Behaviour {
  absl::Status result;
  bool blocks = false;
};

class ScriptedAttempt final : public BootstrapAttempt {
 public:
  ScriptedAttempt(Behaviour behaviour, std::string* abort_reason)
      : behaviour_(std::move(behaviour)), abort_reason_(abort_reason) {}

  absl::Status Join() override {
    if (!behaviour_.blocks) return behaviour_.result;
    // Bounded, so that a missing abort fails the test instead of hanging it.
    if (!aborted_.WaitForNotificationWithTimeout(absl::Seconds(30))) {
      return absl::InternalError("never aborted");
    }
    return absl::AbortedError(*abort_reason_);
  }

  void Abort(const absl::Status& why) override {
    absl::MutexLock lock(&mu_);
    if (aborted_.HasBeenNotified()) return;
    *abort_reason_ = std::string(why.message());
    aborted_.Notify();
  }

 private:
  const Behaviour behaviour_;
  absl::Mutex mu_;
  std::string* const abort_reason_;
  absl::Notification aborted_;
};

// The job's ranks, each running JoinWithRetries on its own thread.
class Job {
 public:
  explicit Job(int size) : size_(size), made_(size, 0), abort_reasons_(size) {}

  void Script(int rank, int attempt, Behaviour behaviour) {
    script_[{rank, attempt}] = std::move(behaviour);
  }

  // Runs `ranks` (all by default) and returns each one's result, in that order.
  std::vector<absl::StatusOr<Joined>> Run(BootstrapRetryOptions options,
                                          std::vector<int> ranks = {}) {
    if (ranks.empty()) {
      for (int r = 0; r < size_; ++r) ranks.push_back(r);
    }
    std::vector<absl::StatusOr<Joined>> results(ranks.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ranks.size(); ++i) {
      threads.emplace_back([&, i] {
        const int rank = ranks[i];
        BootstrapRetryOptions mine = options;
        mine.rank = rank;
        mine.size = size_;
        mine.on_retry = [this, rank](int attempt, const absl::Status& why) {
          absl::MutexLock lock(&mu_);
          retries_.push_back({rank, attempt, std::string(why.message())});
        };
        results[i] = JoinWithRetries(
            &store_, mine,
            [&, rank](int attempt,
                      const std::string&) -> absl::StatusOr<std::unique_ptr<BootstrapAttempt>> {
              ++made_[rank];
              auto it = script_.find({rank, attempt});
              return std::make_unique<ScriptedAttempt>(
                  it == script_.end() ? Behaviour{} : it->second, &abort_reasons_[rank]);
            });
      });
    }
    for (std::thread& t : threads) t.join();
    return results;
  }

  int made(int rank) const { return made_[rank]; }
  const std::string& abort_reason(int rank) const { return abort_reasons_[rank]; }
  struct Retry {
    int rank;
    int attempt;
    std::string why;
  };
  std::vector<Retry> retries() {
    absl::MutexLock lock(&mu_);
    return retries_;
  }
  MemoryStore& store() { return store_; }

 private:
  const int size_;
  MemoryStore store_;
  std::map<std::pair<int, int>, Behaviour> script_;
  std::vector<int> made_;                   // each written by its rank's thread only
  std::vector<std::string> abort_reasons_;  // each written under its attempt's mutex
  absl::Mutex mu_;
  std::vector<Retry> retries_ ABSL_GUARDED_BY(mu_);
};

BootstrapRetryOptions Options(const std::string& prefix,
                              absl::Duration timeout = absl::Seconds(20)) {
  BootstrapRetryOptions options;
  options.prefix = prefix;
  options.deadline = absl::Now() + timeout;
  options.max_attempts = 3;
  return options;
}

TEST(JoinWithRetries, EveryRankRetriesInPlaceWhenOneFailsAndWaitersAreAborted) {
  Job job(3);
  // Rank 1's connect is refused in attempt 0; ranks 0 and 2 wait for rank 1 meanwhile.
  job.Script(1, 0, {absl::UnavailableError("connect 127.0.0.1:4242: Connection refused")});
  job.Script(0, 0, {absl::OkStatus(), /*blocks=*/true});
  job.Script(2, 0, {absl::OkStatus(), /*blocks=*/true});
  const std::vector<absl::StatusOr<Joined>> results = job.Run(Options("retry"));
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
    EXPECT_EQ(results[r]->attempts, 2);
    EXPECT_NE(results[r]->attempt, nullptr);
    EXPECT_EQ(job.made(r), 2);
  }
  for (int r : {0, 2}) {
    EXPECT_THAT(job.abort_reason(r), AllOf(HasSubstr("attempt 0"), HasSubstr("rank 1"),
                                           HasSubstr("Connection refused")));
  }
  const std::vector<Job::Retry> retries = job.retries();
  ASSERT_EQ(retries.size(), 3u);
  for (const Job::Retry& retry : retries) {
    EXPECT_EQ(retry.attempt, 0);
    EXPECT_THAT(retry.why, HasSubstr("Connection refused"));
  }
  // Attempt 1 ran under its own keys; attempt 0's verdicts stay as they were.
  ASSERT_OK_AND_ASSIGN(std::string verdict,
                       job.store().Get("retry/0/verdict/1", absl::ZeroDuration()));
  EXPECT_THAT(verdict, HasSubstr("retry"));
  ASSERT_OK_AND_ASSIGN(verdict, job.store().Get("retry/1/verdict/1", absl::ZeroDuration()));
  EXPECT_EQ(verdict, "ok");
}

TEST(JoinWithRetries, AConfigurationErrorOnOneRankEndsEveryRankWithItsCode) {
  Job job(3);
  job.Script(2, 0, {absl::InvalidArgumentError("GlooOptions.hostname \"x\" cannot be bound")});
  job.Script(0, 0, {absl::OkStatus(), /*blocks=*/true});
  const std::vector<absl::StatusOr<Joined>> results = job.Run(Options("fatal"));
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(results[r], StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("GlooOptions.hostname \"x\" cannot be bound")));
    EXPECT_EQ(job.made(r), 1) << "rank " << r << " retried a configuration error";
  }
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2: ")));
  EXPECT_TRUE(job.retries().empty());
}

TEST(JoinWithRetries, AttemptsAreBounded) {
  Job job(2);
  for (int k = 0; k < 3; ++k) job.Script(0, k, {absl::UnavailableError("connection reset")});
  const std::vector<absl::StatusOr<Joined>> results = job.Run(Options("bounded"));
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(results[r],
                StatusIs(absl::StatusCode::kUnavailable,
                         AllOf(HasSubstr("after 3 attempts"), HasSubstr("connection reset"))));
    EXPECT_EQ(job.made(r), 3);
  }
  EXPECT_EQ(job.retries().size(), 4u);  // after attempts 0 and 1, on both ranks
}

TEST(JoinWithRetries, AMissingRankEndsAtTheDeadline) {
  Job job(2);
  const std::vector<absl::StatusOr<Joined>> results =
      job.Run(Options("missing", absl::Milliseconds(300)), {0});
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                   AllOf(HasSubstr("rank 1"), HasSubstr("missing/0/verdict/1"))));
  // The wait that failed was bounded by the deadline, as the store's error says
  // ("... not set within 299.8ms").
  const std::string message(results[0].status().message());
  const size_t at = message.rfind(" within ");
  ASSERT_NE(at, std::string::npos) << message;
  absl::Duration waited;
  ASSERT_TRUE(absl::ParseDuration(message.substr(at + 8), &waited)) << message;
  EXPECT_LE(waited, absl::Milliseconds(300)) << message;
  EXPECT_EQ(job.made(0), 1);
}

TEST(JoinWithRetries, AFailedAttemptCreationIsThatRanksVerdict) {
  // make() itself failing (e.g. a socket that cannot be opened) is retried like a Join.
  MemoryStore store;
  std::vector<absl::StatusOr<Joined>> results(2);
  std::vector<int> made(2, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      BootstrapRetryOptions options = Options("make");
      options.rank = r;
      options.size = 2;
      results[r] = JoinWithRetries(
          &store, options,
          [&, r](int attempt,
                 const std::string&) -> absl::StatusOr<std::unique_ptr<BootstrapAttempt>> {
            ++made[r];
            if (r == 1 && attempt == 0) return absl::UnavailableError("socket: no buffers");
            static std::string unused;
            return std::make_unique<ScriptedAttempt>(Behaviour{}, &unused);
          });
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r].status();
    EXPECT_EQ(results[r]->attempts, 2);
  }
}

TEST(JoinWithRetries, ACancelledStoreEndsAWaitingAttemptPromptlyWithCancelled) {
  // The coordinator's rendezvous answers CANCELLED once the job is released: a rank
  // waiting in its attempt (for a connection) is aborted, and the bootstrap says CANCELLED.
  class Released final : public Store {
   public:
    absl::Status Set(const std::string&, const std::string&) override {
      return absl::CancelledError("job job-7 was released");
    }
    absl::StatusOr<std::string> Get(const std::string&, absl::Duration) override {
      return absl::CancelledError("job job-7 was released");
    }
  } store;
  std::string abort_reason;
  BootstrapRetryOptions options = Options("released");
  options.size = 2;
  int made = 0;
  absl::StatusOr<Joined> result = JoinWithRetries(
      &store, options,
      [&](int, const std::string&) -> absl::StatusOr<std::unique_ptr<BootstrapAttempt>> {
        ++made;
        return std::make_unique<ScriptedAttempt>(Behaviour{absl::OkStatus(), /*blocks=*/true},
                                                 &abort_reason);
      });
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled, HasSubstr("job job-7 was released")));
  EXPECT_THAT(abort_reason, HasSubstr("job job-7 was released"));
  EXPECT_EQ(made, 1);
}

TEST(JoinWithRetries, WhatIsRetried) {
  EXPECT_TRUE(IsRetriable(absl::UnavailableError("")));
  EXPECT_TRUE(IsRetriable(absl::AbortedError("")));
  EXPECT_TRUE(IsRetriable(absl::DeadlineExceededError("")));
  EXPECT_FALSE(IsRetriable(absl::InvalidArgumentError("")));
  EXPECT_FALSE(IsRetriable(absl::CancelledError("")));
  EXPECT_FALSE(IsRetriable(absl::PermissionDeniedError("")));
}

}  // namespace
}  // namespace lockstep::gloo_internal
