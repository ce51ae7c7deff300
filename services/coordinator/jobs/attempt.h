// Attempt: one membership of a job. Its workers (rank order) and their clients, its
// rendezvous namespace, its step fanout, its audit, the steps its workers completed. Run
// prepares every rank from the job's start, runs the steps (pipelined: up to
// steps_in_flight commands on each worker's stream), evaluates at the spec's cadence,
// takes the job's snapshots, and at the end evaluates and writes the checkpoint. It
// returns how it ended (attempt_end.h): Finished, a planned stop at a step boundary
// (ResizeAt, Drained, Suspended), Cancelled, or Failed with the workers that no longer
// answer named. What the job does next is the decision table's (decision.h).
//
// Its files: attempt.cc (prepare, evaluate, how it ended), attempt_steps.cc (the step
// loop), attempt_kept.cc (an elastic resize's kept states and the steps they report),
// attempt_replay.cc (the replay audit's snapshots).
//
// Thread safety: Run on the job's thread; the events (events.h) reach it from any thread.
// Every worker call is made with the attempt's CancelToken, so that a cancel or a lost
// worker ends Run promptly.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_ATTEMPT_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_ATTEMPT_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan.h"
#include "services/coordinator/jobs/attempt_end.h"
#include "services/coordinator/jobs/audit.h"
#include "services/coordinator/jobs/events.h"
#include "services/coordinator/jobs/job.h"
#include "services/coordinator/jobs/replay_audit.h"
#include "services/coordinator/jobs/step_fanout.h"
#include "services/coordinator/workers/worker_client.h"

namespace lockstep {

class Attempt {
 public:
  // Connects to `workers` (workers[r] is rank r), under the token `events` gave them
  // (JobEvents::NewAttempt).
  // `supply` (may be null) lends the replay audit its checkers (replay_audit.h).
  Attempt(Job* job, std::vector<PoolWorker> workers, WorkerClientFactory* factory,
          JobEvents* events, WorkerSupply* supply = nullptr);

  AttemptEnd Run();

  const std::vector<PoolWorker>& workers() const { return workers_; }
  // Releases every rank that still answers (all, unless Run found some dead) with
  // `reason`: each aborts its collective and drops the job.
  void ReleaseAll(const std::string& reason);
  // Releases the workers `ids` alone (a resize lets them go).
  void Release(const std::vector<std::string>& ids, const std::string& reason);

 private:
  // Prepare, the steps, the final evaluation and the checkpoint; a planned stop as its end.
  absl::StatusOr<AttemptEnd> Execute();
  absl::Status Prepare(int64_t* num_train, int64_t* num_test);
  // Prepares every rank from the job's start (a resize: those that keep their state, and
  // the steps they completed past it: CatchUp); each rank's result, checked.
  absl::StatusOr<std::vector<PrepareResult>> PrepareRanks();
  // After a resize's Prepare: OK when every survivor continued from its own state and all
  // agree: those at the start's step on its checksum (where known), those past it on one
  // later step, one checksum and the same steps' losses; else ABORTED naming the worker,
  // so that the job recovers from its snapshot instead (attempt_kept.cc).
  absl::Status CheckKeptStates(const std::vector<absl::StatusOr<PrepareResult>>& resp) const;
  // After CheckKeptStates passed: where survivors hold steps past the start (a lost worker
  // finished them with them but never answered), the job goes on from there: its start
  // moves to that step and Job::ahead() holds the steps to report. True when only some
  // survivors hold it: the others are to get its state (fetched from one that does), so
  // every rank is prepared again.
  absl::StatusOr<bool> CatchUp(const std::vector<absl::StatusOr<PrepareResult>>& resp);
  // Reports Job::ahead()'s steps as the step loop would have (every replica's loss, in
  // replica order: the same event an undisturbed run sends), and the evaluation owed at
  // the last.
  absl::Status ReportAhead(int64_t total, int64_t spe);

  // The steps from the job's start to `total` (attempt_steps.cc): nullopt when all ran, or
  // the planned stop at a step boundary (Drained, Suspended, ResizeAt).
  absl::StatusOr<std::optional<AttemptEnd>> StepLoop(TrainingPlan& plan, int64_t total,
                                                     int64_t num_test);
  struct Pipeline;
  // A drain (`drain`) or a release due: one more step, and the hold after it.
  absl::Status HoldForBoundary(Pipeline& p, bool drain);
  // Sends steps until steps_in_flight are out or one needs a hold after it.
  absl::Status Fill(Pipeline& p);
  // The answers to the next step: its event, its audit's verdict, its time.
  absl::Status Answer(Pipeline& p, std::vector<StepResult> got, bool checked);
  // At the hold's step (`checksum`: the replicas' there): its evaluation, snapshot, and the
  // attempt's planned stop if the hold is for one.
  absl::StatusOr<std::optional<AttemptEnd>> AtHold(Pipeline& p, uint64_t checksum);
  // Whether step `done`'s answers carry the replicas' checksums: the last, and every
  // checksum_every_steps.
  bool ChecksumDue(int64_t done, int64_t total) const;
  // One step command per worker: the step, the worker's dropout key, its shard, and how
  // long its all-reduce may wait for the peers. With `audit`, the audited rank is asked
  // for its gradients' digest and the checkers recompute its shard (audit.h).
  absl::StatusOr<std::vector<StepCommand>> StepCommands(
      const StepPlan& plan, bool want_checksum, absl::Duration collective_timeout,
      const std::optional<AuditPick>& audit = std::nullopt) const;
  // The verdict on step `step`'s audit: OK, or DATA_LOSS naming the step and the workers
  // found lying or suspected (no majority), kept for the Failed end.
  absl::Status CheckAudit(const AuditPick& pick, const std::vector<StepResult>& got, int64_t step,
                          v1::StepEvent* event);
  // The replay audit (replay_audit.h, attempt_replay.cc): whether this attempt runs it
  // (the audit on, recovery, and one worker: the shard audit covers 2 or more, BatchNorm
  // on logical replicas too).
  bool ReplayAudited() const;
  // A periodic snapshot of the job, audited by replay: the previous replay's verdict first
  // (waited for), then `state` is held back (pending) while a lent worker replays the
  // steps since the job's start up to it, or kept at once where no replay can start.
  absl::Status AuditSnapshot(TrainState state, uint64_t checksum, const TrainingPlan& plan);
  // At the last step (`total`, the job's checksum there): the pending replay's verdict,
  // then the steps since the job's start replayed and waited for.
  absl::Status AuditEnd(int64_t total);
  // Starts the replay of the steps from the job's start to `to`, which must end with
  // `checksum`; false (the job's events say why) where none can start.
  bool StartReplay(int64_t to, uint64_t checksum);
  // The running replay's verdict, waited for with `wait`, else only if it is in.
  absl::Status SettleReplay(bool wait);
  // A verdict: passed (the pending snapshot is kept), not run to its end (kept, unaudited),
  // or a mismatch: DATA_LOSS, the job's workers to replace (audit_lost_).
  absl::Status JudgeReplay(const ReplayVerdict& v);

  // Folds the workers' answers to one step into its event; with `check`, DATA_LOSS if
  // the replicas' checksums differ.
  absl::StatusOr<v1::StepEvent> Aggregate(const std::vector<StepResult>& got, int64_t step,
                                          bool check) const;
  absl::StatusOr<v1::EvalResult> Evaluate(int64_t num_test, int64_t step, int64_t epoch);
  // The state rank 0 holds, which must be at `step` (any, when -1) with `checksum`; DATA_LOSS
  // saying `what` otherwise.
  absl::StatusOr<TrainState> FetchChecked(int64_t step, uint64_t checksum, absl::string_view what);
  // The workers named by Job events' releases, as a resize at the next step boundary;
  // with `recover` set when the job cannot go on without them (the decision table's),
  // so that the boundary snapshots.
  std::optional<ResizeAt> ReleaseDue(bool* recover);
  // Workers offered to an elastic job below its most (JobEvents::Offer), as a resize.
  std::optional<ResizeAt> GrowDue();
  // The stop at step `done` (drained; `checksum`: the replicas' there, 0 when not asked)
  // for `resize`: a grow fetches the state from rank 0 for the newcomers.
  absl::StatusOr<AttemptEnd> StopToResize(ResizeAt resize, int64_t done, uint64_t checksum);
  // Drained, or Suspended where the drain is a suspension.
  AttemptEnd DrainEnd(absl::Status why);
  // After the step loop's Take failed at step `done` (of `total`, `spe` per epoch): the
  // steps every worker answered before the failure, reported as completed (their
  // evaluations owed); returns the steps completed (attempt_kept.cc).
  int64_t CountAnswered(StepFanout& fanout, int64_t done, int64_t total, int64_t spe);

  // Releases the workers of `ranks` at once, each call bounded by release_timeout.
  void ReleaseRanks(const std::vector<int>& ranks, const std::string& reason);
  absl::Status WorkerError(int rank, const absl::Status& st) const;
  // After a failure: which ranks still answer a health check.
  std::vector<bool> Probe();
  // After a failure: `st` naming the first dead rank, the dead ids in `lost`.
  absl::Status NameTheDead(absl::Status st, const std::vector<bool>& alive,
                           std::vector<std::string>* lost) const;

  Job& job_;
  JobEvents& events_;
  const std::vector<PoolWorker> workers_;
  std::vector<std::unique_ptr<WorkerClient>> clients_;
  const int number_;  // the job's attempts before this one
  const std::shared_ptr<CancelToken> cancel_;
  // The steps completed once in the step loop (-1: not reached): the state the workers
  // hold; and the last replicas' checksum seen, at done_checksum_step_.
  int64_t done_ = -1;
  uint64_t done_checksum_ = 0;
  int64_t done_checksum_step_ = -1;
  // The rank the step loop's failure was blamed on (-1: none), and each rank's own stream
  // error then (OK: none), so that a peer's error is not taken for the first one.
  int blamed_ = -1;
  std::vector<absl::Status> stream_errors_;
  // A failed audit: the workers to replace, and which of them lied.
  std::vector<PoolWorker> audit_lost_;
  std::vector<PoolWorker> audit_liars_;
  std::vector<bool> alive_;  // which ranks answer; all until a failure's Probe
  WorkerClientFactory* const factory_;
  WorkerSupply* const supply_;
  // The replay audit's: the replay in flight (null where the attempt runs none), and the
  // snapshot it audits, kept once it passed.
  std::unique_ptr<ReplayAuditor> replay_;
  struct Pending {
    TrainState state;
    uint64_t checksum = 0;
    std::map<std::string, std::string> metadata;
  };
  std::optional<Pending> pending_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_ATTEMPT_H_
