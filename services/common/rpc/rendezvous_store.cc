// RendezvousStore: a Store (core/store.h) backed by the coordinator's Rendezvous service, with
// every key under a prefix (one namespace per job attempt). Contract: rendezvous_store.h.
#include "services/common/rpc/rendezvous_store.h"

#include "services/common/rpc/status.h"

namespace lockstep {

RendezvousStore::RendezvousStore(std::shared_ptr<grpc::Channel> channel, std::string prefix,
                                 const CancelToken& cancel, absl::Duration rpc_timeout)
    : stub_(v1::Rendezvous::NewStub(channel)),
      prefix_(std::move(prefix)),
      cancel_(cancel),
      rpc_timeout_(rpc_timeout) {}

absl::Status RendezvousStore::Call(absl::Duration timeout,
                                   const std::function<grpc::Status(grpc::ClientContext*)>& call) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  CancelToken::Callback on_cancel = cancel_.OnCancel([&ctx] { ctx.TryCancel(); });
  if (absl::Status st = cancel_.status(); !st.ok()) return st;
  absl::Status st = FromGrpcStatus(call(&ctx));
  if (absl::Status why = cancel_.status(); !why.ok()) return why;
  return st;
}

absl::Status RendezvousStore::Set(const std::string& key, const std::string& value) {
  v1::SetRequest req;
  req.set_key(prefix_ + key);
  req.set_value(value);
  v1::SetResponse resp;
  return Call(rpc_timeout_, [&](grpc::ClientContext* ctx) { return stub_->Set(ctx, req, &resp); });
}

absl::StatusOr<std::string> RendezvousStore::Get(const std::string& key, absl::Duration timeout) {
  v1::WaitRequest req;
  req.add_keys(prefix_ + key);
  req.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  v1::WaitResponse resp;
  absl::Status st = Call(timeout + rpc_timeout_,
                         [&](grpc::ClientContext* ctx) { return stub_->Wait(ctx, req, &resp); });
  if (!st.ok()) return st;
  if (resp.values_size() != 1) return absl::InternalError("rendezvous: malformed Wait answer");
  return resp.values(0);
}

}  // namespace lockstep
