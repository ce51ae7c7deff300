// The coordinator's gRPC layer: JobService, WorkerRegistry and Rendezvous, each handler
// one line over the plain classes (JobManager, WorkerPool, KvTable).
#ifndef LOCKSTEP_SERVICES_COORDINATOR_SERVICE_H_
#define LOCKSTEP_SERVICES_COORDINATOR_SERVICE_H_

#include "lockstep/v1/job.grpc.pb.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/coordinator/job_manager.h"
#include "services/coordinator/kv_table.h"
#include "services/coordinator/worker_pool.h"

namespace lockstep {

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(JobManager* jobs, WorkerPool* pool) : jobs_(jobs), pool_(pool) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::JobSpec* req, v1::Job* resp) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override;

 private:
  JobManager* jobs_;
  WorkerPool* pool_;
};

class WorkerRegistryImpl final : public v1::WorkerRegistry::Service {
 public:
  WorkerRegistryImpl(WorkerPool* pool, absl::Duration heartbeat_interval)
      : pool_(pool), interval_(heartbeat_interval) {}
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;

 private:
  WorkerPool* pool_;
  absl::Duration interval_;
};

class RendezvousImpl final : public v1::Rendezvous::Service {
 public:
  explicit RendezvousImpl(KvTable* kv) : kv_(kv) {}
  grpc::Status Set(grpc::ServerContext*, const v1::SetRequest* req, v1::SetResponse*) override;
  grpc::Status Get(grpc::ServerContext*, const v1::GetRequest* req, v1::GetResponse* resp) override;
  grpc::Status Wait(grpc::ServerContext* ctx, const v1::WaitRequest* req,
                    v1::WaitResponse* resp) override;

 private:
  KvTable* kv_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_SERVICE_H_
