#include "services/coordinator/service.h"

#include "services/common/status.h"

namespace lockstep {

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext*, const v1::JobSpec* req,
                                       v1::Job* resp) {
  return Answer(jobs_->Submit(*req), resp);
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext*, const v1::GetJobRequest* req,
                                    v1::Job* resp) {
  return Answer(jobs_->Get(req->id()), resp);
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                                      v1::ListJobsResponse* resp) {
  *resp = jobs_->List(*req);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                      grpc::ServerWriter<v1::JobEvent>* writer) {
  return ToGrpcStatus(jobs_->Watch(
      req->id(), req->from_step(), [&](const v1::JobEvent& e) { return writer->Write(e); },
      [&] { return ctx->IsCancelled(); }));
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                                       v1::Job* resp) {
  return Answer(jobs_->Cancel(req->id()), resp);
}

grpc::Status JobServiceImpl::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                         v1::ListWorkersResponse* resp) {
  for (auto& w : pool_->List()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status WorkerRegistryImpl::Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                                          v1::RegisterResponse* resp) {
  if (req->address().empty() || req->device().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("address and device are required"));
  }
  resp->set_worker_id(pool_->Register(req->address(), req->device(), req->name(), req->threads()));
  resp->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(interval_));
  return grpc::Status::OK;
}

grpc::Status WorkerRegistryImpl::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                           v1::HeartbeatResponse*) {
  return ToGrpcStatus(pool_->Heartbeat(req->worker_id()));
}

grpc::Status RendezvousImpl::Set(grpc::ServerContext*, const v1::SetRequest* req,
                                 v1::SetResponse*) {
  return ToGrpcStatus(kv_->Set(req->key(), req->value()));
}

grpc::Status RendezvousImpl::Get(grpc::ServerContext*, const v1::GetRequest* req,
                                 v1::GetResponse* resp) {
  auto v = kv_->Get(req->key());
  if (v.ok()) resp->set_value(*v);
  return ToGrpcStatus(v.status());
}

grpc::Status RendezvousImpl::Wait(grpc::ServerContext* ctx, const v1::WaitRequest* req,
                                  v1::WaitResponse* resp) {
  // Bounded by the request's timeout and the caller's deadline, whichever is sooner.
  absl::Duration timeout = absl::Milliseconds(std::clamp<int64_t>(req->timeout_ms(), 0, 600000));
  timeout = std::min(timeout, absl::FromChrono(ctx->deadline() - std::chrono::system_clock::now()));
  auto v = kv_->Wait({req->keys().begin(), req->keys().end()}, timeout);
  if (v.ok()) {
    for (auto& s : *v) resp->add_values(std::move(s));
  }
  return ToGrpcStatus(v.status());
}

}  // namespace lockstep
