// WorkerClient: the coordinator's handle on one worker, in plain commands
// (core/commands.h). GrpcWorkerClient calls a Worker service; the in-process client
// (services/standalone) calls a JobSlot in this process; fakes inject faults in tests.
//
// Cancellation is sticky: the calls that take a CancelToken fail at once with its status
// when it is already cancelled, and return promptly with it when it is cancelled while
// they run. Release and Alive take none: they are how the coordinator cleans up after a
// cancel. Every call has a timeout.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_WORKERS_WORKER_CLIENT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_WORKERS_WORKER_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cancel.h"
#include "core/commands.h"
#include "core/train_state.h"
#include "services/common/rpc/net.h"

namespace lockstep {

// A TrainState serialized once per job (StateBytes's layout) and shared by every rank's
// Prepare.
struct SharedState {
  StateHeader header;
  std::string bytes;
};

// A bidirectional stream of one job's step commands. Send and Receive may be called from
// two threads; Cancel from any.
class StepStream {
 public:
  // Takes the stream's answers in order, then once the status that ended it (OUT_OF_RANGE:
  // cleanly). Called on the stream's own threads, one call at a time.
  using Deliver = std::function<void(absl::StatusOr<StepResult>)>;

  virtual ~StepStream() = default;
  // A stream that hands its answers over by itself (gRPC's callback threads: no thread of
  // the caller waits on it) takes `deliver` and returns true; Receive is then not called.
  // Those answered already are delivered at once. False: the caller reads with Receive.
  // `deliver` is not called once the destructor has returned.
  virtual bool Subscribe(Deliver deliver) { return false; }
  // False once the stream is broken (Receive then reports why).
  virtual bool Send(const StepCommand& command) = 0;
  // No more commands; the worker ends the stream after answering those sent.
  virtual void CloseSend() = 0;
  // The next answer, in order, waiting at most `timeout` (then DEADLINE_EXCEEDED).
  // OUT_OF_RANGE when the stream ended cleanly, CANCELLED promptly once it is cancelled,
  // otherwise the error that ended it.
  virtual absl::StatusOr<StepResult> Receive(absl::Duration timeout) = 0;
  virtual void Cancel() = 0;
};

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  virtual absl::StatusOr<PrepareResult> Prepare(const JobAssignment& job,
                                                std::shared_ptr<const SharedState> state,
                                                const CancelToken& cancel,
                                                absl::Duration timeout) = 0;
  // The stream lives at most `lifetime`; cancelled with `cancel`.
  virtual absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(const std::string& job_id,
                                                                const CancelToken& cancel,
                                                                absl::Duration lifetime) = 0;
  virtual absl::StatusOr<EvalSums> Evaluate(const std::string& job_id, int64_t begin, int64_t end,
                                            const CancelToken& cancel, absl::Duration timeout) = 0;
  virtual absl::StatusOr<TrainState> FetchState(const std::string& job_id,
                                                const CancelToken& cancel,
                                                absl::Duration timeout) = 0;
  virtual absl::Status Release(const std::string& job_id, const std::string& reason,
                               absl::Duration timeout) = 0;
  // Prepare, Evaluate and Release with the answer given to `done`, exactly once, and no
  // thread of the caller waiting for it (jobs/rank_calls.h): on the client's own threads
  // (gRPC's callbacks) by the call's timeout, promptly with the token's reason once
  // `cancel` is cancelled, at once if it already is. The call holds the token it was given
  // until it has answered. A client whose calls can only block returns false and never
  // calls `done`: the caller makes the blocking call instead, on a thread of its own.
  virtual bool StartPrepare(const JobAssignment& job, std::shared_ptr<const SharedState> state,
                            std::shared_ptr<const CancelToken> cancel, absl::Duration timeout,
                            std::function<void(absl::StatusOr<PrepareResult>)> done) {
    return false;
  }
  virtual bool StartEvaluate(const std::string& job_id, int64_t begin, int64_t end,
                             std::shared_ptr<const CancelToken> cancel, absl::Duration timeout,
                             std::function<void(absl::StatusOr<EvalSums>)> done) {
    return false;
  }
  virtual bool StartRelease(const std::string& job_id, const std::string& reason,
                            absl::Duration timeout, std::function<void(absl::Status)> done) {
    return false;
  }
  // True if the worker's server answers a health check within `timeout`.
  virtual bool Alive(absl::Duration timeout) = 0;
  // Alive's answer given to `done`, exactly once, with no thread of the caller waiting for
  // it: on the client's own threads (gRPC's callbacks) by `timeout`, or at once. By
  // default Alive's, inline (for clients that answer at once).
  virtual void CheckAlive(absl::Duration timeout, std::function<void(bool)> done) {
    done(Alive(timeout));
  }
};

class WorkerClientFactory {
 public:
  virtual ~WorkerClientFactory() = default;
  virtual std::unique_ptr<WorkerClient> Connect(const std::string& address) = 0;
};

// Workers over gRPC: `transport` is the coordinator's (its certificate is what workers
// accept), and each worker must prove the worker identity.
std::unique_ptr<WorkerClientFactory> NewGrpcWorkerClientFactory(const Transport& transport);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_WORKERS_WORKER_CLIENT_H_
