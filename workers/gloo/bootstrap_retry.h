// Retrying a collective's bootstrap in place. A bootstrap attempt that fails on one rank
// for a transport reason (a connection refused or reset, an attempt aborted because a peer
// failed) is run again by every rank of the job, under fresh keys in the store, instead of
// failing the job's preparation (which would cost the job a recovery). The ranks agree
// through the store: each publishes its verdict on each attempt and reads everyone's, so
// that all ranks either keep the same attempt or all start the next one. Bounded by a
// number of attempts and by one deadline for them all.
//
// Keys, under `prefix`/`attempt`/: "verdict/R" (rank R's outcome) and "failed" (written
// by the first rank to fail: its reason; "done" once every rank succeeded). Each rank
// watches "failed" on a thread of its own and aborts its attempt in progress when a peer
// fails, so that nobody waits out a connect timeout for a peer that has moved on, or when
// the store fails (a cancelled job's rendezvous answers CANCELLED), so that a released
// job's bootstrap ends promptly.
#ifndef LOCKSTEP_WORKERS_GLOO_BOOTSTRAP_RETRY_H_
#define LOCKSTEP_WORKERS_GLOO_BOOTSTRAP_RETRY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/store.h"

namespace lockstep::gloo_internal {

// One attempt at joining the mesh.
class BootstrapAttempt {
 public:
  virtual ~BootstrapAttempt() = default;
  // Joins; returns when joined or failed, within the deadline it was made with.
  virtual absl::Status Join() = 0;
  // Makes a Join in progress (or a later one) end promptly with an error. Any thread.
  virtual void Abort(const absl::Status& why) = 0;
};

struct BootstrapRetryOptions {
  int rank = 0;
  int size = 1;
  std::string prefix;  // this job attempt's namespace in the store
  absl::Time deadline = absl::InfinitePast();
  int max_attempts = 3;
  // Called on this rank's thread when an attempt failed somewhere and is retried.
  std::function<void(int attempt, const absl::Status& why)> on_retry;
};

// Whether an attempt that failed with `status` is worth retrying: the transport's errors
// (UNAVAILABLE, ABORTED, DEADLINE_EXCEEDED while time is left). Anything else (a bad
// option, the store refusing us, the job cancelled) ends the bootstrap on every rank.
bool IsRetriable(const absl::Status& status);

struct Joined {
  std::unique_ptr<BootstrapAttempt> attempt;  // joined on every rank
  int attempts = 0;                           // how many were made (1: no retry)
};

// Makes attempt k with make(k, key prefix of attempt k), joins it, and agrees with the
// other ranks (see above). Errors: the first non-retriable error of any rank (its code,
// naming the rank); UNAVAILABLE after max_attempts failed attempts, with the last
// reason; DEADLINE_EXCEEDED when a rank's verdict does not come by the deadline; the
// store's own errors (e.g. CANCELLED).
absl::StatusOr<Joined> JoinWithRetries(
    Store* store, const BootstrapRetryOptions& options,
    const std::function<absl::StatusOr<std::unique_ptr<BootstrapAttempt>>(
        int attempt, const std::string& prefix)>& make);

}  // namespace lockstep::gloo_internal

#endif  // LOCKSTEP_WORKERS_GLOO_BOOTSTRAP_RETRY_H_
