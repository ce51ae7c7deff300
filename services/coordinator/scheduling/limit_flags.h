// The coordinator's per-user limit flags (each with its LOCKSTEP_<FLAG> environment
// variable) and the global record cap, turned into CoordinatorOptions: main.cc calls
// ApplyLimitFlags after filling max_queued_jobs. See deploy/CONFIGURATION.md.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_LIMIT_FLAGS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_LIMIT_FLAGS_H_

#include "absl/status/status.h"
#include "services/common/security/auth.h"
#include "services/coordinator/options.h"

namespace lockstep {

// Sets options->user_limits (from the flags, and the names of `tokens`; null when the
// coordinator is insecure and its one caller, "anonymous", is an administrator) and
// options->max_jobs_kept. INVALID_ARGUMENT naming the flag or the tokens file's name when
// one user alone could fill a global cap (UserLimitsTable::Check).
absl::Status ApplyLimitFlags(const TokenTable* tokens, CoordinatorOptions* options);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_LIMIT_FLAGS_H_
