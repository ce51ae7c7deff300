// JobSlot: a worker's one job, without gRPC. It prepares a Replica for the job the
// coordinator hands it (dropping the one it held, even the same job's earlier attempt: the
// coordinator is the single writer of job state), runs the job's commands on it by job id,
// and releases it.
//
// Thread safety: thread-safe. Commands on the replica are serialized (run_mu_). Release
// never waits behind one: it cancels the job's token, so that a Prepare in progress stops
// at its next phase (backend, datasets, rendezvous, each chunk of state) with CANCELLED and
// a step waiting in the all-reduce ends (the collective is aborted), and the replica is
// dropped as soon as no command runs. Lock order: run_mu_, then mu_;
// the token's callbacks take neither.
#ifndef LOCKSTEP_SERVICES_WORKER_JOB_SLOT_H_
#define LOCKSTEP_SERVICES_WORKER_JOB_SLOT_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/backend.h"
#include "core/cancel.h"
#include "core/collective.h"
#include "core/commands.h"
#include "core/train_state.h"
#include "services/worker/worker_metrics.h"
#include "workers/backend_factory.h"
#include "workers/dataset_cache.h"
#include "workers/replica.h"

namespace lockstep {

// Builds a job's data plane.
class CollectiveFactory {
 public:
  virtual ~CollectiveFactory() = default;
  // Joins the collective of `size` ranks as `rank`; waits for the peers at most
  // `timeout`, and returns CANCELLED promptly once `cancel` is cancelled.
  virtual absl::StatusOr<std::unique_ptr<Collective>> Create(int rank, int size,
                                                             const std::string& prefix,
                                                             absl::Duration timeout,
                                                             Backend* backend,
                                                             const CancelToken& cancel) = 0;
};

// Where Prepare reads the state's bytes from, in order.
class StateSource {
 public:
  virtual ~StateSource() = default;
  // The next chunk into *chunk, or false at the end; an error if the transfer broke.
  virtual absl::StatusOr<bool> Next(std::string* chunk) = 0;
};

class JobSlot {
 public:
  // Largest state a worker accepts.
  static constexpr uint64_t kMaxStateBytes = uint64_t{1} << 34;

  // All must outlive the slot. `collectives` may be null where every job has one worker;
  // `metrics` where nobody reads them.
  JobSlot(const BackendSource* backends, DatasetCache* data, CollectiveFactory* collectives,
          WorkerMetrics* metrics = nullptr);
  ~JobSlot();

  // Checks `job` and `header` (INVALID_ARGUMENT naming what is wrong, before anything is
  // dropped), then builds the job's replica, joins its collective and loads the state from
  // `state`: CANCELLED if the job is released meanwhile; INVALID_ARGUMENT naming
  // a dataset path outside the data roots (DatasetCache), or a dataset the model cannot
  // train on (CheckDatasetFitsModel: its image shape, a label past the model's classes);
  // FAILED_PRECONDITION naming a missing dataset; DATA_LOSS when the state's bytes do not
  // match the header.
  absl::StatusOr<PrepareResult> Prepare(const JobAssignment& job, const StateHeader& header,
                                        StateSource& state);
  //
  // With job.keep_state (an elastic resize, docs/elastic.md) the state is the one this
  // slot holds for the same job, which must be at header.step or past it, every step since
  // kept (FAILED_PRECONDITION otherwise, naming both steps, or when it holds none); the
  // result's `step` and `ahead` say where it is; `state` is not read.
  // FAILED_PRECONDITION unless `job_id` is prepared here; the replica's errors otherwise
  // (after a failed step the job is dropped; a logical-replicas job keeps its state, which
  // a failed step leaves as it was, for a Prepare with keep_state, and runs nothing more).
  absl::StatusOr<StepResult> Step(const std::string& job_id, const StepCommand& command);
  // As soon as a step's command arrives, before Step: a streamed dataset's pipeline starts
  // reading its examples (Replica::Prefetch). Never waits; nothing if `job_id` is not
  // prepared here.
  void Prefetch(const std::string& job_id, const StepCommand& command);
  absl::StatusOr<EvalSums> Evaluate(const std::string& job_id, int64_t begin, int64_t end);
  // Calls sink(header, chunk) with the state's bytes in order, at most `chunk_bytes` at a
  // time; the first non-OK status it returns ends the transfer.
  absl::Status FetchState(
      const std::string& job_id, size_t chunk_bytes,
      const std::function<absl::Status(const StateHeader&, std::string_view)>& sink);
  // Idempotent; unknown job ids are fine (the job may never have been prepared here).
  void Release(const std::string& job_id);

  // Tests only, to play a lying worker (docs/audit.md): every replica this slot prepares
  // from now on applies `fault` to its local gradients before they are all-reduced (and to
  // the audit shards it recomputes). No flag, spec field or RPC reaches it; the worker's
  // main never calls it. Null: none.
  void SetGradientFaultForTesting(StepExecutor::GradientFault fault);
  // The same for a BatchNorm model on logical replicas' statistics: `fault` applied to
  // each local replica's BatchNorm contributions before their exact sum (and to the
  // ride-along audit replica's; StepExecutor::set_statistics_fault).
  void SetStatisticsFaultForTesting(StepExecutor::GradientFault fault);

  // Whether a job is prepared or being prepared here (until its Release dropped it).
  bool holds_job();

  // Not OK once the device is unusable for good (CUDA errors are sticky, e.g. after a
  // collective was aborted mid-kernel): the worker should exit and be replaced.
  absl::Status device_error();

 private:
  struct Job {
    std::string id;
    CancelToken cancel;                // cancelled by Release or by the next Prepare
    std::unique_ptr<Replica> replica;  // set once prepared
    // A logical-replicas job whose step failed: its collective is unusable, its state is
    // kept for a Prepare with keep_state. No command runs on it.
    bool broken = false;
    // A Prepare with keep_state is to take its state: being cancelled does not drop it.
    bool handing_over = false;
    // Cancelling aborts the replica's collective and its dataset's reads, so that a step
    // waiting for a peer that will not come, or for a stalled read, ends now. Destroyed
    // before the replica.
    CancelToken::Callback abort_waits;
  };
  // The state `previous` (the job's earlier replica) holds, for a Prepare with
  // keep_state: its bytes, its header, and the steps it went through past header.step.
  // FAILED_PRECONDITION unless it is the same job at header.step, or past it with every
  // step since kept (Replica::CompletedAfter).
  struct Kept {
    std::string bytes;
    StateHeader header;
    std::vector<CompletedStep> ahead;
  };
  static absl::StatusOr<Kept> KeptState(const Job* previous, const std::string& job_id,
                                        const StateHeader& header);
  absl::StatusOr<PrepareResult> Load(Job& job, const JobAssignment& assignment, TrainSetup setup,
                                     const StateHeader& header, StateSource& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // The prepared replica of `job_id`, or FAILED_PRECONDITION.
  absl::StatusOr<Replica*> Current(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // After a command: drops the job if it was released meanwhile, or (drop_job) anyway.
  void Finish(bool drop_job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  // After a failed command: records the device's error if it no longer works.
  void CheckDevice(Backend& backend);

  const BackendSource* backends_;
  DatasetCache* data_;
  CollectiveFactory* collectives_;
  WorkerMetrics* metrics_;
  absl::Mutex run_mu_;  // held while a command runs on the replica
  absl::Mutex mu_;
  std::unique_ptr<Job> job_ ABSL_GUARDED_BY(mu_);
  // A job whose Prepare waits for the command running on job_ to end.
  std::unique_ptr<Job> next_ ABSL_GUARDED_BY(mu_);
  absl::Status device_error_ ABSL_GUARDED_BY(mu_);
  StepExecutor::GradientFault fault_ ABSL_GUARDED_BY(mu_);             // tests only
  StepExecutor::GradientFault statistics_fault_ ABSL_GUARDED_BY(mu_);  // tests only
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVICES_WORKER_JOB_SLOT_H_
