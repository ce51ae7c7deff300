// In-memory workers for the coordinator's unit tests: a WorkerClient whose step stream,
// Prepare, Evaluate, FetchState and Release behave as a test says, without processes.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_FAKE_WORKER_CLIENT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_FAKE_WORKER_CLIENT_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "services/coordinator/worker_client.h"

namespace lockstep::testing {

// How a fake worker answers its step stream. kEcho answers each step with its number and
// loss = rank + the shard's size.
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

struct FakeWorker {
  Behaviour steps = Behaviour::kEcho;
  bool refuse_steps = false;  // OpenSteps fails
  bool hang_prepare = false;  // Prepare waits until CancelCalls (at most a minute)
  int64_t train_examples = 64, test_examples = 20;
};

class FakeClient final : public WorkerClient {
 public:
  FakeClient(int rank, FakeWorker w) : rank_(rank), w_(w) {}

  absl::StatusOr<v1::PrepareResponse> Prepare(const v1::PrepareHeader&, const TrainState& state,
                                              absl::Duration) override {
    absl::MutexLock lock(&mu_);
    if (w_.hang_prepare) {
      in_prepare_ = true;
      const bool cancelled = mu_.AwaitWithTimeout(absl::Condition(&cancelled_), absl::Minutes(1));
      in_prepare_ = false;
      return cancelled ? absl::CancelledError("cancelled") : absl::DeadlineExceededError("hung");
    }
    state_ = state;
    v1::PrepareResponse resp;
    resp.set_param_checksum(ParamChecksum(state.params));
    resp.set_train_examples(w_.train_examples);
    resp.set_test_examples(w_.test_examples);
    return resp;
  }
  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(absl::Duration) override {
    if (w_.refuse_steps) return absl::UnavailableError("connection refused");
    return std::unique_ptr<StepStream>(new FakeStream(rank_, w_.steps));
  }
  // Half the examples right, loss 0.5 each.
  absl::StatusOr<v1::EvaluateResponse> Evaluate(const v1::EvaluateRequest& request,
                                                absl::Duration) override {
    v1::EvaluateResponse resp;
    resp.set_count(request.end() - request.begin());
    resp.set_loss_sum(0.5 * resp.count());
    resp.set_correct(resp.count() / 2);
    return resp;
  }
  absl::StatusOr<TrainState> FetchState(const std::string&, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    return state_;
  }
  absl::Status Release(const std::string&, const std::string& reason, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    releases_.push_back(reason);
    return absl::OkStatus();
  }
  bool Alive(absl::Duration) override { return true; }
  void CancelCalls() override {
    absl::MutexLock lock(&mu_);
    if (in_prepare_) cancelled_ = true;
  }

  std::vector<std::string> releases() {
    absl::MutexLock lock(&mu_);
    return releases_;
  }

 private:
  const int rank_;
  const FakeWorker w_;
  absl::Mutex mu_;
  TrainState state_ ABSL_GUARDED_BY(mu_);
  bool in_prepare_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> releases_ ABSL_GUARDED_BY(mu_);
};

// Connects the i-th address asked for to a FakeClient of rank i behaving as workers[i]
// (default: FakeWorker{}). The clients belong to whoever connected; `clients` only sees them.
class FakeClientFactory final : public WorkerClientFactory {
 public:
  explicit FakeClientFactory(std::vector<FakeWorker> workers = {}) : workers_(std::move(workers)) {}
  std::unique_ptr<WorkerClient> Connect(const std::string&) override {
    const int rank = static_cast<int>(clients.size());
    auto c = std::make_unique<FakeClient>(
        rank, rank < static_cast<int>(workers_.size()) ? workers_[rank] : FakeWorker{});
    clients.push_back(c.get());
    return c;
  }
  std::vector<FakeClient*> clients;

 private:
  const std::vector<FakeWorker> workers_;
};

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_COORDINATOR_FAKE_WORKER_CLIENT_H_
