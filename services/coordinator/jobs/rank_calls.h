// RankCalls: one call to each of a job's workers at once (Prepare, Evaluate, Release), and
// a bounded wait for their answers. A client that answers by itself (gRPC's callbacks)
// costs no thread of ours; one that can only block (the worker in this process, test
// fakes) is called on a thread of its own, as StepFanout reads such streams.
//
// The answers outlive the RankCalls: one that comes after Wait gave up on it is dropped.
// Thread safety: Start and Wait on one thread (the job's); the answers from any.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_RANK_CALLS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_RANK_CALLS_H_

#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

// `Answer`: absl::Status, or absl::StatusOr of what the call returns.
template <typename Answer>
class RankCalls {
 public:
  using Done = std::function<void(Answer)>;

  // `n` calls, numbered 0 to n - 1.
  explicit RankCalls(int n) : answers_(std::make_shared<Answers>(n)) {}
  // Joins the blocking calls' threads if Wait did not.
  ~RankCalls() {
    for (std::thread& t : threads_) t.join();
  }
  RankCalls(const RankCalls&) = delete;
  RankCalls& operator=(const RankCalls&) = delete;

  // Starts call i: start(done) where the client answers by itself (it returns true and
  // calls `done` once), else block() on a thread of its own. `seen` (may be null) is shown
  // the answer first, on the thread that gives it.
  void Start(int i, const std::function<bool(Done)>& start, std::function<Answer()> block,
             std::function<void(const Answer&)> seen = nullptr) {
    Done done = [answers = answers_, i, seen = std::move(seen)](Answer a) {
      if (seen) seen(a);
      answers->Set(i, std::move(a));
    };
    if (start(done)) return;
    threads_.emplace_back([done = std::move(done), block = std::move(block)] { done(block()); });
  }

  // Every call's answer. The blocking calls are joined: they end as their clients end
  // them (a worker in this process). The others are waited for at most `timeout` more: one
  // unanswered by then is DEADLINE_EXCEEDED (its client broke the contract that each call
  // ends by its timeout).
  std::vector<Answer> Wait(absl::Duration timeout) {
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    return answers_->Wait(timeout);
  }

 private:
  class Answers {
   public:
    explicit Answers(int n) : answers_(n), pending_(n) {}
    void Set(int i, Answer a) {
      absl::MutexLock lock(&mu_);
      answers_[i] = std::move(a);
      --pending_;
    }
    std::vector<Answer> Wait(absl::Duration timeout) {
      absl::MutexLock lock(&mu_);
      auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
      mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
      std::vector<Answer> out;
      for (const std::optional<Answer>& a : answers_) {
        out.push_back(a.has_value() ? *a
                                    : absl::DeadlineExceededError(absl::StrCat(
                                          "no answer within ", absl::FormatDuration(timeout))));
      }
      return out;
    }

   private:
    absl::Mutex mu_;
    std::vector<std::optional<Answer>> answers_ ABSL_GUARDED_BY(mu_);
    int pending_ ABSL_GUARDED_BY(mu_);
  };

  const std::shared_ptr<Answers> answers_;
  std::vector<std::thread> threads_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_RANK_CALLS_H_
