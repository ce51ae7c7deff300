// NCCL results as absl::Status with file:line, and NCCL_RETURN_IF_ERROR. Internal to
// workers/ (includes nccl.h).
#ifndef LOCKSTEP_WORKERS_NCCL_NCCL_STATUS_H_
#define LOCKSTEP_WORKERS_NCCL_NCCL_STATUS_H_

#include <nccl.h>

#include "absl/status/status.h"

namespace lockstep {

// An error naming `expr`, file:line, NCCL's error string and, when `comm` is given, its
// last error message. OK for ncclSuccess and for ncclInProgress (a non-blocking
// communicator's normal answer; see NcclComm::Await). Codes: UNAVAILABLE for system and
// remote errors (a lost peer), INVALID_ARGUMENT, FAILED_PRECONDITION for invalid usage,
// INTERNAL otherwise.
absl::Status NcclStatus(ncclResult_t result, const char* expr, const char* file, int line,
                        ncclComm_t comm = nullptr);

}  // namespace lockstep

#define NCCL_RETURN_IF_ERROR(expr)                                               \
  do {                                                                           \
    const ncclResult_t ls_nccl_result_ = (expr);                                 \
    if (ls_nccl_result_ != ncclSuccess && ls_nccl_result_ != ncclInProgress) {   \
      return ::lockstep::NcclStatus(ls_nccl_result_, #expr, __FILE__, __LINE__); \
    }                                                                            \
  } while (0)

#endif  // LOCKSTEP_WORKERS_NCCL_NCCL_STATUS_H_
