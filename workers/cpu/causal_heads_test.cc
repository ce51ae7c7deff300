// CausalGemmHeadsBf16 on the CPU backend: each way of leaving out a causal layer's zeros
// gives the same bits as the whole product (GemmHeadsBf16), on short sequences and long
// ones. Skipped where the CPU has no bfloat16 kernels.
#include "core/causal_heads.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/cpu/cpu_bf16_testing.h"
#include "workers/cpu/cpu_testing.h"

namespace lockstep {
namespace {

using testing::CpuBf16;
using testing::ToBf16;

class CausalGemmHeads : public CpuBf16 {};

TEST_F(CausalGemmHeads, LeavesOutTheZerosWithTheSameBits) {
  const int b = 3, h = 2;
  for (const auto& [t, d] : {std::pair{37, 8}, std::pair{128, 32}}) {
    SCOPED_TRACE(::testing::Message() << "t " << t << " d " << d);
    const int hd = h * d;
    const int64_t sample = int64_t{t} * hd, tt = int64_t{t} * t;
    // Activations [b, t, h * d]; weights [b, h, t, t], zero past each row's diagonal.
    const std::vector<Bf16> x = ToBf16(testing::RandomNormal(b * sample, 1));
    std::vector<float> wf = testing::RandomNormal(b * h * tt, 2);
    for (int64_t r = 0; r < b * h * t; ++r) {
      for (int c = r % t + 1; c < t; ++c) wf[r * t + c] = 0.0f;
    }
    const std::vector<Bf16> w = ToBf16(wf);
    const Backend::HeadsOperand<const Bf16> xs{x.data(), hd, sample, d},
        ws{w.data(), t, h * tt, tt};
    auto be = NewCpuBackend(2);
    auto run = [&](CausalZeros z, bool ta, bool tb, int m, int n, int k, auto a, auto bo,
                   std::vector<float>& c, int ldc, int64_t stride, int64_t head) {
      c.assign(b * stride, -1.0f);
      return CausalGemmHeadsBf16(*be, z, ta, tb, m, n, k, a, bo, {c.data(), ldc, stride, head}, b,
                                 h);
    };
    std::vector<float> want, got;
    // Scores x x^T: the entries on and below the diagonal.
    ASSERT_OK(run(CausalZeros::kNone, false, true, t, t, d, xs, xs, want, t, h * tt, tt));
    ASSERT_OK(run(CausalZeros::kScores, false, true, t, t, d, xs, xs, got, t, h * tt, tt));
    for (int64_t r = 0; r < b * h * t; ++r) {
      for (int c = 0; c <= r % t; ++c) ASSERT_EQ(got[r * t + c], want[r * t + c]) << r << " " << c;
    }
    // w x and w^T x: every entry.
    for (const bool ta : {false, true}) {
      ASSERT_OK(run(CausalZeros::kNone, ta, false, t, d, t, ws, xs, want, hd, sample, d));
      ASSERT_OK(run(ta ? CausalZeros::kAt : CausalZeros::kA, ta, false, t, d, t, ws, xs, got, hd,
                    sample, d));
      EXPECT_EQ(got, want) << ta;
    }
  }
}

}  // namespace
}  // namespace lockstep
