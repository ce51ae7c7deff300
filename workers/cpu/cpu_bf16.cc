// The CPU backend's bfloat16 kernels besides the GEMMs and convolutions.
// Contract: cpu_bf16.h.
#include "workers/cpu/cpu_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/layer_math.h"
#include "workers/cpu/bf16_vectors.h"
#include "workers/cpu/multiversion.h"
#include "workers/cpu/parallel_min.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lockstep::cpu {
namespace {

using math::Span;
using math::WindowSpan;

LS_MULTIVERSION uint32_t LowBits(const float* x, size_t n) {
  uint32_t low = 0;
  for (size_t i = 0; i < n; ++i) low |= FloatBits(x[i]) & 0xffffu;
  return low;
}

LS_MULTIVERSION void LookUpRange(const float* table, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = table[FloatBits(x[i]) >> 16];
}

LS_MULTIVERSION void ToBf16Loop(const float* x, Bf16* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i].bits = Bf16Bits(x[i]);
}

LS_MULTIVERSION void TwinBf16Loop(const float* y, Bf16* y16, size_t n) {
  for (size_t i = 0; i < n; ++i) y16[i].bits = TwinBits(y[i]);
}

#if defined(__x86_64__)
#pragma GCC diagnostic push  // GCC 12 flags its own intrinsics' _mm512_undefined_*
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// LookUpRange in AVX-512 gathers of 16 (the compilers emulate gathers with scalar loads,
// tuned for CPUs where they were slow).
__attribute__((target("avx512f"))) void LookUpAvx512(const float* table, const float* x, float* y,
                                                     size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_srli_epi32(_mm512_loadu_si512(x + i), 16);
    _mm512_storeu_ps(y + i, _mm512_i32gather_ps(bits, table, sizeof(float)));
  }
  LookUpRange(table, x + i, y + i, n - i);
}

// Bf16Bits and TwinBits of 16 floats at a time, narrowed to 16 bits by AVX-512F's vpmovdw
// (GCC leaves ToBf16Loop and TwinBf16Loop mostly scalar, even in their x86-64-v4 clones).
__attribute__((target("avx512f"))) void ToBf16Avx512(const float* x, Bf16* y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = Bf16BitsAvx512(_mm512_loadu_si512(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(bits));
  }
  ToBf16Loop(x + i, y + i, n - i);
}

__attribute__((target("avx512f"))) void TwinBf16Avx512(const float* x, Bf16* y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i high = _mm512_srli_epi32(_mm512_loadu_si512(x + i), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtepi32_epi16(high));
  }
  TwinBf16Loop(x + i, y + i, n - i);
}
#pragma GCC diagnostic pop
#endif

// AddRowsBf16 over rows [begin, end), bias16 the bias rounded to bfloat16 (or null); the
// twins a tile of rows at a time, while in L1.
LS_MULTIVERSION void AddRowsBf16Range(int cols, const float* x, const float* bias16, float* y,
                                      Bf16* y16, size_t begin, size_t end) {
  constexpr size_t kTileRows = 16;
  for (size_t r0 = begin; r0 < end; r0 += kTileRows) {
    const size_t r1 = std::min(end, r0 + kTileRows);
    for (size_t r = r0; r < r1; ++r) {
      const float* in = x + r * cols;
      float* out = y + r * cols;
      if (bias16 == nullptr) {
        for (int c = 0; c < cols; ++c) out[c] = RoundBf16(in[c]);
      } else {
        for (int c = 0; c < cols; ++c) out[c] = RoundBf16(RoundBf16(in[c]) + bias16[c]);
      }
    }
    if (y16 != nullptr) TwinBf16(y + r0 * cols, y16 + r0 * cols, (r1 - r0) * cols);
  }
}

// AddBf16 over [begin, end), the twin (where kTwin) written in the same loop.
template <bool kRelu, bool kTwin>
LS_MULTIVERSION void AddBf16Range(const float* a, const float* b, float* y, Bf16* y16, size_t begin,
                                  size_t end) {
  for (size_t i = begin; i < end; ++i) {
    const float v = RoundBf16(a[i] + b[i]);
    const float out = kRelu ? (v > 0.0f ? v : 0.0f) : v;
    y[i] = out;
    if constexpr (kTwin) y16[i].bits = TwinBits(out);
  }
}

LS_MULTIVERSION void ReluBf16Range(float* x, Bf16* x16, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    x[i] = x[i] > 0.0f ? x[i] : 0.0f;
    x16[i].bits = TwinBits(x[i]);
  }
}

// An activation's bfloat16 result (math::ActivateBf16) for every bfloat16 input.
template <Activation A>
const float* ActivationTableBf16() {
  static const std::vector<float> table =
      Bf16Table([](float x) { return math::ActivateBf16(A, x); });
  return table.data();
}

// One clone per activation, so that the formula's loop vectorizes with it inline.
template <Activation A>
LS_MULTIVERSION void ActivateBf16Range(const float* x, float* y, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) y[i] = math::ActivateBf16(A, x[i]);
}

// The activation of x[begin, end) in blocks: a lookup where a block holds bfloat16 values
// (as x does in a step: a layer's rounded output), the formula where one does not.
template <Activation A>
void ActivateBf16Blocks(const float* x, float* y, Bf16* y16, size_t begin, size_t end) {
  for (size_t lo = begin; lo < end; lo += kBf16Block) {
    const size_t hi = std::min(end, lo + kBf16Block);
    if (HoldsBf16(x + lo, hi - lo)) {
      LookUpBf16(ActivationTableBf16<A>(), x + lo, y + lo, hi - lo);
    } else {
      ActivateBf16Range<A>(x, y, lo, hi);
    }
    if (y16 != nullptr) TwinBf16(y + lo, y16 + lo, hi - lo);
  }
}

void ActivateBf16Dispatch(Activation a, const float* x, float* y, Bf16* y16, size_t begin,
                          size_t end) {
  switch (a) {
    case Activation::kGeluTanh:
      return ActivateBf16Blocks<Activation::kGeluTanh>(x, y, y16, begin, end);
    case Activation::kGeluErf:
      return ActivateBf16Blocks<Activation::kGeluErf>(x, y, y16, begin, end);
    case Activation::kTanh:
      return ActivateBf16Blocks<Activation::kTanh>(x, y, y16, begin, end);
    case Activation::kSigmoid:
      return ActivateBf16Blocks<Activation::kSigmoid>(x, y, y16, begin, end);
    case Activation::kSilu:
      return ActivateBf16Blocks<Activation::kSilu>(x, y, y16, begin, end);
  }
}

// expf of every bfloat16 value.
const float* ExpTableBf16() {
  static const std::vector<float> table = Bf16Table([](float x) { return expf(x); });
  return table.data();
}

// x[k] = exp[Bf16Bits(x[k] - mx)] for k < n: the softmax's exponentials of bfloat16 values.
LS_MULTIVERSION void ExpRowRange(const float* exp, int n, float mx, float* x) {
  for (int k = 0; k < n; ++k) x[k] = exp[Bf16Bits(x[k] - mx)];
}

#if defined(__x86_64__)
#pragma GCC diagnostic push  // GCC 12 flags its own intrinsics' _mm512_undefined_*
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// ExpRowRange in AVX-512, 16 at a time: Bf16Bits's rounding (a NaN kept a quiet NaN), then
// a gather.
__attribute__((target("avx512f"))) void ExpRowAvx512(const float* exp, int n, float mx, float* x) {
  const __m512 m = _mm512_set1_ps(mx);
  int k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512i bits =
        Bf16BitsAvx512(_mm512_castps_si512(_mm512_sub_ps(_mm512_loadu_ps(x + k), m)));
    _mm512_storeu_ps(x + k, _mm512_i32gather_ps(bits, exp, sizeof(float)));
  }
  ExpRowRange(exp, n - k, mx, x + k);
}
#pragma GCC diagnostic pop
#endif

void ExpRowBf16(const float* exp, int n, float mx, float* x) {
#if defined(__x86_64__)
  if (HasAvx512()) return ExpRowAvx512(exp, n, mx, x);
#endif
  ExpRowRange(exp, n, mx, x);
}

// Rows softmaxed at once by SoftmaxRowsBf16: their in-order max and sum chains interleave,
// so that the adds' latencies overlap.
constexpr int kSoftmaxRows = 4;

// math::SoftmaxRowBf16 of rows [r0, r0 + R) of `t` scores at s (row r's first n(r) its
// own), the exponentials (of bfloat16 values) looked up in `exp`.
template <int R>
LS_MULTIVERSION void SoftmaxRowsBf16(const float* exp, int r0, int t, bool causal, float* s) {
  float* x[R];
  int n[R];
  int shortest = t;
  for (int i = 0; i < R; ++i) {
    x[i] = s + int64_t{r0 + i} * t;
    n[i] = causal ? (r0 + i) % t + 1 : t;
    shortest = std::min(shortest, n[i]);
    for (int k = 0; k < n[i]; ++k) x[i][k] = RoundBf16(x[i][k]);
  }
  float mx[R], sum[R];
  for (int i = 0; i < R; ++i) mx[i] = x[i][0];
  for (int k = 1; k < shortest; ++k) {
    for (int i = 0; i < R; ++i) mx[i] = x[i][k] > mx[i] ? x[i][k] : mx[i];
  }
  for (int i = 0; i < R; ++i) {
    for (int k = shortest; k < n[i]; ++k) mx[i] = x[i][k] > mx[i] ? x[i][k] : mx[i];
    ExpRowBf16(exp, n[i], mx[i], x[i]);
    sum[i] = 0.0f;
  }
  for (int k = 0; k < shortest; ++k) {
    for (int i = 0; i < R; ++i) sum[i] += x[i][k];
  }
  for (int i = 0; i < R; ++i) {
    for (int k = shortest; k < n[i]; ++k) sum[i] += x[i][k];
    const float inv = 1.0f / RoundBf16(sum[i]);
    for (int k = 0; k < n[i]; ++k) x[i][k] = RoundBf16(RoundBf16(x[i][k]) * inv);
    for (int k = n[i]; k < t; ++k) x[i][k] = 0.0f;
  }
}

// A row of MaskedScale's y as bfloat16.
LS_MULTIVERSION void MaskedScaleRowBf16(int cols, const uint8_t* mask, float scale, const float* x,
                                        Bf16* y16) {
  for (int c = 0; c < cols; ++c) y16[c].bits = Bf16Bits(x[c] * (mask[c] ? scale : 0.0f));
}

// A row of SoftmaxBackwardBf16: cpu::SoftmaxBackward's formula on dp masked and scaled as
// MaskedScale does it (mask non-null), rounded to bfloat16.
// The dot product runs over y's first n columns (y is zero past them: the same sum).
LS_MULTIVERSION void SoftmaxBackwardRowBf16(int t, int n, const float* y, const uint8_t* mask,
                                            float scale, const float* dp, Bf16* dp16) {
  auto g = [&](int c) { return mask == nullptr ? dp[c] : dp[c] * (mask[c] ? scale : 0.0f); };
  double dot = 0.0;
  for (int c = 0; c < n; ++c) dot += double{g(c)} * y[c];
  for (int c = 0; c < t; ++c) dp16[c].bits = Bf16Bits(y[c] * static_cast<float>(g(c) - dot));
}

#if defined(LS_AVX512_BF16)
#pragma GCC diagnostic push  // GCC 12 flags its own intrinsics' _mm512_undefined_*
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The AVX-512 BF16 kernels (bf16_vectors.h), dispatched where HasAvx512Bf16.
// ToBf16Loop, 16 at a time.
LS_AVX512_BF16 void ToBf16Avx512Bf16(const float* x, Bf16* y, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), Bf16Bits16(_mm512_loadu_ps(x + i)));
  }
  ToBf16Loop(x + i, y + i, n - i);
}

// AddRowsBf16Range in AVX-512 BF16, 16 columns at a time, the twin from the same vector.
LS_AVX512_BF16 void AddRowsBf16Avx512(int cols, const float* x, const float* bias16, float* y,
                                      Bf16* y16, size_t begin, size_t end) {
  for (size_t r = begin; r < end; ++r) {
    const size_t at = r * cols;
    for (int c = 0; c < cols; c += 16) {
      const __mmask16 m = FirstLanes(cols - c);
      __m512 v = _mm512_maskz_loadu_ps(m, x + at + c);
      if (bias16 != nullptr) {
        v = _mm512_add_ps(WidenBf16(Bf16Bits16(v)), _mm512_maskz_loadu_ps(m, bias16 + c));
      }
      if (y16 != nullptr) {
        StoreBf16<false, true>(v, m, y + at + c, y16 + at + c);
      } else {
        StoreBf16<false, false>(v, m, y + at + c, nullptr);
      }
    }
  }
}

// AddBf16Range in AVX-512 BF16.
template <bool kRelu, bool kTwin>
LS_AVX512_BF16 void AddBf16Avx512(const float* a, const float* b, float* y, Bf16* y16, size_t begin,
                                  size_t end) {
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 m = FirstLanes(end - i);
    const __m512 v =
        _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i));
    StoreBf16<kRelu, kTwin>(v, m, y + i, y16 + i);
  }
}

// x * (mask ? scale : 0) of 16 floats (lanes m): MaskedScale's factor, +0.0 where dropped.
LS_AVX512_BF16 inline __m512 MaskedScale16(__mmask16 m, const float* x, const uint8_t* mask,
                                           __m512 scale) {
  const __m128i bytes = _mm_maskz_loadu_epi8(m, mask);
  return _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x),
                       _mm512_maskz_mov_ps(_mm_test_epi8_mask(bytes, bytes), scale));
}

// MaskedScaleRowBf16 in AVX-512 BF16, 16 at a time, rounded by vcvtneps2bf16.
LS_AVX512_BF16 void MaskedScaleRowBf16Avx512(int cols, const uint8_t* mask, float scale,
                                             const float* x, Bf16* y16) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int c = 0; c < cols; c += 16) {
    const __mmask16 m = FirstLanes(cols - c);
    _mm256_mask_storeu_epi16(y16 + c, m, Bf16Bits16(MaskedScale16(m, x + c, mask + c, s)));
  }
}

// SoftmaxBackwardRowBf16 in AVX-512 BF16: the dot product as there (in order, scalar), the
// row's results 16 at a time (g - dot in double, as the scalar expression promotes it).
LS_AVX512_BF16 void SoftmaxBackwardRowBf16Avx512(int t, int n, const float* y, const uint8_t* mask,
                                                 float scale, const float* dp, Bf16* dp16) {
  double dot = 0.0;
  if (mask == nullptr) {
    for (int c = 0; c < n; ++c) dot += double{dp[c]} * y[c];
  } else {  // the factor scale or +0.0 as a bit mask (a ternary may compile to a branch)
    const uint32_t bits = FloatBits(scale);
    for (int c = 0; c < n; ++c) {
      dot += double{dp[c] * BitsFloat(bits & (0u - uint32_t{mask[c] != 0}))} * y[c];
    }
  }
  const __m512d d = _mm512_set1_pd(dot);
  const __m512 s = _mm512_set1_ps(scale);
  for (int c = 0; c < t; c += 16) {
    const __mmask16 m = FirstLanes(t - c);
    const __m512 g =
        mask == nullptr ? _mm512_maskz_loadu_ps(m, dp + c) : MaskedScale16(m, dp + c, mask + c, s);
    const __m256 low =
        _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(g)), d));
    const __m256 high =
        _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(g, 1)), d));
    const __m512 diff = _mm512_insertf32x8(_mm512_castps256_ps512(low), high, 1);
    _mm256_mask_storeu_epi16(dp16 + c, m,
                             Bf16Bits16(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + c), diff)));
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

bool HoldsBf16(const float* x, size_t n) { return LowBits(x, n) == 0; }

void LookUpBf16(const float* table, const float* x, float* y, size_t n) {
#if defined(__x86_64__)
  if (HasAvx512()) return LookUpAvx512(table, x, y, n);
#endif
  LookUpRange(table, x, y, n);
}

void TwinBf16(const float* y, Bf16* y16, size_t n) {
#if defined(__x86_64__)
  if (HasAvx512()) return TwinBf16Avx512(y, y16, n);
#endif
  TwinBf16Loop(y, y16, n);
}

void ToBf16Rows(const float* x, Bf16* y, size_t n) {
#if defined(LS_AVX512_BF16)
  if (HasAvx512Bf16()) return ToBf16Avx512Bf16(x, y, n);
#endif
#if defined(__x86_64__)
  if (HasAvx512()) return ToBf16Avx512(x, y, n);
#endif
  ToBf16Loop(x, y, n);
}

void AddBf16(int threads, size_t n, const float* a, const float* b, bool relu, float* y,
             Bf16* y16) {
  auto range = relu ? (y16 != nullptr ? AddBf16Range<true, true> : AddBf16Range<true, false>)
                    : (y16 != nullptr ? AddBf16Range<false, true> : AddBf16Range<false, false>);
#if defined(LS_AVX512_BF16)
  if (HasAvx512Bf16()) {
    range = relu ? (y16 != nullptr ? AddBf16Avx512<true, true> : AddBf16Avx512<true, false>)
                 : (y16 != nullptr ? AddBf16Avx512<false, true> : AddBf16Avx512<false, false>);
  }
#endif
  ParallelFor(threads, n, [&](size_t lo, size_t hi) { range(a, b, y, y16, lo, hi); });
}

void ToBf16(int threads, size_t n, const float* x, Bf16* y) {
  ParallelFor(threads, n, [&](size_t b, size_t e) { ToBf16Rows(x + b, y + b, e - b); });
}

void AddRowsBf16(int threads, int rows, int cols, const float* x, const float* bias, float* y,
                 Bf16* y16) {
  std::vector<float> bias16;
  if (bias != nullptr) {
    bias16.resize(cols);
    for (int c = 0; c < cols; ++c) bias16[c] = RoundBf16(bias[c]);
  }
  const float* b16 = bias == nullptr ? nullptr : bias16.data();
  auto range = AddRowsBf16Range;
#if defined(LS_AVX512_BF16)
  if (HasAvx512Bf16()) range = AddRowsBf16Avx512;
#endif
  const size_t per = std::max<size_t>(1, kParallelMin / std::max(cols, 1));
  if (static_cast<size_t>(rows) <= per) return range(cols, x, b16, y, y16, 0, rows);
#pragma omp parallel num_threads(threads)
  {
    const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    range(cols, x, b16, y, y16, rows * t / nt, rows * (t + 1) / nt);
  }
}

void ActivateBf16(int threads, Activation a, size_t n, const float* x, float* y, Bf16* y16) {
  ParallelFor(threads, n, [&](size_t b, size_t e) { ActivateBf16Dispatch(a, x, y, y16, b, e); });
}

void ReluBf16(int threads, size_t n, float* x, Bf16* x16) {
  ParallelFor(threads, n, [&](size_t b, size_t e) { ReluBf16Range(x, x16, b, e); });
}

void AvgPoolBf16(int threads, const ConvGeometry& g, bool count_include_pad, const float* x,
                 float* y) {
  const int oh = g.oh(), ow = g.ow(), c = g.c;
#pragma omp parallel for num_threads(threads) collapse(2) schedule(static)
  for (int n = 0; n < g.b; ++n) {
    for (int oy = 0; oy < oh; ++oy) {
      const Span r = WindowSpan(oy, g.stride_h, g.pad_top, g.kh, g.h);
      for (int ox = 0; ox < ow; ++ox) {
        const Span q = WindowSpan(ox, g.stride_w, g.pad_left, g.kw, g.w);
        float* out = y + ((static_cast<size_t>(n) * oh + oy) * ow + ox) * c;
        // lax.reduce_window's adds in bfloat16 from 0, the window's elements in row-major
        // order, or column-major where the width's padding is all after (XLA's CPU loops,
        // measured: SAME 2x2 and 3x2 windows at stride 1 and 2x2 at stride 2 on odd widths).
        std::fill_n(out, c, 0.0f);
        auto add = [&](int yy, int xx) {
          const float* p = x + ((static_cast<size_t>(n) * g.h + yy) * g.w + xx) * c;
          for (int k = 0; k < c; ++k) out[k] = RoundBf16(out[k] + p[k]);
        };
        if (g.pad_left == 0 && g.pad_right > 0) {
          for (int xx = q.begin; xx < q.end; ++xx) {
            for (int yy = r.begin; yy < r.end; ++yy) add(yy, xx);
          }
        } else {
          for (int yy = r.begin; yy < r.end; ++yy) {
            for (int xx = q.begin; xx < q.end; ++xx) add(yy, xx);
          }
        }
        // Divided by the window's size in bfloat16, or (without count_include_pad) by
        // Flax's float32 counts, whose division is float32.
        const float div = math::AvgDivisor(g, count_include_pad, oy, ox);
        for (int k = 0; k < c; ++k) {
          out[k] = count_include_pad ? RoundBf16(out[k] / div) : out[k] / div;
        }
      }
    }
  }
}

void AttentionSoftmaxBf16(int threads, int rows, int t, bool causal, float* s) {
  const float* exp = ExpTableBf16();
  const int groups = rows / kSoftmaxRows;
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (static_cast <size_t>(rows) * t > kParallelMin)
  for (int g = 0; g < groups; ++g)
    SoftmaxRowsBf16<kSoftmaxRows>(exp, g * kSoftmaxRows, t, causal, s);
  for (int r = groups * kSoftmaxRows; r < rows; ++r) SoftmaxRowsBf16<1>(exp, r, t, causal, s);
}

void MaskedScaleBf16(int threads, int rows, int cols, const uint8_t* mask, float scale,
                     const float* x, Bf16* y16) {
  auto row = MaskedScaleRowBf16;
#if defined(LS_AVX512_BF16)
  if (HasAvx512Bf16()) row = MaskedScaleRowBf16Avx512;
#endif
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (static_cast <size_t>(rows) * cols > kParallelMin)
  for (int r = 0; r < rows; ++r)
    row(cols, mask, scale, x + int64_t{r} * cols, y16 + int64_t{r} * cols);
}

void SoftmaxBackwardBf16(int threads, int rows, int t, bool causal, const float* p,
                         const uint8_t* mask, float scale, const float* dp, Bf16* dp16) {
  auto row = SoftmaxBackwardRowBf16;
#if defined(LS_AVX512_BF16)
  if (HasAvx512Bf16()) row = SoftmaxBackwardRowBf16Avx512;
#endif
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (static_cast <size_t>(rows) * t > kParallelMin)
  for (int r = 0; r < rows; ++r) {
    const int64_t at = int64_t{r} * t;
    row(t, causal ? r % t + 1 : t, p + at, mask == nullptr ? nullptr : mask + int64_t{r % t} * t,
        scale, dp + at, dp16 + at);
  }
}

void Im2ColBf16(int threads, const ConvGeometry& g, const Bf16* x, Bf16* cols) {
  const int oh = g.oh(), ow = g.ow();
  const size_t krow = static_cast<size_t>(g.kw) * g.c;
  const size_t patch = static_cast<size_t>(g.kh) * krow;
  const Bf16 zero{0};
#pragma omp parallel for num_threads(threads) collapse(2) schedule(static)
  for (int n = 0; n < g.b; ++n) {
    for (int y = 0; y < oh; ++y) {
      for (int x0 = 0; x0 < ow; ++x0) {
        Bf16* out = cols + ((static_cast<size_t>(n) * oh + y) * ow + x0) * patch;
        for (int i = 0; i < g.kh; ++i) {
          const int yy = y * g.stride_h - g.pad_top + i;
          for (int j = 0; j < g.kw; ++j, out += g.c) {
            const int xx = x0 * g.stride_w - g.pad_left + j;
            if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w) {
              std::fill_n(out, g.c, zero);
            } else {
              std::copy_n(x + ((static_cast<size_t>(n) * g.h + yy) * g.w + xx) * g.c, g.c, out);
            }
          }
        }
      }
    }
  }
}

}  // namespace lockstep::cpu
