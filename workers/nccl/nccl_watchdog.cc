#include "workers/nccl/nccl_watchdog.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lockstep {

void NcclWatchdog::Arm(absl::Duration timeout) {
  timeout_ = armed_ ? std::max(timeout_, timeout) : timeout;
  armed_ = true;
}

absl::Status NcclWatchdog::Check(absl::Duration waited) {
  if (!error_.ok()) return error_;
  absl::Status async = comm_->AsyncError();
  if (!async.ok()) {
    error_ = absl::UnavailableError(
        absl::StrCat(what_, ": a collective failed, communicator aborted: ", async.message()));
  } else if (armed_ && waited > timeout_) {
    error_ = absl::DeadlineExceededError(
        absl::StrCat(what_, ": a collective did not finish within ", absl::FormatDuration(timeout_),
                     " (a peer is stuck or gone); communicator aborted"));
  } else {
    return absl::OkStatus();
  }
  comm_->Abort(error_);
  return error_;
}

}  // namespace lockstep
