// The worker's gRPC layer: the Worker service over a JobSlot (job_slot.h), translating
// with wire.h. Steps streams use gRPC's callback API, so that a stream pins no thread:
// their step commands run in order on one thread this service owns (a worker runs one
// job at a time). Prepare, Evaluate, FetchState and Release are short, one per job, on
// gRPC's synchronous threads. Only the coordinator may call (its certificate, checked
// first in every handler: a refused call touches nothing).
#ifndef LOCKSTEP_SERVICES_WORKER_SERVICE_H_
#define LOCKSTEP_SERVICES_WORKER_SERVICE_H_

#include <spdlog/common.h>

#include "absl/status/status.h"
#include "lockstep/v1/worker.grpc.pb.h"
#include "services/common/observability/rpc_metrics.h"
#include "services/common/rpc/serial_executor.h"
#include "services/common/security/auth.h"
#include "services/worker/job_slot.h"

namespace lockstep {

// The level a failed step is logged at: a warning where a peer is gone (UNAVAILABLE: the
// coordinator resizes an elastic job or recovers it, and says so), an error otherwise.
spdlog::level::level_enum StepFailureLevel(const absl::Status& status);

class WorkerServiceImpl final : public v1::Worker::WithCallbackMethod_Steps<v1::Worker::Service> {
 public:
  // `slot` and `guard` must outlive the service, whose destructor waits for the steps
  // posted; so must `rpc` (may be null), which counts the Steps streams' statuses
  // (RpcMetrics::kSelfCounted).
  WorkerServiceImpl(JobSlot* slot, const Guard* guard, RpcMetrics* rpc = nullptr)
      : slot_(slot), guard_(guard), rpc_(rpc) {}

  grpc::Status Prepare(grpc::ServerContext* ctx, grpc::ServerReader<v1::PrepareChunk>* reader,
                       v1::PrepareResponse* resp) override;
  grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse>* Steps(
      grpc::CallbackServerContext* ctx) override;
  grpc::Status Evaluate(grpc::ServerContext* ctx, const v1::EvaluateRequest* req,
                        v1::EvaluateResponse* resp) override;
  grpc::Status FetchState(grpc::ServerContext* ctx, const v1::FetchStateRequest* req,
                          grpc::ServerWriter<v1::StateChunk>* writer) override;
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                       v1::ReleaseResponse*) override;

 private:
  // OK when the caller holds the coordinator's certificate.
  absl::Status CheckCaller(const grpc::ServerContextBase& ctx) const;

  JobSlot* slot_;
  const Guard* guard_;
  RpcMetrics* rpc_;
  SerialExecutor steps_;  // runs every stream's step commands, in arrival order
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_WORKER_SERVICE_H_
