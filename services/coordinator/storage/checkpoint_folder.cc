// CheckpointFolder: where a coordinator's jobs write their checkpoints and what their resume_from
// may read. Contract: checkpoint_folder.h.
#include "services/coordinator/storage/checkpoint_folder.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/io/durable_file.h"
#include "core/io/paths.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"
#include "services/common/rpc/job_state.h"
#include "services/coordinator/storage/snapshot_store.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

// A name relative to its folder that stays in it as written (Validate checks this too;
// here it is checked again where the name is used).
absl::Status CheckName(const std::string& field, const std::string& name) {
  const fs::path p(name);
  bool up = false;
  for (const fs::path& part : p) up = up || part == "..";
  if (p.is_absolute() || up) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": \"", name, "\" must be relative and stay in its folder (no \"..\")"));
  }
  return absl::OkStatus();
}

bool Exists(const fs::path& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));  // a dangling link exists too
}

}  // namespace

std::string CheckpointFolder::CheckpointPath(const std::string& job_id,
                                             const std::string& name) const {
  if (!enabled()) return name;
  return absl::StrCat(dir_, "/", job_id, "/", name.empty() ? kDefaultName : name);
}

absl::StatusOr<std::string> CheckpointFolder::PrepareCheckpoint(const std::string& job_id,
                                                                const std::string& name,
                                                                bool may_exist) const {
  const std::string path = CheckpointPath(job_id, name);
  if (path.empty()) return path;  // no checkpoint asked for
  auto writable = [&]() -> absl::Status {
    absl::Status st = CheckWritable(path);  // makes the folders
    if (st.ok()) return st;
    return absl::Status(st.code(), absl::StrCat("checkpoint_path: ", st.message()));
  };
  if (!enabled()) {
    RETURN_IF_ERROR(writable());
    return path;
  }
  RETURN_IF_ERROR(CheckName("checkpoint_path", name));
  // The job's folder is DIR/JOB itself, never where a link of that name points.
  const fs::path job_folder = ResolvePath(dir_) / job_id;
  auto inside = [&] {
    const fs::path parent = ResolvePath(fs::path(path).parent_path());
    return !parent.empty() && !job_folder.empty() && IsWithin(parent, job_folder);
  };
  const absl::Status outside = absl::InvalidArgumentError(absl::StrCat(
      "checkpoint_path: \"", name, "\" leads out of the job's folder (a symbolic link?)"));
  if (!inside()) return outside;
  if (!may_exist && Exists(path)) {
    return absl::AlreadyExistsError(
        absl::StrCat("checkpoint_path: ", path, " exists already; a job never writes over a file"));
  }
  RETURN_IF_ERROR(writable());
  if (!inside()) return outside;  // a link put in place meanwhile
  return path;
}

absl::StatusOr<ResumeSource> CheckpointFolder::ResolveResumeFrom(
    const std::string& resume_from) const {
  if (resume_from.empty() || !enabled()) return ResumeSource{"", resume_from};
  RETURN_IF_ERROR(CheckName("resume_from", resume_from));
  ResumeSource src;
  if (IsJobId(resume_from)) {
    src.job_id = resume_from;
    // That job's newest snapshot (SnapshotStore's names, in the coordinator's own
    // folder), else its checkpoint.
    if (!snapshot_dir_.empty()) {
      const SnapshotStore snapshots(absl::StrCat(snapshot_dir_, "/", resume_from), 1);
      if (const std::vector<int64_t> steps = snapshots.Steps(); !steps.empty()) {
        src.path = snapshots.PathOf(steps.back());
        src.snapshot = true;
        return src;
      }
    }
    ASSIGN_OR_RETURN(src.path, FindCheckpoint(resume_from));
    return src;
  }
  src.path = absl::StrCat(dir_, "/", resume_from);
  // Checked before the file's existence, so that a link out of the folder is refused
  // alike whether or not its target exists.
  const fs::path resolved = ResolvePath(src.path), folder = ResolvePath(dir_);
  if (resolved.empty() || folder.empty() || !IsWithin(resolved, folder)) {
    return absl::InvalidArgumentError(
        absl::StrCat("resume_from: \"", resume_from,
                     "\" leads out of the checkpoint folder (a symbolic link?)"));
  }
  if (!Exists(src.path)) {
    return absl::NotFoundError(
        absl::StrCat("resume_from: \"", resume_from, "\": no such file in the checkpoint folder"));
  }
  // The job whose folder the file is in, however it was named ("./JOB/x", a link).
  if (const std::string first = resolved.lexically_relative(folder).begin()->string();
      IsJobId(first)) {
    src.job_id = first;
  }
  return src;
}

absl::StatusOr<StartingPoint> CheckpointFolder::ReadResumeSource(ResumeSource* source,
                                                                 const Model& model,
                                                                 const Optimizer& optimizer,
                                                                 const std::string& reader) const {
  if (!source->snapshot) return ReadStartingPoint(source->path, model, optimizer);
  const SnapshotStore snapshots(absl::StrCat(snapshot_dir_, "/", source->job_id), 1);
  std::vector<int64_t> steps = snapshots.Steps();
  std::vector<std::string> errors;
  for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
    const std::string path = snapshots.PathOf(*step);
    absl::StatusOr<StartingPoint> start = ReadStartingPoint(path, model, optimizer);
    if (!start.ok()) {
      errors.emplace_back(start.status().message());
      continue;
    }
    if (!errors.empty()) {
      LogJob(spdlog::level::warn, {reader},
             absl::StrCat("resume_from: ", source->job_id, "'s newest readable snapshot is ", path,
                          "; skipped: ", absl::StrJoin(errors, "; ")));
    }
    source->path = path;
    return start;
  }
  return absl::DataLossError(absl::StrCat("no readable snapshot of job ", source->job_id, ": ",
                                          absl::StrJoin(errors, "; ")));
}

absl::StatusOr<std::string> CheckpointFolder::FindCheckpoint(const std::string& job_id) const {
  std::vector<std::string> found;
  std::error_code ec;
  // Links are not followed: the job wrote a regular file.
  for (auto it = fs::recursive_directory_iterator(fs::path(dir_) / job_id, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->symlink_status(ec).type() == fs::file_type::regular &&
        it->path().extension() == ".safetensors" && !IsTemporaryFileName(name)) {
      found.push_back(it->path().string());
    }
  }
  std::sort(found.begin(), found.end());
  if (found.size() == 1) return found.front();
  if (found.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("resume_from: the folder of job ", job_id, " holds several checkpoints (",
                     absl::StrJoin(found, ", "), "): name one, as ", job_id, "/NAME"));
  }
  const std::string legacy = absl::StrCat(dir_, "/", job_id, ".safetensors");
  if (fs::is_regular_file(fs::symlink_status(legacy, ec))) return legacy;
  return absl::NotFoundError(
      absl::StrCat("resume_from: job ", job_id, " has no snapshot or checkpoint"));
}

}  // namespace lockstep
