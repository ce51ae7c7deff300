// InProcessWorker: a WorkerClient over a JobSlot in this process, the coordinator's job loop
// without sockets. Contract: in_process_worker.h.
#include "services/standalone/in_process_worker.h"

#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "services/common/rpc/wire.h"

namespace lockstep {
namespace {

// The shared state's bytes in kStateChunkBytes pieces, as a Prepare stream would bring them.
class SharedStateSource final : public StateSource {
 public:
  explicit SharedStateSource(const SharedState& state) : state_(state) {}
  absl::StatusOr<bool> Next(std::string* chunk) override {
    if (offset_ >= state_.bytes.size()) return false;
    chunk->assign(state_.bytes, offset_, kStateChunkBytes);
    offset_ += chunk->size();
    return true;
  }

 private:
  const SharedState& state_;
  size_t offset_ = 0;
};

// Runs the stream's commands in order on its own thread.
class InProcessStepStream final : public StepStream {
 public:
  InProcessStepStream(JobSlot* slot, std::string job_id, const CancelToken& cancel)
      : slot_(slot), job_id_(std::move(job_id)) {
    on_cancel_ = cancel.OnCancel([this] { Cancel(); });
    thread_ = std::thread([this] { Loop(); });
  }
  // A step still running may wait in the all-reduce for peers that never come (up to the
  // collective's timeout): the job is released, which ends it, before the thread is joined.
  ~InProcessStepStream() override {
    bool running;
    {
      absl::MutexLock lock(&mu_);
      if (error_.ok()) error_ = absl::CancelledError("step stream closed");
      running = running_;
    }
    if (running) slot_->Release(job_id_);
    thread_.join();
  }

  bool Send(const StepCommand& command) override {
    absl::MutexLock lock(&mu_);
    if (closed_ || !error_.ok()) return false;
    commands_.push_back({command,
                         {command.indices.begin(), command.indices.end()},
                         {command.audit_indices.begin(), command.audit_indices.end()},
                         {command.keys.begin(), command.keys.end()}});
    return true;
  }
  void CloseSend() override {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  absl::StatusOr<StepResult> Receive(absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !results_.empty() || !error_.ok() || (closed_ && commands_.empty() && !running_);
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("no step answer within ", absl::FormatDuration(timeout)));
    }
    if (!results_.empty()) {
      StepResult r = results_.front();
      results_.pop_front();
      return r;
    }
    if (!error_.ok()) return error_;
    return absl::OutOfRangeError("step stream ended");
  }
  // A stream cancelled before it ended cleanly means the job loop gave up on the job: it
  // is released, which also ends a step waiting in the all-reduce (the collective is
  // aborted), so that the stream's thread ends at once.
  void Cancel() override {
    bool ended;
    {
      absl::MutexLock lock(&mu_);
      ended = closed_ && commands_.empty() && !running_ && error_.ok();
      if (error_.ok()) error_ = absl::CancelledError("step stream cancelled");
    }
    if (!ended) slot_->Release(job_id_);
  }

 private:
  struct Queued {
    StepCommand command;
    std::vector<int32_t> indices;        // what command.indices points to
    std::vector<int32_t> audit_indices;  // and command.audit_indices
    std::vector<rng::Key> keys;          // and command.keys
  };

  void Loop() {
    absl::MutexLock lock(&mu_);
    while (true) {
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !commands_.empty() || closed_ || !error_.ok();
      };
      mu_.Await(absl::Condition(&ready));
      if (!error_.ok() || commands_.empty()) return;
      Queued q = std::move(commands_.front());
      commands_.pop_front();
      q.command.indices = q.indices;
      q.command.audit_indices = q.audit_indices;
      q.command.keys = q.keys;
      running_ = true;
      mu_.Unlock();
      absl::StatusOr<StepResult> r = slot_->Step(job_id_, q.command);
      mu_.Lock();
      running_ = false;
      if (!r.ok()) {
        if (error_.ok()) error_ = r.status();
        return;
      }
      results_.push_back(*r);
    }
  }

  JobSlot* slot_;
  const std::string job_id_;
  absl::Mutex mu_;
  std::deque<Queued> commands_ ABSL_GUARDED_BY(mu_);
  std::deque<StepResult> results_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  CancelToken::Callback on_cancel_;
  std::thread thread_;
};

class InProcessWorkerClient final : public WorkerClient {
 public:
  explicit InProcessWorkerClient(JobSlot* slot) : slot_(slot) {}

  absl::StatusOr<PrepareResult> Prepare(const JobAssignment& job,
                                        std::shared_ptr<const SharedState> state,
                                        const CancelToken& cancel, absl::Duration) override {
    RETURN_IF_ERROR(cancel.status());
    // A cancel releases the job, which stops its preparation.
    CancelToken::Callback release = cancel.OnCancel([&] { slot_->Release(job.job_id); });
    SharedStateSource source(*state);
    absl::StatusOr<PrepareResult> result = slot_->Prepare(job, state->header, source);
    RETURN_IF_ERROR(cancel.status());
    return result;
  }

  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(const std::string& job_id,
                                                        const CancelToken& cancel,
                                                        absl::Duration) override {
    RETURN_IF_ERROR(cancel.status());
    return std::make_unique<InProcessStepStream>(slot_, job_id, cancel);
  }

  absl::StatusOr<EvalSums> Evaluate(const std::string& job_id, int64_t begin, int64_t end,
                                    const CancelToken& cancel, absl::Duration) override {
    RETURN_IF_ERROR(cancel.status());
    return slot_->Evaluate(job_id, begin, end);
  }

  absl::StatusOr<TrainState> FetchState(const std::string& job_id, const CancelToken& cancel,
                                        absl::Duration) override {
    RETURN_IF_ERROR(cancel.status());
    std::optional<StateAssembler> state;
    RETURN_IF_ERROR(slot_->FetchState(
        job_id, kStateChunkBytes, [&](const StateHeader& header, std::string_view bytes) {
          if (!state.has_value()) {
            ASSIGN_OR_RETURN(StateAssembler a, StateAssembler::Create(header));
            state.emplace(std::move(a));
          }
          RETURN_IF_ERROR(cancel.status());
          return state->Append(bytes);
        }));
    return std::move(*state).Finish();
  }

  absl::Status Release(const std::string& job_id, const std::string&, absl::Duration) override {
    slot_->Release(job_id);
    return absl::OkStatus();
  }

  bool Alive(absl::Duration) override { return true; }

 private:
  JobSlot* slot_;
};

}  // namespace

std::unique_ptr<WorkerClient> NewInProcessWorkerClient(JobSlot* slot) {
  return std::make_unique<InProcessWorkerClient>(slot);
}

std::unique_ptr<WorkerClient> InProcessWorkerFactory::Connect(const std::string& address) {
  auto it = slots_.find(address);
  ABSL_RAW_CHECK(it != slots_.end(), "no in-process worker at this address");
  return NewInProcessWorkerClient(it->second);
}

}  // namespace lockstep
