// The worker's gRPC layer: the Worker service over a Replica (workers/replica.h).
#ifndef LOCKSTEP_SERVICES_WORKER_SERVICE_H_
#define LOCKSTEP_SERVICES_WORKER_SERVICE_H_

#include "lockstep/v1/worker.grpc.pb.h"
#include "workers/replica.h"

namespace lockstep {

class WorkerServiceImpl final : public v1::Worker::Service {
 public:
  explicit WorkerServiceImpl(Replica* replica) : replica_(replica) {}

  grpc::Status Prepare(grpc::ServerContext* ctx, grpc::ServerReader<v1::PrepareChunk>* reader,
                       v1::PrepareResponse* resp) override;
  grpc::Status Step(grpc::ServerContext*, const v1::StepRequest* req,
                    v1::StepResponse* resp) override;
  grpc::Status Steps(grpc::ServerContext* ctx,
                     grpc::ServerReaderWriter<v1::StepResponse, v1::StepRequest>* stream) override;
  grpc::Status Evaluate(grpc::ServerContext*, const v1::EvaluateRequest* req,
                        v1::EvaluateResponse* resp) override;
  grpc::Status FetchState(grpc::ServerContext* ctx, const v1::FetchStateRequest* req,
                          grpc::ServerWriter<v1::StateChunk>* writer) override;
  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest* req,
                       v1::ReleaseResponse*) override;

 private:
  Replica* replica_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_WORKER_SERVICE_H_
