// The "bitwise witness" of a job: the params checksum at each snapshot it took, which the
// dashboard shows so that two runs of one spec can be compared at a glance (equal
// checksums at equal steps: the same bits). Kept by JobManager per job, in memory and
// beside the job's record (JobRecords: <id>.witness.safetensors), so that a restarted
// coordinator still shows every mark a job made.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_STORAGE_WITNESS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_STORAGE_WITNESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lockstep/v1/dashboard.pb.h"

namespace lockstep {

// The marks a job keeps; past it the oldest go.
inline constexpr size_t kMaxWitnessMarks = 1000;

// Records a snapshot at `step` in `marks` (ascending step): a step taken again (a replay
// after a recovery or a restart) replaces the marks from it on; then at most
// kMaxWitnessMarks are kept, the newest.
void AddWitnessMark(std::vector<v1::SnapshotMark>& marks, int64_t step, uint64_t param_checksum,
                    int64_t unix_ms);

// Writes `marks` to `path`: a safetensors file (core/io/safetensors.h), atomic and durable,
// with the digests of its header and columns. DATA_LOSS or PERMISSION_DENIED naming the
// file when the disk refuses.
absl::Status WriteWitness(const std::string& path, const std::vector<v1::SnapshotMark>& marks);
// Reads what WriteWitness wrote, checking its digests. NOT_FOUND when there is no file;
// DATA_LOSS naming the file when a digest does not match or it is torn; INVALID_ARGUMENT
// when it is not a witness.
absl::StatusOr<std::vector<v1::SnapshotMark>> ReadWitness(const std::string& path);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_STORAGE_WITNESS_H_
