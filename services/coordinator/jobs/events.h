// JobEvents: the one way in to a running job. Whoever runs it (the JobManager, a test)
// pushes events from any thread: cancel, drain or suspend, a worker lost, workers to
// release, workers given after a loss (or none), workers offered to grow onto. The job's
// own thread (JobRunner, its Attempt) takes them where it can act on them: a lost worker
// or a cancel interrupts the attempt at once (its CancelToken, which every worker call is
// made with), a drain, a release or an offer waits for the next step boundary, workers
// given end the wait for them. Nothing here calls back into the pusher, and the job tells
// the pusher what it needs only by reports (WorkerSupply), never by a call that returns
// workers.
//
// Thread safety: thread-safe. Its lock is a leaf: pushers may hold theirs.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_EVENTS_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_EVENTS_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/cancel.h"
#include "services/coordinator/workers/worker_pool.h"

namespace lockstep {

class JobEvents {
 public:
  JobEvents();
  ~JobEvents();

  // --- Pushed by whoever runs the job, from any thread.

  // The job stops promptly with `why` (CANCELLED for a user's cancel). Sticky.
  void Cancel(absl::Status why);
  // The job stops to continue later from a snapshot: in its step loop at the next step
  // boundary (a snapshot there), at once while preparing or waiting for workers. `why`
  // empty: the coordinator's drain; else a suspension ("suspended: preempted by ...").
  void Drain(std::string why = "");
  // Worker `worker_id` is gone (its heartbeats stopped): the attempt it works for ends with
  // `why`. Other ids are ignored.
  void LoseWorker(const std::string& worker_id, const absl::Status& why);
  // The job is to go on without the workers `ids` (leaving on SIGTERM, preempted), `why`
  // completing "worker w2 ...", at its next step boundary. Ids not among its workers are
  // kept in case they become so (a replacement).
  void Release(std::vector<std::string> ids, std::string why);

  // Workers for a job that waits for them after a loss (WorkerSupply::Recovering), rank
  // order; or, instead, why none come (DEADLINE_EXCEEDED saying what it waited for).
  void GiveWorkers(std::vector<PoolWorker> workers);
  void NoWorkers(absl::Status why);
  // Free workers an elastic job below its most may grow onto at its next step boundary;
  // they are the job's from now on (its supply took them for it).
  void Offer(std::vector<PoolWorker> workers);

  // --- Consumed on the job's thread.

  // The job's token: cancelled by Cancel, and by Drain outside the step loop.
  const CancelToken& job() const { return job_; }
  // A fresh token for an attempt on `workers` (which LoseWorker matches), cancelled at
  // once if the job is.
  std::shared_ptr<CancelToken> NewAttempt(const std::vector<PoolWorker>& workers);
  std::shared_ptr<CancelToken> attempt();

  bool draining();
  // Whether the drain is a suspension (Drain with a reason).
  bool suspending();
  // Why the job stops for a drain: it continues from `from` (e.g. "its snapshot of step 5").
  absl::Status Drained(absl::string_view from);
  // Enters (or leaves) the step loop, where a drain waits for a step boundary; entering
  // returns Drained("its latest snapshot") if a drain came first.
  absl::Status SetStepping(bool stepping);

  // The releases pending for `workers`: the ids among them in rank order, and the reasons
  // joined, grouped by reason in the order each first comes ("worker w1 leaving (SIGTERM);
  // workers w2, w3 preempted by ..."). Empty ids: none.
  std::pair<std::vector<std::string>, std::string> Releasing(
      const std::vector<PoolWorker>& workers);
  // The releases of `ids` are done (or overtaken by a recovery).
  void Released(const std::vector<std::string>& ids);

  // The workers given after a loss (GiveWorkers), or why none came (NoWorkers); the job's
  // cancel status once it is cancelled (a drain outside the step loop included). Waits at
  // most `timeout` (then DEADLINE_EXCEEDED): the supply promised an answer before that.
  absl::StatusOr<std::vector<PoolWorker>> AwaitWorkers(absl::Duration timeout);
  // The workers offered to grow onto (Offer), taken; empty: none.
  std::vector<PoolWorker> TakeOffer();
  // Forgets the offers not taken (the supply took those workers back: a recovery).
  void DropOffers();

 private:
  CancelToken job_;
  absl::Mutex mu_;
  std::shared_ptr<CancelToken> attempt_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> members_ ABSL_GUARDED_BY(mu_);  // the attempt's worker ids
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;            // job_ is
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::string drain_why_ ABSL_GUARDED_BY(mu_);
  bool stepping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::string> releasing_ ABSL_GUARDED_BY(mu_);  // worker id -> why
  // GiveWorkers' or NoWorkers' answer, until AwaitWorkers takes it.
  std::optional<absl::StatusOr<std::vector<PoolWorker>>> given_ ABSL_GUARDED_BY(mu_);
  std::vector<PoolWorker> offered_ ABSL_GUARDED_BY(mu_);
  CancelToken::Callback cancel_attempt_;  // the job's cancel reaches the attempt
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_EVENTS_H_
