// Replica: a worker's side of one job, without gRPC and without knowing about jobs or rendezvous:
// the TrainState in the backend's memory, the job's datasets on the backend, the collective and the
// step executor. Contract: replica.h.
#include "workers/replica.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/grad_digest.h"
#include "core/spec/spec.h"
#include "core/status_macros.h"

namespace lockstep {

absl::Status CheckReplicaConfig(const ReplicaConfig& config) {
  const v1::JobSpec& spec = config.spec;
  // Logical replicas run on any number of workers up to the spec's (docs/elastic.md).
  const bool logical = config.logical_replicas > 0;
  const bool size_ok =
      logical ? config.world_size >= 1 && config.world_size <= static_cast<int>(spec.workers())
              : config.world_size == static_cast<int>(spec.workers());
  if (!size_ok || config.rank < 0 || config.rank >= config.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", config.rank, " of ", config.world_size,
                                                   " for a job of ", spec.workers(), " workers"));
  }
  if (spec.eval().batch_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval.batch_size: ", spec.eval().batch_size(), " is not positive"));
  }
  if (logical) {
    const int v = config.logical_replicas, first = config.logical_first;
    if (v < config.world_size || config.logical_count < 1 || first < 0 ||
        first + config.logical_count > v || (config.world_size == 1 && config.logical_count != v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logical replicas [", first, ", ", first + config.logical_count, ") of ", v,
                       " for rank ", config.rank, " of ", config.world_size));
    }
    return LocalBatch(spec, v).status();
  }
  return LocalBatch(spec, config.world_size).status();
}

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(const ReplicaConfig& config,
                                                         TrainSetup setup,
                                                         std::shared_ptr<Backend> backend,
                                                         std::shared_ptr<const Datasets> data,
                                                         std::unique_ptr<Collective> collective) {
  RETURN_IF_ERROR(CheckReplicaConfig(config));
  const v1::JobSpec& spec = config.spec;
  if ((collective == nullptr) != (config.world_size == 1)) {
    return absl::InvalidArgumentError("a collective is needed exactly when there are peers");
  }
  const bool logical = config.logical_replicas > 0;
  ASSIGN_OR_RETURN(int local_batch,
                   LocalBatch(spec, logical ? config.logical_replicas : config.world_size));
  for (const Dataset* d : {&data->train, &data->test}) {
    RETURN_IF_ERROR(CheckDatasetFitsModel(*d, setup.model));
  }
  RETURN_IF_ERROR(backend->SetTf32(spec.cuda().tf32()));
  std::unique_ptr<Replica> r(new Replica());
  r->config_ = config;
  r->backend_ = std::move(backend);
  r->data_ = std::move(data);
  ASSIGN_OR_RETURN(r->train_, UploadDataset(*r->backend_, r->data_->train));
  ASSIGN_OR_RETURN(r->test_, UploadDataset(*r->backend_, r->data_->test));
  r->collective_ = std::move(collective);
  CollectiveOptions copts;
  copts.timeout = config.collective_timeout;
  ASSIGN_OR_RETURN(
      r->exec_, StepExecutor::Create(std::move(setup.model), std::move(setup.optimizer), setup.impl,
                                     local_batch, r->backend_.get(), r->collective_.get(), copts,
                                     !spec.cuda().disable_graphs()));
  r->exec_->set_allreduce_bucket_bytes(AllReduceBucketBytes(spec));
  if (logical) {
    RETURN_IF_ERROR(r->exec_->SetLogicalReplicas(config.logical_replicas, config.logical_first,
                                                 config.logical_count));
  }
  return r;
}

Replica::~Replica() = default;

StateHeader Replica::state_header() const {
  return {exec_->step(), exec_->param_count(), static_cast<uint32_t>(exec_->slot_count()),
          exec_->stats_count()};
}

absl::Status Replica::WriteState(uint64_t offset, std::string_view bytes) {
  return exec_->WriteState(offset, bytes);
}

absl::Status Replica::ReadState(uint64_t offset, std::span<char> out) {
  return exec_->ReadState(offset, out);
}

absl::StatusOr<StepResult> Replica::Step(const StepCommand& command) {
  if (command.step != exec_->step()) {
    return absl::AbortedError(absl::StrCat(
        "step ", command.step, " is out of order: the replica is at step ", exec_->step()));
  }
  const auto t0 = std::chrono::steady_clock::now();
  exec_->set_collective_timeout(
      command.collective_timeout > absl::ZeroDuration()
          ? std::min(command.collective_timeout, config_.collective_timeout)
          : config_.collective_timeout);
  if (config_.logical_replicas > 0) return StepLogical(command);
  StepResult r;
  if (command.audit) {  // another rank's shard at this state: gradients only
    exec_->set_capture_local_gradients(true);
    absl::StatusOr<StepMetrics> audit =
        exec_->ComputeGradients(train_, command.audit_indices, command.audit_key);
    exec_->set_capture_local_gradients(false);
    if (!audit.ok()) {
      return absl::Status(audit.status().code(),
                          absl::StrCat("audit shard: ", audit.status().message()));
    }
    r.audited = true;
    r.audit_loss = audit->loss;
    r.audit_digest = GradDigest(exec_->local_gradients());
  }
  exec_->set_capture_local_gradients(command.want_grad_digest);
  absl::StatusOr<StepMetrics> stepped = exec_->Step(train_, command.indices, command.key);
  exec_->set_capture_local_gradients(false);
  RETURN_IF_ERROR(stepped.status());
  if (command.want_grad_digest) r.grad_digest = GradDigest(exec_->local_gradients());
  RETURN_IF_ERROR(Finish(command, *stepped, t0, r));
  return r;
}

absl::Status Replica::Finish(const StepCommand& command, const StepMetrics& m,
                             std::chrono::steady_clock::time_point t0, StepResult& r) {
  r.step = command.step;
  r.loss = m.loss;
  r.accuracy = m.accuracy;
  const StepExecutor::Timings& t = exec_->last_timings();
  r.compute_ms = t.compute * 1000;
  r.allreduce_ms = t.allreduce * 1000;
  r.update_ms = t.update * 1000;
  if (command.want_checksum) {
    ASSIGN_OR_RETURN(r.param_checksum, exec_->ParamChecksum());
  }
  r.step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Replica::StepLogical(const StepCommand& command) {
  if (command.audit || command.want_grad_digest) {
    return absl::FailedPreconditionError("the audit does not support logical replicas");
  }
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(StepMetrics m, exec_->StepReplicas(train_, command.indices, command.keys));
  KeepCompleted(
      {{command.step + 1, std::move(m.all_replica_loss), std::move(m.all_replica_accuracy)}});
  StepResult r;
  r.replica_losses = std::move(m.replica_loss);
  r.replica_accuracies = std::move(m.replica_accuracy);
  RETURN_IF_ERROR(Finish(command, m, t0, r));
  return r;
}

void Replica::KeepCompleted(std::vector<CompletedStep> steps) {
  for (CompletedStep& s : steps) completed_.push_back(std::move(s));
  while (completed_.size() > kKeptSteps) completed_.pop_front();
}

absl::StatusOr<std::vector<CompletedStep>> Replica::CompletedAfter(int64_t step) const {
  std::vector<CompletedStep> out;
  for (int64_t s = step + 1; s <= exec_->step(); ++s) {
    auto it = std::find_if(completed_.begin(), completed_.end(),
                           [s](const CompletedStep& c) { return c.step == s; });
    if (it == completed_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("step ", s, "'s replica losses are not kept here"));
    }
    out.push_back(*it);
  }
  return out;
}

absl::StatusOr<EvalSums> Replica::Evaluate(int64_t begin, int64_t end) {
  ASSIGN_OR_RETURN(
      EvalMetrics m,
      exec_->Evaluate(test_, static_cast<int>(config_.spec.eval().batch_size()), begin, end));
  return EvalSums{m.loss * m.count, std::llround(m.accuracy * m.count), m.count};
}

}  // namespace lockstep
