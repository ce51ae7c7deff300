// The one mapping between absl::Status and grpc::Status, both ways.
#ifndef LOCKSTEP_SERVICES_COMMON_STATUS_H_
#define LOCKSTEP_SERVICES_COMMON_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace lockstep {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COMMON_STATUS_H_
