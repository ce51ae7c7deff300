// StepExecutor's workspace planning: the buffers one batch size needs (GetWorkspace), and
// their bytes before anything is allocated (WorkspaceBytes).
#include "core/step_workspace.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/step.h"

namespace lockstep {

using step_internal::AttentionFloats;
using step_internal::BatchNormBuffer;
using step_internal::Bf16Elements;
using step_internal::Bf16GradElements;
using step_internal::ColsPerSample;
using step_internal::Geometry;
using step_internal::InPlace;
using step_internal::NeedsDin;
using step_internal::NeedsGrad;
using step_internal::NeedsTwin;
using step_internal::NormRows;

namespace step_internal {

bool SharesInput(const Model& m, int i) {
  const int src = m.layers()[i].src;
  for (int j = 0; j < static_cast<int>(m.layers().size()); ++j) {
    const Layer& l = m.layers()[j];
    if (j != i && (l.src == src || (l.kind == LayerKind::kAdd && l.residual == src))) return true;
  }
  return false;
}

bool ConvSumsUnrounded(const Model& m, int i) {
  const auto& layers = m.layers();
  const Layer& l = layers[i];
  if (l.kind != LayerKind::kConv || !l.bf16() || l.bias >= 0) return false;
  if (i + 1 >= static_cast<int>(layers.size())) return false;
  const Layer& next = layers[i + 1];
  if (next.kind != LayerKind::kBatchNorm || !next.bf16() || next.src != i) return false;
  for (int j = 0; j < static_cast<int>(layers.size()); ++j) {
    const Layer& r = layers[j];
    if (j != i + 1 && (r.src == i || (r.kind == LayerKind::kAdd && r.residual == i))) return false;
  }
  return true;
}

bool NeedsTwin(const Model& m, int j) {
  if (j < 0) return false;
  const Layer& p = m.layers()[j];
  switch (p.kind) {
    case LayerKind::kConv:
    case LayerKind::kDense:
    case LayerKind::kAttention:
    case LayerKind::kActivation:
    case LayerKind::kRelu:
    case LayerKind::kLayerNorm:
    case LayerKind::kBatchNorm:
    case LayerKind::kEmbed:
    case LayerKind::kPositionEmbed:
    case LayerKind::kAdd:
    case LayerKind::kDropout:
      break;
    default:
      return false;
  }
  if (!p.bf16()) return false;
  for (const Layer& l : m.layers()) {
    if (l.src == j && IsBf16Matmul(l)) return true;
  }
  return false;
}

std::vector<bool> NeedsGrad(const Model& m) {
  std::vector<bool> needs(m.layers().size());
  auto at = [&](int j) { return j >= 0 && needs[j]; };
  for (size_t i = 0; i < needs.size(); ++i) {
    const Layer& l = m.layers()[i];
    needs[i] = l.has_params() || at(l.src) || (l.kind == LayerKind::kAdd && at(l.residual));
  }
  return needs;
}

}  // namespace step_internal

// Every buffer GetWorkspace allocates, at the default convolutions' scratch; backends
// with their own convolutions may need less (the CPU backend's oneDNN convolutions need none).
uint64_t WorkspaceBytes(const Model& model, int batch, bool train) {
  const uint64_t b = batch, f = sizeof(float), p = b * model.positions();
  // idx, input; labels, loss, dlogits, correct, host_loss and host_correct per prediction.
  uint64_t bytes = b * (4 + model.input().size() * f);
  bytes += p * (4 + f + model.num_classes() * f + f) + 2 * p * f;
  const std::vector<bool> needs_grad = NeedsGrad(model);
  for (size_t i = 0; i < model.layers().size(); ++i) {
    const Layer& l = model.layers()[i];
    if (NeedsTwin(model, static_cast<int>(i))) bytes += b * l.out.size() * sizeof(Bf16);
    if (InPlace(model, i, train)) continue;
    bytes += b * l.out.size() * f;
    if (l.kind == LayerKind::kConv) bytes += b * ColsPerSample(l) * f;
    bytes += Bf16Elements(model, static_cast<int>(i), batch, train) * sizeof(Bf16);
    if (l.kind == LayerKind::kDropout) bytes += b * l.out.size();
    if (l.kind == LayerKind::kAttention) {
      bytes += AttentionFloats(l, batch, train) * f + uint64_t(l.in.w) * l.in.w;
    }
    if (l.kind == LayerKind::kLayerNorm) bytes += 2 * b * NormRows(l) * f;
    if (l.kind == LayerKind::kBatchNorm && train) bytes += BatchNormBuffer(l) * f;
    if (train && NeedsDin(model, needs_grad, i)) {
      bytes += b * l.in.size() * f;
    }
  }
  if (train) bytes += Bf16GradElements(model, batch) * sizeof(Bf16);
  return bytes;
}

absl::StatusOr<StepExecutor::Workspace*> StepExecutor::GetWorkspace(int batch, bool train) {
  std::unique_ptr<Workspace>& slot = train ? train_ws_ : eval_ws_;
  if (slot && slot->capacity >= batch) return slot.get();
  ASSIGN_OR_RETURN(slot, NewWorkspace(batch, train));
  return slot.get();
}

absl::StatusOr<std::unique_ptr<StepExecutor::Workspace>> StepExecutor::NewWorkspace(int batch,
                                                                                    bool train) {
  // Kernels index a batch's activations and conv patches with int rows and columns.
  uint64_t widest = model_.input().size();
  for (const Layer& l : model_.layers()) {
    widest = std::max<uint64_t>(widest, l.out.size());
    if (l.kind == LayerKind::kConv) widest = std::max(widest, ColsPerSample(l));
    if (l.kind == LayerKind::kAttention)
      widest = std::max<uint64_t>(widest, uint64_t(l.heads) * l.in.w * l.in.w);
  }
  if (static_cast<uint64_t>(batch) * widest > uint64_t{INT32_MAX}) {
    return absl::InvalidArgumentError(absl::StrCat("a batch of ", batch, " needs ", widest,
                                                   " floats per example in one buffer: over 2^31 "
                                                   "in all; use a smaller batch"));
  }
  auto ws = std::make_unique<Workspace>();
  ws->capacity = batch;
  ws->train = train;
  auto alloc = [&](size_t bytes) -> absl::StatusOr<void*> {
    ASSIGN_OR_RETURN(Buffer b, backend_->Allocate(bytes));
    ws->owned.push_back(std::move(b));
    return ws->owned.back().as<void>();
  };
  const size_t b = batch, p = b * model_.positions();  // p: predictions
  const int classes = model_.num_classes();
  ASSIGN_OR_RETURN(ws->idx, backend_->Allocate(b * sizeof(int32_t)));
  ASSIGN_OR_RETURN(ws->input, backend_->Allocate(b * model_.input().size() * sizeof(float)));
  ASSIGN_OR_RETURN(ws->labels, backend_->Allocate(p * sizeof(int32_t)));
  ASSIGN_OR_RETURN(ws->loss, backend_->Allocate(p * sizeof(float)));
  ASSIGN_OR_RETURN(ws->dlogits, backend_->Allocate(p * classes * sizeof(float)));
  ASSIGN_OR_RETURN(ws->correct, backend_->Allocate(p * sizeof(float)));
  const auto& layers = model_.layers();
  ws->needs_grad = NeedsGrad(model_);
  ws->dy.assign(layers.size(), nullptr);
  ws->out.assign(layers.size(), nullptr);
  ws->din.assign(layers.size(), nullptr);
  ws->scratch.assign(layers.size(), nullptr);
  ws->stats.assign(layers.size(), nullptr);
  ws->bn.assign(layers.size(), nullptr);
  ws->mask.assign(layers.size(), nullptr);
  ws->xb.assign(layers.size(), nullptr);
  ws->twin.assign(layers.size(), nullptr);
  if (train && Bf16GradElements(model_, batch) > 0) {
    ASSIGN_OR_RETURN(void* dyb, alloc(Bf16GradElements(model_, batch) * sizeof(Bf16)));
    ws->dyb = static_cast<Bf16*>(dyb);
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    float* prev = l.src < 0 ? ws->input.as() : ws->out[l.src];
    const size_t n_out = b * l.out.size();
    if (NeedsTwin(model_, static_cast<int>(i))) {
      ASSIGN_OR_RETURN(void* twin, alloc(n_out * sizeof(Bf16)));
      ws->twin[i] = static_cast<Bf16*>(twin);
    }
    if (InPlace(model_, i, train)) {
      ws->out[i] = prev;
      continue;
    }
    ASSIGN_OR_RETURN(void* out, alloc(n_out * sizeof(float)));
    ws->out[i] = static_cast<float*>(out);
    if (l.kind == LayerKind::kConv) {
      const ConvGeometry g = Geometry(l, batch);
      const size_t bytes =
          l.bf16() ? backend_->ConvScratchBytesBf16(g) : backend_->ConvScratchBytes(g);
      if (bytes > 0) {
        ASSIGN_OR_RETURN(ws->scratch[i], alloc(bytes));
      }
    }
    if (const uint64_t n = Bf16Elements(model_, static_cast<int>(i), batch, train); n > 0) {
      ASSIGN_OR_RETURN(void* xb, alloc(n * sizeof(Bf16)));
      ws->xb[i] = static_cast<Bf16*>(xb);
    }
    if (l.kind == LayerKind::kDropout) {
      ASSIGN_OR_RETURN(void* m, alloc(n_out));
      ws->mask[i] = static_cast<uint8_t*>(m);
    }
    if (l.kind == LayerKind::kAttention) {
      ASSIGN_OR_RETURN(ws->scratch[i], alloc(AttentionFloats(l, batch, train) * sizeof(float)));
      ASSIGN_OR_RETURN(void* m, alloc(size_t(l.in.w) * l.in.w));
      ws->mask[i] = static_cast<uint8_t*>(m);
      // The backend prepares its fused attention for this shape now, outside any capture.
      if (l.bf16()) backend_->FusedAttentionTakes({batch, l.in.w, l.heads, l.head_dim, l.causal});
    }
    if (l.kind == LayerKind::kLayerNorm) {
      ASSIGN_OR_RETURN(void* st, alloc(2 * b * NormRows(l) * sizeof(float)));
      ws->stats[i] = static_cast<float*>(st);
    }
    if (l.kind == LayerKind::kBatchNorm && train) {
      ASSIGN_OR_RETURN(void* bn, alloc(BatchNormBuffer(l) * sizeof(float)));
      ws->bn[i] = static_cast<float*>(bn);
    }
    if (train && NeedsDin(model_, ws->needs_grad, i)) {
      ASSIGN_OR_RETURN(void* d, alloc(b * l.in.size() * sizeof(float)));
      ws->din[i] = static_cast<float*>(d);
    }
  }
  ws->host_loss.resize(p);
  ws->host_correct.resize(p);
  return ws;
}

}  // namespace lockstep
