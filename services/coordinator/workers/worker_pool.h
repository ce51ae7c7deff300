// WorkerPool: the registered workers, their identities (the worker name in each one's
// certificate, auth.h), their liveness (heartbeats) and which job holds each. A worker id
// is bound to the identity that registered it: only that identity heartbeats for it, and
// an address held by one live identity is not taken by another. Revoked identities are
// refused (RevokedWorkers, persisted). The scheduler (scheduler.h) plans on its Views and the
// JobManager assigns workers to jobs; a worker whose heartbeats stop is dropped and reported so its
// job can fail. Thread-safe; its lock is taken under the JobManager's, never the other way round.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_WORKERS_WORKER_POOL_H_
#define LOCKSTEP_SERVICES_COORDINATOR_WORKERS_WORKER_POOL_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/clock.h"
#include "lockstep/v1/job.pb.h"
#include "services/coordinator/scheduling/scheduler.h"
#include "services/coordinator/workers/revoked_workers.h"

namespace lockstep {

struct PoolWorker {
  std::string id, address, device, name;
  std::string identity;  // its certificate's worker name; empty without TLS
  uint32_t threads = 0;
  std::string job_id;  // empty when free
  absl::Time last_seen;
  bool leaving = false;  // it got SIGTERM (HeartbeatRequest.leaving): never assigned again
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

  // Where revocations are kept (the state folder's revoked-workers): loads them.
  absl::Status UseRevocationFile(const std::string& path);

  // Adds a worker proving `identity` (empty: none, --insecure). The same identity
  // registering again replaces its old entry (it restarted), as does anyone registering
  // from an address held by an entry without identity; the old entry is reported by
  // TakeLost(). PERMISSION_DENIED for a revoked identity, or for an address a live worker
  // of another identity holds (naming the address).
  absl::StatusOr<std::string> RegisterAs(const std::string& identity, const std::string& address,
                                         const std::string& device, const std::string& name,
                                         uint32_t threads);
  // RegisterAs without an identity (plaintext, tests).
  std::string Register(const std::string& address, const std::string& device,
                       const std::string& name, uint32_t threads);
  // NOT_FOUND for an unknown (e.g. expired) worker: it must register again.
  // PERMISSION_DENIED when `id` was registered by another identity than `identity`.
  absl::Status Heartbeat(const std::string& id, const std::string& identity = "");
  // OK if worker `id` is registered under `identity`; as Heartbeat otherwise.
  absl::Status CheckIdentity(const std::string& id, const std::string& identity);

  // Revokes the identity of worker `id_or_identity` (a worker id, or an identity whether
  // registered or not) for good: persisted first, then its workers are dropped and reported
  // by TakeLost() (their jobs recover as for a lost worker). Returns the identity.
  // NOT_FOUND for an unknown id that is no valid identity; FAILED_PRECONDITION for a
  // worker without identity (plaintext); the file's error if it cannot be written.
  absl::StatusOr<std::string> Revoke(const std::string& id_or_identity);
  bool IsRevoked(const std::string& identity);

  // Worker `id` lied to a job's audit (docs/audit.md): it gets no work from this pool
  // again, nor does whoever registers later with its identity (or, without identity, its
  // address). It stays registered, listed with `why`; in memory only (for good: revoke
  // it). Unknown ids are ignored.
  void Quarantine(const std::string& id, const std::string& why);

  // Worker `id` (registered by `identity`) is leaving (SIGTERM: HeartbeatRequest.leaving): it
  // is never assigned again and is listed as leaving; once free, its heartbeats may stop
  // without it counting as lost (TakeLost drops it silently). Returns the job it holds
  // ("" for none) the first time it is marked, nullopt after that; Heartbeat's errors.
  absl::StatusOr<std::optional<std::string>> MarkLeaving(const std::string& id,
                                                         const std::string& identity = "");

  // The workers in registration order, as the scheduler sees them (the quarantined and
  // the leaving left out).
  std::vector<WorkerView> Views();
  // Gives the workers `ids` to `job_id`; FAILED_PRECONDITION naming one that is gone or
  // busy (then none is taken).
  absl::StatusOr<std::vector<PoolWorker>> Assign(const std::string& job_id,
                                                 const std::vector<std::string>& ids);
  // Frees the job's workers still registered.
  void Release(const std::string& job_id);
  // Frees the workers `ids` (a job that goes on without them); unknown ids are ignored.
  void Free(const std::vector<std::string>& ids);
  // Drops a worker found unreachable; if it is alive after all, its next heartbeat gets
  // NOT_FOUND and it registers again.
  void Drop(const std::string& id);

  // Moves workers whose heartbeats lapsed into the lost list (a free leaving worker is
  // dropped instead: it left); returns and clears it.
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
  RevokedWorkers revoked_ ABSL_GUARDED_BY(mu_);
  // Quarantined identities (or, for workers without one, addresses): why.
  std::map<std::string, std::string> quarantined_ ABSL_GUARDED_BY(mu_);

  // Why `w` is quarantined, or null.
  const std::string* QuarantinedLocked(const PoolWorker& w) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The worker `id` if `identity` registered it: NOT_FOUND or PERMISSION_DENIED otherwise.
  absl::StatusOr<PoolWorker*> OwnedLocked(const std::string& id, const std::string& identity)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_WORKERS_WORKER_POOL_H_
