#include "core/causal_heads.h"

#include <cstdint>
#include <utility>

#include "core/status_macros.h"

namespace lockstep {
namespace {

// Element (row, col) of op(o) as an operand.
template <typename T>
Backend::HeadsOperand<T> At(Backend::HeadsOperand<T> o, bool trans, int row, int col) {
  o.p += trans ? int64_t{col} * o.ld + row : int64_t{row} * o.ld + col;
  return o;
}

}  // namespace

absl::Status CausalGemmHeadsBf16(Backend& backend, CausalZeros zeros, bool ta, bool tb, int m,
                                 int n, int k, Backend::HeadsOperand<const Bf16> a,
                                 Backend::HeadsOperand<const Bf16> b,
                                 Backend::HeadsOperand<float> c, int count, int heads) {
  if (zeros == CausalZeros::kNone) {
    return backend.GemmHeadsBf16(ta, tb, m, n, k, 1.0f, a, b, 0.0f, c, count, heads);
  }
  const int half = m / 2;
  for (const auto& [r0, r1] : {std::pair{0, half}, std::pair{half, m}}) {
    const int n1 = zeros == CausalZeros::kScores ? r1 : n;
    const int k0 = zeros == CausalZeros::kAt ? r0 : 0, k1 = zeros == CausalZeros::kA ? r1 : k;
    RETURN_IF_ERROR(backend.GemmHeadsBf16(ta, tb, r1 - r0, n1, k1 - k0, 1.0f, At(a, ta, r0, k0),
                                          At(b, tb, k0, 0), 0.0f, At(c, false, r0, 0), count,
                                          heads));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
