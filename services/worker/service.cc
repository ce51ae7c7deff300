// The worker's gRPC layer: the Worker service over a JobSlot (job_slot.h), translating with wire.h.
// Contract: service.h.
#include "services/worker/service.h"

#include <spdlog/spdlog.h>

#include <deque>
#include <map>

#include "absl/strings/str_cat.h"
#include "services/common/observability/job_log.h"
#include "services/common/rpc/net.h"
#include "services/common/rpc/status.h"
#include "services/common/rpc/wire.h"

namespace lockstep {

spdlog::level::level_enum StepFailureLevel(const absl::Status& status) {
  return absl::IsUnavailable(status) ? spdlog::level::warn : spdlog::level::err;
}

namespace {

// The rank this worker holds in each job it was given (the newest few), for its lines
// about them.
class Ranks {
 public:
  void Set(const std::string& job_id, int rank) {
    absl::MutexLock lock(&mu_);
    ranks_[job_id] = rank;
    order_.push_back(job_id);
    if (order_.size() > 16) {
      ranks_.erase(order_.front());
      order_.pop_front();
    }
  }
  JobContext About(const std::string& job_id) {
    absl::MutexLock lock(&mu_);
    auto it = ranks_.find(job_id);
    return {job_id, "", it == ranks_.end() ? -1 : it->second};
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, int> ranks_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);
};

Ranks& JobRanks() {
  static auto* ranks = new Ranks();
  return *ranks;
}

// The state's chunks as Prepare's stream brings them, the first one's data included.
class PrepareSource final : public StateSource {
 public:
  PrepareSource(grpc::ServerReader<v1::PrepareChunk>* reader, std::string first)
      : reader_(reader), first_(std::move(first)) {}
  absl::StatusOr<bool> Next(std::string* chunk) override {
    if (!first_done_) {
      first_done_ = true;
      *chunk = std::move(first_);
      return true;
    }
    v1::PrepareChunk c;
    if (!reader_->Read(&c)) return false;
    if (c.has_job() || c.state().has_header()) {
      return absl::InvalidArgumentError("Prepare: only the first message carries a header");
    }
    *chunk = std::move(*c.mutable_state()->mutable_data());
    return true;
  }

 private:
  grpc::ServerReader<v1::PrepareChunk>* reader_;
  std::string first_;
  bool first_done_ = false;
};

// One Steps stream. Requests are read ahead (at most kMaxQueued waiting) and run on the
// service's executor; answers are written in order, one write in flight at a time. The
// reactor's state lives in a Core shared with the tasks on the executor, so that a task
// finishing after the RPC ended touches no freed memory: every call on the reactor is
// made under core->mu while core->reactor is set, and OnDone clears it first.
class StepsReactor final : public grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse> {
 public:
  StepsReactor(JobSlot* slot, SerialExecutor* executor, RpcMetrics* rpc)
      : core_(std::make_shared<Core>()), slot_(slot), executor_(executor) {
    absl::MutexLock lock(&core_->mu);
    core_->reactor = this;
    core_->rpc = rpc;
    core_->Pump();
  }

  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&core_->mu);
    core_->reading = false;
    if (!ok) {
      core_->reads_done = true;
      core_->MaybeFinish();
      return;
    }
    if (!core_->status.ok()) return;  // failed: stop reading
    auto request = std::make_shared<v1::StepRequest>(std::move(core_->request));
    ++core_->queued;
    executor_->Post([core = core_, slot = slot_, request] {
      {
        absl::MutexLock lock(&core->mu);
        if (!core->status.ok()) {  // the stream ended: its steps are not wanted
          --core->queued;
          core->Pump();
          return;
        }
      }
      std::vector<rng::Key> keys;
      absl::StatusOr<StepResult> result = slot->Step(request->job_id(), FromProto(*request, &keys));
      if (!result.ok() && !absl::IsCancelled(result.status())) {
        LogJob(StepFailureLevel(result.status()), JobRanks().About(request->job_id()),
               absl::StrCat("step ", request->step(), ": ", result.status().ToString()));
      }
      absl::MutexLock lock(&core->mu);
      --core->queued;
      if (!result.ok() && core->status.ok()) core->status = result.status();
      if (result.ok() && core->status.ok()) core->outbox.push_back(ToProto(*result));
      core->Pump();
    });
    core_->Pump();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&core_->mu);
    core_->writing = false;
    if (!ok && core_->status.ok()) core_->status = absl::CancelledError("the stream broke");
    if (!ok) core_->client_ended = true;
    core_->Pump();
  }

  void OnCancel() override {
    absl::MutexLock lock(&core_->mu);
    if (core_->status.ok()) core_->status = absl::CancelledError("the coordinator cancelled");
    core_->client_ended = true;
    core_->Pump();
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&core_->mu);
      core_->reactor = nullptr;
    }
    delete this;
  }

 private:
  static constexpr int kMaxQueued = 16;

  struct Core {
    absl::Mutex mu;
    StepsReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;   // null once done
    RpcMetrics* rpc = nullptr;                             // may be null
    v1::StepRequest request ABSL_GUARDED_BY(mu);           // the read in flight
    v1::StepResponse writing_message ABSL_GUARDED_BY(mu);  // the write in flight
    std::deque<v1::StepResponse> outbox ABSL_GUARDED_BY(mu);
    int queued ABSL_GUARDED_BY(mu) = 0;  // requests read, not yet run
    bool reading ABSL_GUARDED_BY(mu) = false;
    bool reads_done ABSL_GUARDED_BY(mu) = false;
    bool writing ABSL_GUARDED_BY(mu) = false;
    bool finished ABSL_GUARDED_BY(mu) = false;
    bool client_ended ABSL_GUARDED_BY(mu) = false;  // the coordinator cancelled or went away
    absl::Status status ABSL_GUARDED_BY(mu);        // the first error

    // Starts what can start: the next write, the next read (while few requests wait),
    // or Finish.
    void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      if (reactor == nullptr || finished) return;
      if (!writing && !outbox.empty() && status.ok()) {
        writing_message = std::move(outbox.front());
        outbox.pop_front();
        writing = true;
        reactor->StartWrite(&writing_message);
      }
      if (!reading && !reads_done && status.ok() &&
          queued + static_cast<int>(outbox.size()) < kMaxQueued) {
        reading = true;
        reactor->StartRead(&request);
      }
      MaybeFinish();
    }
    void MaybeFinish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  };

  std::shared_ptr<Core> core_;
  JobSlot* slot_;
  SerialExecutor* executor_;
};

void StepsReactor::Core::MaybeFinish() {
  if (reactor == nullptr || finished || writing || queued > 0) return;
  // Done when the coordinator stopped sending and every answer is out, or on an error
  // (the error ends the stream; answers not yet written are dropped).
  if (status.ok() && !(reads_done && outbox.empty())) return;
  finished = true;
  // A stream the coordinator ended (a cancelled job, a recovery) is no error of this worker.
  reactor->Finish(
      client_ended
          ? RpcMetrics::ClientCancelled(rpc, RpcMetrics::kStepsMethod, ToGrpcStatus(status))
          : RpcMetrics::Counted(rpc, RpcMetrics::kStepsMethod, ToGrpcStatus(status)));
}

// A Steps stream refused at the start.
class RefusedSteps final : public grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse> {
 public:
  RefusedSteps(const absl::Status& st, RpcMetrics* rpc) {
    Finish(RpcMetrics::Counted(rpc, RpcMetrics::kStepsMethod, ToGrpcStatus(st)));
  }
  void OnDone() override { delete this; }
};

}  // namespace

absl::Status WorkerServiceImpl::CheckCaller(const grpc::ServerContextBase& ctx) const {
  return guard_->Peer(ctx, kCoordinatorIdentity);
}

grpc::Status WorkerServiceImpl::Prepare(grpc::ServerContext* ctx,
                                        grpc::ServerReader<v1::PrepareChunk>* reader,
                                        v1::PrepareResponse* resp) {
  if (absl::Status st = CheckCaller(*ctx); !st.ok()) return ToGrpcStatus(st);
  v1::PrepareChunk first;
  if (!reader->Read(&first) || !first.has_job() || !first.state().has_header()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "Prepare: the first message must carry the job and the state's header"));
  }
  PrepareSource source(reader, std::move(*first.mutable_state()->mutable_data()));
  const JobAssignment job = FromProto(first.job());
  JobRanks().Set(job.job_id, job.replica.rank);
  const JobContext about = JobRanks().About(job.job_id);
  LogJob(spdlog::level::info, about,
         absl::StrCat("preparing rank ", job.replica.rank, " of ", job.replica.world_size));
  absl::StatusOr<PrepareResult> result =
      slot_->Prepare(job, FromProto(first.state().header()), source);
  if (result.ok()) {
    *resp = ToProto(*result);
    LogJob(spdlog::level::info, about,
           absl::StrCat("prepared: ", result->train_examples, " training examples, ",
                        result->test_examples, " test examples"));
  } else {
    LogJob(spdlog::level::err, about, "prepare failed: " + result.status().ToString());
  }
  return ToGrpcStatus(result.status());
}

grpc::ServerBidiReactor<v1::StepRequest, v1::StepResponse>* WorkerServiceImpl::Steps(
    grpc::CallbackServerContext* ctx) {
  if (absl::Status st = CheckCaller(*ctx); !st.ok()) return new RefusedSteps(st, rpc_);
  return new StepsReactor(slot_, &steps_, rpc_);
}

grpc::Status WorkerServiceImpl::Evaluate(grpc::ServerContext* ctx, const v1::EvaluateRequest* req,
                                         v1::EvaluateResponse* resp) {
  if (absl::Status st = CheckCaller(*ctx); !st.ok()) return ToGrpcStatus(st);
  absl::StatusOr<EvalSums> sums = slot_->Evaluate(req->job_id(), req->begin(), req->end());
  if (sums.ok()) *resp = ToProto(*sums);
  return ToGrpcStatus(sums.status());
}

grpc::Status WorkerServiceImpl::FetchState(grpc::ServerContext* ctx,
                                           const v1::FetchStateRequest* req,
                                           grpc::ServerWriter<v1::StateChunk>* writer) {
  if (absl::Status st = CheckCaller(*ctx); !st.ok()) return ToGrpcStatus(st);
  bool first = true;
  return ToGrpcStatus(slot_->FetchState(
      req->job_id(), kStateChunkBytes, [&](const StateHeader& header, std::string_view bytes) {
        v1::StateChunk chunk;
        if (first) *chunk.mutable_header() = ToProto(header);
        first = false;
        chunk.set_data(std::string(bytes));
        return writer->Write(chunk) ? absl::OkStatus()
                                    : absl::CancelledError("the coordinator went away");
      }));
}

grpc::Status WorkerServiceImpl::Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                                        v1::ReleaseResponse*) {
  if (absl::Status st = CheckCaller(*ctx); !st.ok()) return ToGrpcStatus(st);
  LogJob(spdlog::level::info, JobRanks().About(req->job_id()), "released: " + req->reason());
  slot_->Release(req->job_id());
  return grpc::Status::OK;
}

}  // namespace lockstep
