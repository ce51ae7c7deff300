// The CPU backend's bfloat16 kernels besides the GEMMs and convolutions (dnnl_matmul.h,
// dnnl_conv.h): the casts, the bias epilogue, the activations, avg_pool and the attention
// softmax as XLA computes them in bfloat16 (see Backend for each one's contract). They
// are also the CPU references the CUDA bf16 kernels are tested against. Each runs on up
// to `threads` OpenMP threads and gives the same bits whatever their number.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_BF16_H_
#define LOCKSTEP_WORKERS_CPU_CPU_BF16_H_

#include <cstddef>

#include "core/backend.h"

namespace lockstep::cpu {

void ToBf16(int threads, size_t n, const float* x, Bf16* y);
void AddRowsBf16(int threads, int rows, int cols, const float* x, const float* bias, float* y,
                 Bf16* y16);
void ActivateBf16(int threads, Activation a, size_t n, const float* x, float* y, Bf16* y16);
void ReluBf16(int threads, size_t n, float* x, Bf16* x16);
void AvgPoolBf16(int threads, const ConvGeometry& g, bool count_include_pad, const float* x,
                 float* y);
void AttentionSoftmaxBf16(int threads, int rows, int t, bool causal, float* s);
void Im2ColBf16(int threads, const ConvGeometry& g, const Bf16* x, Bf16* cols);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_BF16_H_
