// StepExecutor's internals shared by core/step*.cc (not a public header): the buffers
// for one batch size (Workspace) and the layer shapes that plan them.
#ifndef LOCKSTEP_CORE_STEP_WORKSPACE_H_
#define LOCKSTEP_CORE_STEP_WORKSPACE_H_

#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/model.h"
#include "core/step.h"

namespace lockstep {

// Buffers for one batch size. out[i] is layer i's output; relu and flatten write in
// place (out[i] == out[i-1]), as does an inactive dropout. din[i] is the gradient with
// respect to layer i's input, for the layers whose backward produces one in a buffer of
// its own (activations work on dy in place). scratch[i]: a conv's ConvScratchBytes (null
// when it needs none), an attention layer's AttentionFloats; stats[i]: a layer norm's
// per-row mean, then rstd; bn[i]: a batch norm's BatchNormBuffer (training only);
// mask[i]: a dropout's mask, or an attention layer's (T * T, shared by the batch and heads).
// labels, loss and correct hold one entry per prediction (Model::positions() per example).
struct StepExecutor::Workspace {
  int capacity = 0;
  bool train = false;
  Buffer idx, input, labels, loss, dlogits, correct;
  std::vector<Buffer> owned;
  std::vector<float*> out, din, stats, bn;
  std::vector<void*> scratch;
  std::vector<uint8_t*> mask;
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

// Layers computed in place on their input's buffer.
inline bool InPlace(const Layer& l, bool train) {
  return l.kind == LayerKind::kRelu || l.kind == LayerKind::kFlatten ||
         (l.kind == LayerKind::kDropout && !IsActiveDropout(l, train));
}

// Layers whose backward writes the input gradient into a buffer of its own (activations
// and the position embedding work on dy in place; an embed has no input gradient).
inline bool OwnsInputGrad(const Layer& l, bool train) {
  return !InPlace(l, train) && l.kind != LayerKind::kActivation &&
         l.kind != LayerKind::kPositionEmbed && l.kind != LayerKind::kEmbed;
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

inline int FirstParamLayer(const Model& m) {
  for (size_t i = 0; i < m.layers().size(); ++i) {
    if (m.layers()[i].has_params()) return static_cast<int>(i);
  }
  return 0;
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
