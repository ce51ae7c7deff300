// Who may see and touch a job, for every door to the job API (the gRPC service and the dashboard's
// JSON API): its owner and the admins. Contract: job_access.h.
#include "services/coordinator/api/job_access.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace lockstep {

absl::StatusOr<v1::Job> JobFor(JobManager& jobs, const Principal& who, const std::string& id) {
  ASSIGN_OR_RETURN(v1::Job job, jobs.Get(id));
  if (!who.admin && job.owner() != who.name) {
    return absl::PermissionDeniedError(absl::StrCat("job ", id, " belongs to another user"));
  }
  return job;
}

}  // namespace lockstep
