// RendezvousStore: a Store (core/store.h) backed by the coordinator's Rendezvous service,
// with every key under a prefix (one namespace per job attempt). Used by workers to
// bootstrap Gloo and NCCL. A cancelled token makes calls in flight and later calls
// return CANCELLED. Thread-safe.
#ifndef LOCKSTEP_SERVICES_COMMON_RPC_RENDEZVOUS_STORE_H_
#define LOCKSTEP_SERVICES_COMMON_RPC_RENDEZVOUS_STORE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "core/cancel.h"
#include "core/store.h"
#include "lockstep/v1/registry.grpc.pb.h"

namespace lockstep {

class RendezvousStore final : public Store {
 public:
  // `cancel` must outlive the store.
  RendezvousStore(std::shared_ptr<grpc::Channel> channel, std::string prefix,
                  const CancelToken& cancel, absl::Duration rpc_timeout = absl::Seconds(10));
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;

 private:
  // Runs call(ctx) with a deadline `timeout` away, cancelled with the token.
  absl::Status Call(absl::Duration timeout,
                    const std::function<grpc::Status(grpc::ClientContext*)>& call);

  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  const std::string prefix_;
  const CancelToken& cancel_;
  const absl::Duration rpc_timeout_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_RPC_RENDEZVOUS_STORE_H_
