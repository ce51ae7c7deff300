// NcclWatchdog: turns a lost or stuck peer into an error instead of a hang. Contract:
// nccl_watchdog.h.
#include "workers/nccl/nccl_watchdog.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lockstep {

void NcclWatchdog::Arm(absl::Duration timeout) {
  timeout_ = armed_ ? std::max(timeout_, timeout) : timeout;
  armed_ = true;
}

void NcclWatchdog::RequestAbort(const absl::Status& why) {
  absl::MutexLock lock(&request_mu_);
  if (requested_.ok()) requested_ = why.ok() ? absl::AbortedError("aborted") : why;
}

absl::Status NcclWatchdog::Check(absl::Duration waited) {
  if (!error_.ok()) return error_;
  absl::Status requested;
  {
    absl::MutexLock lock(&request_mu_);
    requested = requested_;
  }
  absl::Status async = comm_->AsyncError();
  if (!requested.ok()) {
    error_ = absl::AbortedError(
        absl::StrCat(what_, ": aborted, communicator aborted: ", requested.message()));
  } else if (!async.ok()) {
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
