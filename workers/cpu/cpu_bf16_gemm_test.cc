// The CPU backend's bfloat16 GEMMs and convolutions: float32 sums of the exact products of
// their bfloat16 operands (against float32 arithmetic on the same values), per head and
// per sample as one product each, at a ViT's per-head sizes too. Skipped where the CPU has
// no bfloat16 kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/cpu/cpu_bf16.h"
#include "workers/cpu/cpu_bf16_testing.h"
#include "workers/cpu/cpu_testing.h"

namespace lockstep {
namespace {

using testing::CpuBf16;
using testing::RandomNormal;
using testing::Rounded;
using testing::ToBf16;

// op(a) m x k times op(b) k x n in double, from the bfloat16 operands.
std::vector<double> Product(bool ta, bool tb, int m, int n, int k, const std::vector<Bf16>& a,
                            const std::vector<Bf16>& b) {
  std::vector<double> c(size_t(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int p = 0; p < k; ++p) {
        const float av = Bf16Float(a[ta ? size_t(p) * m + i : size_t(i) * k + p].bits);
        const float bv = Bf16Float(b[tb ? size_t(j) * k + p : size_t(p) * n + j].bits);
        sum += double{av} * bv;
      }
      c[size_t(i) * n + j] = sum;
    }
  }
  return c;
}

TEST_F(CpuBf16, GemmSumsTheBf16ProductsInFloat32) {
  const int m = 67, n = 45, k = 300;
  for (int threads : {1, 2}) {
    auto be = NewCpuBackend(threads);
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(::testing::Message() << threads << " threads, ta " << ta << ", tb " << tb);
        const std::vector<Bf16> a = ToBf16(RandomNormal(size_t(m) * k, 4));
        const std::vector<Bf16> b = ToBf16(RandomNormal(size_t(k) * n, 5));
        const std::vector<double> want = Product(ta, tb, m, n, k, a, b);
        std::vector<float> c(size_t(m) * n, 1.0f);
        ASSERT_OK(be->GemmBf16(ta, tb, m, n, k, 1.0f, a.data(), b.data(), 1.0f, c.data()));
        for (size_t i = 0; i < c.size(); ++i) {
          // float32 sums of k exact products of magnitude ~1: within k ulps of ~sqrt(k).
          ASSERT_NEAR(c[i], want[i] + 1.0, 1e-4) << i;
        }
        std::vector<float> again(c.size(), 1.0f);
        ASSERT_OK(be->GemmBf16(ta, tb, m, n, k, 1.0f, a.data(), b.data(), 1.0f, again.data()));
        EXPECT_EQ(again, c);  // the same bits run to run
      }
    }
  }
}

void ExpectOneGemmPerHead(int t) {
  const int d = 16, h = 4, hd = h * d;
  const std::vector<Bf16> q = ToBf16(RandomNormal(size_t(t) * hd, 6));
  const std::vector<Bf16> k = ToBf16(RandomNormal(size_t(t) * hd, 7));
  std::vector<float> w(size_t(h) * t * t);
  auto be = NewCpuBackend(2);
  ASSERT_OK(be->GemmStridedBf16(false, true, t, t, d, 1.0f, q.data(), hd, d, k.data(), hd, d, 0.0f,
                                w.data(), t, int64_t{t} * t, h));
  for (int head = 0; head < h; ++head) {
    for (int i = 0; i < t; ++i) {
      for (int j = 0; j < t; ++j) {
        double want = 0;
        for (int p = 0; p < d; ++p) {
          want += double{Bf16Float(q[size_t(i) * hd + head * d + p].bits)} *
                  Bf16Float(k[size_t(j) * hd + head * d + p].bits);
        }
        ASSERT_NEAR(w[(size_t(head) * t + i) * t + j], want, 1e-5) << head << " " << i << " " << j;
      }
    }
  }
}

TEST_F(CpuBf16, GemmStridedIsOneGemmPerHead) {
  // Attention's products: h heads of [t, d] inside rows of h * d, a short sequence and a
  // longer one.
  for (const int t : {33, 80}) {
    SCOPED_TRACE(::testing::Message() << "t " << t);
    ExpectOneGemmPerHead(t);
  }
}

// Every sample's and head's products in one call: w = q k^T into [b, h, t, t], then
// o = w^T q back into q's layout ([b, t, h * d]), against float64 sums of the exact products.
TEST_F(CpuBf16, GemmHeadsIsOneGemmPerSampleAndHead) {
  const int b = 3, d = 16, h = 4, hd = h * d;
  for (const int t : {33, 80}) {
    SCOPED_TRACE(::testing::Message() << "t " << t);
    const int64_t sample = int64_t{t} * hd, tt = int64_t{t} * t;
    const std::vector<Bf16> q = ToBf16(RandomNormal(b * sample, 8));
    const std::vector<Bf16> k = ToBf16(RandomNormal(b * sample, 9));
    auto qk = [&](const std::vector<Bf16>& x, int s, int j, int i, int p) {
      return double{Bf16Float(x[s * sample + int64_t{i} * hd + j * d + p].bits)};
    };
    auto be = NewCpuBackend(2);
    std::vector<float> w(b * h * tt), o(b * sample);
    ASSERT_OK(be->GemmHeadsBf16(false, true, t, t, d, 1.0f, {q.data(), hd, sample, d},
                                {k.data(), hd, sample, d}, 0.0f, {w.data(), t, h * tt, tt}, b, h));
    const std::vector<Bf16> w16 = ToBf16(w);
    ASSERT_OK(be->GemmHeadsBf16(true, false, t, d, t, 1.0f, {w16.data(), t, h * tt, tt},
                                {q.data(), hd, sample, d}, 0.0f, {o.data(), hd, sample, d}, b, h));
    for (int s = 0; s < b; ++s) {
      for (int j = 0; j < h; ++j) {
        const int64_t at = (int64_t{s} * h + j) * tt;
        for (int x = 0; x < t; ++x) {
          for (int y = 0; y < t; ++y) {
            double want = 0;
            for (int p = 0; p < d; ++p) want += qk(q, s, j, x, p) * qk(k, s, j, y, p);
            ASSERT_NEAR(w[at + x * t + y], want, 1e-5) << s << " " << j << " " << x << " " << y;
          }
          for (int p = 0; p < d; ++p) {  // o[x, p] = sum over y of w[y, x] q[y, p]
            double want = 0;
            for (int y = 0; y < t; ++y)
              want += double{Bf16Float(w16[at + y * t + x].bits)} * qk(q, s, j, y, p);
            ASSERT_NEAR(o[s * sample + int64_t{x} * hd + j * d + p], want,
                        1e-3 * (1 + std::abs(want)))
                << s << " " << j << " " << x << " " << p;
          }
        }
      }
    }
  }
}

TEST_F(CpuBf16, SmallStridedGemmIsItsSumWithTheSameBitsOnAnyThreadCount) {
  // A ViT's per-head products (17 tokens, 16 features), 8 of them, every transpose: each
  // element the float32 sum of its exact products (to float32 rounding of the float64 sum),
  // the same bits on 1 and 2 threads.
  const int m = 17, n = 17, k = 16, count = 8;
  const int64_t stride = int64_t{m} * k + 5;  // operands apart, not packed
  const std::vector<Bf16> a = ToBf16(RandomNormal(size_t(stride) * count, 11));
  const std::vector<Bf16> b = ToBf16(RandomNormal(size_t(stride) * count, 12));
  const std::vector<float> c0 = RandomNormal(size_t(m) * n * count, 13);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        SCOPED_TRACE(::testing::Message() << "ta " << ta << ", tb " << tb << ", beta " << beta);
        const int lda = ta ? m : k, ldb = tb ? k : n;
        std::vector<double> want(c0.begin(), c0.end());
        double scale = 0;  // the sum of the products' magnitudes, the rounding's scale
        for (int i = 0; i < count; ++i) {
          for (int r = 0; r < m; ++r) {
            for (int j = 0; j < n; ++j) {
              double sum = 0;
              for (int p = 0; p < k; ++p) {
                const Bf16 x = a[i * stride + (ta ? p * lda + r : r * lda + p)];
                const Bf16 y = b[i * stride + (tb ? j * ldb + p : p * ldb + j)];
                sum += double{Bf16Float(x.bits)} * Bf16Float(y.bits);
                scale = std::max(scale, std::abs(double{Bf16Float(x.bits)} * Bf16Float(y.bits)));
              }
              double& out = want[(size_t(i) * m + r) * n + j];
              out = beta == 0.0f ? 2.0 * sum : 2.0 * sum + beta * out;
            }
          }
        }
        std::vector<float> first;
        for (int threads : {1, 2}) {
          std::vector<float> c = c0;
          if (beta == 0.0f) std::fill(c.begin(), c.end(), std::nanf(""));  // never read
          ASSERT_OK(NewCpuBackend(threads)->GemmStridedBf16(ta, tb, m, n, k, 2.0f, a.data(), lda,
                                                            stride, b.data(), ldb, stride, beta,
                                                            c.data(), n, int64_t{m} * n, count));
          for (size_t e = 0; e < c.size(); ++e) {
            ASSERT_NEAR(c[e], want[e], 2.0 * k * scale * 0x1p-23)
                << e << ", " << threads << " threads";
          }
          if (first.empty()) first = c;
          EXPECT_EQ(std::memcmp(c.data(), first.data(), c.size() * sizeof(float)), 0)
              << threads << " threads";
        }
      }
    }
  }
}

// The bfloat16 convolutions against the float32 ones on the same (rounded) operands.
void ExpectConvsMatchFloat32(Backend& be, const ConvGeometry& g) {
  const size_t in = size_t(g.b) * g.h * g.w * g.c, out = size_t(g.b) * g.oh() * g.ow() * g.f;
  const std::vector<float> x = Rounded(RandomNormal(in, 8));
  const std::vector<float> w = Rounded(RandomNormal(size_t(g.kh) * g.kw * g.c * g.f, 9));
  const std::vector<float> dy = Rounded(RandomNormal(out, 10));
  const std::vector<Bf16> x16 = ToBf16(x), w16 = ToBf16(w), dy16 = ToBf16(dy);
  std::vector<float> scratch(std::max(be.ConvScratchBytes(g), be.ConvScratchBytesBf16(g)) / 4 + 1);
  std::vector<float> y(out), y32(out), dw(w.size()), dw32(w.size()), dx(in), dx32(in);
  ASSERT_OK(be.ConvForward(g, x.data(), w.data(), nullptr, y32.data(), scratch.data()));
  ASSERT_OK(be.ConvBackwardWeights(g, x.data(), dy.data(), dw32.data(), nullptr, scratch.data()));
  ASSERT_OK(be.ConvBackwardData(g, w.data(), dy.data(), dx32.data(), scratch.data()));
  ASSERT_OK(be.ConvForwardBf16(g, x16.data(), w16.data(), y.data(), scratch.data()));
  ASSERT_OK(be.ConvBackwardWeightsBf16(g, x16.data(), dy16.data(), dw.data(), scratch.data()));
  ASSERT_OK(be.ConvBackwardDataBf16(g, w16.data(), dy16.data(), dx.data(), scratch.data()));
  EXPECT_LE(testing::RelativeL2(y, y32), 1e-6);
  EXPECT_LE(testing::RelativeL2(dw, dw32), 1e-6);
  EXPECT_LE(testing::RelativeL2(dx, dx32), 1e-6);
}

TEST_F(CpuBf16, ConvolutionsAreFloat32ConvolutionsOfTheBf16Operands) {
  ConvGeometry same{8, 14, 14, 16, 32, 3, 3};  // SAME 3x3
  same.pad_top = same.pad_bottom = same.pad_left = same.pad_right = 1;
  ConvGeometry first{8, 28, 28, 1, 16, 3, 3};  // one input channel
  first.pad_top = first.pad_bottom = first.pad_left = first.pad_right = 1;
  ConvGeometry strided{4, 9, 9, 8, 8, 3, 3};  // stride 2, padding after only
  strided.stride_h = strided.stride_w = 2;
  strided.pad_bottom = strided.pad_right = 1;
  for (CpuKernels kernels : {CpuKernels::kOneDnn, CpuKernels::kOpenBlas}) {
    for (int threads : {1, 2}) {
      auto be = NewCpuBackend(threads, kernels);
      for (const ConvGeometry& g : {same, first, strided}) {
        SCOPED_TRACE(::testing::Message()
                     << threads << " threads, c " << g.c << ", stride " << g.stride_h
                     << (kernels == CpuKernels::kOneDnn ? " oneDNN" : " im2col"));
        ExpectConvsMatchFloat32(*be, g);
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
