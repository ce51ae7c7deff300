// StepExecutor's multi-head self-attention in bfloat16: Flax's
// nn.MultiHeadDotProductAttention(dtype=jnp.bfloat16) on x [b, T, F], rounded where XLA
// rounds it (docs/models.md#mixed-precision):
//   q, k, v = bf16(bf16(bf16(x) . bf16(W)) + bf16(b))            (DenseGeneral, each)
//   q = bf16(q / bf16(sqrt(D)))                                  (jnp.sqrt(depth).astype)
//   w = softmax_bf16(bf16(q . k over D), causal mask)            (math::SoftmaxRowBf16)
//   w = bf16(w * bf16(1 / bf16(keep)))  where kept               (training with dropout)
//   o = bf16(w . v);  y = bf16(bf16(o . Wo) + bf16(bo))
// Backward, the same products transposed on bfloat16 operands; the gradients between them
// float32 (step_bf16.cc); a causal layer's products leave out what its mask makes zero
// (core/causal_heads.h: the same sums). Where no dropout is active and the backend takes
// the shape (FusedAttentionTakes: cuDNN's SDPA on CUDA), the core from the rounded q, k, v to o is
// the backend's fused attention instead (its softmax in float32: within bfloat16 rounding
// of the sequence above), forward and backward. The products run on bfloat16 copies of q, k, v, o
// and w, in the layer's bfloat16 workspace (AttentionBf16Elements: x, q, k, v, o, w; then dy, do,
// dw and one of dq, dk, dv), laid out as the float32 ones (AttentionBuffers).
#include <cmath>

#include "core/causal_heads.h"
#include "core/status_macros.h"
#include "core/step.h"
#include "core/step_workspace.h"

namespace lockstep {
namespace {

using step_internal::AttentionBuffers;
using step_internal::AttentionBuffersAt;

struct AttentionBf16 {
  Bf16 *x, *q, *k, *v, *o, *w;  // forward
  Bf16 *dy, *do_, *dw, *dqkv;   // training
};

AttentionBf16 Bf16BuffersAt(const Layer& l, int b, bool train, Bf16* p) {
  const int64_t rows = int64_t{b} * l.in.w, act = rows * l.heads * l.head_dim;
  const int64_t weights = int64_t{b} * l.heads * l.in.w * l.in.w;
  AttentionBf16 a{};
  a.x = p, p += rows * l.in.c;
  a.q = p, a.k = p + act, a.v = p + 2 * act, a.o = p + 3 * act, p += 4 * act;
  a.w = p, p += weights;
  if (train) {
    a.dy = p, p += rows * l.out.c;
    a.do_ = p, p += act;
    a.dw = p, p += weights;
    a.dqkv = p;
  }
  return a;
}

// Operands of GemmHeadsBf16: a per-head activation ([b, T, heads * D]: q k v o and their
// gradients, sample i, head j at p + i * T * heads * D + j * D), and the attention weights
// ([b, heads, T, T]) and their gradients.
template <typename T>
Backend::HeadsOperand<T> HeadsOf(T* p, const Layer& l) {
  const int hd = l.heads * l.head_dim;
  return {p, hd, int64_t{l.in.w} * hd, l.head_dim};
}
template <typename T>
Backend::HeadsOperand<T> WeightsOf(T* p, const Layer& l) {
  const int64_t tt = int64_t{l.in.w} * l.in.w;
  return {p, l.in.w, l.heads * tt, tt};
}
auto Heads(const Bf16* p, const Layer& l) { return HeadsOf(p, l); }
auto Heads(float* p, const Layer& l) { return HeadsOf(p, l); }
auto Weights(const Bf16* p, const Layer& l) { return WeightsOf(p, l); }
auto Weights(float* p, const Layer& l) { return WeightsOf(p, l); }

// What layer l's product leaves out (CausalGemmHeadsBf16): `z` where l is causal.
CausalZeros Zeros(const Layer& l, CausalZeros z) { return l.causal ? z : CausalZeros::kNone; }

// What q is divided by: jnp.sqrt(depth) (float32) cast to bfloat16.
float ScaleBf16(const Layer& l) { return RoundBf16(std::sqrt(static_cast<float>(l.head_dim))); }

// Whether layer l's core at batch b runs as the backend's fused attention: no dropout
// active (training with dropout keeps the batched GEMMs and their mask) and a shape the
// backend takes. Its softmax statistics go where the weights would (AttentionBuffers' w).
bool Fused(Backend& backend, const Layer& l, int b, bool train) {
  return !(train && l.keep < 1.0f) &&
         backend.FusedAttentionTakes({b, l.in.w, l.heads, l.head_dim, l.causal});
}

}  // namespace

absl::Status StepExecutor::AttentionForwardBf16(Workspace& ws, size_t i, int b, bool train,
                                                const float* x, const rng::Key* key) {
  const Layer& l = model_.layers()[i];
  const auto& entries = model_.layout().entries();
  auto param = [&](int index) {
    return index < 0 ? nullptr : params_.as() + entries[index].offset;
  };
  const int t = l.in.w, h = l.heads, d = l.head_dim, hd = h * d, rows = b * t;
  const size_t act = size_t(rows) * hd;
  const AttentionBuffers a = AttentionBuffersAt(l, b, ws.train, ws.scratch[i]);
  const AttentionBf16 h16 = Bf16BuffersAt(l, b, ws.train, ws.xb[i]);
  ASSIGN_OR_RETURN(const Bf16* x16, Bf16Input(ws, i, b));  // x's twin, or h16.x
  float* qkv[3] = {a.q, a.k, a.v};
  Bf16* qkv16[3] = {h16.q, h16.k, h16.v};
  for (int j = 0; j < 3; ++j) {  // q rounded, then scaled and rounded again
    RETURN_IF_ERROR(backend_->GemmBf16(false, false, rows, hd, l.in.c, 1.0f, x16,
                                       Bf16Param(l.kernels[j]), 0.0f, qkv[j]));
    RETURN_IF_ERROR(backend_->AddRowsBf16(rows, hd, qkv[j], param(l.biases[j]), qkv[j],
                                          j == 0 ? nullptr : qkv16[j]));
  }
  RETURN_IF_ERROR(backend_->DivideBf16(act, ScaleBf16(l), a.q, h16.q));
  float* y = ws.out[i];
  if (Fused(*backend_, l, b, train)) {
    RETURN_IF_ERROR(
        backend_->FusedAttentionBf16({b, t, h, d, l.causal}, h16.q, h16.k, h16.v, h16.o, a.w));
    RETURN_IF_ERROR(backend_->GemmBf16(false, false, rows, l.out.c, hd, 1.0f, h16.o,
                                       Bf16Param(l.kernels[3]), 0.0f, y));
    return backend_->AddRowsBf16(rows, l.out.c, y, param(l.biases[3]), y, ws.twin[i]);
  }
  const int64_t tt = int64_t{t} * t;
  // w[s, j] = q[s, :, j] k[s, :, j]^T, every sample s and head j
  RETURN_IF_ERROR(CausalGemmHeadsBf16(*backend_, Zeros(l, CausalZeros::kScores), false, true, t, t,
                                      d, Heads(h16.q, l), Heads(h16.k, l), Weights(a.w, l), b, h));
  RETURN_IF_ERROR(backend_->AttentionSoftmaxBf16(b * h * t, t, l.causal, a.w));
  if (key != nullptr) {  // draws the [T, T] mask (the dropped buffer's values are discarded)
    RETURN_IF_ERROR(
        backend_->Dropout(size_t(tt), l.keep, key, impl_, a.dropped, a.dropped, ws.mask[i]));
    const float scale = RoundBf16(1.0f / RoundBf16(l.keep));
    RETURN_IF_ERROR(backend_->MaskedScaleBf16(b * h, static_cast<int>(tt), ws.mask[i], scale, a.w,
                                              a.dropped, h16.w));
  } else {  // no dropout: the weights themselves (a.dropped is a.w)
    RETURN_IF_ERROR(backend_->ToBf16(size_t(b) * h * tt, a.w, h16.w));
  }
  // o[s, :, j] = w[s, j] v[s, :, j]
  RETURN_IF_ERROR(CausalGemmHeadsBf16(*backend_, Zeros(l, CausalZeros::kA), false, false, t, d, t,
                                      Weights(h16.w, l), Heads(h16.v, l), Heads(a.o, l), b, h));
  RETURN_IF_ERROR(backend_->ToBf16(act, a.o, h16.o));  // (the float32 o is not read again)
  RETURN_IF_ERROR(backend_->GemmBf16(false, false, rows, l.out.c, hd, 1.0f, h16.o,
                                     Bf16Param(l.kernels[3]), 0.0f, y));
  return backend_->AddRowsBf16(rows, l.out.c, y, param(l.biases[3]), y, ws.twin[i]);
}

absl::Status StepExecutor::AttentionBackwardBf16(Workspace& ws, size_t i, int b, const float* dy,
                                                 float* grads, float* dx) {
  const Layer& l = model_.layers()[i];
  const auto& entries = model_.layout().entries();
  auto grad = [&](int index) { return index < 0 ? nullptr : grads + entries[index].offset; };
  const int t = l.in.w, h = l.heads, d = l.head_dim, hd = h * d, rows = b * t;
  const size_t act = size_t(rows) * hd;
  const AttentionBuffers a = AttentionBuffersAt(l, b, true, ws.scratch[i]);
  const AttentionBf16 h16 = Bf16BuffersAt(l, b, true, ws.xb[i]);
  // out: y = o Wo + bo.
  RETURN_IF_ERROR(backend_->BiasGradBf16(rows, l.out.c, dy, grad(l.biases[3]), h16.dy));
  RETURN_IF_ERROR(backend_->GemmBf16(true, false, hd, l.out.c, rows, 1.0f, h16.o, h16.dy, 0.0f,
                                     grad(l.kernels[3])));
  RETURN_IF_ERROR(backend_->GemmBf16(false, true, rows, hd, l.out.c, 1.0f, h16.dy,
                                     Bf16Param(l.kernels[3]), 0.0f, a.do_));
  RETURN_IF_ERROR(backend_->ToBf16(act, a.do_, h16.do_));
  const float* dqkv[3] = {a.dq, a.dk, a.dv};
  if (Fused(*backend_, l, b, true)) {
    // dq, dk, dv as bfloat16 in the float32 o's buffer (unused here) and the one dq, dk or
    // dv slot; dq divided by the scale in float32, then rounded again.
    Bf16* dq16 = reinterpret_cast<Bf16*>(a.o);
    Bf16* dqkv16[3] = {dq16, dq16 + act, h16.dqkv};
    RETURN_IF_ERROR(backend_->FusedAttentionBackwardBf16({b, t, h, d, l.causal}, h16.q, h16.k,
                                                         h16.v, h16.o, h16.do_, a.w, dqkv16[0],
                                                         dqkv16[1], dqkv16[2], a.dq, a.dk, a.dv));
    RETURN_IF_ERROR(backend_->Divide(act, ScaleBf16(l), a.dq));
    RETURN_IF_ERROR(backend_->ToBf16(act, a.dq, dqkv16[0]));
    for (int j = 0; j < 3; ++j) {
      RETURN_IF_ERROR(QkvBackwardBf16(ws, i, b, dqkv[j], false, dqkv16[j], j, grads, dx));
    }
    return absl::OkStatus();
  }
  // o = w v: dw = do v^T (all of it: the softmax's gradient reads every entry), dv = w^T do
  // (w after dropout).
  RETURN_IF_ERROR(backend_->GemmHeadsBf16(false, true, t, t, d, 1.0f, Heads(h16.do_, l),
                                          Heads(h16.v, l), 0.0f, Weights(a.dw, l), b, h));
  RETURN_IF_ERROR(CausalGemmHeadsBf16(*backend_, Zeros(l, CausalZeros::kAt), true, false, t, d, t,
                                      Weights(h16.w, l), Heads(h16.do_, l), Heads(a.dv, l), b, h));
  const bool dropout = a.dropped != a.w;
  RETURN_IF_ERROR(backend_->SoftmaxBackwardBf16(b * h * t, t, l.causal, a.w,
                                                dropout ? ws.mask[i] : nullptr,
                                                RoundBf16(1.0f / RoundBf16(l.keep)), a.dw, h16.dw));
  // w = q k^T (q scaled): dq = dw k, dk = dw^T q.
  RETURN_IF_ERROR(CausalGemmHeadsBf16(*backend_, Zeros(l, CausalZeros::kA), false, false, t, d, t,
                                      Weights(h16.dw, l), Heads(h16.k, l), Heads(a.dq, l), b, h));
  RETURN_IF_ERROR(CausalGemmHeadsBf16(*backend_, Zeros(l, CausalZeros::kAt), true, false, t, d, t,
                                      Weights(h16.dw, l), Heads(h16.q, l), Heads(a.dk, l), b, h));
  RETURN_IF_ERROR(backend_->Divide(act, ScaleBf16(l), a.dq));
  for (int j = 0; j < 3; ++j) {  // one of dq, dk, dv as bfloat16 at a time
    RETURN_IF_ERROR(QkvBackwardBf16(ws, i, b, dqkv[j], true, h16.dqkv, j, grads, dx));
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::QkvBackwardBf16(Workspace& ws, size_t i, int b, const float* dz,
                                           bool round, Bf16* dz16, int j, float* grads, float* dx) {
  const Layer& l = model_.layers()[i];
  const auto& entries = model_.layout().entries();
  auto grad = [&](int index) { return index < 0 ? nullptr : grads + entries[index].offset; };
  const int hd = l.heads * l.head_dim, rows = b * l.in.w;
  if (round) {
    RETURN_IF_ERROR(backend_->BiasGradBf16(rows, hd, dz, grad(l.biases[j]), dz16));
  } else if (l.biases[j] >= 0) {
    RETURN_IF_ERROR(backend_->BiasGrad(rows, hd, dz, grad(l.biases[j])));
  }
  RETURN_IF_ERROR(backend_->GemmBf16(true, false, l.in.c, hd, rows, 1.0f, Bf16InputOf(ws, i), dz16,
                                     0.0f, grad(l.kernels[j])));
  if (dx == nullptr) return absl::OkStatus();
  return backend_->GemmBf16(false, true, rows, l.in.c, hd, 1.0f, dz16, Bf16Param(l.kernels[j]),
                            j == 0 ? 0.0f : 1.0f, dx);
}

}  // namespace lockstep
