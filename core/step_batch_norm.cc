// StepExecutor's BatchNorm layers: Flax's nn.BatchNorm(axis_name='batch') under pmap.
// Each replica sums its own rows per channel; the statistics, and in the backward pass
// the per-channel sums the gradient of their pmean needs, are all-reduced across the
// replicas (one small synchronous collective each, N > 1), so every replica normalizes
// with the same statistics and keeps the same running averages.
#include "core/status_macros.h"
#include "core/step.h"
#include "core/step_workspace.h"

namespace lockstep {

absl::Status StepExecutor::BatchNormForward(Workspace& ws, size_t i, int rows, bool train) {
  const Layer& l = model_.layers()[i];
  const int c = l.in.c;
  const float* x = Input(ws, l);
  if (!train) {  // use_running_average: the batch_stats
    const auto& stats = model_.stats_layout().entries();
    return BatchNormApply(ws, i, rows, x, stats_.as() + stats[l.mean].offset,
                          stats_.as() + stats[l.var].offset);
  }
  float* bn = ws.bn[i];
  float* moments = bn;  // [E[x], E[x^2]], then pmean'd
  float* var = bn + 2 * c;
  RETURN_IF_ERROR(BatchNormMomentsOf(l, rows, x, bn));
  if (replicas() > 1) {
    // lax.pmean of the stacked [mean, mean2]: the sum, then a division by N.
    RETURN_IF_ERROR(collective_->AllReduceSum(moments, 2 * c, collective_options_));
    RETURN_IF_ERROR(backend_->Divide(2 * c, static_cast<float>(replicas()), moments));
  }
  RETURN_IF_ERROR(backend_->BatchNormVariance(c, moments, var));
  return BatchNormApply(ws, i, rows, x, moments, var);
}

absl::Status StepExecutor::BatchNormApply(Workspace& ws, size_t i, int rows, const float* x,
                                          const float* mean, const float* var) {
  const Layer& l = model_.layers()[i];
  const auto& entries = model_.layout().entries();
  auto param = [&](int index) {
    return index < 0 ? nullptr : params_.as() + entries[index].offset;
  };
  if (!l.bf16()) {
    return backend_->BatchNormApply(rows, l.in.c, l.epsilon, x, mean, var, param(l.scale),
                                    param(l.bias), ws.out[i]);
  }
  const bool relu = step_internal::FusedReluBf16(model_, static_cast<int>(i));
  return backend_->BatchNormApplyBf16(rows, l.in.c, l.epsilon, x, mean, var, param(l.scale),
                                      param(l.bias), relu, ws.out[i], ws.twin[relu ? i + 1 : i]);
}

absl::Status StepExecutor::BatchNormBackward(const Layer& l, int rows, const float* x,
                                             const float* dy, float* dx, Bf16* dyb, float* bn) {
  RETURN_IF_ERROR(BatchNormReduceOf(l, rows, x, dy, bn, grads_.as()));
  if (dx == nullptr) return absl::OkStatus();
  if (replicas() > 1) {
    // The transpose of the statistics' pmean: every replica's cotangents, summed.
    RETURN_IF_ERROR(collective_->AllReduceSum(bn + 3 * l.in.c, 2 * l.in.c, collective_options_));
  }
  return BatchNormApplyGradOf(l, rows, replicas(), x, dy, bn, dx, dyb);
}

absl::Status StepExecutor::BatchNormMomentsOf(const Layer& l, int rows, const float* x, float* bn) {
  const int c = l.in.c;
  if (l.src >= 0 && unrounded_[l.src])
    return backend_->BatchNormMomentsBf16(rows, c, x, bn + 5 * c, bn);
  return backend_->BatchNormMoments(rows, c, x, bn + 5 * c, bn);
}

absl::Status StepExecutor::BatchNormReduceOf(const Layer& l, int rows, const float* x,
                                             const float* dy, float* bn, float* grads) {
  const int c = l.in.c;
  const auto& entries = model_.layout().entries();
  auto grad = [&](int index) { return index < 0 ? nullptr : grads + entries[index].offset; };
  // bn: moments (2c), var (c), sums (2c), partials.
  if (l.src >= 0 && unrounded_[l.src]) {
    return backend_->BatchNormBackwardReduceBf16(rows, c, l.epsilon, x, dy, bn, bn + 2 * c,
                                                 bn + 5 * c, bn + 3 * c, grad(l.scale),
                                                 grad(l.bias));
  }
  return backend_->BatchNormBackwardReduce(rows, c, l.epsilon, x, dy, bn, bn + 2 * c, bn + 5 * c,
                                           bn + 3 * c, grad(l.scale), grad(l.bias));
}

absl::Status StepExecutor::BatchNormApplyGradOf(const Layer& l, int rows, int replicas,
                                                const float* x, const float* dy, const float* bn,
                                                float* dx, Bf16* dyb) {
  const int c = l.in.c;
  const float* scale =
      l.scale < 0 ? nullptr : params_.as() + model_.layout().entries()[l.scale].offset;
  if (l.src >= 0 && unrounded_[l.src]) {
    return backend_->BatchNormBackwardApplyBf16(rows, c, l.epsilon, replicas, x, dy, bn, bn + 2 * c,
                                                scale, bn + 3 * c, dyb);
  }
  return backend_->BatchNormBackwardApply(rows, c, l.epsilon, replicas, x, dy, bn, bn + 2 * c,
                                          scale, bn + 3 * c, dx);
}

absl::Status StepExecutor::UpdateBatchStats(const std::vector<float*>& bn) {
  const auto& stats = model_.stats_layout().entries();
  for (size_t i = 0; i < model_.layers().size(); ++i) {
    const Layer& l = model_.layers()[i];
    if (l.kind != LayerKind::kBatchNorm) continue;
    const float* moments = bn[i];
    RETURN_IF_ERROR(backend_->BatchNormUpdateStats(
        l.in.c, l.momentum, l.one_minus_momentum, moments, moments + 2 * l.in.c,
        stats_.as() + stats[l.mean].offset, stats_.as() + stats[l.var].offset));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
