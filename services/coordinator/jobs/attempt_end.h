// How one attempt of a job ended (Attempt::Run): a value of its own for each planned
// outcome (a resize at a step boundary, a drain, a suspension), never an error status to
// be decoded later. The decision table (decision.h) takes it to choose what the job does
// next; JobRunner carries that out.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_ATTEMPT_END_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_ATTEMPT_END_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "core/train_state.h"
#include "services/coordinator/workers/worker_pool.h"

namespace lockstep {

// Every step, the final evaluation and the checkpoint are done.
struct Finished {};

// The job was aborted (a user's cancel, the coordinator's stop): `why`, sticky.
struct Cancelled {
  absl::Status why;
};

// The coordinator is stopping (its drain): the job snapshotted at a step boundary, or was
// stopped while preparing or waiting; it continues from its snapshot once a coordinator
// starts on its records. `why` says from which snapshot.
struct Drained {
  absl::Status why;
};

// Preempted by a job of higher priority (JobRunner::Drain with a reason): as Drained, and
// the job waits in the queue for workers.
struct Suspended {
  absl::Status why;
};

// The attempt stopped at a step boundary, drained, for a change of membership: workers
// `joining` (offered to an elastic job below its max) or `leaving` (ids, rank order:
// JobRunner::ReleaseWorkers). The workers hold the state at `step` (`checksum`: the
// replicas' there, 0 when not asked); a grow fetched it from rank 0 into `held` for the
// newcomers. `why` is e.g. "worker w2 leaving (SIGTERM)", "worker w3 joined".
struct ResizeAt {
  int64_t step = 0;
  uint64_t checksum = 0;
  std::vector<PoolWorker> joining;
  std::vector<std::string> leaving;
  std::string why;
  std::optional<TrainState> held;
};

// The attempt failed: `why` names the worker to blame where there is one. `lost`: the ids of
// the workers that no longer answer (a health check after the failure); `survivors`: those
// that do, in rank order. `completed`: the steps the workers completed (the state they hold),
// -1 when the attempt never reached its steps; `checksum`: the replicas' at `completed`
// (0: unknown). A failed audit names the workers to replace (`audit_lost`) and, of those,
// the liars to quarantine.
struct Failed {
  absl::Status why;
  std::vector<std::string> lost;
  std::vector<PoolWorker> survivors;
  int64_t completed = -1;
  uint64_t checksum = 0;
  std::vector<PoolWorker> audit_lost;
  std::vector<PoolWorker> liars;
};

using AttemptEnd = std::variant<Finished, Cancelled, Drained, Suspended, ResizeAt, Failed>;

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_ATTEMPT_END_H_
