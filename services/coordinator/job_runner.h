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
// Thread safety: Run on one thread; Abort from any. Cancellation is sticky: every worker
// call is made with the job's CancelToken, so that an Abort at any moment ends Run
// promptly, and a call made after it fails at once.
#ifndef LOCKSTEP_SERVICES_COORDINATOR_JOB_RUNNER_H_
#define LOCKSTEP_SERVICES_COORDINATOR_JOB_RUNNER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/cancel.h"
#include "core/plan.h"
#include "core/spec/spec.h"
#include "lockstep/v1/job.pb.h"
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
  std::vector<std::string> unreachable;  // worker ids found dead after a failure
};

class JobRunner {
 public:
  // `spec` is validated (core/spec/spec.h); workers[r] is rank r.
  JobRunner(std::string job_id, v1::JobSpec spec, std::vector<PoolWorker> workers,
            WorkerClientFactory* factory, const CoordinatorOptions& options, JobSink* sink);

  // Runs the job to its end. OK: succeeded. CANCELLED: Abort with it. Otherwise the
  // failure, its message naming the worker. `outcome` is filled either way.
  absl::Status Run(JobOutcome* outcome);

  // Makes Run stop promptly with `status` (CANCELLED for a user's cancel).
  void Abort(absl::Status status) { cancel_.Cancel(std::move(status)); }

 private:
  // Prepare, the steps, the final evaluation and the checkpoint.
  absl::Status Train(JobOutcome* outcome);
  absl::Status Prepare(int64_t* num_train, int64_t* num_test);
  absl::Status StepLoop(TrainingPlan& plan, int64_t total, int64_t num_test, JobOutcome* outcome);
  // One step command per worker: the step, the worker's dropout key, its shard.
  absl::StatusOr<std::vector<StepCommand>> StepCommands(const StepPlan& plan,
                                                        bool want_checksum) const;
  // Folds the workers' answers to one step into its event; with `check`, DATA_LOSS if
  // the replicas' checksums differ.
  absl::StatusOr<v1::StepEvent> Aggregate(const std::vector<StepResult>& got, int64_t step,
                                          bool check) const;
  absl::StatusOr<v1::EvalResult> Evaluate(int64_t num_test, int64_t step, int64_t epoch);
  absl::Status SaveCheckpoint(const std::string& path, uint64_t checksum, rng::Key data_key,
                              rng::Key main_key);
  absl::Status WorkerError(int rank, const absl::Status& st) const;
  // After a failure: which ranks still answer a health check.
  std::vector<bool> Probe();
  void ReleaseAll(const std::string& reason, const std::vector<bool>& alive);

  const std::string job_id_;
  const v1::JobSpec spec_;
  const std::vector<PoolWorker> workers_;
  const CoordinatorOptions options_;
  JobSink* sink_;
  std::vector<std::unique_ptr<WorkerClient>> clients_;
  std::optional<TrainSetup> setup_;  // set by Prepare
  CancelToken cancel_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_COORDINATOR_JOB_RUNNER_H_
