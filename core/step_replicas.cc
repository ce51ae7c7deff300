// StepExecutor's logical replicas (docs/elastic.md): the step of a job on V logical
// replicas for the range of them this executor holds. Each local replica has a workspace
// of its own at batch B/V, its own dropout keys and gradients; forward and backward go
// layer by layer over the local replicas, so that a BatchNorm layer reduces all of their
// statistics at once, exactly (core/exact_sum.h) over all V, before any normalizes. The
// gradients are summed exactly the same way, divided by V, and applied once to the one
// train state. Every reduction's result is a function of the V replicas' contributions
// alone, and each replica's arithmetic depends only on its shapes and the backend's
// threads: the bits are the same whichever worker computes which replica.
#include <algorithm>
#include <chrono>
#include <limits>
#include <tuple>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/step.h"
#include "core/step_workspace.h"

namespace lockstep {

using step_internal::NormRows;

absl::Status StepExecutor::SetLogicalReplicas(int total, int first, int count) {
  const int ranks = collective_ != nullptr ? collective_->size() : 1;
  // Alone (no collective), this executor must hold every replica.
  if (count < 1 || first < 0 || first + count > total || total < ranks ||
      (ranks == 1 && count != total)) {
    return absl::InvalidArgumentError(absl::StrCat("logical replicas [", first, ", ", first + count,
                                                   ") are not a range of ", total,
                                                   " logical replicas over ", ranks, " workers"));
  }
  logical_ = {total, first, count};
  exact_.reset();
  device_exact_.reset();
  if (backend_->host_memory() && !exact_in_backend_) {
    exact_ = std::make_unique<ExactSum>(collective_, total);
  } else {
    device_exact_ = std::make_unique<DeviceExactSum>(backend_, collective_, total);
  }
  replica_ws_.clear();
  ride_ws_.reset();
  replica_grads_.clear();
  replica_keys_.clear();
  int keys = 0;
  for (int slot : dropout_slot_) keys = std::max(keys, slot + 1);
  for (int j = 0; j < count; ++j) {
    ASSIGN_OR_RETURN(std::unique_ptr<Workspace> ws, NewWorkspace(local_batch_, true));
    replica_ws_.push_back(std::move(ws));
    ASSIGN_OR_RETURN(Buffer k, backend_->Allocate(std::max(keys, 1) * sizeof(rng::Key)));
    replica_keys_.push_back(std::move(k));
    if (j == 0) continue;  // replica 0's gradients: grads_
    ASSIGN_OR_RETURN(Buffer g, backend_->Allocate(param_count() * sizeof(float)));
    replica_grads_.push_back(std::move(g));
  }
  return absl::OkStatus();
}

std::vector<int64_t> StepExecutor::ShareReplicaMetrics(const StepMetrics& local) const {
  const int v = logical_.total;
  std::vector<int64_t> slots(2 * static_cast<size_t>(v), std::numeric_limits<int64_t>::min());
  auto bits = [](float f) { return static_cast<int64_t>(absl::bit_cast<uint32_t>(f)); };
  for (int j = 0; j < logical_.count; ++j) {
    slots[logical_.first + j] = bits(local.replica_loss[j]);
    slots[v + logical_.first + j] = bits(local.replica_accuracy[j]);
  }
  return slots;
}

absl::StatusOr<std::pair<std::vector<float>, std::vector<float>>>
StepExecutor::UnshareReplicaMetrics(const std::vector<int64_t>& slots) const {
  const int v = logical_.total;
  std::pair<std::vector<float>, std::vector<float>> out;
  for (int p = 0; p < 2 * v; ++p) {
    if (slots[p] < 0 || slots[p] > std::numeric_limits<uint32_t>::max()) {
      return absl::DataLossError(absl::StrCat("logical replica ", p % v, "'s ",
                                              p < v ? "loss" : "accuracy",
                                              " did not arrive in the step's all-reduce"));
    }
    const float f = absl::bit_cast<float>(static_cast<uint32_t>(slots[p]));
    (p < v ? out.first : out.second).push_back(f);
  }
  return out;
}

absl::Status StepExecutor::SumExactly(std::span<const float* const> local, size_t n, float* out,
                                      std::span<int64_t> also_max) {
  if (device_exact_ != nullptr) {
    return device_exact_->Sum(local, n, out, collective_options_, also_max);
  }
  return exact_->Sum(local, n, out, collective_options_, also_max);
}

absl::Status StepExecutor::ExactSumInto(const std::vector<float*>& local, size_t size) {
  const std::vector<const float*> in(local.begin(), local.end());
  RETURN_IF_ERROR(SumExactly(in, size, local[0]));
  for (size_t j = 1; j < local.size(); ++j)
    RETURN_IF_ERROR(backend_->Copy(size, local[0], local[j]));
  return absl::OkStatus();
}

absl::Status StepExecutor::StatisticsTaps(size_t i, int part, const std::vector<float*>& local,
                                          bool capture, std::vector<float>& host) {
  const size_t c = model_.layers()[i].in.c;
  if (statistics_fault_) {
    for (float* x : local) RETURN_IF_ERROR(statistics_fault_(*backend_, x, 2 * c));
  }
  if (!capture) return absl::OkStatus();
  size_t offset = 0;  // layer i's 4c floats in `host`: after the BatchNorm layers before it
  for (size_t k = 0; k < i; ++k) {
    const Layer& l = model_.layers()[k];
    if (l.kind == LayerKind::kBatchNorm) offset += 4 * static_cast<size_t>(l.in.c);
  }
  return backend_->CopyToHost(host.data() + offset + part * 2 * c, local[0], 2 * c * sizeof(float));
}

absl::Status StepExecutor::BatchNormForwardReplicas(size_t i) {
  const Layer& l = model_.layers()[i];
  const int c = l.in.c, rows = local_batch_ * NormRows(l);
  auto input = [&](Workspace& ws) { return Input(ws, l); };
  std::vector<float*> moments;  // per local replica: [E[x], E[x^2]] over its rows
  for (auto& ws : replica_ws_) {
    float* bn = ws->bn[i];
    RETURN_IF_ERROR(BatchNormMomentsOf(l, rows, input(*ws), bn));
    moments.push_back(bn);
  }
  RETURN_IF_ERROR(StatisticsTaps(i, 0, moments, capture_, local_stats_));
  if (riding_) {  // its own moments, tapped, but not summed
    float* bn = ride_ws_->bn[i];
    RETURN_IF_ERROR(BatchNormMomentsOf(l, rows, input(*ride_ws_), bn));
    RETURN_IF_ERROR(StatisticsTaps(i, 0, {bn}, true, ride_along_result_.statistics));
  }
  // lax.pmean over the V replicas: the exact sum, then a division by V.
  RETURN_IF_ERROR(ExactSumInto(moments, 2 * c));
  auto normalize = [&](Workspace& ws) -> absl::Status {
    float* bn = ws.bn[i];
    RETURN_IF_ERROR(backend_->BatchNormVariance(c, bn, bn + 2 * c));
    return BatchNormApply(ws, i, rows, input(ws), bn, bn + 2 * c);
  };
  for (auto& ws : replica_ws_) {
    RETURN_IF_ERROR(backend_->Divide(2 * c, static_cast<float>(logical_.total), ws->bn[i]));
    RETURN_IF_ERROR(normalize(*ws));
  }
  if (riding_) {  // the job-wide moments
    RETURN_IF_ERROR(backend_->Copy(2 * c, replica_ws_[0]->bn[i], ride_ws_->bn[i]));
    RETURN_IF_ERROR(normalize(*ride_ws_));
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::ForwardReplicas(const DeviceDataset& data,
                                           const DeviceDataset* ride_data) {
  for (auto& ws : replica_ws_) RETURN_IF_ERROR(GatherBatch(*ws, data, local_batch_));
  if (riding_) RETURN_IF_ERROR(GatherBatch(*ride_ws_, *ride_data, local_batch_));
  RETURN_IF_ERROR(RefreshBf16Params());
  for (size_t i = 0; i < model_.layers().size(); ++i) {
    if (model_.layers()[i].kind == LayerKind::kBatchNorm) {
      RETURN_IF_ERROR(BatchNormForwardReplicas(i));
      continue;
    }
    for (size_t j = 0; j < replica_ws_.size(); ++j) {
      RETURN_IF_ERROR(
          ForwardLayer(*replica_ws_[j], i, local_batch_, true, replica_keys_[j].as<rng::Key>()));
    }
    if (riding_) {
      RETURN_IF_ERROR(ForwardLayer(*ride_ws_, i, local_batch_, true, ride_keys_.as<rng::Key>()));
    }
  }
  for (auto& ws : replica_ws_) RETURN_IF_ERROR(Loss(*ws, local_batch_));
  if (riding_) RETURN_IF_ERROR(Loss(*ride_ws_, local_batch_));
  return absl::OkStatus();
}

absl::Status StepExecutor::BatchNormBackwardReplicas(int i) {
  const Layer& l = model_.layers()[i];
  const int c = l.in.c, rows = local_batch_ * NormRows(l);
  // Its sums of dy and dy * (x - mean) and its parameters' gradients.
  auto reduce = [&](Workspace& ws, float* grads) {
    return BatchNormReduceOf(l, rows, Input(ws, l), ws.dy[i], ws.bn[i], grads);
  };
  std::vector<float*> sums;  // per local replica
  for (size_t j = 0; j < replica_ws_.size(); ++j) {
    RETURN_IF_ERROR(reduce(*replica_ws_[j], j == 0 ? grads_.as() : replica_grads_[j - 1].as()));
    sums.push_back(replica_ws_[j]->bn[i] + 3 * c);
  }
  if (riding_) RETURN_IF_ERROR(reduce(*ride_ws_, ride_grads_.as()));
  if (replica_ws_[0]->din[i] == nullptr) return absl::OkStatus();  // no input gradient
  RETURN_IF_ERROR(StatisticsTaps(i, 1, sums, capture_, local_stats_));
  if (riding_) {
    RETURN_IF_ERROR(
        StatisticsTaps(i, 1, {ride_ws_->bn[i] + 3 * c}, true, ride_along_result_.statistics));
  }
  // The transpose of the statistics' pmean: every replica's cotangents, summed exactly.
  RETURN_IF_ERROR(ExactSumInto(sums, 2 * c));
  auto apply = [&](Workspace& ws) -> absl::Status {
    RETURN_IF_ERROR(BatchNormApplyGradOf(l, rows, logical_.total, Input(ws, l), ws.dy[i], ws.bn[i],
                                         ws.din[i], ws.dyb));
    return Deliver(ws, l.src, ws.din[i], static_cast<size_t>(rows) * c);
  };
  for (auto& ws : replica_ws_) RETURN_IF_ERROR(apply(*ws));
  if (riding_) {  // the job-wide sums
    RETURN_IF_ERROR(backend_->Copy(2 * c, sums[0], ride_ws_->bn[i] + 3 * c));
    RETURN_IF_ERROR(apply(*ride_ws_));
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::BackwardReplicas(const std::function<void(int)>& layer_done) {
  for (auto& ws : replica_ws_) StartBackward(*ws);
  if (riding_) StartBackward(*ride_ws_);
  for (int i = static_cast<int>(model_.layers().size()) - 1; i >= 0; --i) {
    if (!replica_ws_[0]->needs_grad[i]) continue;  // no params at or before it
    if (model_.layers()[i].kind == LayerKind::kBatchNorm) {
      RETURN_IF_ERROR(BatchNormBackwardReplicas(i));
    } else {
      for (size_t j = 0; j < replica_ws_.size(); ++j) {
        float* grads = j == 0 ? grads_.as() : replica_grads_[j - 1].as();
        // The last replica's parameter gradients complete the layer's, before its input
        // gradient is computed: the sums they start overlap that too.
        const bool last = j + 1 == replica_ws_.size();
        RETURN_IF_ERROR(BackwardLayer(*replica_ws_[j], i, local_batch_, grads,
                                      last ? layer_done : std::function<void(int)>()));
      }
      if (riding_) RETURN_IF_ERROR(BackwardLayer(*ride_ws_, i, local_batch_, ride_grads_.as(), {}));
    }
    if (layer_done) layer_done(i);
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::BackwardReplicasSummed(
    std::vector<int64_t>& shared, std::chrono::steady_clock::time_point& backward_end) {
  std::vector<float*> grads = {grads_.as()};
  for (Buffer& g : replica_grads_) grads.push_back(g.as());
  auto local_at = [&](size_t offset) {
    std::vector<const float*> local;
    for (float* g : grads) local.push_back(g + offset);
    return local;
  };
  // The audit's taps on [offset, offset + size) before it is summed: the fault (tests
  // only) changes every local replica's gradients, the capture copies the first's.
  auto taps = [&](size_t offset, size_t size) -> absl::Status {
    if (fault_) {
      for (float* g : grads) RETURN_IF_ERROR(fault_(*backend_, g + offset, size));
    }
    if (!capture_) return absl::OkStatus();
    local_grads_.resize(param_count());
    return backend_->CopyToHost(local_grads_.data() + offset, grads[0] + offset,
                                size * sizeof(float));
  };
  // One sum after backward, the metrics in its max all-reduce: in backend memory
  // (DeviceExactSum), or where the collective cannot overlap the host's.
  if (device_exact_ != nullptr || !exact_->overlaps()) {
    RETURN_IF_ERROR(BackwardReplicas());
    backward_end = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(taps(0, param_count()));
    return SumExactly(local_at(0), param_count(), grads_.as(), shared);
  }
  const std::vector<GradBucket> buckets =
      AlignGradBuckets(buckets_.empty() ? PlanGradBuckets(model_, 0) : buckets_, exact_->block());
  size_t next = 0;                       // the first bucket not started
  CollectiveTicket last = 0;             // the last one started
  absl::Status started;                  // the first error starting one
  auto start_through = [&](int layer) {  // starts the buckets complete once `layer` is
    while (started.ok() && next < buckets.size() && buckets[next].layer >= layer) {
      const GradBucket& b = buckets[next++];
      started = taps(b.offset, b.size);
      if (!started.ok()) break;
      absl::StatusOr<CollectiveTicket> t =
          exact_->StartSum(local_at(b.offset), b.size, grads_.as() + b.offset, collective_options_);
      if (t.ok()) {
        last = *t;
      } else {
        started = t.status();
      }
    }
  };
  absl::Status status = BackwardReplicas(start_through);
  backward_end = std::chrono::steady_clock::now();
  if (status.ok()) start_through(-1);  // the rest: complete now
  if (status.ok() && started.ok()) {
    status = exact_->Sum(local_at(0), 0, grads_.as(), collective_options_, shared);
  }
  // Every started bucket is waited for, even after an error: none may outlive the step.
  absl::Status waited = collective_->Wait(last);
  RETURN_IF_ERROR(status);
  RETURN_IF_ERROR(started);
  return waited;
}

absl::Status StepExecutor::CopyKeys(Buffer& to) {
  // Prepare wrote the optimizer's scalars (the same each time) and the replica's keys into
  // step_args_: the keys to the replica's own buffer (backend memory, in whole floats: a
  // key is two uint32s).
  const size_t floats =
      std::min(to.bytes(), step_args_.bytes() - sizeof(UpdateScalars)) / sizeof(float);
  return backend_->Copy(
      floats,
      reinterpret_cast<const float*>(step_args_.as<unsigned char>() + sizeof(UpdateScalars)),
      to.as());
}

absl::Status StepExecutor::PrepareRideAlong(const RideAlong& ride) {
  if (ride.data == nullptr || ride.indices.size() != static_cast<size_t>(local_batch_)) {
    return absl::InvalidArgumentError(absl::StrCat("the ride-along replica has ",
                                                   ride.indices.size(),
                                                   " samples; a replica takes ", local_batch_));
  }
  if (ride_ws_ == nullptr) {
    ASSIGN_OR_RETURN(ride_ws_, NewWorkspace(local_batch_, true));
    ASSIGN_OR_RETURN(ride_grads_, backend_->Allocate(param_count() * sizeof(float)));
    ASSIGN_OR_RETURN(ride_keys_, backend_->Allocate(replica_keys_[0].bytes()));
  }
  RETURN_IF_ERROR(Prepare(*ride_ws_, *ride.data, ride.indices, ride.key));
  return CopyKeys(ride_keys_);
}

absl::StatusOr<StepMetrics> StepExecutor::StepReplicas(const DeviceDataset& data,
                                                       std::span<const int32_t> indices,
                                                       std::span<const rng::Key> keys,
                                                       const RideAlong* ride_along) {
  if (logical_.total == 0) {
    return absl::FailedPreconditionError("StepReplicas before SetLogicalReplicas");
  }
  const int k = logical_.count;
  if (indices.size() != static_cast<size_t>(k) * local_batch_ || keys.size() != size_t(k)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step has ", indices.size(), " samples and ", keys.size(), " keys; these ", k,
                     " logical replicas take ", k * local_batch_, " samples (", local_batch_,
                     " each) and ", k, " keys"));
  }
  for (int j = 0; j < k; ++j) {
    RETURN_IF_ERROR(
        Prepare(*replica_ws_[j], data, indices.subspan(j * local_batch_, local_batch_), keys[j]));
    RETURN_IF_ERROR(CopyKeys(replica_keys_[j]));
  }
  // The BatchNorm taps' host copies: 4c floats per BatchNorm layer (StatisticsTaps).
  size_t stats_floats = 0;
  for (const Layer& l : model_.layers()) {
    if (l.kind == LayerKind::kBatchNorm) stats_floats += 4 * static_cast<size_t>(l.in.c);
  }
  if (capture_) local_stats_.assign(stats_floats, 0.0f);
  ride_along_result_ = {};
  if (ride_along != nullptr) {
    RETURN_IF_ERROR(PrepareRideAlong(*ride_along));
    ride_along_result_.statistics.assign(stats_floats, 0.0f);
    ride_along_result_.gradients.resize(param_count());
  }
  riding_ = ride_along != nullptr;
  absl::StatusOr<StepMetrics> stepped = StepReplicasRiding(data, ride_along);
  riding_ = false;
  return stepped;
}

absl::StatusOr<StepMetrics> StepExecutor::StepReplicasRiding(const DeviceDataset& data,
                                                             const RideAlong* ride_along) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const int k = logical_.count;
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(ForwardReplicas(data, riding_ ? ride_along->data : nullptr));
  StepMetrics metrics;
  for (auto& ws : replica_ws_) {
    ASSIGN_OR_RETURN(StepMetrics m, Finish(*ws, local_batch_));
    metrics.replica_loss.push_back(m.loss);
    metrics.replica_accuracy.push_back(m.accuracy);
    metrics.loss += m.loss;
    metrics.accuracy += m.accuracy;
  }
  metrics.loss /= static_cast<float>(k);
  metrics.accuracy /= static_cast<float>(k);
  if (riding_) {
    ASSIGN_OR_RETURN(StepMetrics m, Finish(*ride_ws_, local_batch_));
    ride_along_result_.loss = m.loss;
  }
  // Every replica's loss and accuracy ride in the sum's max all-reduce, each in its own
  // slot (elsewhere the lowest int64), so that every rank that completes the step knows
  // all V of them: a step a lost peer never answered can still be reported exactly.
  std::vector<int64_t> shared = ShareReplicaMetrics(metrics);
  Clock::time_point t1;
  RETURN_IF_ERROR(BackwardReplicasSummed(shared, t1));
  if (riding_) {  // its gradients, tapped as a local replica's are, but not summed
    float* g = ride_grads_.as();
    if (fault_) RETURN_IF_ERROR(fault_(*backend_, g, param_count()));
    RETURN_IF_ERROR(backend_->CopyToHost(ride_along_result_.gradients.data(), g,
                                         param_count() * sizeof(float)));
  }
  ASSIGN_OR_RETURN(std::tie(metrics.all_replica_loss, metrics.all_replica_accuracy),
                   UnshareReplicaMetrics(shared));
  const size_t n = param_count();
  const auto t2 = Clock::now();
  std::vector<float*> slots;
  for (Buffer& s : slots_) slots.push_back(s.as());
  // pmean: the sum over the V replicas, then (in the update's pass) a division by V.
  RETURN_IF_ERROR(optimizer_.Apply(*backend_, n, logical_.total, step_args_.as<UpdateScalars>(),
                                   update_scratch_.as<void>(), grads_.as(), slots, params_.as()));
  RETURN_IF_ERROR(UpdateBatchStats(replica_ws_[0]->bn));
  timings_ = {seconds(t0, t1), seconds(t1, t2), seconds(t2, Clock::now())};
  ++step_;
  return metrics;
}

}  // namespace lockstep
