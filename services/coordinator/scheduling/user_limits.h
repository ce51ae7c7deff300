// Per-user limits: how many jobs one owner may have queued and running, how fast they may
// submit, and how many of their finished jobs' records are kept. So that one user cannot
// deny service to the others: each limit counts only that owner's jobs, and retention
// forgets only that owner's own oldest finished records (another's never).
//
// The defaults come from the coordinator's flags (limit_flags.h); a name's line in the
// tokens file may give that name its own (CallerLimits). Administrators are exempt from the
// queued, running and rate limits unless their line gives them some; retention applies
// to every owner. The global caps (CoordinatorOptions::max_queued_jobs, max_jobs_kept)
// stay as a safety net, and Check refuses limits with which one user alone could fill
// one of them.
//
// Immutable after construction: safe to read from any thread.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_USER_LIMITS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_USER_LIMITS_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "services/common/security/auth.h"

namespace lockstep {

// Which limit, in the texts below.
enum class UserLimit { kQueued, kRunning, kSubmitsPerMinute, kKept };

// One owner's limits. 0 is "no per-user limit" for the first three (the global caps still
// apply); max_jobs_kept 0 keeps none of the owner's finished records.
struct UserLimits {
  int max_queued_jobs = 0;        // QUEUED jobs; a submit past it is RESOURCE_EXHAUSTED
  int max_running_jobs = 0;       // RUNNING or RECOVERING; the owner's next jobs wait
  int submits_per_minute = 0;     // accepted submits (TokenBucket: a minute's worth at once)
  int max_jobs_kept = 1000;       // finished jobs' records; the owner's oldest go first
  unsigned from_tokens_file = 0;  // bits 1 << UserLimit: set by the name's line, not a flag
};

class UserLimitsTable {
 public:
  // No per-user limits, 1000 finished records kept per owner (tests, `lockstep train`).
  UserLimitsTable() = default;
  // `defaults` for users; `callers` (the tokens file's names) for administrators and for
  // names with limits of their own (their unset fields take `defaults`).
  UserLimitsTable(const UserLimits& defaults, const std::map<std::string, Caller>& callers);

  // The limits of jobs owned by `owner`; an unknown owner gets the users' defaults.
  const UserLimits& For(const std::string& owner) const;

  // INVALID_ARGUMENT naming the flag or the tokens file's name when one user alone could
  // fill a global cap: a user's queued limit 0 (none) or at least `max_queued_jobs`, or an
  // owner's retention plus queued jobs (an administrator's up to `max_queued_jobs`)
  // reaching `max_jobs_kept`.
  absl::Status Check(int max_queued_jobs, int max_jobs_kept) const;

 private:
  struct Named {
    UserLimits limits;
    bool admin = false;
  };
  UserLimits defaults_;
  std::map<std::string, Named> by_name_;  // administrators, and names with limits of their own
};

// Where `which` of `limits` is set, for messages: "--max_queued_jobs_per_user 20" or
// "max_queued_jobs=5 in the tokens file".
std::string LimitSource(const UserLimits& limits, UserLimit which);

// RESOURCE_EXHAUSTED's text: "user alice: 20 queued jobs (limit --max_queued_jobs_per_user
// 20)".
std::string OverLimit(const std::string& owner, const UserLimits& limits, UserLimit which,
                      int count);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_USER_LIMITS_H_
