// The one mapping between absl::Status and grpc::Status, both ways. Contract: status.h.
#include "services/common/rpc/status.h"

#include <string>

namespace lockstep {

// absl::StatusCode and grpc::StatusCode share their numbering (both are google.rpc.Code).
grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace lockstep
