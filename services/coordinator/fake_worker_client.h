// In-memory workers for the coordinator's unit tests: a WorkerClient whose step stream,
// Prepare, Evaluate, FetchState and Release behave as a test says, without processes.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_FAKE_WORKER_CLIENT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_FAKE_WORKER_CLIENT_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "services/coordinator/worker_client.h"

namespace lockstep::testing {

// How a fake worker answers its step stream. kEcho answers each step with its number,
// loss = rank + the shard's size and made-up times (below); kSilent answers nothing; kHang
// answers nothing and does not end its stream when told no more commands come.
enum class Behaviour { kEcho, kSilent, kHang, kFail, kEndEarly, kWrongStep };

// What a fake replica's steps did to its state, shared by its client and its stream: with
// FakeWorker.snapshots, the steps it answered, and its params' checksum, which it reports.
struct FakeReplica {
  std::atomic<int64_t> stepped{0};
  uint64_t checksum = 0;
};

// An in-memory step stream: answers each command (or not) as its behaviour says.
class FakeStream final : public StepStream {
 public:
  // `replica`: null, or where it records its steps and finds the checksum it answers.
  FakeStream(int rank, Behaviour b, const CancelToken& cancel,
             std::shared_ptr<FakeReplica> replica = nullptr)
      : rank_(rank), behaviour_(b), replica_(std::move(replica)) {
    on_cancel_ = cancel.OnCancel([this] { Cancel(); });
  }

  bool Send(const StepCommand& command) override {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    switch (behaviour_) {
      case Behaviour::kEcho:
      case Behaviour::kWrongStep: {
        StepResult a;
        a.step = command.step + (behaviour_ == Behaviour::kWrongStep ? 1 : 0);
        a.loss = static_cast<float>(rank_ + command.indices.size());
        // Times that tell the ranks and the steps apart: compute rank + 1, step 10 * (rank
        // + 1) + the step's number.
        a.compute_ms = rank_ + 1;
        a.allreduce_ms = 0.5;
        a.update_ms = 0.25;
        a.step_ms = 10.0 * (rank_ + 1) + static_cast<double>(command.step);
        if (replica_ != nullptr) {
          a.param_checksum = replica_->checksum;
          replica_->stepped = command.step + 1;
        }
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
      case Behaviour::kHang:
        break;
    }
    return true;
  }
  void CloseSend() override {
    absl::MutexLock lock(&mu_);
    if (behaviour_ != Behaviour::kHang) closed_ = true;
  }
  absl::StatusOr<StepResult> Receive(absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(
                                  +[](FakeStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
                                    return !s->answers_.empty() || s->closed_ || s->cancelled_ ||
                                           !s->error_.ok();
                                  },
                                  this),
                              timeout)) {
      return absl::DeadlineExceededError("no answer in time");
    }
    if (cancelled_) return absl::CancelledError("cancelled");
    if (!error_.ok()) return error_;
    if (answers_.empty()) return absl::OutOfRangeError("ended");
    StepResult a = answers_.front();
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
  const std::shared_ptr<FakeReplica> replica_;
  absl::Mutex mu_;
  std::deque<StepResult> answers_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  CancelToken::Callback on_cancel_;  // last: unregisters before the rest goes
};

// A stream that hands its answers over by itself, as the gRPC one does on gRPC's threads:
// a thread of its own reads `inner` and delivers each answer, then the end.
class PushingStream final : public StepStream {
 public:
  explicit PushingStream(std::unique_ptr<StepStream> inner) : inner_(std::move(inner)) {}
  ~PushingStream() override {
    inner_->Cancel();
    if (thread_.joinable()) thread_.join();
  }
  bool Subscribe(Deliver deliver) override {
    thread_ = std::thread([this, deliver = std::move(deliver)] {
      while (true) {
        absl::StatusOr<StepResult> answer = inner_->Receive(absl::Hours(1));
        const bool more = answer.ok();
        deliver(std::move(answer));
        if (!more) return;
      }
    });
    return true;
  }
  bool Send(const StepCommand& command) override { return inner_->Send(command); }
  void CloseSend() override { inner_->CloseSend(); }
  absl::StatusOr<StepResult> Receive(absl::Duration) override {
    return absl::InternalError("a subscribed stream is not read");
  }
  void Cancel() override { inner_->Cancel(); }

 private:
  const std::unique_ptr<StepStream> inner_;
  std::thread thread_;
};

struct FakeWorker {
  Behaviour steps = Behaviour::kEcho;
  bool push = false;          // the step stream hands its answers over (PushingStream)
  bool refuse_steps = false;  // OpenSteps fails
  bool hang_prepare = false;  // Prepare waits until cancelled (at most a minute)
  bool alive = true;          // what Alive answers (false: a dead worker)
  // Its steps answer its params' checksum, and FetchState gives its state at the step it
  // answered last (params unchanged): snapshots succeed (and the witness has marks).
  bool snapshots = false;
  int64_t train_examples = 64, test_examples = 20;
};

class FakeClient final : public WorkerClient {
 public:
  FakeClient(int rank, FakeWorker w) : rank_(rank), w_(w) {}

  absl::StatusOr<PrepareResult> Prepare(const JobAssignment& job,
                                        std::shared_ptr<const SharedState> state,
                                        const CancelToken& cancel, absl::Duration) override {
    {
      absl::MutexLock lock(&mu_);
      rendezvous_prefix_ = job.rendezvous_prefix;
    }
    if (w_.hang_prepare) {
      {
        absl::MutexLock lock(&mu_);
        in_prepare_ = true;
      }
      const bool cancelled = cancel.WaitFor(absl::Minutes(1));
      return cancelled ? cancel.status() : absl::DeadlineExceededError("hung");
    }
    auto s = StateFromBytes(state->bytes, state->header);
    if (!s.ok()) return s.status();
    absl::MutexLock lock(&mu_);
    state_ = *s;
    if (w_.snapshots) {
      replica_ = std::make_shared<FakeReplica>();
      replica_->stepped = state_.step;
      replica_->checksum = ParamChecksum(state_.params, state_.batch_stats);
    }
    return PrepareResult{w_.train_examples, w_.test_examples,
                         ParamChecksum(state_.params, state_.batch_stats)};
  }
  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(const std::string&,
                                                        const CancelToken& cancel,
                                                        absl::Duration) override {
    if (w_.refuse_steps) return absl::UnavailableError("connection refused");
    std::shared_ptr<FakeReplica> replica;
    {
      absl::MutexLock lock(&mu_);
      replica = replica_;
    }
    auto stream = std::make_unique<FakeStream>(rank_, w_.steps, cancel, std::move(replica));
    if (w_.push) return std::unique_ptr<StepStream>(new PushingStream(std::move(stream)));
    return std::unique_ptr<StepStream>(std::move(stream));
  }
  // Half the examples right, loss 0.5 each.
  absl::StatusOr<EvalSums> Evaluate(const std::string&, int64_t begin, int64_t end,
                                    const CancelToken&, absl::Duration) override {
    const int64_t count = end - begin;
    return EvalSums{0.5 * count, count / 2, count};
  }
  absl::StatusOr<TrainState> FetchState(const std::string&, const CancelToken&,
                                        absl::Duration) override {
    absl::MutexLock lock(&mu_);
    TrainState s = state_;
    if (replica_ != nullptr) s.step = replica_->stepped;
    return s;
  }
  absl::Status Release(const std::string&, const std::string& reason, absl::Duration) override {
    absl::MutexLock lock(&mu_);
    releases_.push_back(reason);
    return absl::OkStatus();
  }
  bool Alive(absl::Duration) override { return w_.alive; }

  std::vector<std::string> releases() {
    absl::MutexLock lock(&mu_);
    return releases_;
  }
  // The rendezvous prefix of the last Prepare.
  std::string rendezvous_prefix() {
    absl::MutexLock lock(&mu_);
    return rendezvous_prefix_;
  }
  // Waits until a hanging Prepare has started.
  void AwaitPrepare() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&in_prepare_));
  }

 private:
  const int rank_;
  const FakeWorker w_;
  absl::Mutex mu_;
  TrainState state_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<FakeReplica> replica_ ABSL_GUARDED_BY(mu_);  // with w_.snapshots
  bool in_prepare_ ABSL_GUARDED_BY(mu_) = false;
  std::string rendezvous_prefix_ ABSL_GUARDED_BY(mu_);
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
