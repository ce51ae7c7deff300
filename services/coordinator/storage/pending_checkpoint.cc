// PendingCheckpoint: a job's final checkpoint that the disk refused (full, say), and what it takes
// to write it later: the final TrainState, held in memory, the spec it was trained with and where
// it goes. Contract: pending_checkpoint.h.
#include "services/coordinator/storage/pending_checkpoint.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/checkpoint.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"
#include "services/coordinator/storage/snapshot_store.h"

namespace lockstep {

PendingCheckpoint::PendingCheckpoint(std::string job_id, v1::JobSpec spec, std::string path,
                                     TrainState state, std::map<std::string, std::string> metadata,
                                     std::string snapshot_dir)
    : job_id_(std::move(job_id)),
      spec_(std::move(spec)),
      path_(std::move(path)),
      state_(std::move(state)),
      metadata_(std::move(metadata)),
      snapshot_dir_(std::move(snapshot_dir)) {}

absl::StatusOr<std::unique_ptr<PendingCheckpoint>> PendingCheckpoint::FromSnapshot(
    const std::string& job_id, const v1::JobSpec& spec, const std::string& path, int64_t step,
    const std::string& snapshot_dir) {
  ASSIGN_OR_RETURN(const TrainSetup setup, SetupFromSpec(spec));
  const SnapshotStore store(snapshot_dir, 1);
  ASSIGN_OR_RETURN(std::optional<Snapshot> latest, store.Latest(setup.model, setup.optimizer));
  if (!latest.has_value() || latest->state.step != step) {
    return absl::NotFoundError(absl::StrCat(
        "the final state of job ", job_id, " (step ", step, ") is not in ", snapshot_dir,
        latest.has_value() ? absl::StrCat(": its newest snapshot is of step ", latest->state.step)
                           : ""));
  }
  // The snapshot's own metadata, less what WriteCheckpoint sets again.
  latest->metadata.erase("step");
  latest->metadata.erase("format");
  return std::make_unique<PendingCheckpoint>(job_id, spec, path, std::move(latest->state),
                                             std::move(latest->metadata), snapshot_dir);
}

absl::Status PendingCheckpoint::Write() {
  absl::MutexLock lock(&mu_);
  if (written_) return absl::OkStatus();
  ASSIGN_OR_RETURN(const TrainSetup setup, SetupFromSpec(spec_));
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  RETURN_IF_ERROR(WriteCheckpoint(path_, setup.model, setup.optimizer, state_, metadata_));
  written_ = true;
  SnapshotStore(snapshot_dir_, 1).Clear();  // the checkpoint holds the end
  return absl::OkStatus();
}

std::shared_ptr<PendingCheckpoint> KeepFinalState(
    const std::string& job_id, const v1::JobSpec& spec, const std::string& path, TrainState state,
    const std::map<std::string, std::string>& metadata, const absl::Status& why,
    SnapshotStore& snapshots, const Model& model, const Optimizer& optimizer) {
  const int64_t step = state.step;
  const absl::Status snapshot = snapshots.enabled()
                                    ? snapshots.Write(model, optimizer, state, metadata)
                                    : absl::FailedPreconditionError("no snapshot folder");
  LogJob(spdlog::level::err, {job_id},
         absl::StrCat(
             "final checkpoint pending: ", why.message(), "; the state of step ", step,
             snapshot.ok()
                 ? absl::StrCat(" is kept in memory and in ", snapshots.PathOf(step))
                 : absl::StrCat(" is kept in memory only (the snapshot: ", snapshot.message(), ")"),
             "; the checkpoint is retried, and written at once on GetCheckpoint "
             "(`lockstep checkpoint`)"));
  std::map<std::string, std::string> kept = metadata;
  return std::make_shared<PendingCheckpoint>(job_id, spec, path, std::move(state), std::move(kept),
                                             snapshots.enabled() ? snapshots.dir() : "");
}

bool PendingCheckpoint::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

}  // namespace lockstep
