// HeadsGemmBf16 against the sum its header states, element by element and bit for bit:
// over pairs along k in order, the odd element's product added before the even one's, in
// float32 from 0. Skipped where the CPU has no AVX-512 BF16.
#include "workers/cpu/heads_gemm_bf16.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "workers/cpu/cpu_bf16_testing.h"
#include "workers/cpu/cpu_testing.h"

namespace lockstep {
namespace {

using testing::RandomNormal;
using testing::ToBf16;

struct Shape {
  int m, n, k;
};

class HeadsGemmBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::HeadsGemmBf16Takes(1, 1, 1)) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  }
};

float At(const std::vector<Bf16>& x, int64_t i) { return Bf16Float(x[i].bits); }

TEST_F(HeadsGemmBf16, IsItsPairwiseSumBitForBit) {
  // A ViT's (17 tokens, 16 features), a decoder's halves (64 x 128 x 32), odd sizes, the
  // edges of a vector and of a tile, one element; 3 samples of 2 heads, operands apart.
  const Shape shapes[] = {{17, 17, 16}, {17, 16, 17}, {64, 128, 32}, {5, 33, 7},  {16, 18, 3},
                          {1, 1, 1},    {40, 19, 33}, {3, 65, 64},   {21, 2, 40}, {256, 20, 2}};
  const int count = 3, heads = 2;
  for (const Shape& s : shapes) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 0.25f}}) {
          SCOPED_TRACE(::testing::Message() << s.m << " x " << s.n << " x " << s.k << ", ta " << ta
                                            << ", tb " << tb << ", alpha " << alpha);
          // op(a) m x k: stored k x m (ta) or m x k, leading dimension padded by 3.
          const int lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 3, ldc = s.n + 1;
          const int64_t a_size = int64_t{lda} * (ta ? s.k : s.m),
                        b_size = int64_t{ldb} * (tb ? s.n : s.k);
          const int64_t c_size = int64_t{ldc} * s.m;
          // Heads side by side, samples after them with a gap.
          const Backend::HeadsOperand<const Bf16> a_at{nullptr, lda, heads * a_size + 7, a_size};
          const Backend::HeadsOperand<const Bf16> b_at{nullptr, ldb, heads * b_size + 5, b_size};
          const std::vector<Bf16> a = ToBf16(RandomNormal(count * a_at.stride, s.m + 1));
          const std::vector<Bf16> b = ToBf16(RandomNormal(count * b_at.stride, s.n + 2));
          const int64_t c_stride = heads * c_size + 2;
          const std::vector<float> c0 = RandomNormal(count * c_stride, s.k + 3);
          std::vector<float> want = c0;
          for (int i = 0; i < count; ++i) {
            for (int h = 0; h < heads; ++h) {
              const int64_t ao = i * a_at.stride + h * a_at.head,
                            bo = i * b_at.stride + h * b_at.head;
              auto av = [&](int r, int p) { return At(a, ao + (ta ? p * lda + r : r * lda + p)); };
              auto bv = [&](int p, int j) { return At(b, bo + (tb ? j * ldb + p : p * ldb + j)); };
              for (int r = 0; r < s.m; ++r) {
                for (int j = 0; j < s.n; ++j) {
                  float sum = 0.0f;
                  for (int p = 0; p < s.k; p += 2) {
                    sum = sum + (p + 1 < s.k ? av(r, p + 1) * bv(p + 1, j) : 0.0f);
                    sum = sum + av(r, p) * bv(p, j);
                  }
                  float& y = want[i * c_stride + h * c_size + int64_t{r} * ldc + j];
                  const float v = alpha == 1.0f ? sum : alpha * sum;
                  y = beta != 0.0f ? v + beta * y : v;
                }
              }
            }
          }
          for (const int threads : {1, 2, 3}) {
            std::vector<float> c = c0;
            cpu::HeadsGemmBf16(threads, ta, tb, s.m, s.n, s.k, alpha,
                               {a.data(), lda, a_at.stride, a_at.head},
                               {b.data(), ldb, b_at.stride, b_at.head}, beta,
                               {c.data(), ldc, c_stride, c_size}, count, heads);
            for (size_t e = 0; e < c.size(); ++e) {  // the gaps and padding untouched too
              ASSERT_EQ(FloatBits(c[e]), FloatBits(want[e]))
                  << "element " << e << " of " << c.size() << ", " << threads
                  << " threads: " << c[e] << " against " << want[e];
            }
          }
        }
      }
    }
  }
}

TEST_F(HeadsGemmBf16, SubnormalOperandsCountAsZero) {
  // a = [subnormal, 1], b = [2^100, 1]: the first product would be 2^-33 exactly.
  const std::vector<Bf16> a = {Bf16{0x0001}, Bf16{Bf16Bits(1.0f)}};
  const std::vector<Bf16> b = {Bf16{Bf16Bits(0x1p100f)}, Bf16{Bf16Bits(1.0f)}};
  float c = -1.0f;
  cpu::HeadsGemmBf16(1, false, false, 1, 1, 2, 1.0f, {a.data(), 2, 0, 0}, {b.data(), 1, 0, 0}, 0.0f,
                     {&c, 1, 0, 0}, 1, 1);
  EXPECT_EQ(c, 1.0f);
}

}  // namespace
}  // namespace lockstep
