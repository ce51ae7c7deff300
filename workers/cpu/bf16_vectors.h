// bfloat16 rounding of 16 floats at a time for the CPU backend's AVX-512 loops: Bf16Bits
// (core/bfloat16.h) in AVX-512F integer arithmetic, and by AVX-512 BF16's vcvtneps2bf16
// with that formula for the vectors the instruction would round otherwise. Only where
// LS_AVX512_BF16 is defined (multiversion.h); call the LS_AVX512_BF16 ones where
// HasAvx512Bf16().
#ifndef LOCKSTEP_WORKERS_CPU_BF16_VECTORS_H_
#define LOCKSTEP_WORKERS_CPU_BF16_VECTORS_H_

#include "core/bfloat16.h"
#include "workers/cpu/multiversion.h"

#if defined(LS_AVX512_BF16)
#include <immintrin.h>

namespace lockstep::cpu {

#pragma GCC diagnostic push  // GCC 12 flags its own intrinsics' _mm512_undefined_*
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Bf16Bits of 16 floats (given as their bits), in 32-bit lanes.
__attribute__((target("avx512f"))) inline __m512i Bf16BitsAvx512(__m512i u) {
  const __m512i high = _mm512_srli_epi32(u, 16);
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                         _mm512_and_si512(high, _mm512_set1_epi32(1))),
                        16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
}

// Bf16Bits of 16 floats by vcvtneps2bf16 (nearest even, a NaN made quiet as Bf16Bits
// does), whose one difference, subnormal inputs flushed to zero, sends a vector holding
// one to the integer formula.
LS_AVX512_BF16 inline __m256i Bf16Bits16(__m512 x) {
  if (_mm512_fpclass_ps_mask(x, 0x20) == 0) return (__m256i)_mm512_cvtneps_pbh(x);
  return _mm512_cvtepi32_epi16(Bf16BitsAvx512(_mm512_castps_si512(x)));
}

// The floats of 16 bfloat16 values.
LS_AVX512_BF16 inline __m512 WidenBf16(__m256i bits) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// The upper halves of 16 floats holding bfloat16 values (TwinBits).
LS_AVX512_BF16 inline __m256i TwinBits16(__m512 x) {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16));
}

// The first n (< 16 for a tail) lanes.
LS_AVX512_BF16 inline __mmask16 FirstLanes(size_t n) {
  return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
}

// v rounded to bfloat16, then ReLU'd where kRelu (a max with 0, which as `v > 0 ? v : 0`
// gives +0 for a NaN, -0 and below), stored in lanes m as floats at y and, where kTwin,
// as Bf16 at y16.
template <bool kRelu, bool kTwin>
LS_AVX512_BF16 inline void StoreBf16(__m512 v, __mmask16 m, float* y, Bf16* y16) {
  __m256i bits = Bf16Bits16(v);
  __m512 out = WidenBf16(bits);
  if constexpr (kRelu) out = _mm512_max_ps(out, _mm512_setzero_ps()), bits = TwinBits16(out);
  _mm512_mask_storeu_ps(y, m, out);
  if constexpr (kTwin) _mm256_mask_storeu_epi16(y16, m, bits);
}

#pragma GCC diagnostic pop

}  // namespace lockstep::cpu

#endif  // LS_AVX512_BF16
#endif  // LOCKSTEP_WORKERS_CPU_BF16_VECTORS_H_
