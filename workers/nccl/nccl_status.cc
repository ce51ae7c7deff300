// NCCL results as absl::Status with file:line, and NCCL_RETURN_IF_ERROR. Contract: nccl_status.h.
#include "workers/nccl/nccl_status.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::Status NcclStatus(ncclResult_t result, const char* expr, const char* file, int line,
                        ncclComm_t comm) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  std::string message = absl::StrCat(file, ":", line, ": ", expr, ": ", ncclGetErrorString(result));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, " (", last, ")");
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(message);
    case ncclInvalidArgument:
      return absl::InvalidArgumentError(message);
    case ncclInvalidUsage:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace lockstep
