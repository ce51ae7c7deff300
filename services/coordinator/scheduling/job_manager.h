// JobManager: the coordinator's single writer of job state. It validates and queues
// submitted jobs (within their owner's limits, user_limits.h, and the global caps), starts
// them as the scheduling policy says (scheduler.h: FIFO onto free workers, passing over an
// owner at their running-jobs limit; jobs on disjoint workers run concurrently), runs
// each on a thread of its own (JobRunner), gives a job that lost workers healthy ones
// again (RECOVERING, first in line), resumes running jobs after a restart, and cancels.
// Its parts, each with one concern: job records on disk (JobRecords, written outside
// this class's lock), each job's event log (EventLog, its own lock, for watchers) and
// TensorBoard event files (TensorBoardWriter, written on a thread of their own), the
// pool (WorkerPool) and the policy (PlanSchedule, pure). Its metrics (CoordinatorMetrics)
// follow state changes under mu_, and each step on the job's runner thread.
//
// Thread-safe. Lock order: submit_mu_, then mu_, then the WorkerPool's lock; a job's
// CancelToken callbacks may run under mu_ and take only leaf locks (a gRPC call's, a step
// stream's). Watchers are woken on a thread of the manager's own (notifier_). mu_ is never held
// while waiting for the disk, a worker or a thread: records are written and threads joined after
// unlocking.
//
// Its implementation, a file an idea: job_manager.cc (the state machine: submit, schedule,
// run, recover, cancel), job_manager_restart.cc (Start), job_manager_drain.cc,
// job_manager_limits.cc, job_manager_retention.cc, job_manager_logs.cc (logs, watchers,
// TensorBoard), job_manager_checkpoints.cc, job_manager_preemption.cc (priorities) and
// job_manager_sink.cc; job_manager_internal.h holds the Record they share.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/dashboard.pb.h"
#include "lockstep/v1/job.pb.h"
#include "services/common/observability/job_log.h"
#include "services/common/security/auth.h"
#include "services/coordinator/jobs/job_runner.h"
#include "services/coordinator/jobs/local_replica.h"
#include "services/coordinator/observability/coordinator_metrics.h"
#include "services/coordinator/observability/event_log.h"
#include "services/coordinator/observability/tensorboard_writer.h"
#include "services/coordinator/options.h"
#include "services/coordinator/scheduling/scheduler.h"
#include "services/coordinator/scheduling/token_bucket.h"
#include "services/coordinator/storage/checkpoint_retrier.h"
#include "services/coordinator/storage/job_records.h"
#include "services/coordinator/storage/step_history.h"
#include "services/coordinator/workers/kv_table.h"
#include "services/coordinator/workers/worker_client.h"
#include "services/coordinator/workers/worker_pool.h"

namespace lockstep {

class JobManager {
 public:
  // All must outlive the manager. `kv` may be null (no rendezvous keys to drop);
  // `metrics` too (the manager keeps its own, unserved).
  JobManager(const CoordinatorOptions& options, WorkerPool* pool, KvTable* kv,
             WorkerClientFactory* factory, CoordinatorMetrics* metrics = nullptr);
  // Stops every running job (to continue from its latest snapshot after a restart, never
  // CANCELLED: call Drain first to have them take one now), and joins every thread.
  ~JobManager();

  // Reloads the job records and starts the scheduler thread: jobs a previous coordinator
  // left queued stay queued, and those it left running are RECOVERING (at the step of
  // their latest snapshot) until they have workers, then continue from that snapshot.
  // DATA_LOSS naming an unreadable record.
  absl::Status Start();
  // The coordinator's own replica (local_replica.h), for a replay audit that no free
  // worker can take (docs/audit.md); must outlive the manager. Before Start. Without one
  // (as with --audit_local_replica=false) such a replay is skipped.
  void SetLocalReplica(LocalReplica* replica) { local_replica_ = replica; }

  // A graceful stop (SIGTERM): refuses new jobs and watchers, starts no queued job, has
  // every running job snapshot its state at its next step and recorded RECOVERING (it
  // continues when a coordinator starts on these records), ends a job's wait for workers
  // at once, and finally ends every WatchJob and WatchLogs stream with UNAVAILABLE saying
  // so. Returns by `deadline`: a job that did not reach a step boundary within three
  // quarters of the time left is aborted, to continue from its previous snapshot
  // (DEADLINE_EXCEEDED naming those jobs). Call once; the manager serves reads after.
  absl::Status Drain(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // INVALID_ARGUMENT naming the spec field; NOT_FOUND when resume_from names nothing;
  // RESOURCE_EXHAUSTED naming the field when the job's estimated memory exceeds a budget
  // (CheckMemoryBudget), or naming the user and the limit when `by` has as many queued jobs
  // as their limit or submits faster than theirs (AdmitLocked), or naming the global cap
  // (--max_queued_jobs, --max_jobs_kept); DATA_LOSS when the record
  // cannot be written; PERMISSION_DENIED when a user (not an admin) resumes from another's
  // job. Returns once the job's record, owned by `by`, is on disk. A spec.request_id the
  // owner used before returns that job if the spec is the same (defaults filled in), else
  // ALREADY_EXISTS naming the job.
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec, const Principal& by = {"", true});
  absl::StatusOr<v1::Job> Get(const std::string& id);
  v1::ListJobsResponse List(const v1::ListJobsRequest& request);
  // FAILED_PRECONDITION if the job already ended. A queued job is CANCELLED at once; a
  // running one within about a second (its runner stops; its workers are released).
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  // The params checksums at the job's snapshots taken by this process, and the final one
  // once it SUCCEEDED (witness.h). NOT_FOUND.
  absl::StatusOr<v1::JobWitness> Witness(const std::string& id);

  // A file holding the job's state at a step: a kept snapshot (`step`), or by default the
  // final checkpoint if there is one, else the newest snapshot. NOT_FOUND naming the steps
  // there are.
  struct StateFile {
    std::string path;
    int64_t step = 0;
  };
  absl::StatusOr<StateFile> CheckpointFile(const std::string& id, std::optional<int64_t> step);

  // A watcher of one job: its event log, and where the history it replays ends. Counts
  // against the watcher limits while it lives.
  class Watch {
   public:
    ~Watch();
    const std::shared_ptr<EventLog>& log() const { return log_; }
    int64_t replay_until() const { return replay_until_; }

   private:
    friend class JobManager;
    Watch(JobManager* m, std::string id, std::shared_ptr<EventLog> log)
        : m_(m), id_(std::move(id)), log_(std::move(log)), replay_until_(log_->end()) {}
    JobManager* m_;
    const std::string id_;
    const std::shared_ptr<EventLog> log_;
    const int64_t replay_until_;
  };
  // NOT_FOUND; RESOURCE_EXHAUSTED when the watcher limits are reached. With `logs`, the
  // watch is of the job's log lines (JobEvents with `log`), not of its events.
  absl::StatusOr<std::unique_ptr<Watch>> StartWatch(const std::string& id, bool logs = false);

  // A log line about a job (LogLine.job), from this process's log (SetLogTap): kept in the
  // job's log for WatchLogs; lines of unknown jobs are dropped. Takes only leaf locks.
  void AppendLog(const v1::LogLine& line) ABSL_LOCKS_EXCLUDED(logs_mu_);
  // Log lines a worker shipped with its heartbeat: each kept in its job's log if the
  // worker ran that job (`worker` set to its id, whatever it said); others are dropped.
  void AppendWorkerLogs(const std::string& worker_id,
                        const google::protobuf::RepeatedPtrField<v1::LogLine>& lines)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Wakes the scheduler (e.g. a worker registered).
  void Kick();

  // Worker `worker_id`, registered by `identity`, is leaving (SIGTERM; its heartbeat says
  // so): the pool never assigns it again, and its job, if any, goes on without it from
  // its next step boundary (JobRunner::ReleaseWorkers). Idempotent. The pool's errors
  // (NOT_FOUND, PERMISSION_DENIED) as for a heartbeat.
  absl::Status WorkerLeaving(const std::string& worker_id, const std::string& identity = "")
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Record;
  class Sink;
  // A record to write once mu_ is released, with the job's step history when it has one.
  struct Save {
    v1::Job job;
    int64_t version;
    std::shared_ptr<const StepHistory> history;
    std::shared_ptr<const std::vector<v1::SnapshotMark>> witness;  // null: unchanged
  };
  void SchedulerLoop();
  // Applies PlanSchedule; started jobs' records go to *saves.
  void ScheduleLocked(std::vector<Save>* saves) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Preemption (job_manager_preemption.cc): `blocked` (Schedule::blocked, of `demands`)
  // takes workers from running jobs of lower priority as PlanPreemption says: elastic
  // ones release theirs at their next step boundary (JobRunner::ReleaseWorkers), the
  // others are suspended (SuspendLocked). One preemption at a time: none for a minute
  // while one for the same job is under way.
  void PreemptLocked(const std::string& blocked, const std::vector<JobDemand>& demands)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job snapshots at its next step boundary (JobRunner::Drain with `why`) and is
  // SUSPENDED (RunJob), then queued again to continue from that snapshot (RequeueLocked).
  void SuspendLocked(Record& rec, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A SUSPENDED job whose thread was joined: back in the queue, in arrival order, to
  // continue from its newest snapshot (as a restarted coordinator's jobs do).
  void RequeueLocked(Record& rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunJob(Record* rec);
  // A running job lost workers (WorkerSupply::Recovering, from its runner): RECOVERING,
  // first in line, until the scheduler gives it workers (JobRunner::GiveWorkers) or
  // `timeout` passes (JobRunner::NoWorkers, ExpireRecoveriesLocked).
  void Recovering(Record& rec, const std::vector<std::string>& lost, const absl::Status& reason,
                  absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Tells the recovering jobs whose wait is over that no workers come.
  void ExpireRecoveriesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Offers free workers to running elastic jobs below their most (JobRunner::OfferWorkers),
  // one offer a job at a time, none while other jobs wait for workers.
  void OfferLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether every job's thread ended and its records are written.
  bool SettledLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Whether `name` is not a job id, or names a job of `user`'s (resume_from's check).
  bool OwnsOrNoJob(const std::string& user, const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  bool OwnsOrNoJobLocked(const std::string& user, const std::string& name) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Changes the job's state, logs the state event, and queues the record's write.
  void SetStateLocked(Record& rec, v1::JobState state, const absl::Status& reason,
                      std::vector<Save>* saves) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the records (without mu_) and notes what reached the disk.
  void Persist(std::vector<Save> saves) ABSL_LOCKS_EXCLUDED(mu_);
  using JobMap = std::map<std::string, std::unique_ptr<Record>>;
  // Each owner's oldest finished jobs past that owner's retention (UserLimits::
  // max_jobs_kept) whose records are on disk, with no write of them pending: forgotten,
  // their ids returned for Forget. Never another owner's.
  std::vector<std::string> ForgetOldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job ended and nothing of it is still to be written or joined.
  bool ForgettableLocked(const Record& rec) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the job from memory (its records go in Forget); returns its id.
  std::string ForgetLocked(JobMap::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `owner` may queue one more job: RESOURCE_EXHAUSTED naming the user and the
  // limit (their queued jobs, their submits a minute) or the global cap (queued jobs; job
  // records, when none of theirs can make room). When admitted it takes a submit token,
  // and at the records' cap forgets the owner's own oldest finished job (into *forgotten).
  absl::Status AdmitLocked(const std::string& owner, std::vector<std::string>* forgotten)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The room to start jobs of each queued job's owner who has a running-jobs limit.
  std::map<std::string, OwnerSlots> OwnerSlotsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases the forgotten jobs' records, after writing down `next_id` (ids are not reused).
  void Forget(std::vector<std::string> ids, int64_t next_id) ABSL_LOCKS_EXCLUDED(mu_);
  // A new job's log (WatchLogs), known to AppendLog from now on.
  std::shared_ptr<EventLog> NewLogs(const std::string& id) ABSL_LOCKS_EXCLUDED(logs_mu_);
  // The job's TensorBoard writer; null without options_.tensorboard_dir.
  std::shared_ptr<TensorBoardWriter> NewTensorBoardWriter(const v1::Job& job);
  absl::StatusOr<Record*> FindLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndWatch(const std::string& id);
  // A SUCCEEDED job whose final checkpoint is pending (job_manager_checkpoints.cc): a
  // restarted coordinator's takes the final state from its newest snapshot, for retrier_.
  void KeepPendingCheckpointLocked(Record& rec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // retrier_ wrote job `id`'s checkpoint to `path`: on its record.
  void CheckpointWritten(const std::string& id, const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);

  const CoordinatorOptions options_;
  // Wakes the watchers of every job's event log (EventLog), so that a runner never does.
  // Destroyed last.
  SerialExecutor notifier_;
  // Writes the jobs' TensorBoard event files (TensorBoardWriter), off the runners' threads.
  SerialExecutor tensorboard_io_;
  WorkerPool* pool_;
  KvTable* kv_;
  WorkerClientFactory* factory_;
  LocalReplica* local_replica_ = nullptr;
  std::unique_ptr<CoordinatorMetrics> own_metrics_;  // when none was given
  CoordinatorMetrics* metrics_;
  JobRecords records_;

  absl::Mutex submit_mu_;  // serializes Submit, whose write to disk happens under it
  absl::Mutex mu_;
  JobMap jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> recovering_ ABSL_GUARDED_BY(mu_);  // waiting for workers again
  // RequestKey(owner, request_id) -> job id: one caller's retries, never another's job.
  std::map<std::string, std::string> by_request_id_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Each limited owner's submit rate (UserLimits::submits_per_minute).
  std::map<std::string, TokenBucket> submit_rate_ ABSL_GUARDED_BY(mu_);
  int watchers_ ABSL_GUARDED_BY(mu_) = 0;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The job a preemption is under way for, until when (PreemptLocked).
  std::string preempting_for_ ABSL_GUARDED_BY(mu_);
  absl::Time preempt_until_ ABSL_GUARDED_BY(mu_);
  // Threads of jobs that ended, for the scheduler thread to join outside mu_.
  std::vector<std::pair<std::string, std::thread>> ended_ ABSL_GUARDED_BY(mu_);
  // Logs of jobs that ended, closed once their workers' last lines had time to come.
  std::vector<std::pair<absl::Time, std::shared_ptr<EventLog>>> logs_to_close_ ABSL_GUARDED_BY(mu_);
  std::thread scheduler_;

  // Each known job's log lines (Record::logs), for AppendLog, which may run under mu_.
  absl::Mutex logs_mu_;  // a leaf
  std::map<std::string, std::shared_ptr<EventLog>> logs_ ABSL_GUARDED_BY(logs_mu_);

  // Final checkpoints a full disk refused, retried; destroyed first (it calls back).
  CheckpointRetrier retrier_{
      [this](const std::string& id, const std::string& path) { CheckpointWritten(id, path); },
      [](const std::string& id, const absl::Status& why) {
        LogJob(spdlog::level::warn, {id},
               absl::StrCat("final checkpoint still pending: ", why.message(),
                            "; retried with backoff"));
      }};
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_H_
