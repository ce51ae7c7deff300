// The CPU backend's elementwise and row kernels (cpu_elementwise.h).
#include "workers/cpu/cpu_elementwise.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/base/casts.h"
#include "core/bfloat16.h"
#include "workers/cpu/bf16_vectors.h"
#include "workers/cpu/cpu_bf16.h"
#include "workers/cpu/double_column_sums.h"
#include "workers/cpu/multiversion.h"
#include "workers/cpu/parallel_min.h"

namespace lockstep::cpu {
namespace {

LS_MULTIVERSION void ReluRange(float* x, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

LS_MULTIVERSION void ReluBackwardRange(const float* y, float* dy, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

LS_MULTIVERSION void AddRange(const float* a, const float* b, float* y, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) y[i] = a[i] + b[i];
}

LS_MULTIVERSION void DivideRange(float d, float* x, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) x[i] /= d;
}

LS_MULTIVERSION void DivideBf16Range(float d, const float* x, Bf16* y16, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) y16[i].bits = Bf16Bits(x[i] / d);
}

#if defined(LS_AVX512_BF16)
#pragma GCC diagnostic push  // GCC 12 flags its own intrinsics' _mm512_undefined_*
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// DivideBf16Range in AVX-512 BF16, 16 at a time, rounded by vcvtneps2bf16 (1.27x GCC's
// x86-64-v4 clone of that loop, which rounds by the integer formula: cpu-passes.md).
LS_AVX512_BF16 void DivideBf16Avx512(float d, const float* x, Bf16* y16, size_t begin, size_t end) {
  const __m512 divisor = _mm512_set1_ps(d);
  for (size_t i = begin; i < end; i += 16) {
    const __mmask16 m = FirstLanes(end - i);
    const __m512 q = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), divisor);
    _mm256_mask_storeu_epi16(y16 + i, m, Bf16Bits16(q));
  }
}
#pragma GCC diagnostic pop
#endif

// Dropout of elements [begin, end) of n, the mask from random_bits(key, n), in one pass:
// y[i] = x / keep (in bfloat16 bf16(x / bf16(keep))) where element i is kept, else +0.0,
// the division done for every element and the select a bit mask (a conditional division
// or a ternary compiles to a branch per element, which the random mask mispredicts, and no
// vector loop). Where kTwin (bfloat16), y16 receives y as Bf16 too. x may be y.
template <bool kBf16, bool kTwin = false>
LS_MULTIVERSION void DropoutRange(rng::Key k, rng::Impl impl, size_t n, float keep, const float* x,
                                  float* y, uint8_t* mask, Bf16* y16, size_t begin, size_t end) {
  static_assert(kBf16 || !kTwin);
  const float keep16 = RoundBf16(keep);
  auto select = [&](size_t i, uint32_t bits) {
    const uint32_t m = rng::BitsToUnitFloat(bits) < keep ? 1u : 0u;
    const float v = kBf16 ? RoundBf16(x[i] / keep16) : x[i] / keep;
    const uint32_t out = absl::bit_cast<uint32_t>(v) & (0u - m);
    mask[i] = static_cast<uint8_t>(m);
    y[i] = absl::bit_cast<float>(out);
    if constexpr (kTwin) y16[i].bits = static_cast<uint16_t>(out >> 16);
  };
  if (impl == rng::Impl::kPartitionable && end <= (uint64_t{1} << 32)) {
    // Every counter's high word is 0: 32-bit counters, hashed a block at a time in a loop
    // of their own, 16 per AVX-512 vector (with 64-bit counters, or the byte mask in the
    // same loop, GCC hashes 8).
    constexpr uint32_t kBlock = 256;
    uint32_t bits[kBlock];
    for (size_t b = begin; b < end; b += kBlock) {
      const uint32_t m = static_cast<uint32_t>(std::min<size_t>(kBlock, end - b));
      const uint32_t b32 = static_cast<uint32_t>(b);
      for (uint32_t j = 0; j < m; ++j) bits[j] = rng::PartitionableBitsAt(k, 0u, b32 + j);
      for (uint32_t j = 0; j < m; ++j) select(b + j, bits[j]);
    }
  } else if (impl == rng::Impl::kPartitionable) {
    for (size_t i = begin; i < end; ++i) {
      select(i, rng::RandomBitsAt(k, rng::Impl::kPartitionable, i, n));
    }
  } else {
    for (size_t i = begin; i < end; ++i) select(i, rng::RandomBitsAt(k, rng::Impl::kLegacy, i, n));
  }
}

// Unconditional division, then a select as a bit mask (dy / keep or +0.0): a ternary here
// compiles to a branch per element, which the random mask mispredicts, and no vector
// loop. dx may be dy.
LS_MULTIVERSION void DropoutBackwardRange(float keep, const uint8_t* mask, const float* dy,
                                          float* dx, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    const uint32_t keep_bits = 0u - static_cast<uint32_t>(mask[i] != 0);
    dx[i] = absl::bit_cast<float>(absl::bit_cast<uint32_t>(dy[i] / keep) & keep_bits);
  }
}

LS_MULTIVERSION void BiasAddRows(int cols, const float* bias, float* y, size_t begin, size_t end) {
  for (size_t r = begin; r < end; ++r) {
    float* row = y + r * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

// sum[c] = column sums of rows [begin, end), top to bottom, accumulated in double; dy16
// (unless null) receives those rows as bfloat16.
LS_MULTIVERSION void BlockColumnSums(int cols, const float* dy, double* sum, Bf16* dy16,
                                     size_t begin, size_t end) {
  if (dy16 == nullptr) return DoubleColumnSums(cols, dy, sum, begin, end);
  std::fill_n(sum, cols, 0.0);
  for (size_t r0 = begin; r0 < end; r0 += kColumnSumTileRows) {  // each tile while in L1
    const size_t r1 = std::min(end, r0 + kColumnSumTileRows);
    AddDoubleColumnSums(cols, dy, sum, r0, r1);
    ToBf16Rows(dy + r0 * cols, dy16 + r0 * cols, (r1 - r0) * cols);
  }
}

}  // namespace

void Relu(int threads, size_t n, float* x) {
  ParallelFor(threads, n, [&](size_t b, size_t e) { ReluRange(x, b, e); });
}

void ReluBackward(int threads, size_t n, const float* y, float* dy) {
  ParallelFor(threads, n, [&](size_t b, size_t e) { ReluBackwardRange(y, dy, b, e); });
}

void Add(int threads, size_t n, const float* a, const float* b, float* y) {
  ParallelFor(threads, n, [&](size_t lo, size_t hi) { AddRange(a, b, y, lo, hi); });
}

void Copy(int threads, size_t n, const float* x, float* y) {
  ParallelFor(threads, n,
              [&](size_t b, size_t e) { std::memcpy(y + b, x + b, (e - b) * sizeof(float)); });
}

void Divide(int threads, size_t n, float d, float* x) {
  ParallelFor(threads, n, [&](size_t b, size_t e) { DivideRange(d, x, b, e); });
}

void DivideBf16(int threads, size_t n, float d, const float* x, Bf16* y16) {
  auto range = DivideBf16Range;
#if defined(LS_AVX512_BF16)
  if (HasAvx512Bf16()) range = DivideBf16Avx512;
#endif
  ParallelFor(threads, n, [&](size_t b, size_t e) { range(d, x, y16, b, e); });
}

void Dropout(int threads, size_t n, float keep, rng::Key key, rng::Impl impl, const float* x,
             float* y, uint8_t* mask) {
  ParallelFor(threads, n, [&](size_t begin, size_t end) {
    DropoutRange<false>(key, impl, n, keep, x, y, mask, nullptr, begin, end);
  });
}

void DropoutBf16(int threads, size_t n, float keep, rng::Key key, rng::Impl impl, const float* x,
                 float* y, uint8_t* mask, Bf16* y16) {
  const auto range = y16 != nullptr ? DropoutRange<true, true> : DropoutRange<true, false>;
  ParallelFor(threads, n, [&](size_t begin, size_t end) {
    range(key, impl, n, keep, x, y, mask, y16, begin, end);
  });
}

void DropoutBackward(int threads, size_t n, float keep, const uint8_t* mask, const float* dy,
                     float* dx) {
  ParallelFor(threads, n,
              [&](size_t b, size_t e) { DropoutBackwardRange(keep, mask, dy, dx, b, e); });
}

void BiasAdd(int threads, int rows, int cols, const float* bias, float* y) {
  if (static_cast<size_t>(rows) * cols <= kParallelMin) {
    BiasAddRows(cols, bias, y, 0, rows);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const size_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    BiasAddRows(cols, bias, y, rows * t / nt, rows * (t + 1) / nt);
  }
}

void BiasGrad(int threads, int rows, int cols, const float* dy, float* db, Bf16* dy16) {
  // Partial sums in double over a fixed number of row blocks, combined in block order and
  // rounded once at the end: the same bits whatever the thread count.
  constexpr int kBlocks = 8;
  const int blocks = static_cast<size_t>(rows) * cols <= kParallelMin ? 1 : kBlocks;
  std::vector<double> partial(static_cast<size_t>(blocks) * cols);
#pragma omp parallel for num_threads(threads) schedule(static) if (blocks > 1)
  for (int blk = 0; blk < blocks; ++blk) {
    BlockColumnSums(cols, dy, partial.data() + static_cast<size_t>(blk) * cols, dy16,
                    static_cast<size_t>(rows) * blk / blocks,
                    static_cast<size_t>(rows) * (blk + 1) / blocks);
  }
  for (int c = 0; c < cols; ++c) {
    double sum = 0;
    for (int blk = 0; blk < blocks; ++blk) sum += partial[static_cast<size_t>(blk) * cols + c];
    db[c] = static_cast<float>(sum);
  }
}

void SoftmaxCrossEntropy(int threads, int b, int classes, const float* logits,
                         const int32_t* labels, float* loss, float* dlogits, float* correct) {
  const float inv_b = 1.0f / static_cast<float>(b);
#pragma omp parallel for num_threads(threads) \
    schedule(static) if (static_cast <size_t>(b) * classes > kParallelMin)
  for (int r = 0; r < b; ++r) {
    const float* z = logits + static_cast<size_t>(r) * classes;
    float* dz = dlogits + static_cast<size_t>(r) * classes;
    int argmax = 0;
    for (int c = 1; c < classes; ++c) argmax = z[c] > z[argmax] ? c : argmax;
    const float mx = z[argmax];
    float sum = 0.0f;
    for (int c = 0; c < classes; ++c) sum += std::exp(z[c] - mx);
    const float lse = std::log(sum);
    const int label = labels[r];
    loss[r] = -((z[label] - mx) - lse);
    for (int c = 0; c < classes; ++c) {
      const float softmax = std::exp((z[c] - mx) - lse);
      dz[c] = (softmax - (c == label ? 1.0f : 0.0f)) * inv_b;
    }
    correct[r] = argmax == label ? 1.0f : 0.0f;
  }
}

void GatherRows(int threads, size_t row, int n, const int32_t* idx, const float* table,
                float* out) {
#pragma omp parallel for num_threads(threads) schedule(static) if (row * n > kParallelMin)
  for (int i = 0; i < n; ++i) {
    std::memcpy(out + i * row, table + static_cast<size_t>(idx[i]) * row, row * sizeof(float));
  }
}

void GatherLabels(int n, const int32_t* idx, const int32_t* table, int32_t* out) {
  for (int i = 0; i < n; ++i) out[i] = table[idx[i]];
}

}  // namespace lockstep::cpu
