// The CPU backend's Flax BatchNorm kernels (see Backend::BatchNormMoments and the methods after it
// for each one's contract). Contract: cpu_batch_norm.h.
#include "workers/cpu/cpu_batch_norm.h"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/backend.h"
#include "core/batch_norm_math.h"
#include "core/bfloat16.h"
#include "workers/cpu/bf16_vectors.h"
#include "workers/cpu/cpu_bf16.h"
#include "workers/cpu/double_column_sums.h"
#include "workers/cpu/multiversion.h"
#include "workers/cpu/parallel_min.h"

namespace lockstep::cpu {
namespace {

bool Parallel(int rows, int cols) { return static_cast<size_t>(rows) * cols > kParallelMin; }

// Row block `blk`'s rows [begin, end) of kBatchNormBlocks.
int BlockRow(int rows, int blk) { return static_cast<int>(int64_t{rows} * blk / kBatchNormBlocks); }

// x as the kernels read it: rounded to bfloat16 where kRound (a bfloat16 conv's sums
// left unrounded, Backend::TakesUnroundedBatchNormInput), else as it is.
template <bool kRound>
inline float Read(float x) {
  return kRound ? RoundBf16(x) : x;
}

// Columns [c0, c0 + 8 * kVecs) of MomentSums (kGrad false) or GradSums (true): each
// column's two sums held in registers over the rows, in row order (sums in memory are a
// store and a load per row, each waiting on the last). s and q: the first and second sums.
template <bool kGrad, bool kRound, int kVecs>
__attribute__((always_inline)) inline void ColumnBlockSums(int begin, int end, int cols, int c0,
                                                           const float* x, const float* dy,
                                                           const float* mean, double* s,
                                                           double* q) {
  D8 sum[kVecs] = {}, second[kVecs] = {};
  for (int r = begin; r < end; ++r) {
    const size_t at = static_cast<size_t>(r) * cols + c0;
    float u[8 * kVecs], g[8 * kVecs];  // x as read (minus the mean for kGrad), and dy
    for (int j = 0; j < 8 * kVecs; ++j) {
      u[j] = kGrad ? Read<kRound>(x[at + j]) - mean[c0 + j] : Read<kRound>(x[at + j]);
      g[j] = kGrad ? dy[at + j] : u[j];
    }
    for (int k = 0; k < kVecs; ++k) {
      F8 fu, fg;
      std::memcpy(&fu, u + 8 * k, sizeof(fu));
      std::memcpy(&fg, g + 8 * k, sizeof(fg));
      const D8 du = __builtin_convertvector(fu, D8), dg = __builtin_convertvector(fg, D8);
      sum[k] += dg;
      second[k] += dg * du;
    }
  }
  std::memcpy(s + c0, sum, sizeof(sum));
  std::memcpy(q + c0, second, sizeof(second));
}

// Every column of MomentSums or GradSums into a[0, cols) and a[cols, 2 * cols): blocks of
// 64, 32, 16 and 8 columns, then one at a time.
template <bool kGrad, bool kRound>
__attribute__((always_inline)) inline void AllColumnSums(int begin, int end, int cols,
                                                         const float* x, const float* dy,
                                                         const float* mean, double* a) {
  double *s = a, *q = a + cols;
  int c0 = 0;
  for (; c0 + 64 <= cols; c0 += 64) {
    ColumnBlockSums<kGrad, kRound, 8>(begin, end, cols, c0, x, dy, mean, s, q);
  }
  if (c0 + 32 <= cols) {
    ColumnBlockSums<kGrad, kRound, 4>(begin, end, cols, c0, x, dy, mean, s, q);
    c0 += 32;
  }
  if (c0 + 16 <= cols) {
    ColumnBlockSums<kGrad, kRound, 2>(begin, end, cols, c0, x, dy, mean, s, q);
    c0 += 16;
  }
  if (c0 + 8 <= cols) {
    ColumnBlockSums<kGrad, kRound, 1>(begin, end, cols, c0, x, dy, mean, s, q);
    c0 += 8;
  }
  for (; c0 < cols; ++c0) {
    double sum = 0, second = 0;
    for (int r = begin; r < end; ++r) {
      const size_t at = static_cast<size_t>(r) * cols + c0;
      const float u = kGrad ? Read<kRound>(x[at]) - mean[c0] : Read<kRound>(x[at]);
      const float g = kGrad ? dy[at] : u;
      sum += g;
      second += double{g} * u;
    }
    s[c0] = sum;
    q[c0] = second;
  }
}

// p[c] and p[cols + c] = the column sums of x and of x * x over rows [begin, end), in
// row order from 0, accumulated in double (each x * x exact) and rounded once.
template <bool kRound>
LS_MULTIVERSION void MomentSums(int begin, int end, int cols, const float* x, float* p) {
  std::vector<double> a(2 * static_cast<size_t>(cols));
  AllColumnSums<false, kRound>(begin, end, cols, x, nullptr, nullptr, a.data());
  for (size_t k = 0; k < a.size(); ++k) p[k] = static_cast<float>(a[k]);
}

// p[c] and p[cols + c] = the column sums of dy and of dy * (x - mean) over rows
// [begin, end), in row order from 0, accumulated in double and rounded once.
template <bool kRound>
LS_MULTIVERSION void GradSums(int begin, int end, int cols, const float* x, const float* dy,
                              const float* mean, float* p) {
  std::vector<double> a(2 * static_cast<size_t>(cols));
  AllColumnSums<true, kRound>(begin, end, cols, x, dy, mean, a.data());
  for (size_t k = 0; k < a.size(); ++k) p[k] = static_cast<float>(a[k]);
}

// out = the sums that block_sums(begin, end, p) writes for kBatchNormBlocks row blocks,
// each into its own BatchNormPartials(cols) slice of `partial`, added in block order from
// 0 in double and rounded once: the same bits whatever the thread count. Where the mean is
// large against the spread, var = E[x^2] - E[x]^2 cancels, and float sums' rounding (a
// sequential float sum errs by up to its length in ulps; XLA's come within one or two)
// made a random model's gradients 12x further from float64 than XLA's.
template <typename F>
void ColumnSums2(int threads, int rows, int cols, F block_sums, float* partial, float* out) {
  const size_t width = 2 * static_cast<size_t>(cols);
#pragma omp parallel for num_threads(threads) schedule(static) if (Parallel(rows, cols))
  for (int blk = 0; blk < kBatchNormBlocks; ++blk) {
    block_sums(BlockRow(rows, blk), BlockRow(rows, blk + 1), partial + blk * width);
  }
  for (size_t k = 0; k < width; ++k) {
    double total = 0.0;
    for (int blk = 0; blk < kBatchNormBlocks; ++blk) total += partial[blk * width + k];
    out[k] = static_cast<float>(total);
  }
}

LS_MULTIVERSION void ApplyRows(int begin, int end, int cols, const float* x, const float* mean,
                               const float* mul, const float* bias, float* y) {
  for (int r = begin; r < end; ++r) {
    const size_t at = static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c)
      y[at + c] = math::BatchNormY(x[at + c], mean[c], mul[c], bias, c);
  }
}

// ApplyRows of bf16(x) (x holds bfloat16 values, or a conv's sums left unrounded)
// rounded to bfloat16, relu'd where kRelu, and its Bf16 twin in y16 where kTwin (in the
// same loop: a conv's rows are 16 to 64 channels).
template <bool kRelu, bool kTwin>
LS_MULTIVERSION void ApplyRowsBf16(int begin, int end, int cols, const float* x, const float* mean,
                                   const float* mul, const float* bias, float* y, Bf16* y16) {
  for (int r = begin; r < end; ++r) {
    const size_t at = static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) {
      const float v = RoundBf16(math::BatchNormY(RoundBf16(x[at + c]), mean[c], mul[c], bias, c));
      const float out = kRelu ? (v > 0.0f ? v : 0.0f) : v;
      y[at + c] = out;
      if constexpr (kTwin) y16[at + c].bits = TwinBits(out);
    }
  }
}

#if defined(LS_AVX512_BF16)
#pragma GCC diagnostic push  // GCC 12 flags its own intrinsics' _mm512_undefined_*
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// ApplyRowsBf16 in AVX-512 BF16, 16 columns at a time (math::BatchNormY's operations in
// its order).
template <bool kRelu, bool kTwin>
LS_AVX512_BF16 void ApplyRowsBf16Avx512(int begin, int end, int cols, const float* x,
                                        const float* mean, const float* mul, const float* bias,
                                        float* y, Bf16* y16) {
  for (int r = begin; r < end; ++r) {
    const size_t at = static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; c += 16) {
      const __mmask16 m = FirstLanes(cols - c);
      const __m512 xr = WidenBf16(Bf16Bits16(_mm512_maskz_loadu_ps(m, x + at + c)));
      __m512 v = _mm512_mul_ps(_mm512_sub_ps(xr, _mm512_maskz_loadu_ps(m, mean + c)),
                               _mm512_maskz_loadu_ps(m, mul + c));
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + c));
      StoreBf16<kRelu, kTwin>(v, m, y + at + c, y16 + at + c);
    }
  }
}
#pragma GCC diagnostic pop
#endif

// dx = math::BatchNormDx of each element: float32 where D is float, else (x a bf16 conv's
// unrounded sums, read rounded) dx rounded to bfloat16 in the same loop.
template <typename D>
LS_MULTIVERSION void BackwardApplyRows(int begin, int end, int cols, const float* mean,
                                       const float* mul, const float* mean_dy, const float* k,
                                       const float* x, const float* dy, D* dx) {
  constexpr bool kBf16 = std::is_same_v<D, Bf16>;
  for (int r = begin; r < end; ++r) {
    const size_t at = static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) {
      const float v = math::BatchNormDx({mean[c], mul[c], mean_dy[c], k[c]}, Read<kBf16>(x[at + c]),
                                        dy[at + c]);
      if constexpr (kBf16) {
        dx[at + c].bits = Bf16Bits(v);
      } else {
        dx[at + c] = v;
      }
    }
  }
}

#if defined(LS_AVX512_BF16)
#pragma GCC diagnostic push  // GCC 12 flags its own intrinsics' _mm512_undefined_*
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// BackwardApplyRows<Bf16> in AVX-512 BF16, 16 columns at a time (math::BatchNormDx's
// operations in its order), rounded by vcvtneps2bf16 (1.2-1.6x GCC's x86-64-v4 clone of
// that loop: cpu-passes.md).
LS_AVX512_BF16 void BackwardApplyRowsBf16Avx512(int begin, int end, int cols, const float* mean,
                                                const float* mul, const float* mean_dy,
                                                const float* k, const float* x, const float* dy,
                                                Bf16* dx) {
  for (int r = begin; r < end; ++r) {
    const size_t at = static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; c += 16) {
      const __mmask16 m = FirstLanes(cols - c);
      const __m512 xr = WidenBf16(Bf16Bits16(_mm512_maskz_loadu_ps(m, x + at + c)));
      const __m512 from_dy = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, dy + at + c),
                                                         _mm512_maskz_loadu_ps(m, mean_dy + c)),
                                           _mm512_maskz_loadu_ps(m, mul + c));
      const __m512 from_x = _mm512_mul_ps(_mm512_sub_ps(xr, _mm512_maskz_loadu_ps(m, mean + c)),
                                          _mm512_maskz_loadu_ps(m, k + c));
      _mm256_mask_storeu_epi16(dx + at + c, m, Bf16Bits16(_mm512_add_ps(from_dy, from_x)));
    }
  }
}
#pragma GCC diagnostic pop
#endif

// f(begin, end) over [0, rows) split evenly across the threads (one call where the
// product is small).
template <typename F>
void ParallelRows(int threads, int rows, int cols, F f) {
  if (!Parallel(rows, cols)) {
    f(0, rows);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    f(static_cast<int>(rows * t / nt), static_cast<int>(rows * (t + 1) / nt));
  }
}

}  // namespace

void BatchNormMoments(int threads, int rows, int cols, const float* x, float* partials,
                      float* moments, bool round_x) {
  ColumnSums2(
      threads, rows, cols,
      [&](int begin, int end, float* p) {
        round_x ? MomentSums<true>(begin, end, cols, x, p)
                : MomentSums<false>(begin, end, cols, x, p);
      },
      partials, moments);
  const float n = static_cast<float>(rows);
  for (int k = 0; k < 2 * cols; ++k) moments[k] = moments[k] / n;
}

void BatchNormVariance(int cols, const float* moments, float* var) {
  for (int c = 0; c < cols; ++c) var[c] = math::BatchNormVariance(moments[c], moments[cols + c]);
}

void BatchNormApply(int threads, int rows, int cols, float epsilon, const float* x,
                    const float* mean, const float* var, const float* scale, const float* bias,
                    float* y) {
  std::vector<float> mul(cols);
  for (int c = 0; c < cols; ++c) mul[c] = math::BatchNormMul(var[c], epsilon, scale, c);
  ParallelRows(threads, rows, cols, [&](int begin, int end) {
    ApplyRows(begin, end, cols, x, mean, mul.data(), bias, y);
  });
}

void BatchNormApplyBf16(int threads, int rows, int cols, float epsilon, const float* x,
                        const float* mean, const float* var, const float* scale, const float* bias,
                        bool relu, float* y, Bf16* y16) {
  std::vector<float> mul(cols);
  for (int c = 0; c < cols; ++c) mul[c] = math::BatchNormMul(var[c], epsilon, scale, c);
  ParallelRows(threads, rows, cols, [&](int begin, int end) {
    auto apply = relu ? (y16 != nullptr ? ApplyRowsBf16<true, true> : ApplyRowsBf16<true, false>)
                      : (y16 != nullptr ? ApplyRowsBf16<false, true> : ApplyRowsBf16<false, false>);
#if defined(LS_AVX512_BF16)
    if (HasAvx512Bf16()) {
      apply = relu ? (y16 != nullptr ? ApplyRowsBf16Avx512<true, true>
                                     : ApplyRowsBf16Avx512<true, false>)
                   : (y16 != nullptr ? ApplyRowsBf16Avx512<false, true>
                                     : ApplyRowsBf16Avx512<false, false>);
    }
#endif
    apply(begin, end, cols, x, mean, mul.data(), bias, y, y16);
  });
}

void BatchNormUpdateStats(int cols, float momentum, float one_minus_momentum, const float* mean,
                          const float* var, float* ra_mean, float* ra_var) {
  for (int c = 0; c < cols; ++c) {
    ra_mean[c] = momentum * ra_mean[c] + one_minus_momentum * mean[c];
    ra_var[c] = momentum * ra_var[c] + one_minus_momentum * var[c];
  }
}

void BatchNormBackwardReduce(int threads, int rows, int cols, float epsilon, const float* x,
                             const float* dy, const float* mean, const float* var, float* partials,
                             float* sums, float* dscale, float* dbias, bool round_x) {
  ColumnSums2(
      threads, rows, cols,
      [&](int begin, int end, float* p) {
        round_x ? GradSums<true>(begin, end, cols, x, dy, mean, p)
                : GradSums<false>(begin, end, cols, x, dy, mean, p);
      },
      partials, sums);
  for (int c = 0; c < cols; ++c) {
    if (dbias != nullptr) dbias[c] = sums[c];
    if (dscale != nullptr) dscale[c] = sums[cols + c] * math::BatchNormRsqrt(var[c], epsilon);
  }
}

namespace {

template <typename D>
void BackwardApply(int threads, int rows, int cols, float epsilon, int replicas, const float* x,
                   const float* dy, const float* moments, const float* var, const float* scale,
                   const float* sums, D* dx) {
  // Per column, as four arrays (so that the rows' loop vectorizes across columns).
  std::vector<float> mean(cols), mul(cols), mean_dy(cols), k(cols);
  for (int c = 0; c < cols; ++c) {
    const math::BatchNormGrad g =
        math::BatchNormGradFor(moments[c], moments[cols + c], var[c], epsilon, scale, c, sums[c],
                               sums[cols + c], replicas, rows);
    mean[c] = g.mean, mul[c] = g.mul, mean_dy[c] = g.mean_dy, k[c] = g.k;
  }
  auto apply = BackwardApplyRows<D>;
#if defined(LS_AVX512_BF16)
  if constexpr (std::is_same_v<D, Bf16>) {
    if (HasAvx512Bf16()) apply = BackwardApplyRowsBf16Avx512;
  }
#endif
  ParallelRows(threads, rows, cols, [&](int begin, int end) {
    apply(begin, end, cols, mean.data(), mul.data(), mean_dy.data(), k.data(), x, dy, dx);
  });
}

}  // namespace

void BatchNormBackwardApply(int threads, int rows, int cols, float epsilon, int replicas,
                            const float* x, const float* dy, const float* moments, const float* var,
                            const float* scale, const float* sums, float* dx) {
  BackwardApply(threads, rows, cols, epsilon, replicas, x, dy, moments, var, scale, sums, dx);
}

void BatchNormBackwardApplyBf16(int threads, int rows, int cols, float epsilon, int replicas,
                                const float* x, const float* dy, const float* moments,
                                const float* var, const float* scale, const float* sums,
                                Bf16* dx16) {
  BackwardApply(threads, rows, cols, epsilon, replicas, x, dy, moments, var, scale, sums, dx16);
}

}  // namespace lockstep::cpu
