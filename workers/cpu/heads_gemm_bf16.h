// Attention's per-head bfloat16 products on AVX-512 BF16 dot products (vdpbf16ps), for
// the small shapes where oneDNN's per-product overhead exceeds the work: a ViT's 17 x 17
// x 16 ran at ~20 GMAC/s in oneDNN's one 4-D call, a decoder's 64 x 128 x 32 at ~80,
// against ~170 for its dense layers.
//
// Each product c = alpha * op(a) op(b) + beta * c (Backend::GemmHeadsBf16) is one
// thread's: its operands packed into pairs along k, then every c[i][j] summed from 0 in
// float32 over the pairs in order, two exact products per pair as the instruction adds
// them (k odd: the last pair's second element 0):
//   s = (s + a[i][2p+1] * b[2p+1][j]) + a[i][2p] * b[2p][j]
// with bfloat16 subnormal operands read as zero and subnormal sums flushed to zero (the
// instruction's DAZ/FTZ, as in oneDNN's kernels). The bits depend on nothing else: not on
// the thread count, nor on how products are split among threads.
#ifndef LOCKSTEP_WORKERS_CPU_HEADS_GEMM_BF16_H_
#define LOCKSTEP_WORKERS_CPU_HEADS_GEMM_BF16_H_

#include "core/backend.h"
#include "core/bfloat16.h"

namespace lockstep::cpu {

// Whether HeadsGemmBf16 runs a product of this shape on this CPU: HasAvx512Bf16
// (multiversion.h) and m, n, k <= kHeadsGemmMaxDim.
inline constexpr int kHeadsGemmMaxDim = 256;
bool HeadsGemmBf16Takes(int m, int n, int k);

// Whether the CPU backend runs a product here rather than in oneDNN: where
// HeadsGemmBf16Takes and the CPU has no AMX (this kernel was measured faster than oneDNN's
// AVX-512 BF16 one, bench/results/heads-gemm.md; oneDNN's AMX kernels were not measured
// against it, so an AMX CPU keeps them).
bool HeadsGemmBf16Preferred(int m, int n, int k);

// count x heads products as Backend::GemmHeadsBf16, split among `threads` OpenMP
// threads. Only for shapes HeadsGemmBf16Takes.
void HeadsGemmBf16(int threads, bool ta, bool tb, int m, int n, int k, float alpha,
                   Backend::HeadsOperand<const Bf16> a, Backend::HeadsOperand<const Bf16> b,
                   float beta, Backend::HeadsOperand<float> c, int count, int heads);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_HEADS_GEMM_BF16_H_
