// WorkerClient: the coordinator's handle on one worker's Worker service. The interface
// lets the job runner be tested with injected faults; GrpcWorkerClient is the real one.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_WORKER_CLIENT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_WORKER_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/train_state.h"
#include "lockstep/v1/worker.pb.h"

namespace lockstep {

// A bidirectional stream of step commands. Send and Receive may be called from two
// threads; Cancel from any.
class StepStream {
 public:
  virtual ~StepStream() = default;
  // False once the stream is broken (Receive then reports why).
  virtual bool Send(const v1::StepRequest& request) = 0;
  // No more requests; the worker ends the stream after answering those sent.
  virtual void CloseSend() = 0;
  // The next answer, in order. OUT_OF_RANGE when the stream ended cleanly, otherwise the
  // error that ended it.
  virtual absl::StatusOr<v1::StepResponse> Receive() = 0;
  virtual void Cancel() = 0;
};

class WorkerClient {
 public:
  virtual ~WorkerClient() = default;
  virtual absl::StatusOr<v1::PrepareResponse> Prepare(const v1::PrepareHeader& header,
                                                      const TrainState& state,
                                                      absl::Duration timeout) = 0;
  virtual absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(absl::Duration timeout) = 0;
  virtual absl::StatusOr<v1::EvaluateResponse> Evaluate(const v1::EvaluateRequest& request,
                                                        absl::Duration timeout) = 0;
  virtual absl::StatusOr<TrainState> FetchState(const std::string& job_id,
                                                absl::Duration timeout) = 0;
  virtual absl::Status Release(const std::string& job_id, const std::string& reason,
                               absl::Duration timeout) = 0;
  // True if the worker's server answers a health check within `timeout`.
  virtual bool Alive(absl::Duration timeout) = 0;
  // Cancels the Prepare, Evaluate and FetchState calls in flight (they return CANCELLED);
  // later calls are unaffected. Thread-safe.
  virtual void CancelCalls() = 0;
};

class WorkerClientFactory {
 public:
  virtual ~WorkerClientFactory() = default;
  virtual std::unique_ptr<WorkerClient> Connect(const std::string& address) = 0;
};

std::unique_ptr<WorkerClientFactory> NewGrpcWorkerClientFactory();

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_WORKER_CLIENT_H_
