// ExactSum: an order-independent sum of float32 contributions across ranks. Contract: exact_sum.h.
#include "core/exact_sum.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace lockstep {
namespace {

// round(x) to the nearest int64, ties to even (the default rounding mode), for |x| < 2^63:
// std::llrint, which is a library call where math errno is on; SSE2's conversion (the
// same rounding, inline) where there is one.
inline int64_t RoundToInt64(double x) {
#if defined(__SSE2__)
  return _mm_cvtsd_si64(_mm_set_sd(x));
#else
  return std::llrint(x);
#endif
}

// The hot loops below are compiled for AVX-512, AVX2 and baseline x86-64 and picked at
// load time, as workers/cpu/multiversion.h does for the CPU kernels; vectorizing changes
// no result (no reassociation: each element's operations are the same, in order).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LS_EXACT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LS_EXACT_CLONES
#endif

// |x|'s bits (they order as the magnitudes do, inf and NaN above every finite one).
inline uint32_t Magnitude(float x) { return absl::bit_cast<uint32_t>(x) & 0x7fffffffu; }

// A block's largest |x| (step 1's exponent) and smallest nonzero |x| (the coarsest
// contribution's grid) over its contributions, as bits; for two contributions also
// whether a float sum is tiny: nonzero and at most float's smallest normal in magnitude,
// where the fixed-point result is rounded twice (to 24 bits, then to the subnormal grid)
// and one rounding may differ. The loops keep unsigned minima and maxima only (|x| - 1
// wraps a zero to the top), which vectorize.
constexpr uint32_t kMinNormal = 0x00800000;
struct BlockScan {
  uint32_t largest = 0, smallest_minus_1 = UINT32_MAX;  // UINT32_MAX: every |x| is 0
  bool tiny = false;
};

LS_EXACT_CLONES void ScanOne(const float* x, size_t n, BlockScan& scan) {
  uint32_t largest = scan.largest, smallest = scan.smallest_minus_1;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t m = Magnitude(x[i]);
    largest = std::max(largest, m);
    smallest = std::min(smallest, m - 1u);
  }
  scan.largest = largest;
  scan.smallest_minus_1 = smallest;
}

LS_EXACT_CLONES BlockScan ScanPair(const float* a, const float* b, size_t n) {
  uint32_t largest = 0, smallest = UINT32_MAX, smallest_sum = UINT32_MAX;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t ma = Magnitude(a[i]), mb = Magnitude(b[i]);
    largest = std::max(largest, std::max(ma, mb));
    smallest = std::min(smallest, std::min(ma - 1u, mb - 1u));
    smallest_sum = std::min(smallest_sum, Magnitude(a[i] + b[i]) - 1u);
  }
  return {largest, smallest, smallest_sum < kMinNormal};
}

// out = a + b, + 0.0f: a sum of zeros is +0, as the fixed-point total 0 converts.
LS_EXACT_CLONES void AddPair(const float* a, const float* b, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = (a[i] + b[i]) + 0.0f;
}

LS_EXACT_CLONES void Accumulate(const float* x, size_t n, double* acc) {
  for (size_t i = 0; i < n; ++i) acc[i] += x[i];
}

// out = float(acc) + 0.0f; whether any is tiny (as ScanPair's).
LS_EXACT_CLONES bool RoundDoubles(const double* acc, size_t n, float* out) {
  uint32_t smallest = UINT32_MAX;
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(acc[i]) + 0.0f;
    smallest = std::min(smallest, Magnitude(out[i]) - 1u);
  }
  return smallest < kMinNormal;
}

// The int64 of step 2 for each contribution of element i, added (step 3) and converted
// back (step 4): the result as steps 2-4 write it.
float FixedPointElement(std::span<const float* const> all, size_t i, double scale, double unscale) {
  int64_t total = 0;
  for (const float* x : all) total += RoundToInt64(static_cast<double>(x[i]) * scale);
  // One correctly rounded int64 -> float conversion; the power of two is exact unless the
  // result is below float's normal range.
  return static_cast<float>(static_cast<double>(static_cast<float>(total)) * unscale);
}

// One block of Reduce: n <= block elements, each from all V contributions, into out.
// `acc` holds n doubles, `sums` n floats of scratch.
void ReduceBlock(int h, std::span<const float* const> all, size_t n, float* out, double* acc,
                 float* sums) {
  const bool pair = all.size() == 2;
  BlockScan scan;
  if (pair) {
    scan = ScanPair(all[0], all[1], n);
  } else {
    for (const float* x : all) ScanOne(x, n, scan);
  }
  if (scan.largest >= 0x7f800000u || scan.largest == 0) {
    std::fill_n(out, n, scan.largest == 0 ? 0.0f : std::numeric_limits<float>::quiet_NaN());
    return;
  }
  int e = 0;
  std::frexp(absl::bit_cast<float>(scan.largest), &e);
  const int s = 62 - h - e;
  // The smallest contribution is a multiple of 2^k; so is every other. Step 2 rounds
  // nothing where 2^(k + s) is an integer; then the fixed-point total is the true sum T.
  const int k = std::max(static_cast<int>((scan.smallest_minus_1 + 1) >> 23), 1) - 150;
  if (k + s >= 0) {
    if (pair && !scan.tiny) {  // T correctly rounded is the float sum of the two
      AddPair(all[0], all[1], n, out);
      return;
    }
    if (!pair && e + h - k <= 53) {
      // Every partial sum is a multiple of 2^k below 2^(e+h) in magnitude: exact in
      // double, in any order; one rounding to float.
      std::fill_n(acc, n, 0.0);
      for (const float* x : all) Accumulate(x, n, acc);
      if (!RoundDoubles(acc, n, sums)) {
        std::copy_n(sums, n, out);
        return;
      }
    }
  }
  const double scale = std::ldexp(1.0, s), unscale = std::ldexp(1.0, -s);
  for (size_t i = 0; i < n; ++i) out[i] = FixedPointElement(all, i, scale, unscale);
}

}  // namespace

void ExactSum::Reduce(int contributions, size_t block, std::span<const float* const> all, size_t n,
                      float* out) {
  if (all.empty() || n == 0) return;
  block = std::max<size_t>(block, 1);
  const int h = Headroom(std::max(contributions, static_cast<int>(all.size())));
  // Scratch for the V > 2 blocks, kept by the thread (a collective's runs Reduce too).
  thread_local std::vector<double> acc;
  thread_local std::vector<float> sums;
  if (all.size() != 2 && acc.size() < std::min(n, block)) {
    acc.resize(std::min(n, block));
    sums.resize(std::min(n, block));
  }
  std::vector<const float*> at(all.begin(), all.end());
  for (size_t b = 0; b < n; b += block) {
    const size_t len = std::min(n - b, block);
    for (size_t j = 0; j < all.size(); ++j) at[j] = all[j] + b;
    ReduceBlock(h, at, len, out + b, acc.data(), sums.data());
  }
}

ExactSum::ExactSum(Collective* collective, int contributions, size_t block)
    : collective_(collective),
      contributions_(std::max(contributions, 1)),
      block_(std::max<size_t>(block, 1)) {}

int ExactSum::Headroom(int contributions) {
  int h = 0;
  while ((int64_t{1} << h) < contributions) ++h;
  return h;
}

int64_t ExactSum::BlockExponent(std::span<const float* const> local, size_t begin, size_t end) {
  // The largest |x| as its bits (non-negative int32s order as the floats do, inf and NaN
  // above every finite one): a branch-free loop the compiler vectorizes.
  int32_t largest = 0;
  for (const float* x : local) {
    for (size_t i = begin; i < end; ++i) {
      largest = std::max(largest, absl::bit_cast<int32_t>(x[i]) & 0x7fffffff);
    }
  }
  if (largest >= 0x7f800000) return kNonFinite;
  if (largest == 0) return kZeroBlock;
  int e = 0;
  std::frexp(absl::bit_cast<float>(largest), &e);  // largest = f * 2^e, f in [0.5, 1): below 2^e
  return e;
}

bool ExactSum::ByChunks() const {
  return collective_ != nullptr && collective_->size() > 1 &&
         collective_->CanAllReduceBy(contributions_, block_);
}

absl::Status ExactSum::Sum(std::span<const float* const> local, size_t n, float* out,
                           const CollectiveOptions& options, std::span<int64_t> also_max) {
  if (local.empty()) return absl::InvalidArgumentError("exact sum: no local contributions");
  if (n > 0 && (out == nullptr || std::find(local.begin(), local.end(), nullptr) != local.end())) {
    return absl::InvalidArgumentError(absl::StrCat("exact sum of ", n, " floats: null data"));
  }
  if (collective_ == nullptr || collective_->size() == 1) {
    Reduce(contributions_, block_, local, n, out);  // all are here; the max is this rank's
    return absl::OkStatus();
  }
  if (!ByChunks()) return SumFixedPoint(local, n, out, options, also_max);
  if (!also_max.empty()) {
    RETURN_IF_ERROR(
        collective_->AllReduceInt64(also_max.data(), also_max.size(), ReduceOp::kMax, options));
  }
  if (n == 0) return absl::OkStatus();
  return collective_->AllReduceBy(local, n, out, ChunkReducer(), options);
}

absl::StatusOr<CollectiveTicket> ExactSum::StartSum(std::span<const float* const> local, size_t n,
                                                    float* out, const CollectiveOptions& options) {
  if (!ByChunks() || n == 0) {
    RETURN_IF_ERROR(Sum(local, n, out, options));
    return CollectiveTicket{0};
  }
  if (std::find(local.begin(), local.end(), nullptr) != local.end() || out == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("exact sum of ", n, " floats: null data"));
  }
  return collective_->StartAllReduceBy(local, n, out, ChunkReducer(), options);
}

ChunkReduction ExactSum::ChunkReducer() const {
  return {contributions_, block_,
          [v = contributions_, block = block_](std::span<const float* const> all, size_t n,
                                               float* out) { Reduce(v, block, all, n, out); }};
}

absl::Status ExactSum::SumFixedPoint(std::span<const float* const> local, size_t n, float* out,
                                     const CollectiveOptions& options,
                                     std::span<int64_t> also_max) {
  const size_t blocks = (n + block_ - 1) / block_;
  exponents_.resize(blocks + also_max.size());
  for (size_t b = 0; b < blocks; ++b) {
    exponents_[b] = BlockExponent(local, b * block_, std::min(n, (b + 1) * block_));
  }
  std::copy(also_max.begin(), also_max.end(), exponents_.begin() + blocks);
  if (!exponents_.empty()) {
    RETURN_IF_ERROR(
        collective_->AllReduceInt64(exponents_.data(), exponents_.size(), ReduceOp::kMax, options));
  }
  std::copy(exponents_.begin() + blocks, exponents_.end(), also_max.begin());
  if (n == 0) return absl::OkStatus();
  const int h = Headroom(contributions_);
  fixed_.resize(n);
  for (size_t b = 0; b < blocks; ++b) {
    const int64_t e = exponents_[b];
    const size_t end = std::min(n, (b + 1) * block_);
    if (e == kZeroBlock || e == kNonFinite) {
      std::fill(fixed_.begin() + b * block_, fixed_.begin() + end, 0);
      continue;
    }
    // x * 2^s is exact in double (a power of two times 24 significant bits, s in range).
    const double scale = std::ldexp(1.0, static_cast<int>(62 - h - e));
    for (size_t i = b * block_; i < end; ++i) {
      fixed_[i] = RoundToInt64(static_cast<double>(local[0][i]) * scale);
    }
    for (const float* x : local.subspan(1)) {
      for (size_t i = b * block_; i < end; ++i) {
        fixed_[i] += RoundToInt64(static_cast<double>(x[i]) * scale);
      }
    }
  }
  RETURN_IF_ERROR(collective_->AllReduceInt64(fixed_.data(), n, ReduceOp::kSum, options));
  for (size_t b = 0; b < blocks; ++b) {
    const int64_t e = exponents_[b];
    const size_t end = std::min(n, (b + 1) * block_);
    if (e == kZeroBlock || e == kNonFinite) {
      std::fill(out + b * block_, out + end,
                e == kZeroBlock ? 0.0f : std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const double unscale = std::ldexp(1.0, static_cast<int>(e + h - 62));
    for (size_t i = b * block_; i < end; ++i) {
      // One correctly rounded int64 -> float conversion; the power of two is exact unless
      // the result is below float's normal range.
      out[i] = static_cast<float>(static_cast<double>(static_cast<float>(fixed_[i])) * unscale);
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
