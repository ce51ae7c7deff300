// The coordinator's gRPC layer: JobService, WorkerRegistry and Rendezvous, each handler
// one line over the plain classes (JobManager, WorkerPool, KvTable). The streams that can
// last long — WatchJob and WatchLogs (a job's whole run) and Rendezvous.Wait (a job's
// bootstrap) — use gRPC's callback API, so that they pin no thread; they end on
// cancellation and shutdown.
//
// Every handler first asks the Guard who calls: the job API takes bearer tokens (users
// see and touch their own jobs, admins everything, and only admins list workers); the
// registry and the rendezvous take only workers' own certificates (auth.h: Guard::Worker),
// and each worker acts only as itself: its id, its jobs' rendezvous keys and logs.
// WorkerAdmin (admins' tokens) revokes a worker's identity.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_API_SERVICE_H_
#define LOCKSTEP_SERVICES_COORDINATOR_API_SERVICE_H_

#include "lockstep/v1/job.grpc.pb.h"
#include "lockstep/v1/registry.grpc.pb.h"
#include "services/common/observability/rpc_metrics.h"
#include "services/common/security/auth.h"
#include "services/coordinator/api/enrollment.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/workers/kv_table.h"
#include "services/coordinator/workers/worker_pool.h"

namespace lockstep {

class JobServiceImpl final
    : public v1::JobService::WithCallbackMethod_WatchJob<
          v1::JobService::WithCallbackMethod_WatchLogs<v1::JobService::Service>> {
 public:
  // All must outlive the service. `rpc` (may be null) counts the WatchJob streams'
  // statuses (RpcMetrics::kSelfCounted).
  JobServiceImpl(JobManager* jobs, WorkerPool* pool, const Guard* guard, RpcMetrics* rpc = nullptr)
      : jobs_(jobs), pool_(pool), guard_(guard), rpc_(rpc) {}
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::JobSpec* req, v1::Job* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext* ctx,
                                                   const v1::WatchJobRequest* req) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchLogs(grpc::CallbackServerContext* ctx,
                                                    const v1::WatchLogsRequest* req) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override;
  grpc::Status GetCheckpoint(grpc::ServerContext* ctx, const v1::GetCheckpointRequest* req,
                             grpc::ServerWriter<v1::CheckpointChunk>* writer) override;

 private:
  // The caller, if it may touch job `id` (its owner or an admin): UNAUTHENTICATED,
  // PERMISSION_DENIED ("belongs to another user"), NOT_FOUND.
  absl::Status MayTouch(const grpc::ServerContextBase& ctx, const std::string& id) const;

  JobManager* jobs_;
  WorkerPool* pool_;
  const Guard* guard_;
  RpcMetrics* rpc_;
};

class WorkerRegistryImpl final : public v1::WorkerRegistry::Service {
 public:
  // `jobs` is told when a worker registers (its scheduler may have work for it).
  // `enrollment` (may be null: Enroll is then FAILED_PRECONDITION) signs new workers' keys.
  WorkerRegistryImpl(WorkerPool* pool, JobManager* jobs, absl::Duration heartbeat_interval,
                     const Guard* guard, const Enrollment* enrollment = nullptr)
      : pool_(pool),
        jobs_(jobs),
        interval_(heartbeat_interval),
        guard_(guard),
        enrollment_(enrollment) {}
  grpc::Status Enroll(grpc::ServerContext* ctx, const v1::EnrollRequest* req,
                      v1::EnrollResponse* resp) override;
  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;

 private:
  WorkerPool* pool_;
  JobManager* jobs_;
  absl::Duration interval_;
  const Guard* guard_;
  const Enrollment* enrollment_;
};

class WorkerAdminImpl final : public v1::WorkerAdmin::Service {
 public:
  WorkerAdminImpl(WorkerPool* pool, JobManager* jobs, const Guard* guard)
      : pool_(pool), jobs_(jobs), guard_(guard) {}
  grpc::Status RevokeWorker(grpc::ServerContext* ctx, const v1::RevokeWorkerRequest* req,
                            v1::RevokeWorkerResponse* resp) override;

 private:
  WorkerPool* pool_;
  JobManager* jobs_;
  const Guard* guard_;
};

class RendezvousImpl final
    : public v1::Rendezvous::WithCallbackMethod_Wait<v1::Rendezvous::Service> {
 public:
  // A job's keys live under a prefix with a random part that only its ranks learn (in
  // Prepare), in a namespace only its workers' identities may use (KvTable).
  RendezvousImpl(KvTable* kv, const Guard* guard) : kv_(kv), guard_(guard) {}
  grpc::Status Set(grpc::ServerContext* ctx, const v1::SetRequest* req, v1::SetResponse*) override;
  grpc::Status Get(grpc::ServerContext* ctx, const v1::GetRequest* req,
                   v1::GetResponse* resp) override;
  grpc::ServerUnaryReactor* Wait(grpc::CallbackServerContext* ctx, const v1::WaitRequest* req,
                                 v1::WaitResponse* resp) override;

 private:
  KvTable* kv_;
  const Guard* guard_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_API_SERVICE_H_
