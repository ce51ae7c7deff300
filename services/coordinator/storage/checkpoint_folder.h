// CheckpointFolder: where a coordinator's jobs write their checkpoints and what their
// resume_from may read. Each job writes only in a folder of its own, DIR/JOB/: its final
// checkpoint goes to DIR/JOB/<spec.checkpoint_path> (default "checkpoint.safetensors"),
// never over an existing file. resume_from names a job id (that job's newest snapshot,
// else its checkpoint) or a file anywhere in DIR ("job-000001/model.safetensors", or one
// an administrator placed there, "pretrained/x.safetensors"). No name leaves its folder:
// Validate refuses absolute names and "..", and here each is resolved (symlinks
// followed) and checked again.
//
// Without a folder (`lockstep train`), names are the user's own paths, used as given.
//
// Thread safety: immutable; the file system is the state.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_STORAGE_CHECKPOINT_FOLDER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_STORAGE_CHECKPOINT_FOLDER_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/checkpoint.h"

namespace lockstep {

// What a resume_from value refers to.
struct ResumeSource {
  // The job whose state it is: the value itself when it is a job id, or the job whose
  // folder holds the file, symbolic links resolved ("job-000001/model.safetensors");
  // "" for other files.
  std::string job_id;
  std::string path;       // the file to read
  bool snapshot = false;  // path is the job's newest snapshot (older ones may stand in)
};

class CheckpointFolder {
 public:
  static constexpr char kDefaultName[] = "checkpoint.safetensors";

  // `dir`: the checkpoint folder ("" for none: user paths); `snapshot_dir`: where jobs'
  // snapshots are (SNAPSHOT_DIR/JOB, see SnapshotStore), "" for none.
  CheckpointFolder(std::string dir, std::string snapshot_dir)
      : dir_(std::move(dir)), snapshot_dir_(std::move(snapshot_dir)) {}

  bool enabled() const { return !dir_.empty(); }

  // Where job `job_id`'s final checkpoint goes given spec.checkpoint_path `name`:
  // DIR/JOB/NAME (NAME defaults to kDefaultName); without a folder, `name` ("": none).
  std::string CheckpointPath(const std::string& job_id, const std::string& name) const;

  // Makes sure the checkpoint can be written where CheckpointPath says, before the
  // training: its folders are made and, resolved, lie inside the job's folder
  // (INVALID_ARGUMENT naming checkpoint_path otherwise); the file does not exist unless
  // `may_exist` (ALREADY_EXISTS); the folder takes a file (CheckWritable's
  // PERMISSION_DENIED). Returns the path. Without a folder, only the last check.
  absl::StatusOr<std::string> PrepareCheckpoint(const std::string& job_id, const std::string& name,
                                                bool may_exist) const;

  // The one resolution of spec.resume_from: the file it names and the job it belongs to.
  // INVALID_ARGUMENT naming resume_from when the value or a symlink leads out of the
  // folder (or the job's folder holds several checkpoints: name one); NOT_FOUND when
  // the file does not exist or the job has no snapshot or checkpoint. A job's newest
  // snapshot is preferred to its checkpoint (a cancelled job has no checkpoint).
  absl::StatusOr<ResumeSource> ResolveResumeFrom(const std::string& resume_from) const;

  // Reads what ResolveResumeFrom found (core/checkpoint.h's ReadStartingPoint, every digest
  // checked). For a job's snapshot, a newer one that does not read whole is skipped for
  // the one before (logged about `reader`, naming the file and the damage), and
  // `source->path` becomes the file read; DATA_LOSS naming each file when none reads.
  absl::StatusOr<StartingPoint> ReadResumeSource(ResumeSource* source, const Model& model,
                                                 const Optimizer& optimizer,
                                                 const std::string& reader) const;

 private:
  // The job's checkpoint file found in its folder (or, written before jobs had folders,
  // DIR/JOB.safetensors).
  absl::StatusOr<std::string> FindCheckpoint(const std::string& job_id) const;

  const std::string dir_;
  const std::string snapshot_dir_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_STORAGE_CHECKPOINT_FOLDER_H_
