// The CPU backend's bfloat16 kernels besides the GEMMs and convolutions (dnnl_matmul.h,
// dnnl_conv.h): the casts, the bias epilogue, the activations, avg_pool and the attention
// softmax as XLA computes them in bfloat16 (see Backend for each one's contract), and the
// one-pass forms of attention's dropout and softmax gradient. They are also the CPU
// references the CUDA bf16 kernels are tested against. Each runs on up to `threads`
// OpenMP threads and gives the same bits whatever their number. Elementwise functions of
// a bfloat16 value (activations, their derivatives, exp) are looked up in 65,536-entry
// tables of the formula's results (Bf16Table), so a lookup is the formula bit for bit.
#ifndef LOCKSTEP_WORKERS_CPU_CPU_BF16_H_
#define LOCKSTEP_WORKERS_CPU_CPU_BF16_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/backend.h"

namespace lockstep::cpu {

void ToBf16(int threads, size_t n, const float* x, Bf16* y);
// ToBf16 of n values on the calling thread.
void ToBf16Rows(const float* x, Bf16* y, size_t n);
// Elements per block that a table's user checks with HoldsBf16 (in L1 for its lookup).
inline constexpr size_t kBf16Block = 4096;
// Whether x[0, n) holds bfloat16 values only (each float32's low 16 bits zero).
bool HoldsBf16(const float* x, size_t n);
// The Bf16 twin of x, which holds a bfloat16 value (its high 16 bits: exact, no rounding).
inline uint16_t TwinBits(float x) { return static_cast<uint16_t>(FloatBits(x) >> 16); }
// f at every bfloat16 input, indexed by the input's bits (65,536 float32s): an elementwise
// function of a bfloat16 value looked up, bit for bit what f gives.
template <typename F>
std::vector<float> Bf16Table(F f) {
  std::vector<float> t(size_t{1} << 16);
  for (uint32_t b = 0; b < t.size(); ++b) t[b] = f(BitsFloat(b << 16));
  return t;
}
// y[i] = table[x[i]'s high 16 bits]: Bf16Table's lookup (x holding bfloat16 values).
void LookUpBf16(const float* table, const float* x, float* y, size_t n);
// y16[i] = y[i] as Bf16 (n values; exact: y holds bfloat16 values).
void TwinBf16(const float* y, Bf16* y16, size_t n);
void AddRowsBf16(int threads, int rows, int cols, const float* x, const float* bias, float* y,
                 Bf16* y16);
void ActivateBf16(int threads, Activation a, size_t n, const float* x, float* y, Bf16* y16);
void ReluBf16(int threads, size_t n, float* x, Bf16* x16);
// Backend::AddBf16 in one pass: the same bits as Add, AddRowsBf16 and ReluBf16 in turn.
void AddBf16(int threads, size_t n, const float* a, const float* b, bool relu, float* y, Bf16* y16);
void AvgPoolBf16(int threads, const ConvGeometry& g, bool count_include_pad, const float* x,
                 float* y);
void AttentionSoftmaxBf16(int threads, int rows, int t, bool causal, float* s);
// Backend::MaskedScaleBf16 and SoftmaxBackwardBf16 in one pass each, writing the bfloat16
// results alone (causal: each row's dot product over its first r % t + 1 columns).
void MaskedScaleBf16(int threads, int rows, int cols, const uint8_t* mask, float scale,
                     const float* x, Bf16* y16);
void SoftmaxBackwardBf16(int threads, int rows, int t, bool causal, const float* p,
                         const uint8_t* mask, float scale, const float* dp, Bf16* dp16);
void Im2ColBf16(int threads, const ConvGeometry& g, const Bf16* x, Bf16* cols);

}  // namespace lockstep::cpu

#endif  // LOCKSTEP_WORKERS_CPU_CPU_BF16_H_
