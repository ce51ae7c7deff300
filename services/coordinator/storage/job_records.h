// JobRecords: the coordinator's job records on disk, one JSON file per job under
// <state_dir>/jobs, so that a restarted coordinator knows its jobs, and beside each the
// job's StepHistory (<id>.steps.safetensors: its per-step losses) and its bitwise witness
// (<id>.witness.safetensors: the params checksum at each snapshot, witness.h), with the
// digests every safetensors file Lockstep writes keeps of itself, checked when read. Every
// write is atomic and durable: the record goes to a temporary file, which is fsync'ed and
// renamed over the old one, and the directory is fsync'ed; a kill -9 at any moment leaves
// either the old record or the new one, never a torn one (a leftover temporary file is
// ignored).
//
// Thread-safe, with a lock of its own: callers write records without holding theirs (the
// JobManager's job API never waits for the disk). Writes of one job are ordered by the
// version the caller gives: a write older than one already made is skipped. Erase a job
// only once no write of it can still come.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_STORAGE_JOB_RECORDS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_STORAGE_JOB_RECORDS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/job.pb.h"
#include "services/coordinator/storage/step_history.h"
#include "services/coordinator/storage/witness.h"

namespace lockstep {

class JobRecords {
 public:
  // An empty dir keeps nothing (tests, throwaway coordinators).
  explicit JobRecords(std::string dir) : dir_(std::move(dir)) {}

  // Every record, oldest first. Unreadable files are DATA_LOSS naming the file.
  absl::StatusOr<std::vector<v1::Job>> Load() const;
  // Writes `job` as of `version` (increasing per job), and its `history` and `witness`
  // first when given. DATA_LOSS naming the file when the disk refuses.
  absl::Status Save(const v1::Job& job, int64_t version, const StepHistory* history = nullptr,
                    const std::vector<v1::SnapshotMark>* witness = nullptr);
  // Removes the job's record, its history and its witness.
  absl::Status Erase(const std::string& id);
  // The job's history as last saved, thinned to `budget`: empty when none was saved;
  // StepHistory::Read's DATA_LOSS (naming the file) when it is damaged.
  absl::StatusOr<StepHistory> LoadHistory(const std::string& id, int64_t budget) const;
  // The job's witness marks as last saved: empty when none was saved; ReadWitness's
  // DATA_LOSS (naming the file) when it is damaged.
  absl::StatusOr<std::vector<v1::SnapshotMark>> LoadWitness(const std::string& id) const;

  // The next job number to issue, kept beside the records (a file of its own), so that a
  // restarted coordinator does not reuse the ids of jobs whose records were erased. 1 when
  // none was saved.
  absl::StatusOr<int64_t> LoadNextId() const;
  absl::Status SaveNextId(int64_t next);

 private:
  std::string PathOf(const std::string& id) const { return dir_ + "/" + id + ".json"; }
  std::string HistoryPathOf(const std::string& id) const {
    return dir_ + "/" + id + ".steps.safetensors";
  }
  std::string WitnessPathOf(const std::string& id) const {
    return dir_ + "/" + id + ".witness.safetensors";
  }

  const std::string dir_;
  absl::Mutex mu_;                                               // held while writing
  std::map<std::string, int64_t> written_ ABSL_GUARDED_BY(mu_);  // id -> version on disk
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_STORAGE_JOB_RECORDS_H_
