// Attention's per-head bfloat16 products over a causal layer's [T, T] weights, leaving out
// what the causal mask makes zero (StepExecutor's bfloat16 attention, step_attention_bf16.cc).
// The weights are zero past each row's query position (the softmax's causal rows, and so
// the attention dropout's and their gradients through the softmax), so a product over them
// runs as two: over the first half of its rows, then the rest, each over the columns or
// the span of k its rows need: 3/4 of the multiply-adds, and the same sums (what is left
// out adds exact zeros, or is scores the softmax never reads).
#ifndef LOCKSTEP_CORE_CAUSAL_HEADS_H_
#define LOCKSTEP_CORE_CAUSAL_HEADS_H_

#include "absl/status/status.h"
#include "core/backend.h"

namespace lockstep {

// Where a product c = op(a) op(b) has the causal weights, and so what of it is left out.
enum class CausalZeros {
  kNone,    // none: the whole product
  kScores,  // c is the scores: of row i, only columns j <= i (those the softmax reads)
  kA,       // op(a) is the weights: row i's products over k <= i
  kAt,      // op(a) is the weights transposed: row j's products over k >= j
};

// Backend::GemmHeadsBf16 with alpha 1 and beta 0, leaving out what `zeros` says (kNone:
// the one call itself). For kScores, c's entries past each row's diagonal are left as
// they were.
absl::Status CausalGemmHeadsBf16(Backend& backend, CausalZeros zeros, bool trans_a, bool trans_b,
                                 int m, int n, int k, Backend::HeadsOperand<const Bf16> a,
                                 Backend::HeadsOperand<const Bf16> b,
                                 Backend::HeadsOperand<float> c, int count, int heads);

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_CAUSAL_HEADS_H_
