// WorkerPool: the registered workers, their liveness (heartbeats) and which job holds
// each. The scheduler (scheduler.h) plans on its Views and the JobManager assigns workers
// to jobs; a worker whose heartbeats stop is dropped and reported so its job can fail.
// Thread-safe; its lock is taken under the JobManager's, never the other way round.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_WORKER_POOL_H_
#define LOCKSTEP_SERVICES_COORDINATOR_WORKER_POOL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/clock.h"
#include "lockstep/v1/job.pb.h"
#include "services/coordinator/scheduler.h"

namespace lockstep {

struct PoolWorker {
  std::string id, address, device, name;
  uint32_t threads = 0;
  std::string job_id;  // empty when free
  absl::Time last_seen;
};

struct LostWorker {
  PoolWorker worker;
  std::string reason;
};

class WorkerPool {
 public:
  // Ids are "w0000-<instance>", ...: a random instance tag per pool, so that ids are unique
  // across coordinator lifetimes. An empty tag (tests) gives "w0000", ...
  // Heartbeats are timed on `clock` (tests pass a SimulatedClock), which must outlive the pool.
  explicit WorkerPool(absl::Duration heartbeat_timeout, std::string instance = NewInstanceTag(),
                      Clock* clock = Clock::Real());
  static std::string NewInstanceTag();

  // Adds a worker. A worker re-registering from the same address replaces its old entry
  // (it restarted); the old one is reported by TakeLost().
  std::string Register(const std::string& address, const std::string& device,
                       const std::string& name, uint32_t threads);
  // NOT_FOUND for an unknown (e.g. expired) worker: it must register again.
  absl::Status Heartbeat(const std::string& id);

  // The workers in registration order, as the scheduler sees them.
  std::vector<WorkerView> Views();
  // Gives the workers `ids` to `job_id`; FAILED_PRECONDITION naming one that is gone or
  // busy (then none is taken).
  absl::StatusOr<std::vector<PoolWorker>> Assign(const std::string& job_id,
                                                 const std::vector<std::string>& ids);
  // Frees the job's workers still registered.
  void Release(const std::string& job_id);
  // Drops a worker found unreachable; if it is alive after all, its next heartbeat gets
  // NOT_FOUND and it registers again.
  void Drop(const std::string& id);

  // Moves workers whose heartbeats lapsed into the lost list; returns and clears it.
  std::vector<LostWorker> TakeLost(absl::Time now);
  std::vector<LostWorker> TakeLost() { return TakeLost(clock_->Now()); }
  std::vector<v1::WorkerInfo> List();

 private:
  const absl::Duration timeout_;
  const std::string instance_;  // a random tag in every id this pool gives
  Clock* const clock_;
  absl::Mutex mu_;
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, PoolWorker> workers_ ABSL_GUARDED_BY(mu_);  // ordered by id
  std::vector<LostWorker> lost_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_WORKER_POOL_H_
