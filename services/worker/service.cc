#include "services/worker/service.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "services/common/net.h"
#include "services/common/status.h"

namespace lockstep {

grpc::Status WorkerServiceImpl::Prepare(grpc::ServerContext*,
                                        grpc::ServerReader<v1::PrepareChunk>* reader,
                                        v1::PrepareResponse* resp) {
  v1::PrepareChunk chunk;
  if (!reader->Read(&chunk) || !chunk.has_header()) {
    return ToGrpcStatus(
        absl::InvalidArgumentError("Prepare: the first message must be the header"));
  }
  const v1::PrepareHeader header = chunk.header();
  // Bounded by what the header announces: a client cannot make us buffer more. The
  // buffer grows as chunks arrive, not by the announcement.
  constexpr uint64_t kMaxStateBytes = uint64_t{1} << 34;
  const uint64_t tensors = 1 + uint64_t{header.slot_count()};
  if (header.param_count() > kMaxStateBytes / sizeof(float) / tensors) {
    return ToGrpcStatus(absl::InvalidArgumentError("Prepare: train state over 16 GiB"));
  }
  const uint64_t expected = header.param_count() * tensors * sizeof(float);
  std::string state;
  while (reader->Read(&chunk)) {
    if (!chunk.has_state() || state.size() + chunk.state().size() > expected) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("Prepare: train state exceeds the ", expected, " bytes announced")));
    }
    state += chunk.state();
  }
  return Answer(replica_->Prepare(header, state), resp);
}

grpc::Status WorkerServiceImpl::Step(grpc::ServerContext*, const v1::StepRequest* req,
                                     v1::StepResponse* resp) {
  return Answer(replica_->Step(*req), resp);
}

grpc::Status WorkerServiceImpl::Steps(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<v1::StepResponse, v1::StepRequest>* stream) {
  v1::StepRequest req;
  while (stream->Read(&req)) {
    if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
    auto resp = replica_->Step(req);
    if (!resp.ok()) return ToGrpcStatus(resp.status());
    if (!stream->Write(*resp)) break;
  }
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Evaluate(grpc::ServerContext*, const v1::EvaluateRequest* req,
                                         v1::EvaluateResponse* resp) {
  return Answer(replica_->Evaluate(*req), resp);
}

grpc::Status WorkerServiceImpl::FetchState(grpc::ServerContext*, const v1::FetchStateRequest* req,
                                           grpc::ServerWriter<v1::StateChunk>* writer) {
  auto state = replica_->FetchState(req->job_id());
  if (!state.ok()) return ToGrpcStatus(state.status());
  v1::StateChunk chunk;
  chunk.set_step(state->step);
  chunk.set_param_count(state->params.size());
  chunk.set_slot_count(static_cast<uint32_t>(state->slots.size()));
  const std::string bytes = StateBytes(*state);
  for (size_t off = 0; off == 0 || off < bytes.size(); off += kStateChunkBytes) {
    chunk.set_data(bytes.substr(off, kStateChunkBytes));
    if (!writer->Write(chunk)) return grpc::Status::CANCELLED;
    chunk.clear_step();  // the header fields travel in the first chunk only
    chunk.clear_param_count();
    chunk.clear_slot_count();
  }
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Release(grpc::ServerContext*, const v1::ReleaseRequest* req,
                                        v1::ReleaseResponse*) {
  spdlog::info("release {}: {}", req->job_id(), req->reason());
  return ToGrpcStatus(replica_->Release(req->job_id()));
}

}  // namespace lockstep
