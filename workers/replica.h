// Replica: a worker's side of one job, without gRPC and without knowing about jobs or
// rendezvous: the TrainState in the backend's memory, the job's datasets on the backend,
// the collective and the step executor. Whoever holds it (the worker's JobSlot, or the
// in-process worker of `lockstep train`) creates one per job and drops it to release it.
//
// Thread safety: none; one thread at a time drives a replica.
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
#include "workers/dataset_cache.h"

namespace lockstep {

// INVALID_ARGUMENT unless `config` is a place in its job (rank, world size, batch split,
// evaluation batch).
absl::Status CheckReplicaConfig(const ReplicaConfig& config);

class Replica {
 public:
  // Builds the replica `config` describes for `setup` (SetupFromSpec(config.spec)) on
  // `backend` with the job's datasets and `collective` (null for one replica): zeroed
  // state buffers at step 0. CheckReplicaConfig's errors; INVALID_ARGUMENT naming the
  // dataset field, file and array when the model cannot train on the datasets
  // (CheckDatasetFitsModel); RESOURCE_EXHAUSTED when the backend's memory does not suffice.
  static absl::StatusOr<std::unique_ptr<Replica>> Create(const ReplicaConfig& config,
                                                         TrainSetup setup,
                                                         std::shared_ptr<Backend> backend,
                                                         std::shared_ptr<const Datasets> data,
                                                         std::unique_ptr<Collective> collective);
  ~Replica();

  const ReplicaConfig& config() const { return config_; }
  Backend& backend() { return *backend_; }
  // Null for one replica. Collective::Abort may be called from any thread.
  Collective* collective() { return collective_.get(); }
  int64_t train_examples() const { return data_->train.size; }
  int64_t test_examples() const { return data_->test.size; }

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
  // command.indices and command.keys, each replica's loss in the result;
  // FAILED_PRECONDITION with an audit or a gradient digest asked for.
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
  // Loss and accuracy sums over [begin, end) of the test split, in eval.batch_size
  // batches, without dropout.
  absl::StatusOr<EvalSums> Evaluate(int64_t begin, int64_t end);

 private:
  Replica() = default;
  // Step's logical-replica path (the step's order and timeout already set).
  absl::StatusOr<StepResult> StepLogical(const StepCommand& command);
  // Fills in the rest of a step's result: metrics, timings, the checksum if asked for, and
  // the time since t0.
  absl::Status Finish(const StepCommand& command, const StepMetrics& m,
                      std::chrono::steady_clock::time_point t0, StepResult& r);

  // Destroyed in reverse: the executor first, the backend last.
  ReplicaConfig config_;
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<const Datasets> data_;
  DeviceDataset train_, test_;
  std::unique_ptr<Collective> collective_;
  std::unique_ptr<StepExecutor> exec_;
  std::deque<CompletedStep> completed_;  // the last kKeptSteps, oldest first
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKERS_REPLICA_H_
