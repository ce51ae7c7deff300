// The coordinator's per-user limit flags (each with its LOCKSTEP_<FLAG> environment variable) and
// the global record cap, turned into CoordinatorOptions: main.cc calls ApplyLimitFlags after
// filling max_queued_jobs. Contract: limit_flags.h.
#include "services/coordinator/scheduling/limit_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "services/coordinator/scheduling/user_limits.h"

ABSL_FLAG(int, max_queued_jobs_per_user, 20,
          "a user's submit past this many of their queued jobs is refused (RESOURCE_EXHAUSTED)");
ABSL_FLAG(int, max_running_jobs_per_user, 4,
          "a user's jobs past this many running wait in the queue (0: no per-user limit)");
ABSL_FLAG(int, submits_per_minute_per_user, 60,
          "a user's submits past this rate (a minute's worth at once) are refused (0: none)");
ABSL_FLAG(int, max_jobs_kept_per_user, 100,
          "finished jobs' records kept per owner; the owner's oldest are forgotten first");
ABSL_FLAG(int, max_jobs_kept, 10000,
          "job records in all; past it a submit forgets the submitter's own oldest finished "
          "job, or is refused");

namespace lockstep {

absl::Status ApplyLimitFlags(const TokenTable* tokens, CoordinatorOptions* options) {
  UserLimits defaults;
  defaults.max_queued_jobs = absl::GetFlag(FLAGS_max_queued_jobs_per_user);
  defaults.max_running_jobs = absl::GetFlag(FLAGS_max_running_jobs_per_user);
  defaults.submits_per_minute = absl::GetFlag(FLAGS_submits_per_minute_per_user);
  defaults.max_jobs_kept = absl::GetFlag(FLAGS_max_jobs_kept_per_user);
  for (const auto& [flag, value] :
       {std::pair{"max_running_jobs_per_user", defaults.max_running_jobs},
        {"submits_per_minute_per_user", defaults.submits_per_minute},
        {"max_jobs_kept_per_user", defaults.max_jobs_kept}}) {
    if (value < 0) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is negative"));
  }
  options->max_jobs_kept = absl::GetFlag(FLAGS_max_jobs_kept);
  options->user_limits = tokens != nullptr
                             ? UserLimitsTable(defaults, tokens->callers())
                             : UserLimitsTable(defaults, {{"anonymous", Caller{.admin = true}}});
  return options->user_limits.Check(options->max_queued_jobs, options->max_jobs_kept);
}

}  // namespace lockstep
