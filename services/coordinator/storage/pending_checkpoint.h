// PendingCheckpoint: a job's final checkpoint that the disk refused (full, say), and what
// it takes to write it later: the final TrainState, held in memory, the spec it was
// trained with and where it goes. The job's newest snapshot holds the same state (the
// runner writes it there when it can), so a restarted coordinator makes one again from
// the disk (FromSnapshot). Once the checkpoint is written, the job's snapshots go, as
// after any job that ended with its checkpoint.
//
// Thread safety: thread-safe (a retry thread and GetCheckpoint may write at once).
#ifndef LOCKSTEP_SERVICES_COORDINATOR_STORAGE_PENDING_CHECKPOINT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_STORAGE_PENDING_CHECKPOINT_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/train_state.h"
#include "lockstep/v1/job.pb.h"
#include "services/coordinator/storage/snapshot_store.h"

namespace lockstep {

class PendingCheckpoint {
 public:
  // `snapshot_dir`: the job's snapshot folder (SNAPSHOT_DIR/JOB; "" for none).
  PendingCheckpoint(std::string job_id, v1::JobSpec spec, std::string path, TrainState state,
                    std::map<std::string, std::string> metadata, std::string snapshot_dir);

  // A restarted coordinator's: the state from the job's newest snapshot, which must be of
  // `step` (NOT_FOUND naming the folder otherwise: the final state was lost); the
  // snapshot's errors otherwise.
  static absl::StatusOr<std::unique_ptr<PendingCheckpoint>> FromSnapshot(
      const std::string& job_id, const v1::JobSpec& spec, const std::string& path, int64_t step,
      const std::string& snapshot_dir);

  // Writes the checkpoint (durably, as every checkpoint) and then drops the job's
  // snapshots. OK once written, and again afterwards without writing; the disk's error
  // (DATA_LOSS or PERMISSION_DENIED naming the file) while it cannot be.
  absl::Status Write();
  bool written() const;

  const std::string& job_id() const { return job_id_; }
  const std::string& path() const { return path_; }
  int64_t step() const { return state_.step; }

 private:
  const std::string job_id_;
  const v1::JobSpec spec_;
  const std::string path_;
  const TrainState state_;
  const std::map<std::string, std::string> metadata_;
  const std::string snapshot_dir_;
  mutable absl::Mutex mu_;  // held while writing
  bool written_ ABSL_GUARDED_BY(mu_) = false;
};

// The job's final checkpoint could not be written to `path` (`why`): keeps `state` for a
// later write, writes it as the job's newest snapshot too when `snapshots` takes it (so
// that a restarted coordinator has it), and logs both about the job.
std::shared_ptr<PendingCheckpoint> KeepFinalState(
    const std::string& job_id, const v1::JobSpec& spec, const std::string& path, TrainState state,
    const std::map<std::string, std::string>& metadata, const absl::Status& why,
    SnapshotStore& snapshots, const Model& model, const Optimizer& optimizer);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_STORAGE_PENDING_CHECKPOINT_H_
