// The replay audit (docs/audit.md, "The replay audit"): a job the shard
// audit (audit.h) cannot check, one on a single worker or a BatchNorm job on logical
// replicas, is checked by replaying it. At each of its periodic snapshots (and at its end)
// a free worker of equal threads, lent by the job's WorkerSupply, is prepared as a
// one-worker attempt of the job on the side from the job's last verified state, runs the
// steps from there to the snapshot's step, and answers the params checksum there, which
// must equal the job's bitwise. Valid where the job's bits do not depend on where, or on
// how many workers, it runs: a one-worker job (the same rows, keys and threads; no
// all-reduce), and any job on logical replicas (docs/elastic.md).
//
// ReplayAuditor runs one replay at a time on a thread of its own: the job does not wait
// for it while it steps (Poll), only where it needs the verdict (Wait). Where no worker is
// free, the checker may be the coordinator's own replica (local_replica.h): its replay's
// threads run at a lowered OS priority (kLocalReplicaNice), so that the coordinator's
// control plane never waits behind it.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_REPLAY_AUDIT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_REPLAY_AUDIT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/cancel.h"
#include "core/rng/threefry.h"
#include "lockstep/v1/spec.pb.h"
#include "services/coordinator/jobs/job.h"
#include "services/coordinator/options.h"
#include "services/coordinator/workers/worker_client.h"

namespace lockstep {

// One replay: the job's steps [from, to) from `base` (the state at step `from`), whose
// params must end with `checksum`.
struct ReplayRequest {
  std::string job_id;
  v1::JobSpec spec;  // validated
  rng::Impl impl;
  std::shared_ptr<const SharedState> base;
  int64_t from = 0, to = 0;
  uint64_t checksum = 0;
};

// The replay's params checksum at `request.to` on `client`'s worker, prepared as the
// job's only worker (all V replicas, with logical replicas) and released after; the
// worker's error otherwise. Blocks; `cancel` ends it promptly.
absl::StatusOr<uint64_t> Replay(std::unique_ptr<WorkerClient> client, const ReplayRequest& request,
                                const CoordinatorOptions& options, const CancelToken& cancel);

// How much the coordinator's replica's threads are niced (setpriority), at most to 19.
inline constexpr int kLocalReplicaNice = 10;

struct ReplayVerdict {
  int64_t from = 0, to = 0;
  PoolWorker checker;     // a lent worker's; empty where `local`
  bool local = false;     // the checker was the coordinator's own replica
  uint64_t checksum = 0;  // the job's at `to`
  // Why the replay could not run to its end (the checker's error), or OK.
  absl::Status status;
  uint64_t got = 0;     // the checker's checksum, where it ran
  bool agreed = false;  // it ran, and `got` is the job's checksum
};

// "worker ID", or "the coordinator's replica".
std::string CheckerName(const ReplayVerdict& v);

class ReplayAuditor {
 public:
  // Workers come from `supply` (LendWorker) and go back to it (ReturnWorker). Cancelling
  // `attempt` (which must outlive this) cancels the replay running then.
  ReplayAuditor(WorkerClientFactory* factory, WorkerSupply* supply,
                const CoordinatorOptions& options, const CancelToken* attempt);
  ~ReplayAuditor();  // Stop

  bool busy() const { return thread_.joinable(); }
  // Starts `request` on `checker` (lent by the supply). Not while busy.
  void Start(PoolWorker checker, ReplayRequest request);
  // Starts `request` on the coordinator's replica, `replica` (LocalReplica::Lend), at a
  // lowered priority. Not while busy.
  void StartLocal(std::unique_ptr<WorkerClient> replica, ReplayRequest request);
  // The verdict if the replay ended (the checker returned), without waiting; nullopt
  // while it runs or when none was started.
  std::optional<ReplayVerdict> Poll();
  // The verdict, once the replay ends. Only while busy.
  ReplayVerdict Wait();
  // Cancels a running replay and returns its checker; its verdict is dropped.
  void Stop();

 private:
  // Runs `request` on `client` on the replay's thread; a lent worker's is given back at
  // Join.
  void Run(ReplayVerdict v, std::unique_ptr<WorkerClient> client, ReplayRequest request);
  ReplayVerdict Join();

  WorkerClientFactory* const factory_;
  WorkerSupply* const supply_;
  const CoordinatorOptions options_;
  const CancelToken* const attempt_;
  std::unique_ptr<CancelToken> cancel_;  // the running replay's
  CancelToken::Callback on_attempt_cancel_;
  std::thread thread_;
  absl::Mutex mu_;
  std::optional<ReplayVerdict> verdict_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_REPLAY_AUDIT_H_
