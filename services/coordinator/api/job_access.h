// Who may see and touch a job, for every door to the job API (the gRPC service and the
// dashboard's JSON API): its owner and the admins. One rule, one place.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_API_JOB_ACCESS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_API_JOB_ACCESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "lockstep/v1/job.pb.h"
#include "services/common/security/auth.h"
#include "services/coordinator/scheduling/job_manager.h"

namespace lockstep {

// Job `id` if `who` may see and touch it: NOT_FOUND when there is none, PERMISSION_DENIED
// ("belongs to another user") when it is another user's and `who` is not an admin.
absl::StatusOr<v1::Job> JobFor(JobManager& jobs, const Principal& who, const std::string& id);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_API_JOB_ACCESS_H_
