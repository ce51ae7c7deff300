// Job: what outlives an attempt of one job. Its spec and what the spec sets up (model,
// optimizer, RNG implementation), where the next attempt starts (Start: step 0, a
// snapshot, spec.resume_from's state, or the state its workers kept across a resize), its
// snapshots on disk, the most steps any attempt completed (so that steps run again are
// reported as replays), the steps and evaluation still owed to its events, and its
// outcome. An Attempt (attempt.h) reads it and moves it forward; JobRunner owns both.
//
// Where its progress goes: a JobSink (the JobManager, `lockstep train`'s printer, tests).
//
// Thread safety: none; the job's thread (JobRunner::Run) owns it.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOBS_JOB_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOBS_JOB_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cancel.h"
#include "core/commands.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "core/train_state.h"
#include "lockstep/v1/job.pb.h"
#include "services/coordinator/jobs/decision.h"
#include "services/coordinator/jobs/local_replica.h"
#include "services/coordinator/options.h"
#include "services/coordinator/storage/checkpoint_folder.h"
#include "services/coordinator/storage/pending_checkpoint.h"
#include "services/coordinator/storage/snapshot_store.h"
#include "services/coordinator/workers/worker_client.h"
#include "services/coordinator/workers/worker_pool.h"

namespace lockstep {

// Where a job reports progress. Called from the job's thread.
class JobSink {
 public:
  virtual ~JobSink() = default;
  virtual void OnRunning(int64_t total_steps) = 0;
  virtual void OnStep(const v1::StepEvent& event) = 0;
  virtual void OnEval(const v1::EvalResult& result) = 0;
  // A snapshot of the state at `step` was taken (and written, where the job keeps them);
  // `param_checksum`: of its params, which every replica agreed on.
  // `in_memory`: the disk refused it; it is held in memory (a restart cannot use it).
  virtual void OnSnapshot(int64_t step, uint64_t param_checksum, bool in_memory) {}
  // An attempt's collective bootstraps under rendezvous `prefix`, by `workers` (rank order);
  // called before any of them learns it (the previous attempt's namespace is over).
  virtual void OnRendezvous(const std::string& prefix, const std::vector<PoolWorker>& workers) {}
  // Something the job's events should say while it runs (e.g. steps a resize reported from
  // the survivors' state).
  virtual void OnNote(const std::string& why) {}
};

// Where a job's workers come from (the JobManager): told, never asked. Its answers arrive
// as events on the job's queue (JobEvents: GiveWorkers, NoWorkers, Offer), so that nothing
// here returns workers or waits. Called from the job's thread.
class WorkerSupply {
 public:
  virtual ~WorkerSupply() = default;
  // The job lost workers for `reason`: those in `lost` are gone for good, the others are
  // released already (as are any it was offered and had not taken). It waits for as many
  // workers as it needs: answer with GiveWorkers (rank order), or NoWorkers once `timeout`
  // passed without enough (DEADLINE_EXCEEDED saying what it waited for), or when the supply
  // shuts down (UNAVAILABLE).
  virtual void Recovering(const std::vector<std::string>& lost, const absl::Status& reason,
                          absl::Duration timeout) = 0;
  // An elastic job (JobSpec.replicas) lost the workers `lost` (gone for good), or let the
  // workers `released` go (JobRunner::ReleaseWorkers: no longer its own), or took workers
  // it was offered, and goes on, without waiting, on `workers` (rank order; its own); `why`
  // says so, e.g. "resized 3 -> 2 workers: worker w2 lost (...)". Called before they are
  // prepared again.
  virtual void Resized(const std::vector<PoolWorker>& workers, const std::vector<std::string>& lost,
                       const std::string& why, const std::vector<std::string>& released) {}
  // The job's audit found `worker` lying (`why` says where): it must never get work from
  // this coordinator again. Called before the Recovering that has it among the lost.
  virtual void Quarantine(const PoolWorker& worker, const std::string& why) {}
  // The replay audit (replay_audit.h) asks for a free worker on `device` ("cpu", or a
  // "cuda" prefix) computing with `threads` (0: any), none of `exclude` (ids): it is the
  // job's (busy to others) until ReturnWorker. The one call here that answers, and it
  // answers at once: nullopt when none is free (the audit is skipped), never a wait.
  virtual std::optional<PoolWorker> LendWorker(const std::string& device, uint32_t threads,
                                               const std::vector<std::string>& exclude) {
    return std::nullopt;
  }
  virtual void ReturnWorker(const PoolWorker& worker) {}
  // The coordinator's own replica, for a replay that no free worker can take (null: none,
  // e.g. --audit_local_replica=false; the replay is skipped then).
  virtual LocalReplica* local_replica() { return nullptr; }
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

// Where an attempt starts: step 0 (the initial state, made again from the seed), the
// latest snapshot (read from disk, or held here when there is no disk to keep it on), the
// state spec.resume_from gave (held), or the state the workers kept (a resize).
struct Start {
  int64_t step = 0;
  std::string data_key, main_key;  // the plan's keys after `step` steps, to check a replay
  std::optional<TrainState> held;
  // A resize: the ranks [0, kept_ranks) continue from the state they hold at `step`, which
  // has `checksum` where a step reported it (0: unknown; they must agree); the others get
  // `held`.
  bool kept = false;
  uint64_t checksum = 0;
  int kept_ranks = 0;
};

class Job {
 public:
  // `spec` is validated (core/spec/spec.h). `recovers`: workers can be had again after a
  // loss (snapshots are taken only then). With `resume`, the job continues from the newest
  // snapshot on disk, if any (a restarted coordinator).
  Job(std::string id, v1::JobSpec spec, const CoordinatorOptions& options, JobSink* sink,
      bool recovers, bool resume);

  // The spec's setup, where the checkpoint goes (checked now, not after the training) and
  // where the first attempt starts.
  absl::Status Begin();

  const std::string& id() const { return id_; }
  const v1::JobSpec& spec() const { return spec_; }
  const CoordinatorOptions& options() const { return options_; }
  const TrainSetup& setup() const { return *setup_; }
  JobSink* sink() const { return sink_; }
  bool recovers() const { return recovers_; }
  // Whether the job runs on logical replicas (JobSpec.replicas, docs/elastic.md).
  bool logical() const { return spec_.replicas() > 0; }
  // What the decision table takes of the spec (decision.h).
  Policy policy() const {
    return {recovers_, logical(), MinWorkers(spec_),
            static_cast<int>(spec_.recovery().max_restarts())};
  }
  JobOutcome& outcome() { return outcome_; }
  // The number of the next attempt (its rendezvous namespace's), counting from 0.
  int NextAttemptNumber() { return attempts_++; }

  // Where the next attempt starts.
  const Start& start() const { return start_; }
  // A resize: the workers go on from the state they hold (`kept`). The first of a run of
  // resizes remembers where a failed one falls back to: the start before it.
  void KeepState(Start kept);
  // A grow that failed fetched the state the survivors are to continue from: every rank
  // gets it (none keeps its own).
  void SendHeldStateToEveryRank() { start_.kept_ranks = 0; }
  // After a resize that failed: back to that start, the steps it held to report dropped
  // (replayed from the snapshot instead).
  void FallBack();
  // The step a failed resize falls back to.
  int64_t fallback_step() const { return fallback_.has_value() ? fallback_->step : 0; }

  // The attempt's TrainState, serialized once for every rank (a resize's: its shape only,
  // unless it holds one for the ranks that get it).
  absl::StatusOr<std::shared_ptr<const SharedState>> StartState();
  // DATA_LOSS unless `plan`, advanced to the start's step, holds the start's RNG keys.
  absl::Status CheckStartKeys(const TrainingPlan& plan) const;

  // Whether a snapshot is due after step `after` (of `total`) at `now`: every
  // snapshot_every_steps or snapshot_every_seconds, the sooner, where recovery can use it.
  bool SnapshotDue(int64_t after, int64_t total, absl::Time now) const;
  // `state` (fetched and checked against the replicas' `checksum`) as the job's newest
  // snapshot: on disk, else held here (no disk, or the disk refused it). The start of the
  // next attempt from now on.
  void KeepSnapshot(TrainState state, uint64_t checksum, const TrainingPlan& plan);
  // As above, with the metadata SnapshotMetadata gave at the state's step (a snapshot kept
  // once its replay audit passed, when the plan has moved on).
  void KeepSnapshot(TrainState state, uint64_t checksum,
                    const std::map<std::string, std::string>& metadata);
  std::map<std::string, std::string> SnapshotMetadata(uint64_t checksum, const TrainingPlan& plan,
                                                      int64_t step) const {
    return Metadata(checksum, plan, step);
  }
  // A snapshot of `step` was taken now and waits for its replay audit: the cadence
  // (SnapshotDue) counts from it.
  void SnapshotTaken(int64_t step);
  // Writes the final checkpoint of `state` (fetched and checked) to checkpoint_path(); one
  // the disk refuses is left pending in the outcome.
  void SaveCheckpoint(TrainState state, uint64_t checksum, const TrainingPlan& plan);
  const std::string& checkpoint_path() const { return checkpoint_path_; }
  // The job succeeded: its snapshots go (unless its checkpoint is pending).
  void Succeeded();

  // Reports step `step` (of `total`, `spe` a epoch) with event `e` to the sink, marked as a
  // replay where an attempt completed it before; returns whether it was one.
  bool ReportStep(v1::StepEvent e, int64_t step, int64_t total, int64_t spe);
  // Steps up to `step` ran before (under a coordinator that stopped): reported as replays.
  void SetReplayedUntil(int64_t step) { high_water_ = step; }

  // The step whose evaluation an attempt began but did not finish (-1: none).
  int64_t eval_owed() const { return eval_owed_; }
  void set_eval_owed(int64_t step) { eval_owed_ = step; }
  // Steps a resize's survivors completed past the coordinator's last (Attempt::CatchUp),
  // to report.
  std::vector<CompletedStep>* ahead() { return &ahead_; }
  // The workers a failed replay audit involved (the checker and the job's): lent to it
  // as checkers no more.
  std::vector<std::string>& replay_suspects() { return replay_suspects_; }

 private:
  absl::Status ResumeFrom();
  // A snapshot's or checkpoint's metadata after `step` steps: the spec, the RNG chain's
  // keys and epoch, the params' checksum.
  std::map<std::string, std::string> Metadata(uint64_t checksum, const TrainingPlan& plan,
                                              int64_t step) const;

  const std::string id_;
  const v1::JobSpec spec_;
  const CoordinatorOptions options_;
  JobSink* const sink_;
  const bool recovers_;
  const bool resume_;
  const CheckpointFolder folder_;
  std::optional<TrainSetup> setup_;  // set by Begin
  std::string checkpoint_path_;      // set by Begin; "" for none
  SnapshotStore snapshots_;
  Start start_;
  std::optional<Start> fallback_;  // where a resized attempt that fails falls back to
  int64_t high_water_ = 0;         // the most steps any attempt completed
  int64_t last_snapshot_step_ = 0;
  absl::Time last_snapshot_time_;
  int attempts_ = 0;
  int64_t eval_owed_ = -1;
  std::vector<CompletedStep> ahead_;
  std::vector<std::string> replay_suspects_;
  JobOutcome outcome_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOBS_JOB_H_
