// JobRecords: the coordinator's job records on disk, one JSON file per job under
// <state_dir>/jobs, written atomically whenever a job changes state. A restarted
// coordinator reloads them: finished jobs keep their results, and jobs that were queued
// or running are marked FAILED (recovery of running jobs is a later feature). Thread
// safety: none; the JobManager calls it under its lock.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOB_RECORDS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOB_RECORDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lockstep/v1/job.pb.h"

namespace lockstep {

class JobRecords {
 public:
  // An empty dir keeps nothing (tests, throwaway coordinators).
  explicit JobRecords(std::string dir) : dir_(std::move(dir)) {}

  // Every record, oldest first. Unreadable files are errors naming the file.
  absl::StatusOr<std::vector<v1::Job>> Load() const;
  absl::Status Save(const v1::Job& job) const;
  absl::Status Erase(const std::string& id) const;

 private:
  std::string dir_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOB_RECORDS_H_
