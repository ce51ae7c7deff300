// RendezvousStore: a Store (core/store.h) backed by the coordinator's Rendezvous service,
// with every key under a prefix (one namespace per job attempt). Used by workers to
// bootstrap Gloo and NCCL. Thread-safe.
#ifndef LOCKSTEP_SERVICES_COMMON_RENDEZVOUS_STORE_H_
#define LOCKSTEP_SERVICES_COMMON_RENDEZVOUS_STORE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "core/store.h"
#include "lockstep/v1/registry.grpc.pb.h"

namespace lockstep {

class RendezvousStore final : public Store {
 public:
  RendezvousStore(std::shared_ptr<grpc::Channel> channel, std::string prefix,
                  absl::Duration rpc_timeout = absl::Seconds(10));
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;

 private:
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  std::string prefix_;
  absl::Duration rpc_timeout_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_RENDEZVOUS_STORE_H_
