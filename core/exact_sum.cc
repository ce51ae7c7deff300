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

}  // namespace

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

absl::Status ExactSum::Sum(std::span<const float* const> local, size_t n, float* out,
                           const CollectiveOptions& options, std::span<int64_t> also_max) {
  if (local.empty()) return absl::InvalidArgumentError("exact sum: no local contributions");
  if (n > 0 && (out == nullptr || std::find(local.begin(), local.end(), nullptr) != local.end())) {
    return absl::InvalidArgumentError(absl::StrCat("exact sum of ", n, " floats: null data"));
  }
  const bool distributed = collective_ != nullptr && collective_->size() > 1;
  const size_t blocks = (n + block_ - 1) / block_;
  exponents_.resize(blocks + also_max.size());
  for (size_t b = 0; b < blocks; ++b) {
    exponents_[b] = BlockExponent(local, b * block_, std::min(n, (b + 1) * block_));
  }
  std::copy(also_max.begin(), also_max.end(), exponents_.begin() + blocks);
  if (distributed && !exponents_.empty()) {
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
  if (distributed) {
    RETURN_IF_ERROR(collective_->AllReduceInt64(fixed_.data(), n, ReduceOp::kSum, options));
  }
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
