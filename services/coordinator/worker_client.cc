#include "services/coordinator/worker_client.h"

#include <grpcpp/grpcpp.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "lockstep/v1/worker.grpc.pb.h"
#include "services/common/net.h"
#include "services/common/status.h"

namespace lockstep {
namespace {

void SetDeadline(grpc::ClientContext& ctx, absl::Duration timeout) {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

class GrpcStepStream final : public StepStream {
 public:
  GrpcStepStream(v1::Worker::Stub* stub, absl::Duration timeout) {
    SetDeadline(ctx_, timeout);
    stream_ = stub->Steps(&ctx_);
  }
  bool Send(const v1::StepRequest& request) override {
    absl::MutexLock lock(&write_mu_);
    return !closed_ && stream_->Write(request);
  }
  void CloseSend() override {
    absl::MutexLock lock(&write_mu_);
    if (!closed_) stream_->WritesDone();
    closed_ = true;
  }
  absl::StatusOr<v1::StepResponse> Receive() override {
    v1::StepResponse resp;
    if (stream_->Read(&resp)) return resp;
    if (!finished_) {
      final_ = FromGrpcStatus(stream_->Finish());
      finished_ = true;
    }
    if (final_.ok()) return absl::OutOfRangeError("step stream ended");
    return final_;
  }
  void Cancel() override { ctx_.TryCancel(); }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::StepRequest, v1::StepResponse>> stream_;
  absl::Mutex write_mu_;
  bool closed_ ABSL_GUARDED_BY(write_mu_) = false;
  // Receive runs on one thread only.
  bool finished_ = false;
  absl::Status final_;
};

class GrpcWorkerClient final : public WorkerClient {
 public:
  explicit GrpcWorkerClient(const std::string& address)
      : channel_(MakeChannel(address)),
        stub_(v1::Worker::NewStub(channel_)),
        health_(grpc::health::v1::Health::NewStub(channel_)) {}

  absl::StatusOr<v1::PrepareResponse> Prepare(const v1::PrepareHeader& header,
                                              const TrainState& state,
                                              absl::Duration timeout) override {
    Call call(this, timeout);
    v1::PrepareResponse resp;
    auto writer = stub_->Prepare(&call.ctx, &resp);
    v1::PrepareChunk chunk;
    *chunk.mutable_header() = header;
    bool ok = writer->Write(chunk);
    const std::string bytes = StateBytes(state);
    for (size_t off = 0; ok && off < bytes.size(); off += kStateChunkBytes) {
      chunk.set_state(bytes.substr(off, kStateChunkBytes));
      ok = writer->Write(chunk);
    }
    if (ok) writer->WritesDone();
    absl::Status st = FromGrpcStatus(writer->Finish());
    if (!st.ok()) return st;
    return resp;
  }

  absl::StatusOr<std::unique_ptr<StepStream>> OpenSteps(absl::Duration timeout) override {
    return std::make_unique<GrpcStepStream>(stub_.get(), timeout);
  }

  absl::StatusOr<v1::EvaluateResponse> Evaluate(const v1::EvaluateRequest& request,
                                                absl::Duration timeout) override {
    Call call(this, timeout);
    v1::EvaluateResponse resp;
    absl::Status st = FromGrpcStatus(stub_->Evaluate(&call.ctx, request, &resp));
    if (!st.ok()) return st;
    return resp;
  }

  absl::StatusOr<TrainState> FetchState(const std::string& job_id,
                                        absl::Duration timeout) override {
    Call call(this, timeout);
    v1::FetchStateRequest req;
    req.set_job_id(job_id);
    auto reader = stub_->FetchState(&call.ctx, req);
    v1::StateChunk chunk, first;
    std::string bytes;
    for (bool at_first = true; reader->Read(&chunk); at_first = false) {
      if (at_first) first = chunk;  // the header fields travel in the first chunk
      bytes += chunk.data();
    }
    absl::Status st = FromGrpcStatus(reader->Finish());
    if (!st.ok()) return st;
    auto state = StateFromBytes(bytes, first.step(), first.param_count(), first.slot_count());
    if (!state.ok()) return absl::DataLossError(state.status().message());
    return state;
  }

  absl::Status Release(const std::string& job_id, const std::string& reason,
                       absl::Duration timeout) override {
    grpc::ClientContext ctx;
    SetDeadline(ctx, timeout);
    v1::ReleaseRequest req;
    req.set_job_id(job_id);
    req.set_reason(reason);
    v1::ReleaseResponse resp;
    return FromGrpcStatus(stub_->Release(&ctx, req, &resp));
  }

  bool Alive(absl::Duration timeout) override {
    grpc::ClientContext ctx;
    SetDeadline(ctx, timeout);
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    return health_->Check(&ctx, req, &resp).ok() &&
           resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }

  void CancelCalls() override {
    absl::MutexLock lock(&mu_);
    for (grpc::ClientContext* ctx : live_) ctx->TryCancel();
  }

 private:
  // A call's context, reachable by CancelCalls while the call lasts.
  struct Call {
    Call(GrpcWorkerClient* client, absl::Duration timeout) : client(client) {
      SetDeadline(ctx, timeout);
      absl::MutexLock lock(&client->mu_);
      client->live_.insert(&ctx);
    }
    ~Call() {
      absl::MutexLock lock(&client->mu_);
      client->live_.erase(&ctx);
    }
    GrpcWorkerClient* client;
    grpc::ClientContext ctx;
  };

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  absl::Mutex mu_;
  std::set<grpc::ClientContext*> live_ ABSL_GUARDED_BY(mu_);
};

class GrpcFactory final : public WorkerClientFactory {
 public:
  std::unique_ptr<WorkerClient> Connect(const std::string& address) override {
    return std::make_unique<GrpcWorkerClient>(address);
  }
};

}  // namespace

std::unique_ptr<WorkerClientFactory> NewGrpcWorkerClientFactory() {
  return std::make_unique<GrpcFactory>();
}

}  // namespace lockstep
