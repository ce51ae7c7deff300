// DeviceExactSum: the order-free exact sum for contributions in a device backend's
// memory. Contract: exact_sum_device.h.
#include "core/exact_sum_device.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace lockstep {

DeviceExactSum::DeviceExactSum(Backend* backend, Collective* collective, int contributions,
                               size_t block)
    : backend_(backend),
      collective_(collective),
      contributions_(std::max(contributions, 1)),
      block_(std::max<size_t>(block, 1)) {}

absl::Status DeviceExactSum::Reserve(size_t blocks, size_t extra, size_t n) {
  const size_t exponent_bytes = (blocks + extra) * sizeof(int64_t);
  if (exponents_.bytes() < exponent_bytes) {
    ASSIGN_OR_RETURN(exponents_, backend_->Allocate(exponent_bytes));
  }
  if (fixed_.bytes() < n * sizeof(int64_t)) {
    ASSIGN_OR_RETURN(fixed_, backend_->Allocate(n * sizeof(int64_t)));
  }
  return absl::OkStatus();
}

absl::Status DeviceExactSum::Sum(std::span<const float* const> local, size_t n, float* out,
                                 const CollectiveOptions& options, std::span<int64_t> also_max) {
  if (local.empty()) return absl::InvalidArgumentError("exact sum: no local contributions");
  if (n > 0 && (out == nullptr || std::find(local.begin(), local.end(), nullptr) != local.end())) {
    return absl::InvalidArgumentError(absl::StrCat("exact sum of ", n, " floats: null data"));
  }
  const bool distributed = collective_ != nullptr && collective_->size() > 1;
  const size_t blocks = (n + block_ - 1) / block_;
  const size_t extra = distributed ? also_max.size() : 0;
  RETURN_IF_ERROR(Reserve(blocks, extra, n));
  int64_t* exponents = exponents_.as<int64_t>();
  // Step 1: the blocks' exponents over the local contributions, then over every rank's
  // (the also_max values after them, in the same max all-reduce).
  for (size_t j = 0; j < local.size(); ++j) {
    RETURN_IF_ERROR(backend_->ExactBlockExponents(n, block_, local[j], j > 0, exponents));
  }
  if (extra > 0) {
    RETURN_IF_ERROR(
        backend_->CopyToDevice(exponents + blocks, also_max.data(), extra * sizeof(int64_t)));
  }
  if (distributed && blocks + extra > 0) {
    RETURN_IF_ERROR(
        collective_->AllReduceInt64(exponents, blocks + extra, ReduceOp::kMax, options));
  }
  if (extra > 0) {
    RETURN_IF_ERROR(
        backend_->CopyToHost(also_max.data(), exponents + blocks, extra * sizeof(int64_t)));
  }
  if (n == 0) return absl::OkStatus();
  // Steps 2 and 3: the local contributions as int64s, added, then summed over the ranks.
  const int h = ExactSum::Headroom(contributions_);
  int64_t* fixed = fixed_.as<int64_t>();
  for (size_t j = 0; j < local.size(); ++j) {
    RETURN_IF_ERROR(backend_->ExactToFixed(n, block_, h, exponents, local[j], j > 0, fixed));
  }
  if (distributed) {
    RETURN_IF_ERROR(collective_->AllReduceInt64(fixed, n, ReduceOp::kSum, options));
  }
  // Step 4.
  return backend_->ExactFromFixed(n, block_, h, exponents, fixed, out);
}

}  // namespace lockstep
