// JobManager and a job's state files: a final checkpoint a full disk refused (kept pending,
// retried by retrier_, taken up again after a restart), and the file a GetCheckpoint reads.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/scheduling/job_manager_internal.h"
#include "services/coordinator/storage/checkpoint_folder.h"
#include "services/coordinator/storage/pending_checkpoint.h"
#include "services/coordinator/storage/snapshot_store.h"

namespace lockstep {

void JobManager::KeepPendingCheckpointLocked(Record& rec) {
  const v1::Job& job = rec.job;
  if (job.state() != v1::SUCCEEDED || job.checkpoint_pending().empty()) return;
  const std::string path = CheckpointFolder(options_.checkpoint_dir, options_.snapshot_dir)
                               .CheckpointPath(job.id(), job.spec().checkpoint_path());
  absl::StatusOr<std::unique_ptr<PendingCheckpoint>> pending = PendingCheckpoint::FromSnapshot(
      job.id(), job.spec(), path, job.step(),
      options_.snapshot_dir.empty() ? "" : options_.snapshot_dir + "/" + job.id());
  if (!pending.ok()) {
    LogJob(spdlog::level::err, {job.id()},
           absl::StrCat("final checkpoint pending, and lost with the previous coordinator: ",
                        pending.status().message()));
    return;
  }
  LogJob(spdlog::level::info, {job.id()},
         absl::StrCat("final checkpoint pending (", job.checkpoint_pending(),
                      "): its state of step ", job.step(), " is read back; retried"));
  retrier_.Add(std::move(pending).value());
}

void JobManager::CheckpointWritten(const std::string& id, const std::string& path) {
  std::vector<Save> saves;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;  // forgotten meanwhile
    Record& rec = *it->second;
    rec.job.set_checkpoint_path(std::filesystem::absolute(path).string());
    rec.job.clear_checkpoint_pending();
    saves.push_back({rec.job, ++rec.version});
    ++rec.pending_saves;
  }
  LogJob(spdlog::level::info, {id}, absl::StrCat("final checkpoint written to ", path));
  Persist(std::move(saves));
}

absl::StatusOr<JobManager::StateFile> JobManager::CheckpointFile(const std::string& id,
                                                                 std::optional<int64_t> step) {
  // A pending final checkpoint: written now if the disk takes it, else its snapshot serves.
  retrier_.TryNow(id).IgnoreError();
  ASSIGN_OR_RETURN(const v1::Job job, Get(id));
  std::vector<StateFile> files;  // oldest first
  if (!options_.snapshot_dir.empty()) {
    const SnapshotStore store(options_.snapshot_dir + "/" + id, 1);
    for (int64_t s : store.Steps()) files.push_back({store.PathOf(s), s});
  }
  if (!job.checkpoint_path().empty()) files.push_back({job.checkpoint_path(), job.step()});
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    if (!step.has_value() || it->step == *step) return *it;
  }
  std::vector<int64_t> steps;
  for (const StateFile& f : files) steps.push_back(f.step);
  return absl::NotFoundError(absl::StrCat(
      "job ", id,
      steps.empty() ? " has no snapshot or checkpoint yet"
                    : absl::StrCat(" has its state at steps ", absl::StrJoin(steps, ", "),
                                   step.has_value() ? absl::StrCat(", not ", *step) : "")));
}

}  // namespace lockstep
