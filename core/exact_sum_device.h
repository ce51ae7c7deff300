// DeviceExactSum: core/exact_sum.h's order-free sum for contributions in the memory of a
// backend that is not the host's (a CUDA worker's logical replicas). The same four steps,
// their arithmetic as the backend's kernels (Backend::ExactBlockExponents, ExactToFixed,
// ExactFromFixed) and both int64 all-reduces on the backend's memory (the NCCL
// collective's AllReduceInt64), so nothing but `also_max` crosses to the host. The result
// is ExactSum's fixed-point result bit for bit (the same scale, the same integers, the same
// conversions), hence a function of the V contributions alone, on any number of ranks and
// whichever backend computes it.
//
// Thread safety: none; one thread drives it (and its backend and collective).
#ifndef LOCKSTEP_CORE_EXACT_SUM_DEVICE_H_
#define LOCKSTEP_CORE_EXACT_SUM_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/backend.h"
#include "core/collective.h"
#include "core/exact_sum.h"

namespace lockstep {

class DeviceExactSum {
 public:
  // `backend` holds the contributions; `collective` (null: this rank holds all of them)
  // reduces int64s in its memory. Both must outlive this object. `contributions`: V >= 1.
  DeviceExactSum(Backend* backend, Collective* collective, int contributions,
                 size_t block = ExactSum::kDefaultBlock);

  // ExactSum::Sum's contract, with `local` and `out` in the backend's memory (out may be
  // one of local) and `also_max` on the host. Errors: INVALID_ARGUMENT for no
  // contributions or null data with n > 0; the backend's (RESOURCE_EXHAUSTED when its
  // scratch cannot grow) and the collective's as they come.
  absl::Status Sum(std::span<const float* const> local, size_t n, float* out,
                   const CollectiveOptions& options, std::span<int64_t> also_max = {});

 private:
  // Grows the scratch to `blocks` exponents (plus `extra` int64s after them) and n
  // fixed-point values.
  absl::Status Reserve(size_t blocks, size_t extra, size_t n);

  Backend* const backend_;
  Collective* const collective_;
  const int contributions_;
  const size_t block_;
  Buffer exponents_, fixed_;  // backend memory, kept between calls
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_EXACT_SUM_DEVICE_H_
