// JobRunner: runs one job on the workers the scheduler gave it, as the seed program's
// host loop does: initialize the TrainState on the host, replicate it, then for each step
// send every worker its dropout key and shard, average the local losses they answer,
// evaluate at the spec's cadence, compare replica checksums, and finally fetch the state
// and save the checkpoint. It is the one job loop: a cluster's coordinator runs it over
// gRPC workers, `lockstep train` over one worker in the same process.
//
// Its shape (docs/elastic.md, "The decision table"):
//
//   Job (jobs/job.h): what outlives an attempt: spec, start, snapshots, high-water step
//   loop:
//     attempt = Attempt(job, workers)                 # jobs/attempt.h: one membership
//     end = attempt.Run()                             # jobs/attempt_end.h
//     action = Next(job, end, free_workers, policy)   # jobs/decision.h: pure
//     carry it out: finish, fail, cancel, suspend, resize, shrink, or recover
//
// Recovery by replay: at the spec's cadence the attempt drains the pipeline, fetches the
// state from rank 0 (checked against every replica's checksum) and keeps it as the job's
// snapshot, in memory and on disk. When workers are lost (a crash, a partition, a stall),
// the runner releases the survivors, tells its WorkerSupply it is recovering and waits for
// the workers it gives (GiveWorkers), and the next attempt prepares them from the snapshot
// and replays the steps since: each step's inputs come from the plan, so the job ends
// bitwise where an undisturbed one would.
//
// The audit (JobSpec.audit, audit.h, docs/audit.md): at its cadence a random rank's
// shard is recomputed by a checker (and a tie-breaker, with 3 or more workers) in the same
// step command stream, and the digests compared; each step the job snapshots after is
// audited too (a snapshot holds a state an audit passed), and a failed audit ends the
// attempt: the liar is quarantined (WorkerSupply) and replaced, and the job replays from
// the last snapshot.
//
// One direction of calls: whoever runs the job (the JobManager) talks to it only through
// events (Abort, Drain, LoseWorker, ReleaseWorkers, GiveWorkers, NoWorkers, OfferWorkers:
// jobs/events.h) that the job's thread takes; the job talks back only through reports
// (JobSink, WorkerSupply) that return nothing and wait for nothing.
//
// Thread safety: Run on one thread; the events from any. Cancellation is sticky.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_JOB_RUNNER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_JOB_RUNNER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lockstep/v1/job.pb.h"
#include "services/coordinator/jobs/attempt_end.h"
#include "services/coordinator/jobs/events.h"
#include "services/coordinator/jobs/job.h"
#include "services/coordinator/options.h"
#include "services/coordinator/workers/worker_client.h"
#include "services/coordinator/workers/worker_pool.h"

namespace lockstep {

class Attempt;

class JobRunner {
 public:
  // `spec` is validated (core/spec/spec.h); workers[r] is rank r. `supply` may be null
  // (no recovery: a lost worker fails the job). With `resume`, the job continues from the
  // newest snapshot on disk, if any (a restarted coordinator).
  JobRunner(std::string job_id, v1::JobSpec spec, std::vector<PoolWorker> workers,
            WorkerClientFactory* factory, const CoordinatorOptions& options, JobSink* sink,
            WorkerSupply* supply = nullptr, bool resume = false);
  ~JobRunner();

  // Runs the job to its end. OK: succeeded. CANCELLED: Abort with it. Otherwise the
  // failure, its message naming the worker (and, after recoveries, the earlier reasons).
  // `outcome` is filled either way.
  absl::Status Run(JobOutcome* outcome);

  // Makes Run stop promptly with `status` (CANCELLED for a user's cancel).
  void Abort(absl::Status status) { events_.Cancel(std::move(status)); }
  // The coordinator is stopping (a drain): the job keeps its progress. In its step loop
  // it stops sending, takes a snapshot at the next step (drained: no step in flight) and
  // Run returns UNAVAILABLE saying so; while preparing or waiting for workers it stops at
  // once (its latest snapshot stays); its last steps, final evaluation and checkpoint
  // run to the end. Thread-safe; Abort still cuts it short. With `why` (a suspension:
  // "suspended: preempted by ..."), the error says that instead of the coordinator's stop.
  void Drain(std::string why = "") { events_.Drain(std::move(why)); }
  // Whether Drain was called: Run's error then means "continue later", not a failure.
  bool draining() { return events_.draining(); }
  // Steps up to `step` ran before (under a coordinator that stopped): run again, they are
  // reported as replays (StepEvent.replay). Call before Run.
  void SetReplayedUntil(int64_t step) { job_.SetReplayedUntil(step); }
  // Worker `worker_id` is gone (its heartbeats stopped): the current attempt ends with
  // `why`, and the job recovers if it may. Thread-safe; other ids are ignored.
  void LoseWorker(const std::string& worker_id, const absl::Status& why) {
    events_.LoseWorker(worker_id, why);
  }
  // The job is to go on without the workers `ids` (a worker leaving on SIGTERM, workers
  // preempted by a job of higher priority), `why` completing "worker w2 ...", e.g.
  // "leaving (SIGTERM)". At its next step boundary (drained, after one more step answered
  // with the replicas' checksums) an elastic job with at least min_workers left goes on
  // without them: the others keep their state, the replicas are rebalanced, the released
  // workers are released (WorkerSupply::Resized names them) and nothing is computed again.
  // A job that cannot (not elastic, or too few left) takes a snapshot there and recovers
  // from it on replacements (WorkerSupply::Recovering, nothing replayed; not counted against
  // recovery.max_restarts). Ids not among the job's workers are kept in case they become
  // so (a replacement). Thread-safe; without a WorkerSupply it does nothing.
  void ReleaseWorkers(std::vector<std::string> ids, std::string why) {
    events_.Release(std::move(ids), std::move(why));
  }
  // The supply's answers (WorkerSupply): workers for a job that waits for them after a loss
  // (rank order), or why none come; workers an elastic job below its most may grow onto at
  // its next step boundary. Thread-safe.
  void GiveWorkers(std::vector<PoolWorker> workers) { events_.GiveWorkers(std::move(workers)); }
  void NoWorkers(absl::Status why) { events_.NoWorkers(std::move(why)); }
  void OfferWorkers(std::vector<PoolWorker> workers) { events_.Offer(std::move(workers)); }

 private:
  // Runs attempts until the decision table ends the job; its final status.
  absl::Status Loop();
  // After an end the job does not go on from at once: the status it gives the job (a
  // planned recovery's reason, for a ResizeAt), the outcome's lost and quarantined workers,
  // and in `lost` those to replace.
  absl::Status Settle(const AttemptEnd& end, std::vector<std::string>* lost);
  // Resize: the workers that stay (rank order, their state kept) and those joining.
  std::vector<PoolWorker> Resize(Attempt& attempt, ResizeAt resize);
  // Shrink: the survivors, from the state they hold.
  std::vector<PoolWorker> Shrink(const Failed& failed);
  // Recover: workers again for a job released after `failure`, from the supply; the status
  // that ends the job when none come.
  absl::StatusOr<std::vector<PoolWorker>> Recover(const absl::Status& failure,
                                                  const std::vector<std::string>& lost,
                                                  bool counted);

  Job job_;
  WorkerClientFactory* const factory_;
  WorkerSupply* const supply_;
  JobEvents events_;
  std::unique_ptr<Attempt> attempt_;         // the current (or last) attempt
  int counted_recoveries_ = 0;               // against recovery.max_restarts
  std::vector<std::string> recovered_from_;  // the failures recovered from, in order
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_JOB_RUNNER_H_
