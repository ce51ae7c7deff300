// In-memory workers for the coordinator's unit tests: a WorkerClient whose step stream,
// Prepare, Evaluate, FetchState and Release behave as a test says, without processes.
// A fake holds the state it was prepared with (or kept: Prepare with keep_state); each step
// it answers adds 1 to its first param, so that its checksum (answered when asked) tells
// how many steps its state went through.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_WORKERS_FAKE_WORKER_CLIENT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_WORKERS_FAKE_WORKER_CLIENT_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "services/coordinator/workers/worker_client.h"

namespace lockstep::testing {

// How a fake worker answers its step stream. kEcho answers each step with its number and
// loss = rank + the shard's size (logical replicas: replica p's loss ReplicaLoss(step, p),
// the same whichever rank holds it) and made-up times (below); kSilent answers nothing;
// kHang answers nothing and does not end its stream when told no more commands come.
enum class Behaviour { kEcho, kSilent, kHang, kFail, kEndEarly, kWrongStep };

// A fake's loss of logical replica p at (0-based) step `step`; accuracy 0.5.
inline float ReplicaLoss(int64_t step, int p) {
  return 1.0f + 0.125f * static_cast<float>(p) + static_cast<float>(step);
}

// Holds back the answers to steps `from` on (0-based command steps) until `open` is
// notified, so that a test acts while a job is mid-run; shared by the streams it gates.
struct FakeGate {
  int64_t from = 0;
  absl::Notification open;
};

// An in-memory step stream: answers each command (or not) as its behaviour says.
class FakeStream final : public StepStream {
 public:
  // `on_step` (may be null) applies an answered step to the worker's state and sets the
  // answer's checksum.
  using OnStep = std::function<void(const StepCommand&, StepResult*)>;
  // From command step `stall_from` on (-1: never) it answers nothing and applies nothing,
  // as a worker whose all-reduce never completes. `first_replica`: its first logical replica.
  FakeStream(int rank, Behaviour b, const CancelToken& cancel, OnStep on_step = nullptr,
             std::shared_ptr<FakeGate> gate = nullptr, int64_t stall_from = -1,
             int first_replica = 0)
      : rank_(rank),
        behaviour_(b),
        on_step_(std::move(on_step)),
        gate_(std::move(gate)),
        stall_from_(stall_from),
        first_replica_(first_replica) {
    on_cancel_ = cancel.OnCancel([this] { Cancel(); });
  }

  bool Send(const StepCommand& command) override {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    if (stall_from_ >= 0 && command.step >= stall_from_) return true;
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
        for (size_t k = 0; k < command.keys.size(); ++k) {
          a.replica_losses.push_back(
              ReplicaLoss(command.step, first_replica_ + static_cast<int>(k)));
          a.replica_accuracies.push_back(0.5f);
        }
        if (on_step_) on_step_(command, &a);
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
    if (gate_ != nullptr && answers_.front().step >= gate_->from) {
      mu_.Unlock();  // Cancel may come meanwhile
      const bool open = gate_->open.WaitForNotificationWithTimeout(timeout);
      mu_.Lock();
      if (!open) return absl::DeadlineExceededError("held back by the test's gate");
      if (cancelled_) return absl::CancelledError("cancelled");
    }
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
  const OnStep on_step_;
  const std::shared_ptr<FakeGate> gate_;
  const int64_t stall_from_;
  const int first_replica_;
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
  int64_t train_examples = 64, test_examples = 20;
  std::shared_ptr<FakeGate> gate;  // holds back its answers from a step on (null: none)
  int64_t stall_from = -1;         // from this command step on: no answer, no state change
};

// The state a fake worker holds, shared by every client connected to its address (a real
// worker keeps its replica across the coordinator's connections).
// Also what its clients were asked, which outlives them.
struct FakeHeld {
  std::vector<bool> Kept() {
    absl::MutexLock lock(&mu);
    return kept;
  }
  std::vector<std::string> Releases() {
    absl::MutexLock lock(&mu);
    return releases;
  }
  absl::Mutex mu;
  TrainState state ABSL_GUARDED_BY(mu);
  // Logical replicas: every step its state went through, as a JobSlot's replica keeps them.
  std::vector<CompletedStep> completed ABSL_GUARDED_BY(mu);
  std::vector<bool> kept ABSL_GUARDED_BY(mu);  // each Prepare's keep_state
  std::vector<std::string> releases ABSL_GUARDED_BY(mu);
};

class FakeClient final : public WorkerClient {
 public:
  FakeClient(int rank, FakeWorker w, std::shared_ptr<FakeHeld> held = std::make_shared<FakeHeld>())
      : rank_(rank), w_(w), held_(std::move(held)) {}

  absl::StatusOr<PrepareResult> Prepare(const JobAssignment& job,
                                        std::shared_ptr<const SharedState> state,
                                        const CancelToken& cancel, absl::Duration) override {
    {
      absl::MutexLock lock(&mu_);
      rendezvous_prefix_ = job.rendezvous_prefix;
      first_replica_ = job.replica.logical_first;
      replicas_ = job.replica.logical_replicas;
    }
    if (job.keep_state) {  // as JobSlot: its own state, at the header's step or past it
      absl::MutexLock lock(&held_->mu);
      held_->kept.push_back(true);
      const TrainState& own = held_->state;
      PrepareResult result{w_.train_examples,
                           w_.test_examples,
                           ParamChecksum(own.params, own.batch_stats),
                           own.step,
                           {}};
      for (const CompletedStep& c : held_->completed) {
        if (c.step > state->header.step && c.step <= own.step) result.ahead.push_back(c);
      }
      if (own.step < state->header.step ||
          result.ahead.size() != static_cast<size_t>(own.step - state->header.step)) {
        return absl::FailedPreconditionError(
            absl::StrCat("holds step ", own.step, ", not step ", state->header.step));
      }
      return result;
    }
    if (w_.hang_prepare) {
      {
        absl::MutexLock lock(&mu_);
        in_prepare_ = true;
      }
      const bool cancelled = cancel.WaitFor(absl::Minutes(1));
      {
        absl::MutexLock lock(&mu_);
        prepare_cancelled_ = cancelled;
      }
      return cancelled ? cancel.status() : absl::DeadlineExceededError("hung");
    }
    auto s = StateFromBytes(state->bytes, state->header);
    if (!s.ok()) return s.status();
    absl::MutexLock lock(&held_->mu);
    held_->kept.push_back(false);
    held_->state = *s;
    return PrepareResult{
        w_.train_examples, w_.test_examples, ParamChecksum(s->params, s->batch_stats), s->step, {}};
  }
  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(const std::string&,
                                                        const CancelToken& cancel,
                                                        absl::Duration) override {
    if (w_.refuse_steps) return absl::UnavailableError("connection refused");
    int first_replica, replicas;
    {
      absl::MutexLock lock(&mu_);
      first_replica = first_replica_;
      replicas = replicas_;
    }
    auto stream = std::make_unique<FakeStream>(
        rank_, w_.steps, cancel,
        [this, replicas](const StepCommand& command, StepResult* answer) {
          absl::MutexLock lock(&held_->mu);
          TrainState& own = held_->state;
          own.step = command.step + 1;
          if (!own.params.empty()) own.params[0] += 1;
          if (command.want_checksum)
            answer->param_checksum = ParamChecksum(own.params, own.batch_stats);
          if (!command.keys.empty()) {  // every replica's loss, as the all-reduce shares them
            CompletedStep c{own.step, {}, {}};
            for (int p = 0; p < replicas; ++p) {
              c.losses.push_back(ReplicaLoss(command.step, p));
              c.accuracies.push_back(0.5f);
            }
            held_->completed.push_back(std::move(c));
          }
        },
        w_.gate, w_.stall_from, first_replica);
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
    absl::MutexLock lock(&held_->mu);
    return held_->state;
  }
  absl::Status Release(const std::string&, const std::string& reason, absl::Duration) override {
    {
      absl::MutexLock lock(&held_->mu);
      held_->releases.push_back(reason);
    }
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
  // Whether a hanging Prepare ended because its token was cancelled (not its own minute):
  // what a test of a prompt cancel checks, instead of the time it took.
  bool prepare_cancelled() {
    absl::MutexLock lock(&mu_);
    return prepare_cancelled_;
  }

 private:
  const int rank_;
  const FakeWorker w_;
  absl::Mutex mu_;
  const std::shared_ptr<FakeHeld> held_;
  bool in_prepare_ ABSL_GUARDED_BY(mu_) = false;
  bool prepare_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // The last Prepare's logical_first and logical_replicas.
  int first_replica_ ABSL_GUARDED_BY(mu_) = 0;
  int replicas_ ABSL_GUARDED_BY(mu_) = 0;
  std::string rendezvous_prefix_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> releases_ ABSL_GUARDED_BY(mu_);
};

// Connects the i-th address asked for to a FakeClient of rank i behaving as workers[i]
// (default: FakeWorker{}), holding the state of that address's worker. The clients belong
// to whoever connected; `clients` only sees them (a runner drops its clients when its
// workers change: then only held() outlives them).
class FakeClientFactory final : public WorkerClientFactory {
 public:
  explicit FakeClientFactory(std::vector<FakeWorker> workers = {}) : workers_(std::move(workers)) {}
  std::unique_ptr<WorkerClient> Connect(const std::string& address) override {
    const int rank = static_cast<int>(clients.size());
    auto c = std::make_unique<FakeClient>(
        rank, rank < static_cast<int>(workers_.size()) ? workers_[rank] : FakeWorker{},
        held(address));
    clients.push_back(c.get());
    return c;
  }
  // The worker at `address`: its state and what it was asked.
  std::shared_ptr<FakeHeld> held(const std::string& address) {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<FakeHeld>& h = held_[address];
    if (h == nullptr) h = std::make_shared<FakeHeld>();
    return h;
  }
  std::vector<FakeClient*> clients;

 private:
  const std::vector<FakeWorker> workers_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<FakeHeld>> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_COORDINATOR_WORKERS_FAKE_WORKER_CLIENT_H_
