// StepExecutor's multi-head self-attention layer, as Flax's
// nn.MultiHeadDotProductAttention computes it on x [b, T, F]:
//   q, k, v = DenseGeneral(x) [b, T, H, D] each; q = q / sqrt(D) (float32 sqrt, a division)
//   w = softmax(where(causal mask, q . k over D, finfo.min)) [b, H, T, T]
//   w = w * (keep_mask [T, T] / keep)  (1 / keep in float32, for a kept element)  (training with
//   dropout_rate > 0: one mask shared by
//       the batch and heads, broadcast_dropout)
//   o = w . v [b, T, H, D];  y = DenseGeneral(o over (H, D)) [b, T, F_out]
// and its backward pass, the same products transposed. The heads' products are strided
// GEMMs over q, k, v and o as the dense layers leave them ([b, T, H, D]: head h of sample
// s starts at s * T * H * D + h * D, rows H * D apart), one call per sample.
#include <cmath>

#include "core/status_macros.h"
#include "core/step.h"
#include "core/step_workspace.h"

namespace lockstep {
using step_internal::AttentionBuffers;
using step_internal::AttentionBuffersAt;

absl::Status StepExecutor::AttentionForward(Workspace& ws, size_t i, int b, bool train,
                                            const float* x, const rng::Key* key) {
  const Layer& l = model_.layers()[i];
  const auto& entries = model_.layout().entries();
  auto param = [&](int index) {
    return index < 0 ? nullptr : params_.as() + entries[index].offset;
  };
  const int t = l.in.w, h = l.heads, d = l.head_dim, hd = h * d, rows = b * t;
  const AttentionBuffers a = AttentionBuffersAt(l, b, ws.train, ws.scratch[i]);
  float* qkv[3] = {a.q, a.k, a.v};
  for (int j = 0; j < 3; ++j) {
    RETURN_IF_ERROR(backend_->DenseForward(rows, hd, l.in.c, x, param(l.kernels[j]),
                                           param(l.biases[j]), false, qkv[j]));
  }
  RETURN_IF_ERROR(backend_->Divide(size_t(rows) * hd, std::sqrt(static_cast<float>(d)), a.q));
  const int64_t sample = int64_t{t} * hd, tt = int64_t{t} * t;
  for (int s = 0; s < b; ++s) {  // w[s, h] = q[s, :, h] k[s, :, h]^T
    RETURN_IF_ERROR(backend_->GemmStrided(false, true, t, t, d, 1.0f, a.q + s * sample, hd, d,
                                          a.k + s * sample, hd, d, 0.0f, a.w + s * h * tt, t, tt,
                                          h));
  }
  RETURN_IF_ERROR(backend_->AttentionSoftmax(b * h * t, t, l.causal, a.w));
  if (key != nullptr) {  // draws the [T, T] mask (the dropped buffer's values are discarded)
    RETURN_IF_ERROR(
        backend_->Dropout(size_t(tt), l.keep, key, impl_, a.dropped, a.dropped, ws.mask[i]));
    RETURN_IF_ERROR(backend_->MaskedScale(b * h, static_cast<int>(tt), ws.mask[i], 1.0f / l.keep,
                                          a.w, a.dropped));
  }
  const float* w = train ? a.dropped : a.w;
  for (int s = 0; s < b; ++s) {  // o[s, :, h] = w[s, h] v[s, :, h]
    RETURN_IF_ERROR(backend_->GemmStrided(false, false, t, d, t, 1.0f, w + s * h * tt, t, tt,
                                          a.v + s * sample, hd, d, 0.0f, a.o + s * sample, hd, d,
                                          h));
  }
  float* y = ws.out[i];
  return backend_->DenseForward(rows, l.out.c, hd, a.o, param(l.kernels[3]), param(l.biases[3]),
                                false, y);
}

absl::Status StepExecutor::AttentionBackward(Workspace& ws, size_t i, int b, const float* x,
                                             const float* dy, float* grads, float* dx) {
  const Layer& l = model_.layers()[i];
  const auto& entries = model_.layout().entries();
  auto param = [&](int index) {
    return index < 0 ? nullptr : params_.as() + entries[index].offset;
  };
  auto grad = [&](int index) { return index < 0 ? nullptr : grads + entries[index].offset; };
  const int t = l.in.w, h = l.heads, d = l.head_dim, hd = h * d, rows = b * t;
  const AttentionBuffers a = AttentionBuffersAt(l, b, true, ws.scratch[i]);
  const int64_t sample = int64_t{t} * hd, tt = int64_t{t} * t;
  // out: y = o Wo + bo.
  RETURN_IF_ERROR(
      backend_->Gemm(true, false, hd, l.out.c, rows, 1.0f, a.o, dy, 0.0f, grad(l.kernels[3])));
  if (l.biases[3] >= 0) RETURN_IF_ERROR(backend_->BiasGrad(rows, l.out.c, dy, grad(l.biases[3])));
  RETURN_IF_ERROR(
      backend_->Gemm(false, true, rows, hd, l.out.c, 1.0f, dy, param(l.kernels[3]), 0.0f, a.do_));
  // o = w v: dw = do v^T, dv = w^T do (w after dropout).
  for (int s = 0; s < b; ++s) {
    RETURN_IF_ERROR(backend_->GemmStrided(false, true, t, t, d, 1.0f, a.do_ + s * sample, hd, d,
                                          a.v + s * sample, hd, d, 0.0f, a.dw + s * h * tt, t, tt,
                                          h));
    RETURN_IF_ERROR(backend_->GemmStrided(true, false, t, d, t, 1.0f, a.dropped + s * h * tt, t, tt,
                                          a.do_ + s * sample, hd, d, 0.0f, a.dv + s * sample, hd, d,
                                          h));
  }
  if (a.dropped != a.w) {
    RETURN_IF_ERROR(
        backend_->MaskedScale(b * h, static_cast<int>(tt), ws.mask[i], 1.0f / l.keep, a.dw, a.dw));
  }
  RETURN_IF_ERROR(backend_->SoftmaxBackward(b * h * t, t, a.w, a.dw));
  // w = q k^T (q scaled): dq = dw k, dk = dw^T q.
  for (int s = 0; s < b; ++s) {
    RETURN_IF_ERROR(backend_->GemmStrided(false, false, t, d, t, 1.0f, a.dw + s * h * tt, t, tt,
                                          a.k + s * sample, hd, d, 0.0f, a.dq + s * sample, hd, d,
                                          h));
    RETURN_IF_ERROR(backend_->GemmStrided(true, false, t, d, t, 1.0f, a.dw + s * h * tt, t, tt,
                                          a.q + s * sample, hd, d, 0.0f, a.dk + s * sample, hd, d,
                                          h));
  }
  RETURN_IF_ERROR(backend_->Divide(size_t(rows) * hd, std::sqrt(static_cast<float>(d)), a.dq));
  const float* dqkv[3] = {a.dq, a.dk, a.dv};
  for (int j = 0; j < 3; ++j) {
    RETURN_IF_ERROR(
        backend_->Gemm(true, false, l.in.c, hd, rows, 1.0f, x, dqkv[j], 0.0f, grad(l.kernels[j])));
    if (l.biases[j] >= 0) RETURN_IF_ERROR(backend_->BiasGrad(rows, hd, dqkv[j], grad(l.biases[j])));
  }
  if (dx == nullptr) return absl::OkStatus();
  for (int j = 0; j < 3; ++j) {
    RETURN_IF_ERROR(backend_->Gemm(false, true, rows, l.in.c, hd, 1.0f, dqkv[j],
                                   param(l.kernels[j]), j == 0 ? 0.0f : 1.0f, dx));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
