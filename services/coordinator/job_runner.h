// JobRunner: runs one job on the workers the scheduler gave it, as the seed program's
// host loop does: initialize the TrainState on the host, replicate it, then for each step
// send every worker its dropout key and shard, average the local losses they answer,
// evaluate at the spec's cadence, compare replica checksums, and finally fetch the state
// and save the checkpoint. The coordinator's RNG chain lives here (TrainingPlan).
//
// Steps are pipelined: up to `steps_in_flight` step commands are queued on each worker's
// stream, so no round trip is paid per step; the all-reduce keeps workers in lockstep.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOB_RUNNER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOB_RUNNER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/model.h"
#include "core/optimizer.h"
#include "core/plan.h"
#include "lockstep/v1/job.pb.h"
#include "services/coordinator/kv_table.h"
#include "services/coordinator/options.h"
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
};

struct JobOutcome {
  uint64_t param_checksum = 0;
  std::string checkpoint_path;
  double samples_per_sec = 0;
  std::vector<std::string> unreachable;  // worker ids found dead after a failure
};

class JobRunner {
 public:
  JobRunner(std::string job_id, v1::JobSpec spec, std::vector<PoolWorker> workers,
            WorkerClientFactory* factory, KvTable* kv, const CoordinatorOptions& options,
            JobSink* sink);

  // Runs the job to its end. OK: succeeded. CANCELLED: Cancel() was called. Otherwise
  // the failure, its message naming the worker. `outcome` is filled either way.
  absl::Status Run(JobOutcome* outcome);

  // Makes Run stop promptly with `status` (CANCELLED for a user's cancel): cancels the
  // step streams and the worker calls in flight. Thread-safe.
  void Abort(absl::Status status);

 private:
  // Prepare, the steps, the final evaluation and the checkpoint.
  absl::Status Train(JobOutcome* outcome);
  absl::Status Prepare(int64_t* num_train, int64_t* num_test);
  absl::Status StepLoop(TrainingPlan& plan, int64_t total, int64_t num_test, JobOutcome* outcome);
  // One step command per worker: the step, the worker's dropout key, its shard.
  absl::StatusOr<std::vector<v1::StepRequest>> StepRequests(const StepPlan& plan,
                                                            bool want_checksum) const;
  // Folds the workers' answers to one step into its event; with `check`, DATA_LOSS if
  // the replicas' checksums differ.
  absl::StatusOr<v1::StepEvent> Aggregate(const std::vector<v1::StepResponse>& got, int64_t step,
                                          bool check) const;
  absl::StatusOr<v1::EvalResult> Evaluate(int64_t num_test, int64_t step, int64_t epoch);
  absl::Status SaveCheckpoint(const std::string& path, uint64_t checksum, rng::Key data_key,
                              rng::Key main_key);
  absl::Status WorkerError(int rank, const absl::Status& st) const;
  absl::Status aborted();
  void ReleaseAll(const std::string& reason);

  const std::string job_id_;
  const v1::JobSpec spec_;
  const std::vector<PoolWorker> workers_;
  KvTable* kv_;
  const CoordinatorOptions options_;
  JobSink* sink_;
  std::vector<std::unique_ptr<WorkerClient>> clients_;
  // Set by Prepare from the spec.
  std::optional<Model> model_;
  std::optional<Optimizer> optimizer_;
  rng::Impl impl_ = rng::Impl::kPartitionable;

  absl::Mutex mu_;
  absl::Status abort_ ABSL_GUARDED_BY(mu_);
  StepFanout* fanout_ ABSL_GUARDED_BY(mu_) = nullptr;  // while steps run
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOB_RUNNER_H_
