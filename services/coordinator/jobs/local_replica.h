// LocalReplica: the coordinator's own replica for the replay audit (docs/audit.md, "The
// replay audit"): a checker in the coordinator's process, lent to a replay when no
// registered worker of the job's device and threads is free. It computes on the CPU only,
// one replay at a time. The implementation (services/standalone/coordinator_replica.h)
// is a JobSlot reached through an in-process WorkerClient, so that Replay runs on it
// unchanged.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_LOCAL_REPLICA_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_LOCAL_REPLICA_H_

#include <memory>

#include "absl/status/statusor.h"
#include "lockstep/v1/spec.pb.h"
#include "services/coordinator/workers/worker_client.h"

namespace lockstep {

class LocalReplica {
 public:
  virtual ~LocalReplica() = default;
  // A client over the replica, computing `spec` (a validated CPU job) with `threads` and
  // reading its dataset as a worker does; the replica is the caller's until the client is
  // destroyed. Never waits. Why not otherwise, as a message an event can show:
  // UNAVAILABLE while another replay holds it; FAILED_PRECONDITION for more threads or
  // memory than it may use, or a dataset it cannot read (naming the field, the path and
  // the error).
  virtual absl::StatusOr<std::unique_ptr<WorkerClient>> Lend(const v1::JobSpec& spec,
                                                             int threads) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_LOCAL_REPLICA_H_
