// StepExecutor's internals shared by core/step*.cc (not a public header): the buffers
// for one batch size (Workspace) and the layer shapes that plan them.
#ifndef LOCKSTEP_CORE_STEP_WORKSPACE_H_
#define LOCKSTEP_CORE_STEP_WORKSPACE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/model.h"
#include "core/step.h"

namespace lockstep {

// Buffers for one batch size. out[i] is layer i's output; relu and flatten write in
// place (out[i] is their input's buffer), as does an inactive dropout, but a relu whose
// input another layer reads too (a residual connection's) has a buffer of its own. din[i]
// is the gradient with respect to layer i's input, for the layers whose backward produces
// one in a buffer of its own (activations and the position embedding work on dy in place;
// an add's din is the copy of dy its residual operand takes). dy[i], during backward: the
// gradient with respect to out[i] once every reader of it has delivered
// (StepExecutor::Deliver); needs_grad[i]: whether backward needs that gradient (a layer
// with params at or before i). scratch[i]: a conv's ConvScratchBytes (null when it needs
// none), an attention layer's AttentionFloats; stats[i]: a layer norm's per-row mean, then
// rstd; bn[i]: a batch norm's BatchNormBuffer (training only); mask[i]: a dropout's mask,
// or an attention layer's (T * T, shared by the batch and heads). labels, loss and correct
// hold one entry per prediction (Model::positions() per example). With bfloat16 layers
// (docs/models.md#mixed-precision): twin[i], layer i's output as Bf16 too, written by its
// kernel where a bf16 matmul layer reads it (NeedsTwin); xb[i], a bf16 dense's or conv's
// input as bfloat16 where its input has no twin (its matmul's operand, kept for the
// kernel's gradient), an attention layer's bfloat16 arrays (AttentionBf16Elements); dyb,
// in training, the largest such layer's output gradient as bfloat16 (one at a time).
struct StepExecutor::Workspace {
  int capacity = 0;
  bool train = false;
  Buffer idx, input, labels, loss, dlogits, correct;
  std::vector<Buffer> owned;
  std::vector<float*> out, din, stats, bn, dy;
  std::vector<bool> needs_grad;
  std::vector<void*> scratch;
  std::vector<uint8_t*> mask;
  std::vector<Bf16*> xb, twin;
  Bf16* dyb = nullptr;
  std::vector<float> host_loss, host_correct;
};

namespace step_internal {

inline bool IsActiveDropout(const Layer& l, bool train) {
  return l.kind == LayerKind::kDropout && train && l.keep < 1.0f;
}

// Layers that draw a 'dropout' key in training: an active dropout, and an attention
// layer with dropout on its weights.
inline bool DrawsDropoutKey(const Layer& l, bool train) {
  return IsActiveDropout(l, train) || (l.kind == LayerKind::kAttention && train && l.keep < 1.0f);
}

// Whether another layer reads layer i's input too (a residual connection's branch point).
bool SharesInput(const Model& m, int i);

// Layers computed in place on their input's buffer: relu (unless its input is shared: it
// would change what the other reader sees), flatten and an inactive dropout.
inline bool InPlace(const Model& m, int i, bool train) {
  const Layer& l = m.layers()[i];
  return (l.kind == LayerKind::kRelu && !SharesInput(m, i)) || l.kind == LayerKind::kFlatten ||
         (l.kind == LayerKind::kDropout && !IsActiveDropout(l, train));
}

// Layers whose backward passes dy itself (changed in place) on as their input gradient:
// the in-place ones, activations, and the position embedding (x + table: dx is dy).
inline bool GradInPlace(const Layer& l, bool train) {
  return l.kind == LayerKind::kRelu || l.kind == LayerKind::kFlatten ||
         l.kind == LayerKind::kActivation || l.kind == LayerKind::kPositionEmbed ||
         (l.kind == LayerKind::kDropout && !IsActiveDropout(l, train));
}

// A dense layer's rows per sample (the positions of a sequence, else 1) and inputs per row
// (a sequence's features, else the whole flat input).
inline int DenseRows(const Layer& l) { return l.in.seq ? l.in.w : 1; }
inline int DenseInputs(const Layer& l) { return l.in.seq ? l.in.c : static_cast<int>(l.in.size()); }

// An attention layer's workspace floats at batch b (step_attention.cc): q, k, v and the
// heads' outputs (b * T * heads * head_dim each), the weights (b * heads * T * T), their
// dropped-out copy in training with dropout; in training also the gradients of all these.
inline uint64_t AttentionFloats(const Layer& l, int b, bool train) {
  const uint64_t t = l.in.w, hd = uint64_t(l.heads) * l.head_dim;
  const uint64_t act = 4 * b * t * hd, weights = uint64_t(b) * l.heads * t * t;
  const bool drop = train && l.keep < 1.0f;
  return act + weights * (drop ? 2 : 1) + (train ? act + weights : 0);
}

// Where an attention layer's floats lie in its workspace (AttentionFloats).
struct AttentionBuffers {
  float *q, *k, *v, *o;       // [b, T, H, D]
  float *w, *dropped;         // [b, H, T, T]; dropped: w after dropout (w itself without)
  float *dq, *dk, *dv, *do_;  // training
  float* dw;
};

inline AttentionBuffers AttentionBuffersAt(const Layer& l, int b, bool train, void* scratch) {
  const int64_t act = int64_t{b} * l.in.w * l.heads * l.head_dim;
  const int64_t weights = int64_t{b} * l.heads * l.in.w * l.in.w;
  float* p = static_cast<float*>(scratch);
  AttentionBuffers a{};
  a.q = p, a.k = p + act, a.v = p + 2 * act, a.o = p + 3 * act;
  a.w = p + 4 * act;
  p = a.w + weights;
  a.dropped = a.w;
  if (train && l.keep < 1.0f) a.dropped = p, p += weights;
  if (train) {
    a.dq = p, a.dk = p + act, a.dv = p + 2 * act, a.do_ = p + 3 * act;
    a.dw = p + 4 * act;
  }
  return a;
}

// An attention layer's bfloat16 elements at batch b (step_attention_bf16.cc): x, q, k, v
// and the heads' outputs, the (dropped-out) weights; in training also the output
// gradient, the heads' outputs' and the weights' gradients, and one of q's, k's or v's.
inline uint64_t AttentionBf16Elements(const Layer& l, int b, bool train) {
  const uint64_t rows = uint64_t(b) * l.in.w, hd = uint64_t(l.heads) * l.head_dim;
  const uint64_t act = rows * hd, weights = uint64_t(b) * l.heads * l.in.w * l.in.w;
  return rows * l.in.c + 4 * act + weights + (train ? rows * l.out.c + 2 * act + weights : 0);
}

// A bfloat16 dense, conv or attention layer: its matmuls read their input as Bf16.
inline bool IsBf16Matmul(const Layer& l) {
  return l.bf16() && (l.kind == LayerKind::kDense || l.kind == LayerKind::kConv ||
                      l.kind == LayerKind::kAttention);
}

// Whether layer j's kernel writes its output's Bf16 twin (ws.twin[j]): a bfloat16 layer
// whose kernel rounds or is relu or dropout (not a pool or flatten), read by a bf16 matmul
// layer. An inactive dropout (evaluation) writes it from its input (ToBf16).
bool NeedsTwin(const Model& m, int j);

// Whether bfloat16 conv i may leave its float32 sums unrounded on a backend that takes
// them (Backend::TakesUnroundedBatchNormInput): it has no bias, and its one reader is the
// bfloat16 BatchNorm after it, which rounds them to bfloat16 as it reads them.
bool ConvSumsUnrounded(const Model& m, int i);

// Whether float32 conv or dense layer i's output is overwritten in place by a float32 ReLU
// (layer i + 1), which the layer's forward then applies itself (Backend::ConvForwardRelu,
// DenseForward's relu) and the ReLU skips. Not where either computes in bfloat16, nor where
// the ReLU's output has a bfloat16 twin (ReluBf16 writes it).
inline bool FusedRelu(const Model& m, int i) {
  const auto& layers = m.layers();
  return (layers[i].kind == LayerKind::kConv || layers[i].kind == LayerKind::kDense) &&
         i + 1 < static_cast<int>(layers.size()) && layers[i + 1].kind == LayerKind::kRelu &&
         layers[i + 1].src == i && InPlace(m, i + 1, true) && !layers[i].bf16() &&
         !layers[i + 1].bf16() && !NeedsTwin(m, i + 1);
}

// Whether bfloat16 BatchNorm or residual sum i is followed by a ReLU (layer i + 1) that
// overwrites its output in place, which the layer's forward then applies itself with its
// rounding (Backend::BatchNormApplyBf16, AddBf16), writing the ReLU's twin; the ReLU skips.
inline bool FusedReluBf16(const Model& m, int i) {
  const auto& layers = m.layers();
  return (layers[i].kind == LayerKind::kBatchNorm || layers[i].kind == LayerKind::kAdd) &&
         i + 1 < static_cast<int>(layers.size()) && layers[i + 1].kind == LayerKind::kRelu &&
         layers[i + 1].src == i && InPlace(m, i + 1, true) && layers[i].bf16() &&
         layers[i + 1].bf16();
}

// The bfloat16 elements of layer i's workspace: a bf16 dense's or conv's input (xb, where
// its input has no twin), an attention layer's arrays; 0 for the rest.
inline uint64_t Bf16Elements(const Model& m, int i, int b, bool train) {
  const Layer& l = m.layers()[i];
  if (!IsBf16Matmul(l)) return 0;
  if (l.kind == LayerKind::kAttention) return AttentionBf16Elements(l, b, train);
  return NeedsTwin(m, l.src) ? 0 : uint64_t(b) * l.in.size();
}

// The largest output gradient a bf16 dense or conv reads as bfloat16 in backward (dyb).
inline uint64_t Bf16GradElements(const Model& m, int b) {
  uint64_t most = 0;
  for (const Layer& l : m.layers()) {
    if (l.bf16() && (l.kind == LayerKind::kDense || l.kind == LayerKind::kConv)) {
      most = std::max<uint64_t>(most, uint64_t(b) * l.out.size());
    }
  }
  return most;
}

// Per layer output: whether a layer with params is at or before it in the graph, so that
// backward needs the gradient with respect to it.
std::vector<bool> NeedsGrad(const Model& m);

// Whether layer i's backward needs a din buffer: its input gradient is wanted and it
// does not pass dy itself on (an add: its residual operand's gradient is wanted; an
// embed: never).
inline bool NeedsDin(const Model& m, const std::vector<bool>& needs_grad, int i) {
  const Layer& l = m.layers()[i];
  auto wanted = [&](int j) { return j >= 0 && needs_grad[j]; };
  if (l.kind == LayerKind::kAdd) return wanted(l.residual);
  if (l.kind == LayerKind::kEmbed) return false;  // token ids have no gradient
  return wanted(l.src) && !GradInPlace(l, true);
}

// A conv's or pool's geometry at batch b (pools: f == c).
inline ConvGeometry Geometry(const Layer& l, int b) {
  const Window& w = l.window;
  ConvGeometry g{b, l.in.h, l.in.w, l.in.c, l.out.c, w.kh, w.kw};
  g.stride_h = w.stride_h;
  g.stride_w = w.stride_w;
  g.pad_top = w.pad_top;
  g.pad_bottom = w.pad_bottom;
  g.pad_left = w.pad_left;
  g.pad_right = w.pad_right;
  return g;
}

// A conv's im2col floats per sample: (oh*ow, kh*kw*c), what the default convolutions keep
// in their scratch.
inline uint64_t ColsPerSample(const Layer& l) {
  return static_cast<uint64_t>(l.out.h) * l.out.w * l.window.kh * l.window.kw * l.in.c;
}

// A layer norm's rows per sample (one per pixel or position, or one when flat); a batch
// norm's too.
inline int NormRows(const Layer& l) { return l.in.h * l.in.w; }

// A batch norm's workspace floats in training: its moments, var, backward sums and the
// column sums' partials.
inline uint64_t BatchNormBuffer(const Layer& l) {
  return 5 * uint64_t(l.in.c) + BatchNormPartials(l.in.c);
}

}  // namespace step_internal
}  // namespace lockstep

#endif  // LOCKSTEP_CORE_STEP_WORKSPACE_H_
