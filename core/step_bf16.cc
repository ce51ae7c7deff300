// StepExecutor's bfloat16 layers: Flax's modules with dtype=jnp.bfloat16 and
// param_dtype=jnp.float32 (docs/models.md#mixed-precision). Forward, every activation a
// bfloat16 layer stores is rounded where XLA rounds it (each jnp op's result): a dense or
// conv is a bfloat16 matmul of bf16(x) and bf16(kernel) summed in float32 and rounded,
// then its bias added in bfloat16 (rounded again); activations, avg_pool, dropout and the
// attention softmax run their ops' roundings (math::ActivateBf16 ...); norms, embeddings
// and residual sums compute in float32 and round once (ForwardLayer). Backward, the
// gradients stay float32 between layers (JAX rounds each to bfloat16: these are at least
// as precise) and are rounded to bfloat16 only where a matmul or convolution reads them;
// the params' gradients come out float32, for the float32 optimizer.
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/step.h"
#include "core/step_workspace.h"

namespace lockstep {

using step_internal::DenseInputs;
using step_internal::DenseRows;
using step_internal::Geometry;
using step_internal::IsActiveDropout;

absl::Status StepExecutor::RefreshBf16Params() {
  if (params_bf16_.bytes() == 0) return absl::OkStatus();
  return backend_->ToBf16(model_.layout().total(), params_.as(), params_bf16_.as<Bf16>());
}

const Bf16* StepExecutor::Bf16Param(int index) const {
  return index < 0 ? nullptr : params_bf16_.as<Bf16>() + model_.layout().entries()[index].offset;
}

const Bf16* StepExecutor::Bf16InputOf(const Workspace& ws, size_t i) const {
  const int src = model_.layers()[i].src;
  return src >= 0 && ws.twin[src] != nullptr ? ws.twin[src] : ws.xb[i];
}

absl::StatusOr<const Bf16*> StepExecutor::Bf16Input(Workspace& ws, size_t i, int b) {
  const Layer& l = model_.layers()[i];
  if (l.src < 0 || ws.twin[l.src] == nullptr) {
    RETURN_IF_ERROR(backend_->ToBf16(static_cast<size_t>(b) * l.in.size(), Input(ws, l), ws.xb[i]));
  }
  return Bf16InputOf(ws, i);
}

bool StepExecutor::HasBf16Kernels(const Layer& l) const {
  switch (l.kind) {
    case LayerKind::kConv:
    case LayerKind::kDense:
    case LayerKind::kAttention:
    case LayerKind::kActivation:
    case LayerKind::kPositionEmbed:
    case LayerKind::kDropout:
      return l.bf16();
    case LayerKind::kAvgPool:  // its sums are bfloat16 whenever its input is
      return model_.DtypeOf(l.src) == DType::kBfloat16;
    default:
      return false;
  }
}

absl::Status StepExecutor::ForwardLayerBf16(Workspace& ws, size_t i, int b, bool train,
                                            const rng::Key* keys) {
  const Layer& l = model_.layers()[i];
  const auto& entries = model_.layout().entries();
  auto param = [&](int index) {
    return index < 0 ? nullptr : params_.as() + entries[index].offset;
  };
  const float* x = Input(ws, l);
  float* y = ws.out[i];
  const size_t n = static_cast<size_t>(b) * l.out.size();
  switch (l.kind) {
    case LayerKind::kConv: {
      ASSIGN_OR_RETURN(const Bf16* x16, Bf16Input(ws, i, b));
      RETURN_IF_ERROR(
          backend_->ConvForwardBf16(Geometry(l, b), x16, Bf16Param(l.kernel), y, ws.scratch[i]));
      if (unrounded_[i]) return absl::OkStatus();  // the BatchNorm after it rounds them
      return backend_->AddRowsBf16(b * l.out.h * l.out.w, l.out.c, y, param(l.bias), y, ws.twin[i]);
    }
    case LayerKind::kDense: {
      const int rows = b * DenseRows(l), in = DenseInputs(l);
      ASSIGN_OR_RETURN(const Bf16* x16, Bf16Input(ws, i, b));
      RETURN_IF_ERROR(backend_->GemmBf16(false, false, rows, l.out.c, in, 1.0f, x16,
                                         Bf16Param(l.kernel), 0.0f, y));
      return backend_->AddRowsBf16(rows, l.out.c, y, param(l.bias), y, ws.twin[i]);
    }
    case LayerKind::kAttention:
      return AttentionForwardBf16(
          ws, i, b, train, x, dropout_slot_[i] >= 0 && train ? keys + dropout_slot_[i] : nullptr);
    case LayerKind::kActivation:
      return backend_->ActivateBf16(l.activation, n, x, y, ws.twin[i]);
    case LayerKind::kPositionEmbed:  // x + bf16(table rows), rounded
      return backend_->AddRowsBf16(b, static_cast<int>(l.out.size()), x, param(l.kernel), y,
                                   ws.twin[i]);
    case LayerKind::kAvgPool:
      return backend_->AvgPoolBf16(Geometry(l, b), l.count_include_pad, x, y);
    case LayerKind::kDropout: {
      if (!IsActiveDropout(l, train)) {  // in place; its twin x's bits (x holds bfloat16 values)
        return ws.twin[i] == nullptr ? absl::OkStatus() : backend_->ToBf16(n, x, ws.twin[i]);
      }
      // The mask as float32 dropout draws it (bernoulli(keep)); then x / bf16(keep) in
      // bfloat16 where kept (Flax's inputs / keep_prob, keep_prob taking x's dtype).
      return backend_->DropoutBf16(b, static_cast<int>(l.out.size()), l.keep,
                                   keys + dropout_slot_[i], impl_, x, y, ws.mask[i], ws.twin[i]);
    }
    default:
      return absl::InternalError(absl::StrCat("layer ", i, ": no bfloat16 kernel of its own"));
  }
}

absl::Status StepExecutor::DenseBackwardBf16(Workspace& ws, int i, int b, const float* dy,
                                             float* dx, float* grads,
                                             const std::function<void(int)>& grads_ready) {
  const Layer& l = model_.layers()[i];
  const auto& entries = model_.layout().entries();
  const int in = DenseInputs(l), rows = b * DenseRows(l);
  RETURN_IF_ERROR(backend_->BiasGradBf16(
      rows, l.out.c, dy, l.bias >= 0 ? grads + entries[l.bias].offset : nullptr, ws.dyb));
  RETURN_IF_ERROR(backend_->GemmBf16(true, false, in, l.out.c, rows, 1.0f, Bf16InputOf(ws, i),
                                     ws.dyb, 0.0f, grads + entries[l.kernel].offset));
  if (grads_ready) grads_ready(i);
  if (dx == nullptr) return absl::OkStatus();
  return backend_->GemmBf16(false, true, rows, in, l.out.c, 1.0f, ws.dyb, Bf16Param(l.kernel), 0.0f,
                            dx);
}

absl::Status StepExecutor::ConvBackwardBf16(Workspace& ws, int i, int b, const float* dy, float* dx,
                                            float* grads,
                                            const std::function<void(int)>& grads_ready) {
  const Layer& l = model_.layers()[i];
  const auto& entries = model_.layout().entries();
  const ConvGeometry g = Geometry(l, b);
  const int rows = b * l.out.h * l.out.w;
  float* db = l.bias >= 0 ? grads + entries[l.bias].offset : nullptr;
  if (!unrounded_[i]) {
    RETURN_IF_ERROR(backend_->BiasGradBf16(rows, l.out.c, dy, db, ws.dyb));
  } else if (db != nullptr) {  // the BatchNorm after it wrote dyb (BatchNormBackward)
    RETURN_IF_ERROR(backend_->BiasGrad(rows, l.out.c, dy, db));
  }
  // The kernel's gradient first: ConvBackwardDataBf16 may overwrite the scratch.
  RETURN_IF_ERROR(backend_->ConvBackwardWeightsBf16(
      g, Bf16InputOf(ws, i), ws.dyb, grads + entries[l.kernel].offset, ws.scratch[i]));
  if (grads_ready) grads_ready(i);
  if (dx == nullptr) return absl::OkStatus();
  return backend_->ConvBackwardDataBf16(g, Bf16Param(l.kernel), ws.dyb, dx, ws.scratch[i]);
}

}  // namespace lockstep
