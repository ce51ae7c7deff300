// Replica: a worker's side of one job, without gRPC and without knowing about jobs or rendezvous:
// the TrainState in the backend's memory, the job's datasets on the backend, the collective and the
// step executor. Contract: replica.h.
#include "workers/replica.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

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

namespace {

// The read-ahead of a streamed split (docs/datasets.md: dataset.stream).
absl::StatusOr<std::unique_ptr<DataPipeline>> OpenStream(
    const v1::DatasetSpec& spec, Split split, std::shared_ptr<const ExampleSource> source,
    const Model& model, int batches_ahead) {
  if (model.positions() > 1 || model.layers().front().kind == LayerKind::kEmbed) {
    return absl::InvalidArgumentError(absl::StrCat("dataset.format: ", spec.format(),
                                                   " streams images; this model reads tokens"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ImageTransform> transform,
                   ImageTransform::Create(spec, split, model.input()));
  RETURN_IF_ERROR(CheckSplitFitsModel(*source, *transform, model.num_classes()));
  DataPipeline::Options options;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.threads = spec.stream().threads() > 0 ? static_cast<int>(spec.stream().threads())
                                                : std::max(1, cores / 2);
  options.max_batches = batches_ahead;
  options.num_classes = model.num_classes();
  return std::make_unique<DataPipeline>(std::move(source), std::move(transform), options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(const ReplicaConfig& config,
                                                         TrainSetup setup,
                                                         std::shared_ptr<Backend> backend,
                                                         JobData data,
                                                         std::unique_ptr<Collective> collective) {
  RETURN_IF_ERROR(CheckReplicaConfig(config));
  const v1::JobSpec& spec = config.spec;
  if ((collective == nullptr) != (config.world_size == 1)) {
    return absl::InvalidArgumentError("a collective is needed exactly when there are peers");
  }
  const bool logical = config.logical_replicas > 0;
  ASSIGN_OR_RETURN(int local_batch,
                   LocalBatch(spec, logical ? config.logical_replicas : config.world_size));
  std::unique_ptr<Replica> r(new Replica());
  if (data.streamed != nullptr) {
    const v1::DatasetSpec& ds = spec.dataset();
    const int ahead = ds.stream().batches_ahead() > 0
                          ? static_cast<int>(ds.stream().batches_ahead())
                          : kDefaultBatchesAhead;
    ASSIGN_OR_RETURN(r->train_stream_,
                     OpenStream(ds, Split::kTrain, data.streamed->train, setup.model, ahead));
    // Evaluation reads its range in order: one batch made while the other computes.
    ASSIGN_OR_RETURN(r->test_stream_,
                     OpenStream(ds, Split::kTest, data.streamed->test, setup.model, 1));
    r->train_.size = r->train_stream_->size();
    r->test_.size = r->test_stream_->size();
  } else {
    for (const Dataset* d : {&data.resident->train, &data.resident->test}) {
      RETURN_IF_ERROR(CheckDatasetFitsModel(*d, setup.model));
    }
  }
  RETURN_IF_ERROR(backend->SetTf32(spec.cuda().tf32()));
  RETURN_IF_ERROR(backend->SetFusedAttention(!spec.cuda().has_fused_attention() ||
                                             spec.cuda().fused_attention()));
  r->config_ = config;
  r->backend_ = std::move(backend);
  r->data_ = std::move(data);
  if (r->data_.resident != nullptr) {
    ASSIGN_OR_RETURN(r->train_, UploadDataset(*r->backend_, r->data_.resident->train));
    ASSIGN_OR_RETURN(r->test_, UploadDataset(*r->backend_, r->data_.resident->test));
  }
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
  if (config_.logical_replicas > 0 && exec_->stats_count() > 0) {
    // BatchNorm on logical replicas: the audit shard (one replica) rides along the step.
    return StepLogical(command);
  }
  StepResult r;
  if (command.audit) {  // another rank's shard at this state: gradients only
    exec_->set_capture_local_gradients(true);
    absl::StatusOr<Batch> shard =
        TrainBatch(AuditTag(command.step), command.data_key, command.audit_indices, audit_batch_);
    absl::StatusOr<StepMetrics> audit =
        shard.ok() ? exec_->ComputeGradients(*shard->data, shard->indices, command.audit_key)
                   : shard.status();
    exec_->set_capture_local_gradients(false);
    if (!audit.ok()) {
      return absl::Status(audit.status().code(),
                          absl::StrCat("audit shard: ", audit.status().message()));
    }
    r.audited = true;
    r.audit_loss = audit->loss;
    r.audit_digest = GradDigest(exec_->local_gradients());
  }
  if (config_.logical_replicas > 0) {  // the shard was one replica's, as on any worker
    ASSIGN_OR_RETURN(StepResult logical, StepLogical(command));
    logical.audited = r.audited;
    logical.audit_digest = r.audit_digest;
    logical.audit_loss = r.audit_loss;
    return logical;
  }
  ASSIGN_OR_RETURN(Batch batch, TrainBatch(StepTag(command.step), command.data_key, command.indices,
                                           step_batch_));
  exec_->set_capture_local_gradients(command.want_grad_digest);
  absl::StatusOr<StepMetrics> stepped = exec_->Step(*batch.data, batch.indices, command.key);
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
  const auto t0 = std::chrono::steady_clock::now();
  // A BatchNorm model's audit shard: the ride-along replica (StepExecutor::RideAlong).
  const bool ride = command.audit && exec_->stats_count() > 0;
  absl::StatusOr<Batch> shard;
  if (ride) {
    shard =
        TrainBatch(AuditTag(command.step), command.data_key, command.audit_indices, audit_batch_);
    if (!shard.ok()) {
      return absl::Status(shard.status().code(),
                          absl::StrCat("audit shard: ", shard.status().message()));
    }
  }
  ASSIGN_OR_RETURN(Batch batch, TrainBatch(StepTag(command.step), command.data_key, command.indices,
                                           step_batch_));
  StepExecutor::RideAlong ride_along;
  if (ride) ride_along = {shard->data, shard->indices, command.audit_key};
  exec_->set_capture_local_gradients(command.want_grad_digest);
  absl::StatusOr<StepMetrics> stepped =
      exec_->StepReplicas(*batch.data, batch.indices, command.keys, ride ? &ride_along : nullptr);
  exec_->set_capture_local_gradients(false);
  RETURN_IF_ERROR(stepped.status());
  StepMetrics& m = *stepped;
  StepResult r;
  // The digests' copies are done once the backend is.
  if (command.want_grad_digest || ride) RETURN_IF_ERROR(backend_->Synchronize());
  if (command.want_grad_digest) {
    r.grad_digest = GradDigest(exec_->local_gradients());
    if (exec_->stats_count() > 0) r.stats_digest = GradDigest(exec_->local_statistics());
  }
  if (ride) {
    const StepExecutor::RideAlongResult& got = exec_->ride_along_result();
    r.audited = true;
    r.audit_digest = GradDigest(got.gradients);
    r.audit_stats_digest = GradDigest(got.statistics);
    r.audit_loss = got.loss;
  }
  KeepCompleted(
      {{command.step + 1, std::move(m.all_replica_loss), std::move(m.all_replica_accuracy)}});
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

void Replica::Prefetch(const StepCommand& command) {
  if (!streamed()) return;
  if (command.audit) {
    train_stream_->Prefetch(AuditTag(command.step), command.data_key, command.audit_indices);
  }
  train_stream_->Prefetch(StepTag(command.step), command.data_key, command.indices);
}

void Replica::AbortData(const absl::Status& why) {
  if (!streamed()) return;
  train_stream_->Abort(why);
  test_stream_->Abort(why);
}

absl::Status Replica::Stage(DataPipeline& pipeline, int64_t rows, DeviceDataset& staged) {
  if (staged.size < rows) {
    ASSIGN_OR_RETURN(staged.images, backend_->Allocate(rows * pipeline.row() * sizeof(float)));
    ASSIGN_OR_RETURN(staged.labels, backend_->Allocate(rows * sizeof(int32_t)));
    staged.size = rows;
    staged.row = pipeline.row();
    staged.label_row = 1;
  }
  if (static_cast<int64_t>(rows_.size()) < rows) {
    rows_.resize(rows);
    std::iota(rows_.begin(), rows_.end(), 0);
  }
  return absl::OkStatus();
}

absl::StatusOr<Replica::Batch> Replica::TrainBatch(int64_t tag, rng::Key data_key,
                                                   std::span<const int32_t> indices,
                                                   DeviceDataset& staged) {
  if (!streamed()) return Batch{&train_, indices};
  const int64_t n = static_cast<int64_t>(indices.size());
  RETURN_IF_ERROR(Stage(*train_stream_, n, staged));
  if (backend_->host_memory()) {  // straight into the staged batch
    RETURN_IF_ERROR(train_stream_->Take(tag, data_key, indices, staged.images.as<float>(),
                                        staged.labels.as<int32_t>()));
  } else {
    host_images_.resize(n * staged.row);
    host_labels_.resize(n);
    RETURN_IF_ERROR(
        train_stream_->Take(tag, data_key, indices, host_images_.data(), host_labels_.data()));
    RETURN_IF_ERROR(backend_->CopyToDevice(staged.images.as(), host_images_.data(),
                                           host_images_.size() * sizeof(float)));
    RETURN_IF_ERROR(backend_->CopyToDevice(staged.labels.as(), host_labels_.data(),
                                           host_labels_.size() * sizeof(int32_t)));
  }
  return Batch{&staged, std::span<const int32_t>(rows_.data(), n)};
}

absl::StatusOr<EvalSums> Replica::EvaluateStreamed(int64_t begin, int64_t end) {
  if (begin < 0 || begin > end || end > test_.size) {
    return absl::InvalidArgumentError(absl::StrCat("evaluation range [", begin, ", ", end,
                                                   ") is outside the dataset (", test_.size,
                                                   " examples)"));
  }
  const int64_t batch = config_.spec.eval().batch_size();
  auto range = [&](int64_t start) {
    std::vector<int32_t> idx(std::min(batch, end - start));
    std::iota(idx.begin(), idx.end(), static_cast<int32_t>(start));
    return idx;
  };
  EvalSums sums;
  std::vector<int32_t> idx = range(begin);
  if (begin < end) test_stream_->Prefetch(begin, {}, idx);
  for (int64_t start = begin; start < end; start += batch) {
    std::vector<int32_t> next;
    if (start + batch < end) {
      next = range(start + batch);
      test_stream_->Prefetch(start + batch, {}, next);
    }
    const int64_t n = static_cast<int64_t>(idx.size());
    RETURN_IF_ERROR(Stage(*test_stream_, batch, eval_batch_));
    float* images = eval_batch_.images.as<float>();
    int32_t* labels = eval_batch_.labels.as<int32_t>();
    if (!backend_->host_memory()) {
      host_images_.resize(n * eval_batch_.row);
      host_labels_.resize(n);
      images = host_images_.data();
      labels = host_labels_.data();
    }
    RETURN_IF_ERROR(test_stream_->Take(start, {}, idx, images, labels));
    if (!backend_->host_memory()) {
      RETURN_IF_ERROR(backend_->CopyToDevice(eval_batch_.images.as(), images,
                                             n * eval_batch_.row * sizeof(float)));
      RETURN_IF_ERROR(backend_->CopyToDevice(eval_batch_.labels.as(), labels, n * sizeof(int32_t)));
    }
    ASSIGN_OR_RETURN(EvalMetrics m, exec_->Evaluate(eval_batch_, static_cast<int>(batch), 0, n));
    sums.loss_sum += m.loss * m.count;
    sums.correct += std::llround(m.accuracy * m.count);
    sums.count += m.count;
    idx = std::move(next);
  }
  return sums;
}

absl::StatusOr<EvalSums> Replica::Evaluate(int64_t begin, int64_t end) {
  if (streamed()) return EvaluateStreamed(begin, end);
  ASSIGN_OR_RETURN(
      EvalMetrics m,
      exec_->Evaluate(test_, static_cast<int>(config_.spec.eval().batch_size()), begin, end));
  return EvalSums{m.loss * m.count, m.correct, m.count, m.predictions};
}

}  // namespace lockstep
