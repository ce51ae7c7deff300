// Replica: a worker's side of one job, without gRPC and without knowing about jobs or
// rendezvous: the TrainState in the backend's memory, the job's datasets (on the backend,
// or streamed through a read-ahead pipeline into a batch staged there), the collective
// and the step executor. Whoever holds it (the worker's JobSlot, or the
// in-process worker of `lockstep train`) creates one per job and drops it to release it.
//
// Thread safety: one thread at a time drives a replica; Prefetch and AbortData may be
// called from any thread meanwhile.
#ifndef LOCKSTEP_WORKERS_REPLICA_H_
#define LOCKSTEP_WORKERS_REPLICA_H_

#include <chrono>
#include <deque>
#include <memory>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/backend.h"
#include "core/collective.h"
#include "core/commands.h"
#include "core/spec/spec.h"
#include "core/step.h"
#include "core/train_state.h"
#include "workers/data_pipeline.h"
#include "workers/dataset_cache.h"

namespace lockstep {

// INVALID_ARGUMENT unless `config` is a place in its job (rank, world size, batch split,
// evaluation batch).
absl::Status CheckReplicaConfig(const ReplicaConfig& config);

class Replica {
 public:
  // A streamed dataset's local batches decoded ahead of the step by default.
  static constexpr int kDefaultBatchesAhead = 4;

  // Builds the replica `config` describes for `setup` (SetupFromSpec(config.spec)) on
  // `backend` with the job's datasets and `collective` (null for one replica): zeroed
  // state buffers at step 0. CheckReplicaConfig's errors; INVALID_ARGUMENT naming the
  // dataset field, file and array when the model cannot train on the datasets
  // (CheckDatasetFitsModel; a streamed dataset: ImageTransform::Create's errors);
  // RESOURCE_EXHAUSTED when the backend's memory does not suffice.
  static absl::StatusOr<std::unique_ptr<Replica>> Create(const ReplicaConfig& config,
                                                         TrainSetup setup,
                                                         std::shared_ptr<Backend> backend,
                                                         JobData data,
                                                         std::unique_ptr<Collective> collective);
  ~Replica();

  const ReplicaConfig& config() const { return config_; }
  Backend& backend() { return *backend_; }
  // Null for one replica. Collective::Abort may be called from any thread.
  Collective* collective() { return collective_.get(); }
  int64_t train_examples() const { return train_.size; }
  int64_t test_examples() const { return test_.size; }
  bool streamed() const { return train_stream_ != nullptr; }

  // A streamed dataset: starts reading `command`'s examples (and its audit shard's) ahead
  // of its Step; nothing otherwise. Thread-safe, never waits for reading.
  void Prefetch(const StepCommand& command);
  // Ends a Step or Evaluate waiting for a streamed dataset's examples with `why`; for a
  // replica being released. Thread-safe.
  void AbortData(const absl::Status& why);

  // The state's shape and step.
  StateHeader state_header() const;
  void set_step(int64_t step) { exec_->set_step(step); }
  // The state as bytes (StateBytes's layout), in pieces: INVALID_ARGUMENT outside it.
  absl::Status WriteState(uint64_t offset, std::string_view bytes);
  absl::Status ReadState(uint64_t offset, std::span<char> out);
  absl::StatusOr<uint64_t> ParamChecksum() { return exec_->ParamChecksum(); }

  // ABORTED if command.step is not the replica's next step. After a failed step the
  // replica (its collective, for one) is unusable: drop it. With command.audit, the audit
  // shard's gradients are computed first at the same state (docs/audit.md);
  // INVALID_ARGUMENT if that shard is not of the local batch's size. With logical
  // replicas (config().logical_replicas > 0): StepExecutor::StepReplicas on
  // command.indices and command.keys, each replica's loss in the result; the audit shard
  // is one replica's rows and key, the gradient digest the first local replica's. A
  // BatchNorm model's audit shard rides along the step (StepExecutor::RideAlong: its
  // statistics span the replicas), and its digests include the BatchNorm contributions'
  // (stats_digest, audit_stats_digest).
  absl::StatusOr<StepResult> Step(const StepCommand& command);
  // Logical replicas: the steps completed after `step` up to the state's, as the last
  // kKeptSteps steps are kept (CompletedStep); FAILED_PRECONDITION if one is not kept.
  static constexpr size_t kKeptSteps = 8;
  absl::StatusOr<std::vector<CompletedStep>> CompletedAfter(int64_t step) const;
  // Records steps this replica's state went through before it was loaded here (a resize
  // that takes over a worker's own state).
  void KeepCompleted(std::vector<CompletedStep> steps);
  // Tests only (JobSlot::SetGradientFaultForTesting): a fault on every local gradient.
  void set_gradient_fault(StepExecutor::GradientFault fault) {
    exec_->set_gradient_fault(std::move(fault));
  }
  // Tests only (JobSlot::SetStatisticsFaultForTesting): a fault on every local replica's
  // BatchNorm contributions.
  void set_statistics_fault(StepExecutor::GradientFault fault) {
    exec_->set_statistics_fault(std::move(fault));
  }
  // Loss and accuracy sums over [begin, end) of the test split, in eval.batch_size
  // batches, without dropout.
  absl::StatusOr<EvalSums> Evaluate(int64_t begin, int64_t end);

 private:
  Replica() = default;
  // Step's logical-replica path (the step's order and timeout already set).
  absl::StatusOr<StepResult> StepLogical(const StepCommand& command);
  // The examples a step computes on: the resident split and `indices`, or (streamed) the
  // batch staged in `staged` and its rows in order. `tag` orders the pipeline's requests.
  struct Batch {
    const DeviceDataset* data;
    std::span<const int32_t> indices;
  };
  absl::StatusOr<Batch> TrainBatch(int64_t tag, rng::Key data_key, std::span<const int32_t> indices,
                                   DeviceDataset& staged);
  // The pipeline's tags: a step's audit shard before its own.
  static int64_t AuditTag(int64_t step) { return 2 * step; }
  static int64_t StepTag(int64_t step) { return 2 * step + 1; }
  // Backend buffers for `rows` examples of the streamed split `pipeline` (reused).
  absl::Status Stage(DataPipeline& pipeline, int64_t rows, DeviceDataset& staged);
  absl::StatusOr<EvalSums> EvaluateStreamed(int64_t begin, int64_t end);
  // Fills in the rest of a step's result: metrics, timings, the checksum if asked for, and
  // the time since t0.
  absl::Status Finish(const StepCommand& command, const StepMetrics& m,
                      std::chrono::steady_clock::time_point t0, StepResult& r);

  // Destroyed in reverse: the executor first, the backend last.
  ReplicaConfig config_;
  std::shared_ptr<Backend> backend_;
  JobData data_;
  // Resident datasets: the splits on the backend. Streamed: only their sizes, the
  // pipelines, and the backend buffers a batch is staged in (the same each step, so that
  // a captured graph replays on it); host_ a batch's way there when the backend's memory
  // is not the host's.
  DeviceDataset train_, test_;
  std::unique_ptr<DataPipeline> train_stream_, test_stream_;
  DeviceDataset step_batch_, audit_batch_, eval_batch_;
  std::vector<float> host_images_;
  std::vector<int32_t> host_labels_, rows_;
  std::unique_ptr<Collective> collective_;
  std::unique_ptr<StepExecutor> exec_;
  std::deque<CompletedStep> completed_;  // the last kKeptSteps, oldest first
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_REPLICA_H_
