// Test helpers that wait on a JobManager's jobs through their event logs (a watcher each),
// never by sleeping: for the coordinator's unit tests and the in-process job-loop tests.
// Each call holds a Watch while it waits, which counts against the watcher limits.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_TESTING_H_
#define LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_TESTING_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lockstep/v1/job.pb.h"
#include "services/coordinator/scheduling/job_manager.h"

namespace lockstep::testing {

// The job's events, from its first, until `done` holds for one (returned; every event up to
// it is appended to *seen when given). NOT_FOUND when the job ends first (its log closes),
// DEADLINE_EXCEEDED after `timeout`, or StartWatch's error.
absl::StatusOr<v1::JobEvent> AwaitEvent(JobManager& jobs, const std::string& id,
                                        absl::Duration timeout,
                                        const std::function<bool(const v1::JobEvent&)>& done,
                                        std::vector<v1::JobEvent>* seen = nullptr);

// The job once it ended (its event log closed); its events in *seen when given.
// DEADLINE_EXCEEDED naming the job after `timeout`.
absl::StatusOr<v1::Job> AwaitEnd(JobManager& jobs, const std::string& id, absl::Duration timeout,
                                 std::vector<v1::JobEvent>* seen = nullptr);

// The job once its event log shows a state event of `state`. NOT_FOUND naming the state
// when the job ended without it, DEADLINE_EXCEEDED after `timeout`.
absl::StatusOr<v1::Job> AwaitState(JobManager& jobs, const std::string& id, v1::JobState state,
                                   absl::Duration timeout);

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_TESTING_H_
