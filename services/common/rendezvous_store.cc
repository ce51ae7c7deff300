#include "services/common/rendezvous_store.h"

#include "services/common/status.h"

namespace lockstep {

RendezvousStore::RendezvousStore(std::shared_ptr<grpc::Channel> channel, std::string prefix,
                                 absl::Duration rpc_timeout)
    : stub_(v1::Rendezvous::NewStub(channel)),
      prefix_(std::move(prefix)),
      rpc_timeout_(rpc_timeout) {}

absl::Status RendezvousStore::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + rpc_timeout_));
  v1::SetRequest req;
  req.set_key(prefix_ + key);
  req.set_value(value);
  v1::SetResponse resp;
  return FromGrpcStatus(stub_->Set(&ctx, req, &resp));
}

absl::StatusOr<std::string> RendezvousStore::Get(const std::string& key, absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout + rpc_timeout_));
  v1::WaitRequest req;
  req.add_keys(prefix_ + key);
  req.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  v1::WaitResponse resp;
  absl::Status st = FromGrpcStatus(stub_->Wait(&ctx, req, &resp));
  if (!st.ok()) return st;
  if (resp.values_size() != 1) return absl::InternalError("rendezvous: malformed Wait answer");
  return resp.values(0);
}

}  // namespace lockstep
