// StepExecutor: the one training step in Lockstep, run by every replica alike (N = 1: no
// collective). Contract: step.h.
#include "core/step.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/rng/flax_rng.h"
#include "core/status_macros.h"
#include "core/step_workspace.h"

namespace lockstep {

using step_internal::ConvSumsUnrounded;
using step_internal::DenseInputs;
using step_internal::DenseRows;
using step_internal::DrawsDropoutKey;
using step_internal::FusedRelu;
using step_internal::FusedReluBf16;
using step_internal::Geometry;
using step_internal::GradInPlace;
using step_internal::IsActiveDropout;
using step_internal::NormRows;

StepExecutor::StepExecutor(Model model, Optimizer optimizer, rng::Impl impl, int local_batch,
                           Backend* backend, Collective* collective, CollectiveOptions options,
                           bool use_graphs)
    : model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      impl_(impl),
      local_batch_(local_batch),
      backend_(backend),
      collective_(collective),
      collective_options_(options),
      use_graphs_(use_graphs) {}

StepExecutor::~StepExecutor() = default;

absl::StatusOr<std::unique_ptr<StepExecutor>> StepExecutor::Create(
    Model model, Optimizer optimizer, rng::Impl impl, int local_batch, Backend* backend,
    Collective* collective, CollectiveOptions collective_options, bool use_graphs) {
  if (local_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("local batch size ", local_batch, " <= 0"));
  }
  std::unique_ptr<StepExecutor> e(new StepExecutor(std::move(model), std::move(optimizer), impl,
                                                   local_batch, backend, collective,
                                                   collective_options, use_graphs));
  const size_t bytes = e->model_.layout().total() * sizeof(float);
  int keys = 0;
  const bool unrounded = backend->TakesUnroundedBatchNormInput();
  for (size_t i = 0; i < e->model_.layers().size(); ++i) {
    e->dropout_slot_.push_back(DrawsDropoutKey(e->model_.layers()[i], true) ? keys++ : -1);
    e->unrounded_.push_back(unrounded && ConvSumsUnrounded(e->model_, static_cast<int>(i)));
  }
  ASSIGN_OR_RETURN(e->step_args_,
                   backend->Allocate(sizeof(UpdateScalars) + keys * sizeof(rng::Key)));
  ASSIGN_OR_RETURN(e->params_, backend->Allocate(bytes));
  if (e->model_.HasBf16()) {
    RETURN_IF_ERROR(backend->Bf16Support());
    ASSIGN_OR_RETURN(e->params_bf16_, backend->Allocate(e->model_.layout().total() * sizeof(Bf16)));
  }
  ASSIGN_OR_RETURN(e->grads_, backend->Allocate(bytes));
  if (e->stats_count() > 0) {
    ASSIGN_OR_RETURN(e->stats_, backend->Allocate(e->stats_count() * sizeof(float)));
  }
  const size_t scratch = e->optimizer_.ScratchBytes(e->model_.layout().total());
  if (scratch > 0) {
    ASSIGN_OR_RETURN(e->update_scratch_, backend->Allocate(scratch));
  }
  for (size_t i = 0; i < e->optimizer_.slots().size(); ++i) {
    ASSIGN_OR_RETURN(Buffer slot, backend->Allocate(bytes));
    e->slots_.push_back(std::move(slot));
  }
  return e;
}

absl::StatusOr<DeviceDataset> UploadDataset(Backend& backend, const Dataset& dataset) {
  DeviceDataset d;
  d.size = dataset.size;
  d.row = dataset.row;
  d.label_row = dataset.label_row;
  ASSIGN_OR_RETURN(d.images,
                   backend.Upload(dataset.images.data(), dataset.images.size() * sizeof(float)));
  ASSIGN_OR_RETURN(d.labels,
                   backend.Upload(dataset.labels.data(), dataset.labels.size() * sizeof(int32_t)));
  return d;
}
absl::Status StepExecutor::Prepare(Workspace& ws, const DeviceDataset& data,
                                   std::span<const int32_t> indices, rng::Key dropout_key) {
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= data.size) {
      return absl::InvalidArgumentError(absl::StrCat("sample index ", indices[i], " at ", i,
                                                     " is outside the dataset (", data.size,
                                                     " examples)"));
    }
  }
  RETURN_IF_ERROR(
      backend_->CopyToDevice(ws.idx.as(), indices.data(), indices.size() * sizeof(int32_t)));
  if (!ws.train) return absl::OkStatus();
  // make_rng('dropout') in each Dropout module: fold_in(root, hash(name, 1)).
  std::vector<unsigned char> args(step_args_.bytes());
  const UpdateScalars scalars = optimizer_.Scalars(step_);
  std::memcpy(args.data(), &scalars, sizeof(scalars));
  for (size_t i = 0; i < model_.layers().size(); ++i) {
    if (dropout_slot_[i] < 0) continue;
    const rng::Key k = rng::FlaxMakeRng(dropout_key, model_.layers()[i].RngPath(), 1);
    std::memcpy(args.data() + sizeof(UpdateScalars) + dropout_slot_[i] * sizeof(rng::Key), &k,
                sizeof(k));
  }
  return backend_->CopyToDevice(step_args_.as(), args.data(), args.size());
}

absl::Status StepExecutor::Forward(Workspace& ws, const DeviceDataset& data, int b, bool train) {
  RETURN_IF_ERROR(GatherBatch(ws, data, b));
  RETURN_IF_ERROR(RefreshBf16Params());
  const auto* keys =
      reinterpret_cast<const rng::Key*>(step_args_.as<unsigned char>() + sizeof(UpdateScalars));
  for (size_t i = 0; i < model_.layers().size(); ++i) {
    RETURN_IF_ERROR(ForwardLayer(ws, i, b, train, keys));
  }
  return Loss(ws, b);
}

absl::Status StepExecutor::GatherBatch(Workspace& ws, const DeviceDataset& data, int b) {
  RETURN_IF_ERROR(
      backend_->GatherRows(data.row, b, ws.idx.as<int32_t>(), data.images.as(), ws.input.as()));
  if (data.label_row != 1) {
    // Rows of int32 targets: GatherRows copies 4-byte words as they are.
    return backend_->GatherRows(data.label_row, b, ws.idx.as<int32_t>(), data.labels.as<float>(),
                                ws.labels.as<float>());
  }
  return backend_->GatherLabels(b, ws.idx.as<int32_t>(), data.labels.as<int32_t>(),
                                ws.labels.as<int32_t>());
}

absl::Status StepExecutor::ForwardLayer(Workspace& ws, size_t i, int b, bool train,
                                        const rng::Key* keys) {
  const Layer& l = model_.layers()[i];
  if (HasBf16Kernels(l)) return ForwardLayerBf16(ws, i, b, train, keys);
  RETURN_IF_ERROR(ForwardLayerF32(ws, i, b, train, keys));
  // A bfloat16 norm's, embedding's or mean's float32 result, rounded once: XLA's too
  // (relu, max_pool, flatten and x[:, 0] are exact in bfloat16; a BatchNorm's and a
  // residual sum's kernels round their own: BatchNormApplyBf16, AddBf16).
  const bool rounds = l.kind == LayerKind::kLayerNorm || l.kind == LayerKind::kEmbed ||
                      (l.kind == LayerKind::kSequencePool && l.pool_mean);
  if (!l.bf16() || !rounds) return absl::OkStatus();
  return backend_->AddRowsBf16(b, static_cast<int>(l.out.size()), ws.out[i], nullptr, ws.out[i],
                               ws.twin[i]);
}

absl::Status StepExecutor::ForwardLayerF32(Workspace& ws, size_t i, int b, bool train,
                                           const rng::Key* keys) {
  const float* params = params_.as();
  const auto& entries = model_.layout().entries();
  auto param = [&](int index) { return index < 0 ? nullptr : params + entries[index].offset; };
  const Layer& l = model_.layers()[i];
  const float* x = Input(ws, l);
  float* y = ws.out[i];
  switch (l.kind) {
    case LayerKind::kConv:
      if (FusedRelu(model_, static_cast<int>(i))) {
        return backend_->ConvForwardRelu(Geometry(l, b), x, param(l.kernel), param(l.bias), y,
                                         ws.scratch[i]);
      }
      return backend_->ConvForward(Geometry(l, b), x, param(l.kernel), param(l.bias), y,
                                   ws.scratch[i]);
    case LayerKind::kDense: {
      return backend_->DenseForward(b * DenseRows(l), l.out.c, DenseInputs(l), x, param(l.kernel),
                                    param(l.bias), FusedRelu(model_, static_cast<int>(i)), y);
    }
    case LayerKind::kEmbed:
      return backend_->Embed(b * l.out.w, l.out.c, x, param(l.kernel), y);
    case LayerKind::kPositionEmbed:
      return backend_->AddRows(b, static_cast<int>(l.out.size()), x, param(l.kernel), y);
    case LayerKind::kAttention:
      return AttentionForward(ws, i, b, train, x,
                              dropout_slot_[i] >= 0 && train ? keys + dropout_slot_[i] : nullptr);
    case LayerKind::kClassToken:
      return backend_->ClassToken(b, l.in.w, l.in.c, param(l.kernel), x, y);
    case LayerKind::kSequencePool:
      return backend_->SequencePool(l.pool_mean, b, l.in.w, l.in.c, x, y);
    case LayerKind::kRelu:  // in place unless its input is a residual's too
      if (i > 0 && (FusedRelu(model_, static_cast<int>(i) - 1) ||
                    FusedReluBf16(model_, static_cast<int>(i) - 1))) {
        return absl::OkStatus();
      }
      if (y != x) RETURN_IF_ERROR(backend_->Copy(b * l.out.size(), x, y));
      if (ws.twin[i] != nullptr) return backend_->ReluBf16(b * l.out.size(), y, ws.twin[i]);
      return backend_->Relu(b * l.out.size(), y);
    case LayerKind::kActivation:
      return backend_->Activate(l.activation, b * l.out.size(), x, y);
    case LayerKind::kAdd:
      if (l.bf16()) {
        const bool relu = FusedReluBf16(model_, static_cast<int>(i));
        return backend_->AddBf16(b, static_cast<int>(l.out.size()), x, Output(ws, l.residual), relu,
                                 y, ws.twin[relu ? i + 1 : i]);
      }
      return backend_->Add(b * l.out.size(), x, Output(ws, l.residual), y);
    case LayerKind::kAvgPool:
      return backend_->AvgPool(Geometry(l, b), l.count_include_pad, x, y);
    case LayerKind::kMaxPool:
      return backend_->MaxPool(Geometry(l, b), x, y);
    case LayerKind::kLayerNorm: {
      const int rows = b * NormRows(l);
      return backend_->LayerNorm(rows, l.in.c, l.epsilon, x, param(l.scale), param(l.bias), y,
                                 ws.stats[i], ws.stats[i] + rows);
    }
    case LayerKind::kBatchNorm:
      return BatchNormForward(ws, i, b * NormRows(l), train);
    case LayerKind::kFlatten:
      return absl::OkStatus();
    case LayerKind::kDropout:
      if (IsActiveDropout(l, train)) {
        return backend_->Dropout(b * l.out.size(), l.keep, keys + dropout_slot_[i], impl_, x, y,
                                 ws.mask[i]);
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::Loss(Workspace& ws, int b) {
  // A sequence model's loss is the mean over every position of every example.
  return backend_->SoftmaxCrossEntropy(b * model_.positions(), model_.num_classes(), ws.out.back(),
                                       ws.labels.as<int32_t>(), ws.loss.as(), ws.dlogits.as(),
                                       ws.correct.as());
}

absl::StatusOr<StepMetrics> StepExecutor::Finish(Workspace& ws, int examples) {
  const int b = examples * model_.positions();  // predictions
  RETURN_IF_ERROR(backend_->CopyToHost(ws.host_loss.data(), ws.loss.as(), b * sizeof(float)));
  RETURN_IF_ERROR(backend_->CopyToHost(ws.host_correct.data(), ws.correct.as(), b * sizeof(float)));
  RETURN_IF_ERROR(backend_->Synchronize());
  float loss = 0, correct = 0;
  for (int i = 0; i < b; ++i) {
    loss += ws.host_loss[i];
    correct += ws.host_correct[i];
  }
  // Each prediction is 0 or 1, so `correct` is an integer (exact in a float up to 2^24).
  return StepMetrics{.loss = loss / static_cast<float>(b),
                     .accuracy = correct / static_cast<float>(b),
                     .predictions = b,
                     .correct = static_cast<int64_t>(correct)};
}

void StepExecutor::set_allreduce_bucket_bytes(size_t bytes) {
  buckets_.clear();
  if (bytes > 0) buckets_ = PlanGradBuckets(model_, bytes);
}

const float* StepExecutor::Output(const Workspace& ws, int layer) const {
  return layer < 0 ? ws.input.as() : ws.out[layer];
}

void StepExecutor::StartBackward(Workspace& ws) const {
  std::fill(ws.dy.begin(), ws.dy.end(), nullptr);
  ws.dy.back() = ws.dlogits.as();
}

absl::Status StepExecutor::Backward(Workspace& ws, int b,
                                    const std::function<void(int)>& grads_ready) {
  StartBackward(ws);
  for (int i = static_cast<int>(model_.layers().size()) - 1; i >= 0; --i) {
    if (!ws.needs_grad[i]) continue;  // no params at or before it
    RETURN_IF_ERROR(BackwardLayer(ws, i, b, grads_.as(), grads_ready));
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::Deliver(Workspace& ws, int target, float* g, size_t n) {
  if (target < 0 || !ws.needs_grad[target]) return absl::OkStatus();
  float*& dy = ws.dy[target];
  if (dy != nullptr) {
    // The output's second reader (a residual connection's branch point): the gradients
    // add, as JAX's adjoint of a fan-out. Both buffers are this reader's now; g keeps it.
    RETURN_IF_ERROR(backend_->Add(n, dy, g, g));
  }
  dy = g;
  return absl::OkStatus();
}

absl::Status StepExecutor::BackwardLayer(Workspace& ws, int i, int b, float* grads,
                                         const std::function<void(int)>& grads_ready) {
  const auto& entries = model_.layout().entries();
  const float* params = params_.as();
  auto param = [&](int index) { return index < 0 ? nullptr : params + entries[index].offset; };
  auto grad = [&](int index) { return index < 0 ? nullptr : grads + entries[index].offset; };
  const Layer& l = model_.layers()[i];
  const float* x = Input(ws, l);
  float* dy = ws.dy[i];
  // Null where the input's gradient is not wanted and for layers that work on dy in place.
  float* dx = ws.din[i];
  switch (l.kind) {
    case LayerKind::kConv: {
      if (l.bf16()) {
        RETURN_IF_ERROR(ConvBackwardBf16(ws, i, b, dy, dx, grads, grads_ready));
        break;
      }
      // The weights' gradient first: ConvBackwardData may overwrite the scratch.
      const ConvGeometry g = Geometry(l, b);
      RETURN_IF_ERROR(
          backend_->ConvBackwardWeights(g, x, dy, grad(l.kernel), grad(l.bias), ws.scratch[i]));
      if (grads_ready) grads_ready(i);  // before dx: its all-reduce overlaps dx too
      if (dx != nullptr)
        RETURN_IF_ERROR(backend_->ConvBackwardData(g, param(l.kernel), dy, dx, ws.scratch[i]));
      break;
    }
    case LayerKind::kDense: {
      if (l.bf16()) {
        RETURN_IF_ERROR(DenseBackwardBf16(ws, i, b, dy, dx, grads, grads_ready));
        break;
      }
      const int in = DenseInputs(l), rows = b * DenseRows(l);
      RETURN_IF_ERROR(
          backend_->Gemm(true, false, in, l.out.c, rows, 1.0f, x, dy, 0.0f, grad(l.kernel)));
      if (l.bias >= 0) RETURN_IF_ERROR(backend_->BiasGrad(rows, l.out.c, dy, grad(l.bias)));
      if (grads_ready) grads_ready(i);
      if (dx != nullptr) {
        RETURN_IF_ERROR(
            backend_->Gemm(false, true, rows, in, l.out.c, 1.0f, dy, param(l.kernel), 0.0f, dx));
      }
      break;
    }
    case LayerKind::kEmbed: {
      const int num_embeddings = static_cast<int>(entries[l.kernel].shape[0]);
      RETURN_IF_ERROR(
          backend_->EmbedBackward(b * l.out.w, l.out.c, num_embeddings, x, dy, grad(l.kernel)));
      break;
    }
    case LayerKind::kPositionEmbed:
      // The table's rows past T (max_len > T) keep their zero gradient; dx is dy.
      RETURN_IF_ERROR(backend_->BiasGrad(b, static_cast<int>(l.out.size()), dy, grad(l.kernel)));
      break;
    case LayerKind::kAttention:
      RETURN_IF_ERROR(l.bf16() ? AttentionBackwardBf16(ws, i, b, dy, grads, dx)
                               : AttentionBackward(ws, i, b, x, dy, grads, dx));
      break;
    case LayerKind::kClassToken:
      RETURN_IF_ERROR(backend_->ClassTokenBackward(b, l.in.w, l.in.c, dy, dx, grad(l.kernel)));
      break;
    case LayerKind::kSequencePool:
      if (dx != nullptr)
        RETURN_IF_ERROR(backend_->SequencePoolBackward(l.pool_mean, b, l.in.w, l.in.c, dy, dx));
      break;
    case LayerKind::kRelu:
      RETURN_IF_ERROR(backend_->ReluBackward(b * l.out.size(), ws.out[i], dy));
      break;
    case LayerKind::kActivation:
      RETURN_IF_ERROR(backend_->ActivateBackward(l.activation, b * l.out.size(), x, dy));
      break;
    case LayerKind::kAvgPool:
      if (dx != nullptr)
        RETURN_IF_ERROR(backend_->AvgPoolBackward(Geometry(l, b), l.count_include_pad, dy, dx));
      break;
    case LayerKind::kMaxPool:
      if (dx != nullptr) RETURN_IF_ERROR(backend_->MaxPoolBackward(Geometry(l, b), x, dy, dx));
      break;
    case LayerKind::kLayerNorm: {
      const int rows = b * NormRows(l);
      RETURN_IF_ERROR(backend_->LayerNormBackward(rows, l.in.c, x, param(l.scale), ws.stats[i],
                                                  ws.stats[i] + rows, dy, dx, grad(l.scale),
                                                  grad(l.bias)));
      break;
    }
    case LayerKind::kBatchNorm:
      RETURN_IF_ERROR(BatchNormBackward(l, b * NormRows(l), x, dy, dx, ws.dyb, ws.bn[i]));
      break;
    case LayerKind::kFlatten:
      break;
    case LayerKind::kAdd:  // both operands' gradient is dy: the residual's a copy of it
      if (dx != nullptr) {
        RETURN_IF_ERROR(backend_->Copy(b * l.out.size(), dy, dx));
        RETURN_IF_ERROR(Deliver(ws, l.residual, dx, b * l.out.size()));
      }
      return Deliver(ws, l.src, dy, b * l.out.size());
    case LayerKind::kDropout:
      if (dx != nullptr && IsActiveDropout(l, true)) {
        // A bfloat16 dropout divides by bf16(keep) (Flax's x / keep_prob in x's dtype).
        const float keep = l.bf16() ? RoundBf16(l.keep) : l.keep;
        RETURN_IF_ERROR(backend_->DropoutBackward(b * l.out.size(), keep, ws.mask[i], dy, dx));
      }
      break;
  }
  // Layers with parameters the cases above did not announce (grads_ready is idempotent).
  if (grads_ready && l.has_params()) grads_ready(i);
  float* input_grad = GradInPlace(l, true) ? dy : dx;
  if (input_grad == nullptr) return absl::OkStatus();
  return Deliver(ws, l.src, input_grad, static_cast<size_t>(b) * l.in.size());
}

absl::Status StepExecutor::BackwardAllReduced(Workspace& ws,
                                              std::chrono::steady_clock::time_point& backward_end) {
  float* grads = grads_.as();
  size_t next = 0;                       // the first bucket not started
  CollectiveTicket last = 0;             // the last one started
  absl::Status started;                  // the first error starting one
  auto start_through = [&](int layer) {  // starts the buckets complete once `layer` is
    while (started.ok() && next < buckets_.size() && buckets_[next].layer >= layer) {
      const GradBucket& bucket = buckets_[next++];
      started = BeforeReduce(bucket.offset, bucket.size);
      if (!started.ok()) break;
      absl::StatusOr<CollectiveTicket> t =
          collective_->StartAllReduceSum(grads + bucket.offset, bucket.size, collective_options_);
      if (t.ok()) {
        last = *t;
      } else {
        started = t.status();
      }
    }
  };
  const absl::Status backward = Backward(ws, local_batch_, start_through);
  backward_end = std::chrono::steady_clock::now();
  if (backward.ok()) start_through(-1);  // the rest: complete now
  // Every started bucket is waited for, even after an error: none may outlive the step.
  absl::Status waited = collective_->Wait(last);
  RETURN_IF_ERROR(backward);
  RETURN_IF_ERROR(started);
  return waited;
}

absl::Status StepExecutor::DeviceStep(Workspace& ws, const DeviceDataset& data, bool update) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(Forward(ws, data, local_batch_, true));
  const size_t n = model_.layout().total();
  const bool reduce = update && collective_ != nullptr && collective_->size() > 1;
  Clock::time_point t1;
  absl::Status reduced;
  if (reduce && !buckets_.empty()) {
    reduced = BackwardAllReduced(ws, t1);  // the sums overlap backward
  } else {
    RETURN_IF_ERROR(Backward(ws, local_batch_));
    RETURN_IF_ERROR(BeforeReduce(0, n));
    t1 = Clock::now();
    if (reduce) reduced = collective_->AllReduceSum(grads_.as(), n, collective_options_);
  }
  timings_.compute = seconds(t0, t1);
  if (!update) return absl::OkStatus();
  RETURN_IF_ERROR(reduced);
  const auto t2 = Clock::now();
  timings_.allreduce = seconds(t1, t2);
  std::vector<float*> slots;
  for (Buffer& s : slots_) slots.push_back(s.as());
  // pmean: the sum over replicas, then a division (not a multiply) by N, as JAX does; in
  // the update's pass.
  RETURN_IF_ERROR(optimizer_.Apply(*backend_, n, reduce ? collective_->size() : 1,
                                   step_args_.as<UpdateScalars>(), update_scratch_.as<void>(),
                                   grads_.as(), slots, params_.as()));
  RETURN_IF_ERROR(UpdateBatchStats(ws.bn));
  timings_.update = seconds(t2, Clock::now());
  return absl::OkStatus();
}

absl::StatusOr<StepExecutor::Workspace*> StepExecutor::PrepareStep(const DeviceDataset& data,
                                                                   std::span<const int32_t> indices,
                                                                   rng::Key dropout_key) {
  if (static_cast<int>(indices.size()) != local_batch_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step has ", indices.size(), " samples; this replica's local batch is ", local_batch_));
  }
  ASSIGN_OR_RETURN(Workspace * ws, GetWorkspace(local_batch_, true));
  RETURN_IF_ERROR(Prepare(*ws, data, indices, dropout_key));
  return ws;
}

absl::StatusOr<StepMetrics> StepExecutor::ComputeGradients(const DeviceDataset& data,
                                                           std::span<const int32_t> indices,
                                                           rng::Key dropout_key) {
  ASSIGN_OR_RETURN(Workspace * ws, PrepareStep(data, indices, dropout_key));
  RETURN_IF_ERROR(DeviceStep(*ws, data, false));
  return Finish(*ws, local_batch_);
}

absl::StatusOr<StepMetrics> StepExecutor::Step(const DeviceDataset& data,
                                               std::span<const int32_t> indices,
                                               rng::Key dropout_key) {
  ASSIGN_OR_RETURN(Workspace * ws, PrepareStep(data, indices, dropout_key));
  bool replayed = false;  // a tapped step runs eagerly: a graph would skip the taps
  if (!capture_ && !fault_) {
    ASSIGN_OR_RETURN(replayed, ReplayGraph(*ws, data));
  }
  if (!replayed) RETURN_IF_ERROR(DeviceStep(*ws, data, true));
  ASSIGN_OR_RETURN(StepMetrics m, Finish(*ws, local_batch_));
  ++step_;
  return m;
}

absl::Status StepExecutor::BeforeReduce(size_t offset, size_t count) {
  float* g = grads_.as() + offset;
  if (fault_) RETURN_IF_ERROR(fault_(*backend_, g, count));
  if (!capture_) return absl::OkStatus();
  local_grads_.resize(param_count());  // copied before the all-reduce overwrites it
  return backend_->CopyToHost(local_grads_.data() + offset, g, count * sizeof(float));
}

absl::StatusOr<std::vector<float>> StepExecutor::Gradients() {
  std::vector<float> g(model_.layout().total());
  RETURN_IF_ERROR(backend_->CopyToHost(g.data(), grads_.as(), g.size() * sizeof(float)));
  RETURN_IF_ERROR(backend_->Synchronize());
  return g;
}

absl::StatusOr<std::vector<std::vector<uint8_t>>> StepExecutor::DropoutMasks() {
  std::vector<std::vector<uint8_t>> masks;
  if (!train_ws_) return masks;
  for (size_t i = 0; i < model_.layers().size(); ++i) {
    const Layer& l = model_.layers()[i];
    if (!DrawsDropoutKey(l, true)) continue;
    // An attention layer's mask is one [T, T] for the whole batch (broadcast_dropout).
    masks.emplace_back(l.kind == LayerKind::kAttention
                           ? static_cast<size_t>(l.in.w) * l.in.w
                           : static_cast<size_t>(local_batch_) * l.out.size());
    RETURN_IF_ERROR(
        backend_->CopyToHost(masks.back().data(), train_ws_->mask[i], masks.back().size()));
  }
  RETURN_IF_ERROR(backend_->Synchronize());
  return masks;
}

absl::StatusOr<EvalMetrics> StepExecutor::Evaluate(const DeviceDataset& data, int batch_size,
                                                   int64_t begin, int64_t end) {
  if (end < 0) end = data.size;
  if (batch_size <= 0) return absl::InvalidArgumentError("eval batch size must be positive");
  if (begin < 0 || begin > end || end > data.size) {
    return absl::InvalidArgumentError(absl::StrCat("evaluation range [", begin, ", ", end,
                                                   ") is outside the dataset (", data.size,
                                                   " examples)"));
  }
  EvalMetrics total;
  if (begin == end) return total;
  const int cap = static_cast<int>(std::min<int64_t>(batch_size, end - begin));
  ASSIGN_OR_RETURN(Workspace * ws, GetWorkspace(cap, false));
  std::vector<int32_t> idx(cap);
  for (int64_t start = begin; start < end; start += cap) {
    const int b = static_cast<int>(std::min<int64_t>(cap, end - start));
    std::iota(idx.begin(), idx.begin() + b, static_cast<int32_t>(start));
    RETURN_IF_ERROR(Prepare(*ws, data, std::span<const int32_t>(idx.data(), b), {}));
    RETURN_IF_ERROR(Forward(*ws, data, b, false));
    ASSIGN_OR_RETURN(StepMetrics m, Finish(*ws, b));
    total.loss += static_cast<double>(m.loss) * b;
    total.count += b;
    total.predictions += m.predictions;
    total.correct += m.correct;
  }
  total.loss /= static_cast<double>(total.count);
  total.accuracy = static_cast<double>(total.correct) / static_cast<double>(total.predictions);
  return total;
}

}  // namespace lockstep
