// NcclWatchdog: turns a lost or stuck peer into an error instead of a hang. NCCL
// collectives run as kernels on the backend's stream, and the host only learns of them
// when it waits on that stream; the CUDA backend's Synchronize() calls Check() while it
// waits (CudaBackend::SetSyncWatch). On an asynchronous NCCL error, or once the wait
// outlasts the timeout of the collectives queued so far, the watchdog aborts the
// communicator, which makes the pending NCCL kernels return so that the wait ends.
//
// The timeout bounds the whole wait, compute included, once any collective was queued:
// a wait is expected to take far less than a collective's timeout. No thread of its own:
// it runs on the thread that drives the backend and the collective (thread-compatible;
// RequestAbort alone is thread-safe).
#ifndef LOCKSTEP_WORKERS_NCCL_NCCL_WATCHDOG_H_
#define LOCKSTEP_WORKERS_NCCL_NCCL_WATCHDOG_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

// The part of a communicator the watchdog needs (NcclComm; fakes in tests).
class AbortableComm {
 public:
  virtual ~AbortableComm() = default;
  // OK, or the communicator's asynchronous error.
  virtual absl::Status AsyncError() = 0;
  // Aborts the communicator so that its pending collectives return; `why` is the error
  // every later use of it reports.
  virtual void Abort(const absl::Status& why) = 0;
};

class NcclWatchdog {
 public:
  // `comm` must outlive the watchdog. `what` names the communicator in errors.
  NcclWatchdog(AbortableComm* comm, std::string what) : comm_(comm), what_(std::move(what)) {}

  // A collective with this timeout was queued on the stream or captured into a graph:
  // from now on, waits are bounded by the longest such timeout.
  void Arm(absl::Duration timeout);

  // Called while the host has waited `waited` for the stream. OK while all is well.
  // Otherwise aborts the communicator and returns, then and ever after, ABORTED (an abort
  // was requested), UNAVAILABLE (an asynchronous NCCL error: a peer was lost) or
  // DEADLINE_EXCEEDED (armed, and the wait outlasted the timeout).
  absl::Status Check(absl::Duration waited);

  // Asks for the communicator to be aborted with `why` at the next Check, from any thread
  // (Collective::Abort): the driving thread, waiting for the stream, does it.
  void RequestAbort(const absl::Status& why);

 private:
  AbortableComm* comm_;
  std::string what_;
  bool armed_ = false;
  absl::Duration timeout_ = absl::ZeroDuration();
  absl::Status error_;
  absl::Mutex request_mu_;
  absl::Status requested_ ABSL_GUARDED_BY(request_mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_NCCL_NCCL_WATCHDOG_H_
