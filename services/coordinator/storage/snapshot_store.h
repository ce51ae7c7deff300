// SnapshotStore: a job's snapshots on the coordinator's disk — its TrainState at a step,
// with everything needed to continue from there: the step, the RNG chain's keys, the spec
// and the params' checksum. Safetensors files with Flax names (the checkpoint format),
// written durably (core/io/durable_file.h) as <dir>/step-<12 digits>.safetensors; the
// newest `keep` are kept. A kill -9 at any moment leaves every snapshot whole. Each file
// holds digests of its header and of every tensor (params, every optimizer slot, the
// count, batch_stats); Latest skips a file any of which fails, for the previous one, and
// logs (about the job) the file and the tensor.
//
// Thread safety: none; the job's runner owns its store.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_STORAGE_SNAPSHOT_STORE_H_
#define LOCKSTEP_SERVICES_COORDINATOR_STORAGE_SNAPSHOT_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/train_state.h"

namespace lockstep {

struct Snapshot {
  TrainState state;  // state.step: the steps done
  std::map<std::string, std::string> metadata;
};

class SnapshotStore {
 public:
  // An empty dir keeps nothing.
  SnapshotStore(std::string dir, int keep) : dir_(std::move(dir)), keep_(std::max(1, keep)) {}

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  // Writes the snapshot of `state` (with `metadata`), then drops all but the newest `keep`.
  // DATA_LOSS or PERMISSION_DENIED naming the file when the disk refuses.
  absl::Status Write(const Model& model, const Optimizer& optimizer, const TrainState& state,
                     const std::map<std::string, std::string>& metadata);
  // The steps of the snapshots on disk, oldest first.
  std::vector<int64_t> Steps() const;
  // The newest snapshot that reads whole (every digest matching), or nullopt when there is
  // none; the newer ones skipped are logged, naming each file and what is wrong with it.
  // DATA_LOSS naming every file when none reads whole.
  absl::StatusOr<std::optional<Snapshot>> Latest(const Model& model,
                                                 const Optimizer& optimizer) const;
  // Drops every snapshot (the job ended).
  void Clear();
  // Where the snapshot of `step` is (or would be).
  std::string PathOf(int64_t step) const;

 private:
  const std::string dir_;
  const int keep_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_STORAGE_SNAPSHOT_STORE_H_
