// The one mapping between absl::Status and grpc::Status, both ways.
#ifndef LOCKSTEP_SERVICES_COMMON_RPC_STATUS_H_
#define LOCKSTEP_SERVICES_COMMON_RPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lockstep {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// A handler's answer: moves the value into *out when there is one, maps the status.
template <typename T>
grpc::Status Answer(absl::StatusOr<T> v, T* out) {
  if (v.ok()) *out = std::move(v).value();
  return ToGrpcStatus(v.status());
}

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_RPC_STATUS_H_
