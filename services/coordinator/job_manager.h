// JobManager: the coordinator's single writer of job state. It validates and queues
// submitted jobs, schedules them FIFO onto free workers (jobs on disjoint workers run
// concurrently), runs each on its own thread (JobRunner), fails jobs whose workers die,
// keeps a bounded event history per job for watchers, and handles cancellation.
// Thread-safe.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOB_MANAGER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOB_MANAGER_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lockstep/v1/job.pb.h"
#include "services/coordinator/job_records.h"
#include "services/coordinator/job_runner.h"
#include "services/coordinator/kv_table.h"
#include "services/coordinator/options.h"
#include "services/coordinator/worker_client.h"
#include "services/coordinator/worker_pool.h"

namespace lockstep {

class JobManager {
 public:
  JobManager(const CoordinatorOptions& options, WorkerPool* pool, KvTable* kv,
             WorkerClientFactory* factory);
  ~JobManager();  // cancels running jobs and joins every thread

  // Reloads the job records (jobs a previous coordinator left queued or running are
  // marked FAILED) and starts the scheduler thread. DATA_LOSS naming an unreadable record.
  absl::Status Start();

  // INVALID_ARGUMENT naming the spec field. A known spec.request_id returns its job.
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> Get(const std::string& id);
  v1::ListJobsResponse List(const v1::ListJobsRequest& request);
  // FAILED_PRECONDITION if the job already ended.
  absl::StatusOr<v1::Job> Cancel(const std::string& id);

  // Calls `emit` with the job's events from `from_step` (history, then live) until the
  // job ends (after its final event), `emit` returns false, or `cancelled()` is true.
  // RESOURCE_EXHAUSTED when the watcher limits are reached.
  absl::Status Watch(const std::string& id, int64_t from_step,
                     const std::function<bool(const v1::JobEvent&)>& emit,
                     const std::function<bool()>& cancelled);

 private:
  struct Record;
  class Sink;
  void SchedulerLoop();
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunJob(Record* rec);
  void EmitLocked(Record& rec, v1::JobEvent event, int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetStateLocked(Record& rec, v1::JobState state, const absl::Status& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetOldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Record*> FindLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  WorkerPool* pool_;
  KvTable* kv_;
  WorkerClientFactory* factory_;
  JobRecords records_;

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Record>> jobs_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> by_request_id_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int watchers_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread scheduler_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOB_MANAGER_H_
