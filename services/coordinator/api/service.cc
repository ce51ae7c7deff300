// The coordinator's gRPC layer: JobService, WorkerRegistry and Rendezvous, each handler one line
// over the plain classes (JobManager, WorkerPool, KvTable). Contract: service.h.
#include "services/coordinator/api/service.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "services/common/rpc/status.h"
#include "services/coordinator/api/job_access.h"

namespace lockstep {
namespace {

// Streams a job's events (or log lines): the history, then live events as its log wakes
// it, one write in flight at a time, until the log is closed (the job ended) or the call
// is cancelled; with `history_only`, once the history is out.
// Its state lives in a Core shared with the log's wake-up, so that a wake-up after the
// RPC ended touches no freed memory: calls on the reactor are made under core->mu while
// core->reactor is set, and OnDone clears it first.
class WatchReactor final : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  WatchReactor(std::unique_ptr<JobManager::Watch> watch, int64_t from_step, bool history_only,
               RpcMetrics* rpc)
      : watch_(std::move(watch)),
        core_(std::make_shared<Core>(
            watch_->log(), from_step, watch_->replay_until(),
            history_only ? watch_->replay_until() : std::numeric_limits<int64_t>::max())) {
    absl::MutexLock lock(&core_->mu);
    core_->reactor = this;
    core_->rpc = rpc;
    core_->wake = core_->log->Subscribe([weak = std::weak_ptr<Core>(core_)] {
      if (auto core = weak.lock()) {
        absl::MutexLock lock(&core->mu);
        core->Pump();
      }
    });
    core_->Pump();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&core_->mu);
    core_->writing = false;
    if (!ok) core_->cancelled = true;
    core_->Pump();
  }
  void OnCancel() override {
    absl::MutexLock lock(&core_->mu);
    core_->cancelled = true;
    core_->Pump();
  }
  void OnDone() override {
    {
      absl::MutexLock lock(&core_->mu);
      core_->reactor = nullptr;
      core_->wake.reset();
    }
    delete this;  // the Watch goes with it, outside any lock
  }

 private:
  static constexpr size_t kBatch = 64;

  struct Core {
    Core(std::shared_ptr<EventLog> log, int64_t from_step, int64_t replay_until, int64_t stop_at)
        : log(std::move(log)), from_step(from_step), replay_until(replay_until), stop_at(stop_at) {}

    // Starts the next write, or Finish.
    void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      if (reactor == nullptr || finished || writing) return;
      if (cancelled) {  // by the client (`lockstep watch | head`): no error of ours
        finished = true;
        reactor->Finish(
            RpcMetrics::ClientCancelled(rpc, RpcMetrics::kWatchJobMethod, grpc::Status::CANCELLED));
        return;
      }
      if (pending.empty() && !closed) {
        EventLog::Batch b = log->Read(cursor, from_step, replay_until, kBatch, stop_at);
        cursor = b.next;
        closed = b.closed;
        interrupted = b.interrupted;
        pending.insert(pending.end(), std::make_move_iterator(b.events.begin()),
                       std::make_move_iterator(b.events.end()));
      }
      if (!pending.empty()) {
        message = std::move(pending.front());
        pending.pop_front();
        writing = true;
        reactor->StartWrite(&message);
      } else if (closed) {
        finished = true;
        // A drain ends the stream with its reason (UNAVAILABLE: watch again later).
        reactor->Finish(interrupted.ok() ? grpc::Status::OK
                                         : RpcMetrics::Counted(rpc, RpcMetrics::kWatchJobMethod,
                                                               ToGrpcStatus(interrupted)));
      }
    }

    const std::shared_ptr<EventLog> log;
    const int64_t from_step, replay_until, stop_at;
    absl::Mutex mu;
    WatchReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;  // null once done
    RpcMetrics* rpc = nullptr;                            // may be null
    EventLog::Wake wake ABSL_GUARDED_BY(mu);
    int64_t cursor ABSL_GUARDED_BY(mu) = 0;
    std::deque<v1::JobEvent> pending ABSL_GUARDED_BY(mu);
    v1::JobEvent message ABSL_GUARDED_BY(mu);  // the write in flight
    bool writing ABSL_GUARDED_BY(mu) = false;
    bool closed ABSL_GUARDED_BY(mu) = false;       // the log ends after `pending`
    absl::Status interrupted ABSL_GUARDED_BY(mu);  // why, when it ends before the job
    bool cancelled ABSL_GUARDED_BY(mu) = false;    // the client ended the stream
    bool finished ABSL_GUARDED_BY(mu) = false;
  };

  const std::unique_ptr<JobManager::Watch> watch_;
  const std::shared_ptr<Core> core_;
};

// A stream refused at the start.
class RefusedReactor final : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  RefusedReactor(const absl::Status& st, RpcMetrics* rpc) {
    Finish(RpcMetrics::Counted(rpc, RpcMetrics::kWatchJobMethod, ToGrpcStatus(st)));
  }
  void OnDone() override { delete this; }
};

class RefusedWait final : public grpc::ServerUnaryReactor {
 public:
  explicit RefusedWait(const absl::Status& st) { Finish(ToGrpcStatus(st)); }
  void OnDone() override { delete this; }
};

// One Rendezvous.Wait: a KvTable waiter, ended by its keys, its deadline or a cancel.
class WaitReactor final : public grpc::ServerUnaryReactor {
 public:
  WaitReactor(KvTable* kv, std::vector<std::string> keys, absl::Time deadline,
              const std::string& caller, v1::WaitResponse* resp)
      : kv_(kv) {
    const int64_t id = kv_->WaitAsync(
        std::move(keys), deadline,
        [this, resp](absl::StatusOr<std::vector<std::string>> values) {
          if (values.ok()) {
            for (auto& v : *values) resp->add_values(std::move(v));
          }
          Finish(ToGrpcStatus(values.status()));
        },
        caller);
    absl::MutexLock lock(&mu_);
    id_ = id;
  }
  void OnCancel() override {
    int64_t id;
    {
      absl::MutexLock lock(&mu_);
      id = id_;
    }
    kv_->CancelWait(id, absl::CancelledError("rendezvous: the wait was cancelled"));
  }
  void OnDone() override { delete this; }

 private:
  KvTable* kv_;
  absl::Mutex mu_;
  int64_t id_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

absl::Status JobServiceImpl::MayTouch(const grpc::ServerContextBase& ctx,
                                      const std::string& id) const {
  ASSIGN_OR_RETURN(const Principal who, guard_->Client(ctx));
  return JobFor(*jobs_, who, id).status();
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* ctx, const v1::JobSpec* req,
                                       v1::Job* resp) {
  absl::StatusOr<Principal> who = guard_->Client(*ctx);
  if (!who.ok()) return ToGrpcStatus(who.status());
  return Answer(jobs_->Submit(*req, *who), resp);
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                    v1::Job* resp) {
  if (absl::Status st = MayTouch(*ctx, req->id()); !st.ok()) return ToGrpcStatus(st);
  return Answer(jobs_->Get(req->id()), resp);
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                      v1::ListJobsResponse* resp) {
  absl::StatusOr<Principal> who = guard_->Client(*ctx);
  if (!who.ok()) return ToGrpcStatus(who.status());
  v1::ListJobsRequest mine = *req;
  if (!who->admin) mine.set_owner(who->name);  // users see their own jobs only
  *resp = jobs_->List(mine);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::JobEvent>* JobServiceImpl::WatchJob(grpc::CallbackServerContext* ctx,
                                                                 const v1::WatchJobRequest* req) {
  if (absl::Status st = MayTouch(*ctx, req->id()); !st.ok()) return new RefusedReactor(st, rpc_);
  absl::StatusOr<std::unique_ptr<JobManager::Watch>> watch = jobs_->StartWatch(req->id());
  if (!watch.ok()) return new RefusedReactor(watch.status(), rpc_);
  return new WatchReactor(std::move(watch).value(), req->from_step(), req->history_only(), rpc_);
}

// Counted by the interceptor (RpcMetrics), not by itself: no RpcMetrics here.
grpc::ServerWriteReactor<v1::JobEvent>* JobServiceImpl::WatchLogs(grpc::CallbackServerContext* ctx,
                                                                  const v1::WatchLogsRequest* req) {
  if (absl::Status st = MayTouch(*ctx, req->id()); !st.ok()) return new RefusedReactor(st, nullptr);
  absl::StatusOr<std::unique_ptr<JobManager::Watch>> watch =
      jobs_->StartWatch(req->id(), /*logs=*/true);
  if (!watch.ok()) return new RefusedReactor(watch.status(), nullptr);
  return new WatchReactor(std::move(watch).value(), 0, !req->follow(), nullptr);
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                                       v1::Job* resp) {
  if (absl::Status st = MayTouch(*ctx, req->id()); !st.ok()) return ToGrpcStatus(st);
  return Answer(jobs_->Cancel(req->id()), resp);
}

grpc::Status JobServiceImpl::ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest*,
                                         v1::ListWorkersResponse* resp) {
  absl::StatusOr<Principal> who = guard_->Client(*ctx);
  if (!who.ok()) return ToGrpcStatus(who.status());
  if (!who->admin) {
    return ToGrpcStatus(absl::PermissionDeniedError("listing workers is for admins"));
  }
  for (auto& w : pool_->List()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetCheckpoint(grpc::ServerContext* ctx,
                                           const v1::GetCheckpointRequest* req,
                                           grpc::ServerWriter<v1::CheckpointChunk>* writer) {
  if (absl::Status st = MayTouch(*ctx, req->id()); !st.ok()) return ToGrpcStatus(st);
  absl::StatusOr<JobManager::StateFile> file =
      jobs_->CheckpointFile(req->id(), req->has_step() ? std::optional(req->step()) : std::nullopt);
  if (!file.ok()) return ToGrpcStatus(file.status());
  // Opened first: the job may drop an old snapshot meanwhile, and an open file stays whole.
  std::ifstream in(file->path, std::ios::binary | std::ios::ate);
  if (!in) {
    return ToGrpcStatus(absl::NotFoundError(
        absl::StrCat("job ", req->id(), ": the state of step ", file->step, " is gone")));
  }
  const uint64_t total = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  v1::CheckpointChunk chunk;
  chunk.set_step(file->step);
  chunk.set_total_bytes(total);
  std::string buf(1 << 20, '\0');
  uint64_t sent = 0;
  do {
    const uint64_t n = std::min<uint64_t>(buf.size(), total - sent);
    if (!in.read(buf.data(), static_cast<std::streamsize>(n))) {
      return ToGrpcStatus(absl::DataLossError(absl::StrCat(file->path, ": read failed")));
    }
    chunk.set_data(buf.data(), n);
    if (ctx->IsCancelled() || !writer->Write(chunk)) return grpc::Status::CANCELLED;
    chunk.clear_step();
    chunk.clear_total_bytes();
    sent += n;
  } while (sent < total);
  return grpc::Status::OK;
}

grpc::Status WorkerRegistryImpl::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                          v1::RegisterResponse* resp) {
  absl::StatusOr<std::string> identity = guard_->Worker(*ctx);
  if (!identity.ok()) return ToGrpcStatus(identity.status());
  if (req->address().empty() || req->device().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError("address and device are required"));
  }
  absl::StatusOr<std::string> id =
      pool_->RegisterAs(*identity, req->address(), req->device(), req->name(), req->threads());
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_worker_id(*id);
  resp->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(interval_));
  jobs_->Kick();
  return grpc::Status::OK;
}

grpc::Status WorkerRegistryImpl::Enroll(grpc::ServerContext* ctx, const v1::EnrollRequest* req,
                                        v1::EnrollResponse* resp) {
  if (enrollment_ == nullptr) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "enrollment is off: the coordinator needs --worker_ca_key and --bootstrap_token_file"));
  }
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  const absl::string_view authorization =
      it == md.end() ? absl::string_view()
                     : absl::string_view(it->second.data(), it->second.size());
  return Answer(enrollment_->Enroll(authorization, *req), resp);
}

grpc::Status WorkerRegistryImpl::Heartbeat(grpc::ServerContext* ctx,
                                           const v1::HeartbeatRequest* req,
                                           v1::HeartbeatResponse*) {
  absl::StatusOr<std::string> identity = guard_->Worker(*ctx);
  if (!identity.ok()) return ToGrpcStatus(identity.status());
  // Only the identity that registered an id beats for it and writes in its jobs' logs.
  if (absl::Status st = pool_->Heartbeat(req->worker_id(), *identity); !st.ok()) {
    return ToGrpcStatus(st);
  }
  if (req->leaving()) {
    if (absl::Status st = jobs_->WorkerLeaving(req->worker_id(), *identity); !st.ok()) {
      return ToGrpcStatus(st);
    }
  }
  if (!req->logs().empty()) jobs_->AppendWorkerLogs(req->worker_id(), req->logs());
  return grpc::Status::OK;
}

grpc::Status WorkerAdminImpl::RevokeWorker(grpc::ServerContext* ctx,
                                           const v1::RevokeWorkerRequest* req,
                                           v1::RevokeWorkerResponse* resp) {
  absl::StatusOr<Principal> who = guard_->Client(*ctx);
  if (!who.ok()) return ToGrpcStatus(who.status());
  if (!who->admin) {
    return ToGrpcStatus(absl::PermissionDeniedError("revoking workers is for admins"));
  }
  absl::StatusOr<std::string> identity = pool_->Revoke(req->id());
  if (!identity.ok()) return ToGrpcStatus(identity.status());
  resp->set_identity(*identity);
  jobs_->Kick();  // its job, if any, recovers now
  return grpc::Status::OK;
}

grpc::Status RendezvousImpl::Set(grpc::ServerContext* ctx, const v1::SetRequest* req,
                                 v1::SetResponse*) {
  absl::StatusOr<std::string> identity = guard_->Worker(*ctx);
  if (!identity.ok()) return ToGrpcStatus(identity.status());
  return ToGrpcStatus(kv_->Set(req->key(), req->value(), *identity));
}

grpc::Status RendezvousImpl::Get(grpc::ServerContext* ctx, const v1::GetRequest* req,
                                 v1::GetResponse* resp) {
  absl::StatusOr<std::string> identity = guard_->Worker(*ctx);
  if (!identity.ok()) return ToGrpcStatus(identity.status());
  return Answer(kv_->Get(req->key(), *identity), resp->mutable_value());
}

grpc::ServerUnaryReactor* RendezvousImpl::Wait(grpc::CallbackServerContext* ctx,
                                               const v1::WaitRequest* req, v1::WaitResponse* resp) {
  absl::StatusOr<std::string> identity = guard_->Worker(*ctx);
  if (!identity.ok()) return new RefusedWait(identity.status());
  // Bounded by the request's timeout and the caller's deadline, whichever is sooner.
  const absl::Time deadline =
      std::min(absl::Now() + absl::Milliseconds(std::clamp<int64_t>(req->timeout_ms(), 0, 600000)),
               absl::FromChrono(ctx->deadline()));
  return new WaitReactor(kv_, {req->keys().begin(), req->keys().end()}, deadline, *identity, resp);
}

}  // namespace lockstep
