// In-process workers for tests of the job loop without processes: N JobSlots on the CPU
// (one thread each), their collectives over Gloo on loopback rendezvousing in memory,
// and a WorkerClientFactory that reaches them. Beside them, what those tests share: a
// folder of their own, a sink that records the steps, a job run on a JobRunner, and a
// coordinator (pool and JobManager) over such workers that a test can restart.
#ifndef LOCKSTEP_SERVICES_STANDALONE_TESTING_H_
#define LOCKSTEP_SERVICES_STANDALONE_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/store.h"
#include "services/coordinator/jobs/job_runner.h"
#include "services/coordinator/options.h"
#include "services/coordinator/scheduling/job_manager.h"
#include "services/coordinator/workers/worker_pool.h"
#include "services/standalone/in_process_worker.h"
#include "services/worker/job_slot.h"

namespace lockstep::testing {

class InProcessWorkers {
 public:
  // `n` workers with one CPU thread each, at addresses "in-process:R". Their collectives
  // rendezvous in `store` if given (it must outlive them), else in a MemoryStore of their own.
  explicit InProcessWorkers(int n, Store* store = nullptr);
  ~InProcessWorkers();

  WorkerClientFactory* factory() { return factory_.get(); }
  std::vector<PoolWorker> pool_workers() const;
  JobSlot& slot(int r) { return *slots_[r]; }

 private:
  std::unique_ptr<BackendSource> backends_;
  DatasetCache datasets_;
  MemoryStore store_;
  std::unique_ptr<CollectiveFactory> collectives_;
  std::vector<std::unique_ptr<JobSlot>> slots_;
  std::unique_ptr<InProcessWorkerFactory> factory_;
};

// A new, empty folder under the temporary directory, its name starting with `name`; the
// test removes it.
std::string TempDir(const std::string& name);

// Records the steps a runner reports.
class StepRecorder final : public JobSink {
 public:
  void OnRunning(int64_t) override {}
  void OnStep(const v1::StepEvent& e) override { steps.push_back(e); }
  void OnEval(const v1::EvalResult&) override {}
  std::vector<v1::StepEvent> steps;
};

// Runs `spec` on spec.workers() in-process workers of its own as job `job_id` (by default
// its checkpoint_path: the job's files are in CHECKPOINT_DIR/JOB_ID/); the run's error.
absl::StatusOr<JobOutcome> RunInProcess(const v1::JobSpec& spec, const CoordinatorOptions& options,
                                        JobSink* sink, std::string job_id = "");

// Options whose records, snapshots and checkpoints are in folders under `dir`.
CoordinatorOptions OptionsIn(const std::string& dir);

// A coordinator over in-process workers: its pool (heartbeats never lapse) and its manager
// (not started). Destroying it is a coordinator's stop; another over the same options is
// its restart.
struct InProcessCoordinator {
  // With `with_workers`, `workers` are registered at once; else by Register.
  InProcessCoordinator(const CoordinatorOptions& options, InProcessWorkers* workers,
                       bool with_workers = true);
  // Registers `workers` in the pool and wakes the scheduler.
  void Register(InProcessWorkers& workers);

  WorkerPool pool;
  JobManager jobs;
};

// The params' checksum at the end of an undisturbed run of `spec` on `workers`, through a
// coordinator of its own in a folder of its own; the job's failure as INTERNAL naming it.
absl::StatusOr<uint64_t> UndisturbedChecksum(InProcessWorkers& workers, const v1::JobSpec& spec);

}  // namespace lockstep::testing

#endif  // LOCKSTEP_SERVICES_STANDALONE_TESTING_H_
