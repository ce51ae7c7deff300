// JobRunner: runs one job on the workers the scheduler gave it, as the seed program's
// host loop does: initialize the TrainState on the host, replicate it, then for each step
// send every worker its dropout key and shard, average the local losses they answer,
// evaluate at the spec's cadence, compare replica checksums, and finally fetch the state
// and save the checkpoint. The coordinator's RNG chain lives here (TrainingPlan). It is
// the one job loop: a cluster's coordinator runs it over gRPC workers, `lockstep train`
// over one worker in the same process.
//
// Steps are pipelined: up to `steps_in_flight` step commands are queued on each worker's
// stream, so no round trip is paid per step; the all-reduce keeps workers in lockstep.
//
// Recovery by replay: at the spec's cadence the runner drains the pipeline, fetches the
// state from rank 0 (checked against every replica's checksum) and keeps it as the job's
// snapshot, in memory and on disk (SnapshotStore). When workers are lost (a crash, a
// partition, a stall), it releases the survivors, asks its WorkerSupply for healthy
// workers, prepares them from the snapshot and replays the steps since: each step's
// inputs come from the plan, so the job ends bitwise where an undisturbed one would.
//
// The audit (JobSpec.audit, audit.h, docs/audit.md): at its cadence a random rank's
// shard is recomputed by a checker (and a tie-breaker, with 3 or more workers) in the same
// step command stream, and the digests compared; the job snapshots at each audit that
// passed, and a failed one ends the attempt: the liar is quarantined (WorkerSupply) and
// replaced, and the job replays from that snapshot.
//
// Attempts and recovery are job_runner.cc; the step loop (commands, the pipeline, the
// answers folded into events) job_step_loop.cc; where the state comes from and goes
// (starts, snapshots, the checkpoint) job_state.cc; an elastic job's resizes job_resize.cc.
//
// Thread safety: Run on one thread; Abort, Drain, LoseWorker and ReleaseWorkers from any.
// Cancellation is sticky: every worker call is made with the attempt's CancelToken, so that an
// Abort at any moment ends Run promptly, and a call made after it fails at once.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOB_RUNNER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOB_RUNNER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/cancel.h"
#include "core/checkpoint.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "lockstep/v1/job.pb.h"
#include "services/coordinator/audit.h"
#include "services/coordinator/checkpoint_folder.h"
#include "services/coordinator/options.h"
#include "services/coordinator/pending_checkpoint.h"
#include "services/coordinator/snapshot_store.h"
#include "services/coordinator/step_fanout.h"
#include "services/coordinator/worker_client.h"
#include "services/coordinator/worker_pool.h"

namespace lockstep {

// Where a runner reports progress. Called from the runner's thread.
class JobSink {
 public:
  virtual ~JobSink() = default;
  virtual void OnRunning(int64_t total_steps) = 0;
  virtual void OnStep(const v1::StepEvent& event) = 0;
  virtual void OnEval(const v1::EvalResult& result) = 0;
  // A snapshot of the state at `step` was taken (and written, where the runner keeps them);
  // `param_checksum`: of its params, which every replica agreed on.
  // `in_memory`: the disk refused it; it is held in memory (a restart cannot use it).
  virtual void OnSnapshot(int64_t step, uint64_t param_checksum, bool in_memory) {}
  // An attempt's collective bootstraps under rendezvous `prefix`, by `workers` (rank order);
  // called before any of them learns it (the previous attempt's namespace is over).
  virtual void OnRendezvous(const std::string& prefix, const std::vector<PoolWorker>& workers) {}
  // Something the job's events should say while it runs (e.g. steps a resize reported from
  // the survivors' state: job_resize.cc).
  virtual void OnNote(const std::string& why) {}
};

// Where a runner gets workers again after losing some (the JobManager).
class WorkerSupply {
 public:
  virtual ~WorkerSupply() = default;
  // The job lost workers for `reason`: those in `lost` are gone for good, the others are
  // released already. Returns as many workers as the job needs, in rank order, within
  // `timeout`: DEADLINE_EXCEEDED when too few came, CANCELLED when the job was cancelled,
  // `cancel`'s status once it is cancelled (promptly), UNAVAILABLE when the supply shuts
  // down (a coordinator's drain).
  virtual absl::StatusOr<std::vector<PoolWorker>> Replace(const std::vector<std::string>& lost,
                                                          const absl::Status& reason,
                                                          absl::Duration timeout,
                                                          const CancelToken& cancel) = 0;
  // An elastic job (JobSpec.replicas) lost the workers `lost` (gone for good), or let the
  // workers `released` go (JobRunner::ReleaseWorkers: no longer its own), and goes on,
  // without waiting, on `workers` (rank order; still its own); `why` says so, e.g.
  // "resized 3 -> 2 workers: worker w2 lost (...)". Called before they are prepared again.
  virtual void Resized(const std::vector<PoolWorker>& workers, const std::vector<std::string>& lost,
                       const std::string& why, const std::vector<std::string>& released) {}
  // An elastic job below its most workers asks, at a step boundary, for up to `most` free
  // workers to grow onto, without waiting; those returned are the job's. None while
  // other jobs wait for workers.
  virtual std::vector<PoolWorker> Offer(int most) { return {}; }
  // The job's audit found `worker` lying (`why` says where): it must never get work from
  // this coordinator again. Called before the Replace that has it among the lost.
  virtual void Quarantine(const PoolWorker& worker, const std::string& why) {}
};

// A sink for runs whose progress nobody watches (benchmarks, comparisons in tests).
class NullJobSink final : public JobSink {
 public:
  void OnRunning(int64_t) override {}
  void OnStep(const v1::StepEvent&) override {}
  void OnEval(const v1::EvalResult&) override {}
};

struct JobOutcome {
  uint64_t param_checksum = 0;
  std::string checkpoint_path;
  double samples_per_sec = 0;
  double train_seconds = 0;              // step time, evaluations excluded
  std::vector<std::string> unreachable;  // worker ids found dead after the last failure
  int recoveries = 0;
  int resizes = 0;             // times an elastic job went on with its survivors (no replay)
  int64_t replayed_steps = 0;  // steps run again after recoveries
  int audits = 0;              // audited steps compared (JobSpec.audit), failed ones included
  int audits_failed = 0;
  std::vector<std::string> quarantined;  // ids of the workers the audit found lying
  // The job succeeded but its final checkpoint could not be written (a full disk): why,
  // and the final state kept to write it later (also in the newest snapshot if it could
  // be written). checkpoint_path is then empty.
  std::string checkpoint_pending;
  std::shared_ptr<PendingCheckpoint> pending;
};

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
  void Abort(absl::Status status) { cancel_.Cancel(std::move(status)); }
  // The coordinator is stopping (a drain): the job keeps its progress. In its step loop
  // it stops sending, takes a snapshot at the next step (drained: no step in flight) and
  // Run returns UNAVAILABLE saying so; while preparing or waiting for workers it stops at
  // once (its latest snapshot stays); its last steps, final evaluation and checkpoint
  // run to the end. Thread-safe; Abort still cuts it short. With `why` (a suspension: "suspended:
  // preempted by ..."), the error says that instead of the coordinator's stop.
  void Drain(std::string why = "");
  // Whether Drain was called: Run's error then means "continue later", not a failure.
  bool draining();
  // Steps up to `step` ran before (under a coordinator that stopped): run again, they are
  // reported as replays (StepEvent.replay). Call before Run.
  void SetReplayedUntil(int64_t step) { high_water_ = step; }
  // Worker `worker_id` is gone (its heartbeats stopped): the current attempt ends with
  // `why`, and the job recovers if it may. Thread-safe; other ids are ignored.
  void LoseWorker(const std::string& worker_id, const absl::Status& why);
  // The job is to go on without the workers `ids` (a worker leaving on SIGTERM, workers
  // preempted by a job of higher priority), `why` completing "worker w2 ...", e.g.
  // "leaving (SIGTERM)". At its next step boundary (drained, after one more step answered
  // with the replicas' checksums) an elastic job with at least min_workers left goes on
  // without them: the others keep their state, the replicas are rebalanced, the released
  // workers are released (WorkerSupply::Resized names them) and nothing is computed again.
  // A job that cannot (not elastic, or too few left) takes a snapshot there and recovers
  // from it on replacements (WorkerSupply::Replace, nothing replayed; not counted against
  // recovery.max_restarts). Ids not among the job's workers are kept in case they become
  // so (a replacement). Thread-safe; without a WorkerSupply it does nothing (job_resize.cc).
  void ReleaseWorkers(std::vector<std::string> ids, std::string why);

 private:
  // Where an attempt starts: step 0 (the initial state, made again from the seed), the
  // latest snapshot (read from disk, or held here when there is no disk to keep it on), or
  // the state spec.resume_from gave (held).
  struct Start {
    int64_t step = 0;
    std::string data_key, main_key;  // the plan's keys after `step` steps, to check a replay
    std::optional<TrainState> held;
    // An elastic resize: the workers continue from the state they hold at `step`, which
    // has `checksum` where a step reported it (0: unknown; they must agree).
    bool kept = false;
    uint64_t checksum = 0;
  };
  absl::Status Begin();
  // The start spec.resume_from gives.
  absl::Status ResumeFrom();
  // The attempt's TrainState, serialized once for every rank.
  absl::StatusOr<std::shared_ptr<const SharedState>> StartState();
  // DATA_LOSS unless `plan`, advanced to the start's step, holds the start's RNG keys.
  absl::Status CheckStartKeys(const TrainingPlan& plan) const;
  void Connect(std::vector<PoolWorker> workers);
  std::shared_ptr<CancelToken> attempt();
  // A snapshot's or checkpoint's metadata after `step` steps: the spec, the RNG chain's
  // keys and epoch, the params' checksum.
  std::map<std::string, std::string> Metadata(uint64_t checksum, const TrainingPlan& plan,
                                              int64_t step) const;
  // Prepare, the steps, the final evaluation and the checkpoint, from start_.
  absl::Status Attempt(JobOutcome* outcome);
  absl::Status Prepare(int64_t* num_train, int64_t* num_test);
  // Prepares every rank from start_ (a resize: those that keep their state, and the steps
  // they completed past it: CatchUp); each rank's result, checked.
  absl::StatusOr<std::vector<PrepareResult>> PrepareRanks();
  // After a resize's Prepare that CheckKeptStates passed: where survivors hold steps past
  // start_.step (a lost worker finished them with them but never answered), the job goes
  // on from there: start_ moves to that step and ahead_ holds the steps to report. True
  // when only some survivors hold it: the others are to get its state (start_.held,
  // fetched from one that does), so every rank is prepared again.
  absl::StatusOr<bool> CatchUp(const std::vector<absl::StatusOr<PrepareResult>>& resp);
  // Reports ahead_'s steps as the step loop would have (every replica's loss, in replica
  // order: the same event an undisturbed run sends), and the evaluation owed at the last.
  absl::Status ReportAhead(int64_t total, int64_t spe);
  // After an elastic resize's Prepare: OK when every survivor continued from its own state
  // and all agree: those at start_.step on start_.checksum (where known), those past it on
  // one later step, one checksum and the same steps' losses; else ABORTED naming the
  // worker, so that the job recovers from its snapshot instead (job_resize.cc).
  absl::Status CheckKeptStates(const std::vector<absl::StatusOr<PrepareResult>>& resp) const;
  absl::Status StepLoop(TrainingPlan& plan, int64_t total, int64_t num_test, JobOutcome* outcome);
  // Why Run stops for Drain: the job continues from `from`.
  absl::Status Drained(absl::string_view from);
  // Enters (or leaves) the step loop; UNAVAILABLE (Drained) if a drain came first.
  absl::Status SetStepping(bool stepping);
  // Fetches the state at `step` (drained), checks it against `checksum`, keeps and writes it.
  absl::Status TakeSnapshot(int64_t step, uint64_t checksum, const TrainingPlan& plan);
  // After the step loop's Take failed at step `done` (of `total`, `spe` per epoch): the
  // steps every worker answered before the failure, reported as completed (their
  // evaluations owed); returns the steps completed.
  int64_t CountAnswered(StepFanout& fanout, int64_t done, int64_t total, int64_t spe);
  // After a failed attempt of an elastic job: whether it goes on at once with the
  // survivors (`alive`), from the state they hold (job_resize.cc). False where it cannot:
  // too few survivors, none lost, or the attempt never reached its steps.
  bool Shrink(const absl::Status& failure, const std::vector<bool>& alive, JobOutcome* outcome);
  // A resize at a step boundary (job_resize.cc): the step loop decides it (ReleaseDue,
  // GrowDue), stops for it at the boundary (StopToResize) and Run applies it (Resize).
  struct BoundaryResize {
    std::vector<PoolWorker> joining;   // offered by WorkerSupply::Offer
    std::vector<std::string> leaving;  // ids released by ReleaseWorkers, in rank order
    std::string why;                   // e.g. "worker w2 leaving (SIGTERM)", "worker w3 joined"
    // The job cannot go on without `leaving` (not elastic, or too few left): it recovers
    // from the snapshot taken at the boundary, on replacements.
    bool recover = false;
    bool stopped = false;  // the step loop stopped for it (StopToResize)
  };
  // In the step loop, when no hold is pending: whether workers of this attempt are to be
  // released (ReleaseWorkers); kept in resize_.
  bool ReleaseDue();
  // In the step loop, at a step boundary with no step in flight: whether workers joined
  // (WorkerSupply::Offer), kept in resize_.
  bool GrowDue();
  // The step loop stopped at step `done` (drained; `checksum`: the replicas' there, 0 when
  // not asked) for resize_. A grow fetches the state from rank 0 (the newcomers' start);
  // the workers that stay keep theirs. Returns the status that ends the step loop for it.
  absl::Status StopToResize(int64_t done, uint64_t checksum);
  // Run's side of a resize that goes on at once: the released workers released, the event,
  // the workers, a new attempt.
  void Resize(JobOutcome* outcome);
  // After a failed attempt: OK with new workers to go on with, or why the job fails.
  // `planned`: workers were released from a job that had to recover for it (ReleaseWorkers),
  // not counted against recovery.max_restarts.
  absl::Status Recover(const absl::Status& failure, JobOutcome* outcome, bool planned = false);
  // One step command per worker: the step, the worker's dropout key, its shard, and how
  // long its all-reduce may wait for the peers.
  // With `audit`, the audited rank is asked for its gradients' digest and the checkers
  // recompute its shard (audit.h).
  absl::StatusOr<std::vector<StepCommand>> StepCommands(
      const StepPlan& plan, bool want_checksum, absl::Duration collective_timeout,
      const std::optional<AuditPick>& audit = std::nullopt) const;
  // The verdict on step `step`'s audit: OK, or DATA_LOSS naming the step and the workers
  // found lying (quarantined by Recover) or suspected (no majority: replaced); both are
  // kept in audit_lost_ for Recover.
  absl::Status CheckAudit(const AuditPick& pick, const std::vector<StepResult>& got, int64_t step,
                          JobOutcome* outcome, v1::StepEvent* event);
  // Folds the workers' answers to one step into its event; with `check`, DATA_LOSS if
  // the replicas' checksums differ.
  absl::StatusOr<v1::StepEvent> Aggregate(const std::vector<StepResult>& got, int64_t step,
                                          bool check) const;
  absl::StatusOr<v1::EvalResult> Evaluate(int64_t num_test, int64_t step, int64_t epoch);
  // Writes the final checkpoint; one the disk refuses is left pending in `outcome`.
  absl::Status SaveCheckpoint(const std::string& path, uint64_t checksum, const TrainingPlan& plan,
                              JobOutcome* outcome);
  absl::Status WorkerError(int rank, const absl::Status& st) const;
  // Whether the job runs on logical replicas (JobSpec.replicas, docs/elastic.md).
  bool logical() const { return spec_.replicas() > 0; }
  // After a failed attempt: names the first dead rank in the error; outcome->unreachable.
  absl::Status NameTheDead(absl::Status st, const std::vector<bool>& alive, JobOutcome* outcome);
  // After a failure: which ranks still answer a health check.
  std::vector<bool> Probe();
  void ReleaseAll(const std::string& reason, const std::vector<bool>& alive);

  const std::string job_id_;
  const v1::JobSpec spec_;
  const CoordinatorOptions options_;
  WorkerClientFactory* factory_;
  JobSink* sink_;
  WorkerSupply* supply_;
  const bool resume_;
  const CheckpointFolder folder_;
  std::optional<TrainSetup> setup_;  // set by Begin
  std::string checkpoint_path_;      // set by Begin; "" for none
  SnapshotStore snapshots_;
  Start start_;
  int64_t high_water_ = 0;  // the most steps any attempt completed
  int64_t last_snapshot_step_ = 0;
  absl::Time last_snapshot_time_;
  std::vector<PoolWorker> workers_;
  std::vector<std::unique_ptr<WorkerClient>> clients_;
  int attempt_number_ = 0;
  // The current attempt's completed steps once in its step loop (-1: not reached): the
  // state its workers hold; and the last replicas' checksum seen, at done_checksum_step_.
  int64_t done_ = -1;
  uint64_t done_checksum_ = 0;
  int64_t done_checksum_step_ = -1;
  // Where a resized attempt that fails falls back to: the start before the resize.
  std::optional<Start> fallback_;
  // The ranks [0, kept_ranks_) of a resized attempt hold the state (keep_state); the rest
  // get it sent. The resize at the next step boundary, if any.
  int kept_ranks_ = 0;
  std::optional<BoundaryResize> resize_;
  // Steps a resize's survivors completed past the coordinator's last (CatchUp), to report.
  std::vector<CompletedStep> ahead_;
  // The step whose evaluation an attempt began but did not finish (-1: none).
  int64_t eval_owed_ = -1;
  // The rank the step loop's failure was blamed on (-1: none), and each rank's own stream
  // error then (OK: none), so that a peer's error is not taken for the first one.
  int blamed_ = -1;
  std::vector<absl::Status> stream_errors_;
  // The attempt's failed audit: the workers to replace, and which of them lied.
  std::vector<PoolWorker> audit_lost_;
  std::vector<PoolWorker> audit_liars_;
  CancelToken cancel_;  // the job's: Abort
  absl::Mutex attempt_mu_;
  // The current attempt's: cancelled by the job's, or by LoseWorker. Worker calls use it.
  std::shared_ptr<CancelToken> attempt_ ABSL_GUARDED_BY(attempt_mu_);
  bool draining_ ABSL_GUARDED_BY(attempt_mu_) = false;
  std::string drain_why_ ABSL_GUARDED_BY(attempt_mu_);  // Drain's `why`
  bool stepping_ ABSL_GUARDED_BY(attempt_mu_) = false;  // in StepLoop: a drain waits for a step
  // ReleaseWorkers' requests not yet applied: worker id -> why.
  std::map<std::string, std::string> releasing_ ABSL_GUARDED_BY(attempt_mu_);
  CancelToken::Callback cancel_attempt_;  // the job's cancel reaches the attempt
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOB_RUNNER_H_
