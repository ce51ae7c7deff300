// The "bitwise witness" of a job: the params checksum at each snapshot it took, which the
// dashboard shows so that two runs of one spec can be compared at a glance (equal
// checksums at equal steps: the same bits). Kept in memory by JobManager, per job.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_WITNESS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_WITNESS_H_

#include <cstdint>
#include <vector>

#include "lockstep/v1/dashboard.pb.h"

namespace lockstep {

// The marks a job keeps; past it the oldest go.
inline constexpr size_t kMaxWitnessMarks = 1000;

// Records a snapshot at `step` in `marks` (ascending step): a step taken again (a replay
// after a recovery or a restart) replaces the marks from it on; then at most
// kMaxWitnessMarks are kept, the newest.
void AddWitnessMark(std::vector<v1::SnapshotMark>& marks, int64_t step, uint64_t param_checksum,
                    int64_t unix_ms);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_WITNESS_H_
