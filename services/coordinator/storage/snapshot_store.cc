// SnapshotStore: a job's snapshots on the coordinator's disk — its TrainState at a step, with
// everything needed to continue from there: the step, the RNG chain's keys, the spec and the
// params' checksum. Contract: snapshot_store.h.
#include "services/coordinator/storage/snapshot_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/checkpoint.h"
#include "core/io/durable_file.h"
#include "core/status_macros.h"
#include "services/common/observability/job_log.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "step-";
constexpr char kSuffix[] = ".safetensors";

// The snapshot of `step` at `path`, whole: DATA_LOSS or INVALID_ARGUMENT naming the file.
absl::StatusOr<Snapshot> ReadSnapshot(const std::string& path, int64_t step, const Model& model,
                                      const Optimizer& optimizer) {
  Snapshot s;
  bool digested = false;
  // Every tensor and the header against the file's digests (core/io/safetensors_digest.h).
  ASSIGN_OR_RETURN(s.state, ReadCheckpoint(path, model, optimizer, &s.metadata, &digested));
  if (s.state.step != step) {
    return absl::DataLossError(absl::StrCat(path, ": holds step ", s.state.step));
  }
  if (!digested) {
    // Written before snapshots kept digests (a coordinator upgraded mid-job): taken, with
    // only the params' checksum to check it by.
    LogJob(spdlog::level::warn, {s.metadata["job_id"]},
           absl::StrCat(path,
                        " has no digests (written by an older Lockstep): its optimizer "
                        "state cannot be checked"));
  }
  // The checksum, older than the digests, covers the params and batch_stats.
  auto sum = s.metadata.find("param_checksum");
  if (sum != s.metadata.end() &&
      sum->second != absl::StrFormat("%016x", ParamChecksum(s.state.params, s.state.batch_stats))) {
    return absl::DataLossError(
        absl::StrCat(path, ": the params do not match their checksum ", sum->second));
  }
  return s;
}

}  // namespace

std::string SnapshotStore::PathOf(int64_t step) const {
  return absl::StrFormat("%s/%s%012d%s", dir_, kPrefix, step, kSuffix);
}

absl::Status SnapshotStore::Write(const Model& model, const Optimizer& optimizer,
                                  const TrainState& state,
                                  const std::map<std::string, std::string>& metadata) {
  if (!enabled()) return absl::OkStatus();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir_, ": ", ec.message()));
  // What earlier writes killed mid-way left (a snapshot's worth of bytes each). The store is
  // its folder's only writer and writes one snapshot at a time, so none is in flight.
  RemoveTemporaryFiles(dir_);
  RETURN_IF_ERROR(WriteCheckpoint(PathOf(state.step), model, optimizer, state, metadata));
  std::vector<int64_t> steps = Steps();
  for (size_t i = 0; i + keep_ < steps.size(); ++i) fs::remove(PathOf(steps[i]), ec);
  return absl::OkStatus();
}

std::vector<int64_t> SnapshotStore::Steps() const {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!enabled()) return steps;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    // Exactly PathOf's names: a temporary file of a write ("...safetensors.XXXXXX.tmp") or
    // anything else in the folder is not a snapshot.
    if (name.size() != sizeof(kPrefix) - 1 + 12 + sizeof(kSuffix) - 1 ||
        name.rfind(kPrefix, 0) != 0 || e.path().extension() != kSuffix) {
      continue;
    }
    int64_t step;
    const std::string digits = name.substr(sizeof(kPrefix) - 1, 12);
    if (absl::SimpleAtoi(digits, &step)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<std::optional<Snapshot>> SnapshotStore::Latest(const Model& model,
                                                              const Optimizer& optimizer) const {
  const std::vector<int64_t> steps = Steps();
  if (steps.empty()) return std::optional<Snapshot>();
  // A file a disk fault or a hand damaged must not end a job that an older snapshot can
  // resume: its steps are replayed from there, to the same params.
  std::vector<std::string> errors;
  for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
    absl::StatusOr<Snapshot> s = ReadSnapshot(PathOf(*step), *step, model, optimizer);
    if (s.ok()) {
      if (!errors.empty()) {
        LogJob(
            spdlog::level::warn, {std::filesystem::path(dir_).filename().string()},
            absl::StrCat("resuming from step ", *step,
                         ", the newest readable snapshot; skipped: ", absl::StrJoin(errors, "; ")));
      }
      return std::optional<Snapshot>(std::move(s).value());
    }
    errors.push_back(std::string(s.status().message()));
  }
  return absl::DataLossError(
      absl::StrCat("no readable snapshot in ", dir_, ": ", absl::StrJoin(errors, "; ")));
}

void SnapshotStore::Clear() {
  if (!enabled()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

}  // namespace lockstep
