// TokenBucket: a rate limit of N events a minute that allows a burst of up to N (one
// minute's worth), refilled continuously. The time is the caller's (a Clock's), so that
// tests move it instead of sleeping.
//
// Not thread-safe: its owner's lock guards it (JobManager::mu_).
#ifndef LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_TOKEN_BUCKET_H_
#define LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_TOKEN_BUCKET_H_

#include "absl/time/time.h"

namespace lockstep {

class TokenBucket {
 public:
  // Full at `now`: `per_minute` (at least 1) events may come at once.
  TokenBucket(int per_minute, absl::Time now);

  // Takes one token if there is one at `now` (true); otherwise takes nothing and returns
  // false, with *wait (if given) set to how long until there is one. A `now` before the
  // last one seen (a clock set back) refills nothing.
  bool TryTake(absl::Time now, absl::Duration* wait = nullptr);

 private:
  void Refill(absl::Time now);

  const double capacity_;
  const double per_second_;
  double tokens_;
  absl::Time last_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_TOKEN_BUCKET_H_
