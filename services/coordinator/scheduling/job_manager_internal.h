// What JobManager's own files share (job_manager*.cc), and nothing else includes: a job's
// Record, the Sink that forwards its runner's progress, and the small helpers more than
// one of those files uses. Guarded by JobManager::mu_ as the Record's comments say.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_INTERNAL_H_
#define LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_INTERNAL_H_

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/clock.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/storage/step_history.h"

namespace lockstep {
namespace job_manager_internal {

// The coordinator's time (CoordinatorOptions::clock) as a record's and an event's unix_ms.
inline int64_t NowMs(const Clock& clock) { return absl::ToUnixMillis(clock.Now()); }

// The key of by_request_id_: one owner's request id, never another's.
std::string RequestKey(const std::string& owner, const std::string& request_id);

// A job's state event at `unix_ms`, for its event log.
v1::JobEvent StateEvent(v1::JobState state, absl::string_view reason, int64_t unix_ms);

// Why a job stops when the coordinator does: it is to continue, not cancelled.
absl::Status Stopping(absl::string_view detail);

}  // namespace job_manager_internal

struct JobManager::Record {
  v1::Job job;
  int64_t version = 0;    // of `job`, bumped by every change that is written to disk
  int64_t persisted = 0;  // the version on disk
  int pending_saves = 0;  // writes queued and not yet made (it is not forgotten before)
  std::shared_ptr<EventLog> log;
  StepHistory history;  // its steps, thinned (options_.history_steps), kept after it ends
  std::shared_ptr<TensorBoardWriter> tensorboard;  // null: none written
  std::shared_ptr<EventLog> logs;                  // its log lines (WatchLogs)
  std::set<std::string> ran_on;                    // ids of the workers it was given
  // Its snapshots' params checksums, ascending step (Witness; saved with its record): a step
  // taken again (a replay) replaces those from it on; the newest kMaxWitnessMarks.
  std::vector<v1::SnapshotMark> witness;
  int watchers = 0;
  bool resume = false;     // a restarted coordinator's job: it continues from its snapshot
  int64_t high_water = 0;  // with `resume`: the steps it had run (they are replays now)
  bool cancelled = false;  // Cancel was called while it ran
  // Preempted (job_manager_preemption.cc): why, while its runner stops at a step boundary
  // to be SUSPENDED; and, once it is, that it goes back to the queue when its thread is
  // joined.
  std::string suspending;
  bool requeue = false;
  // RECOVERING (in recovering_): until when it waits for workers, and that wait's length.
  absl::Time recover_until;
  absl::Duration recover_timeout;
  // RUNNING, elastic and below its most: the ids of the workers offered to grow onto that
  // its runner has not yet taken (OfferLocked); one offer at a time.
  std::vector<std::string> offered;
  JobSeries* series = nullptr;  // its metrics, from its start (CoordinatorMetrics)
  std::unique_ptr<Sink> sink;
  std::unique_ptr<JobRunner> runner;  // while the job runs, until its thread is joined
  std::thread thread;
};

// Forwards a runner's reports into the job's summary (under the manager's lock) and its
// event log (outside it): its progress, and its membership (a loss, a resize, a liar).
// Returns nothing the runner waits for: workers go to the runner as events. Called on the
// job's runner thread (job_manager_sink.cc).
class JobManager::Sink final : public JobSink, public WorkerSupply {
 public:
  Sink(JobManager* m, Record* rec)
      : m_(m), rec_(rec), log_(rec->log), tensorboard_(rec->tensorboard), series_(rec->series) {}
  void OnSnapshot(int64_t step, uint64_t param_checksum, bool in_memory) override;
  void OnRendezvous(const std::string& prefix, const std::vector<PoolWorker>& workers) override;
  void OnNote(const std::string& why) override;
  void Recovering(const std::vector<std::string>& lost, const absl::Status& reason,
                  absl::Duration timeout) override;
  void Quarantine(const PoolWorker& worker, const std::string& why) override;
  std::optional<PoolWorker> LendWorker(const std::string& device, uint32_t threads,
                                       const std::vector<std::string>& exclude) override;
  void ReturnWorker(const PoolWorker& worker) override;
  LocalReplica* local_replica() override { return m_->local_replica_; }
  void Resized(const std::vector<PoolWorker>& workers, const std::vector<std::string>& lost,
               const std::string& why, const std::vector<std::string>& released) override;
  void OnRunning(int64_t total) override;
  void OnStep(const v1::StepEvent& e) override;
  void OnEval(const v1::EvalResult& r) override;

 private:
  JobManager* m_;
  Record* rec_;
  const std::shared_ptr<EventLog> log_;
  const std::shared_ptr<TensorBoardWriter> tensorboard_;
  JobSeries* const series_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_SCHEDULING_JOB_MANAGER_INTERNAL_H_
