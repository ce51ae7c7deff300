// The CPU backend's bfloat16 kernels: the rounding itself, the GEMMs and convolutions
// against float32 arithmetic on the same bfloat16 operands, and the elementwise layers
// bit for bit against XLA's bfloat16 results (tests/golden/bf16_math.safetensors, written
// by tools/reference/golden_bf16.py). Skipped where the CPU has no bfloat16 kernels.
#include "workers/cpu/cpu_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "core/io/safetensors.h"
#include "core/layer_math.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/cpu/cpu_testing.h"

namespace lockstep {
namespace {

using testing::RandomNormal;

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// The same bits, or both NaN (a NaN's sign and payload depend on the operands' order the
// compiler picks).
bool Same(float a, float b) {
  return FloatBits(a) == FloatBits(b) || (std::isnan(a) && std::isnan(b));
}

std::vector<float> Rounded(std::vector<float> v) {
  for (float& x : v) x = RoundBf16(x);
  return v;
}

std::vector<Bf16> ToBf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i].bits = Bf16Bits(v[i]);
  return out;
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(Bf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(Bf16Bits(FromBits(0x3f808000)), 0x3f80);  // a tie: to the even 0x3f80
  EXPECT_EQ(Bf16Bits(FromBits(0x3f818000)), 0x3f82);  // a tie: to the even 0x3f82
  EXPECT_EQ(Bf16Bits(FromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(Bf16Bits(FromBits(0x3f807fff)), 0x3f80);
  EXPECT_EQ(Bf16Bits(-0.0f), 0x8000);
  EXPECT_EQ(Bf16Bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(Bf16Bits(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(Bf16Bits(FromBits(0x00018000)), 0x0002);               // subnormals kept
  EXPECT_TRUE(std::isnan(RoundBf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(RoundBf16(FromBits(0x7f800001))));  // a NaN that would round to inf
  EXPECT_EQ(RoundBf16(0.1f), 0.10009765625f);
}

TEST(Bf16, DropoutInOnePassIsTheThreeKernelsBitForBit) {
  // Backend::DropoutBf16's one CPU pass against its default (Dropout, DropoutBackward by
  // bf16(keep), AddRowsBf16), both key modes, in place or not, on 1 and 2 threads.
  const int rows = 37, cols = 1001;  // past the single-thread threshold; odd sizes
  const size_t n = size_t(rows) * cols;
  std::vector<float> x = RandomNormal(n, 21);
  for (float& v : x) v = RoundBf16(v);  // bfloat16 values, as the layer's input holds
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[6] = std::numeric_limits<float>::infinity();
  const rng::Key key{3, 7};
  for (rng::Impl impl : {rng::Impl::kPartitionable, rng::Impl::kLegacy}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, impl " << int(impl));
      auto be = NewCpuBackend(threads);
      std::vector<float> want(n), got(n), in_place = x;
      std::vector<uint8_t> want_mask(n), mask(n), mask2(n);
      ASSERT_OK(be->Backend::DropoutBf16(rows, cols, 0.9f, &key, impl, x.data(), want.data(),
                                         want_mask.data()));
      ASSERT_OK(be->DropoutBf16(rows, cols, 0.9f, &key, impl, x.data(), got.data(), mask.data()));
      ASSERT_OK(be->DropoutBf16(rows, cols, 0.9f, &key, impl, in_place.data(), in_place.data(),
                                mask2.data()));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0);
      EXPECT_EQ(std::memcmp(in_place.data(), want.data(), n * sizeof(float)), 0);
      EXPECT_EQ(mask, want_mask);
      EXPECT_EQ(mask2, want_mask);
      const size_t kept = std::count(mask.begin(), mask.end(), uint8_t{1});
      EXPECT_GT(kept, n * 8 / 10);
      EXPECT_LT(kept, n);
    }
  }
}

class CpuBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status bf16 = NewCpuBackend(1)->Bf16Support();
    if (!bf16.ok()) GTEST_SKIP() << bf16.message();
  }
};

TEST_F(CpuBf16, ToBf16IsRoundBf16OnAnyThreadCount) {
  const std::vector<float> x = RandomNormal(100003, 1);
  for (int threads : {1, 2}) {
    std::vector<Bf16> y(x.size());
    ASSERT_OK(NewCpuBackend(threads)->ToBf16(x.size(), x.data(), y.data()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i].bits, Bf16Bits(x[i])) << i;
  }
}

TEST_F(CpuBf16, AddRowsRoundsTheProductsThenTheSum) {
  const int rows = 300, cols = 129;
  const std::vector<float> x = RandomNormal(size_t(rows) * cols, 2), bias = RandomNormal(cols, 3);
  std::vector<float> y(x.size()), same(x);
  std::vector<Bf16> twin(x.size());
  auto be = NewCpuBackend(2);
  ASSERT_OK(be->AddRowsBf16(rows, cols, x.data(), bias.data(), y.data(), twin.data()));
  ASSERT_OK(be->AddRowsBf16(rows, cols, same.data(), bias.data(), same.data(), nullptr));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      ASSERT_EQ(y[i], RoundBf16(RoundBf16(x[i]) + RoundBf16(bias[c]))) << r << "," << c;
      ASSERT_EQ(twin[i].bits, Bf16Bits(y[i])) << r << "," << c;
    }
  }
  EXPECT_EQ(same, y);
  ASSERT_OK(be->AddRowsBf16(rows, cols, x.data(), nullptr, y.data(), nullptr));
  EXPECT_EQ(y, Rounded(x));
}

// Every bfloat16 input (NaNs and infinities among them), shuffled, then float32 values
// that are not bfloat16 ones: each result its formula's bits, in place or not.
std::vector<float> EveryBf16ThenUnrounded() {
  std::vector<float> x(size_t{1} << 16);
  for (uint32_t b = 0; b < x.size(); ++b) x[b] = FromBits(b << 16);
  std::shuffle(x.begin(), x.end(), std::mt19937(5));
  const std::vector<float> unrounded = RandomNormal(10007, 6);
  x.insert(x.end(), unrounded.begin(), unrounded.end());
  return x;
}

constexpr Activation kActivations[] = {Activation::kGeluTanh, Activation::kGeluErf,
                                       Activation::kTanh, Activation::kSigmoid, Activation::kSilu};

TEST_F(CpuBf16, ActivationsAreTheirFormulaOnEveryInput) {
  const std::vector<float> x = EveryBf16ThenUnrounded();
  for (Activation a : kActivations) {
    for (int threads : {1, 2}) {
      auto be = NewCpuBackend(threads);
      std::vector<float> y(x.size()), same(x);
      std::vector<Bf16> twin(x.size());
      ASSERT_OK(be->ActivateBf16(a, x.size(), x.data(), y.data(), twin.data()));
      ASSERT_OK(be->ActivateBf16(a, same.size(), same.data(), same.data(), nullptr));
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = math::ActivateBf16(a, x[i]);
        ASSERT_TRUE(Same(y[i], want)) << static_cast<int>(a) << " at " << x[i];
        ASSERT_TRUE(Same(same[i], want)) << static_cast<int>(a) << " at " << x[i];
        ASSERT_EQ(twin[i].bits, Bf16Bits(y[i])) << static_cast<int>(a) << " at " << x[i];
      }
    }
  }
}

// The float32 backward (a bfloat16 layer's too): bfloat16 inputs' derivatives come from
// a table, the others' from the formula; either way dy * math::ActivationDerivative(x).
TEST_F(CpuBf16, ActivationGradientsAreTheirFormulaOnEveryInput) {
  const std::vector<float> x = EveryBf16ThenUnrounded();
  const std::vector<float> dy = RandomNormal(x.size(), 15);
  for (Activation a : kActivations) {
    for (int threads : {1, 2}) {
      std::vector<float> dx = dy;
      ASSERT_OK(NewCpuBackend(threads)->ActivateBackward(a, x.size(), x.data(), dx.data()));
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(Same(dx[i], dy[i] * math::ActivationDerivative(a, x[i])))
            << static_cast<int>(a) << " at " << x[i];
      }
    }
  }
}

TEST_F(CpuBf16, SoftmaxIsItsRowFormulaBitForBit) {
  const int t = 37, rows = 3 * t;
  std::vector<float> s = RandomNormal(size_t(rows) * t, 7);
  for (size_t i = 0; i < s.size(); ++i) s[i] *= 1.0f + float(i % 13);  // some rows' exps underflow
  s[5] = std::numeric_limits<float>::infinity();
  s[t + 3] = -std::numeric_limits<float>::infinity();
  s[2 * t + 1] = std::nanf("");
  for (bool causal : {false, true}) {
    std::vector<float> want = s;
    for (int r = 0; r < rows; ++r) math::SoftmaxRowBf16(causal ? r % t + 1 : t, t, &want[r * t]);
    for (int threads : {1, 2}) {
      std::vector<float> got = s;
      ASSERT_OK(NewCpuBackend(threads)->AttentionSoftmaxBf16(rows, t, causal, got.data()));
      for (size_t i = 0; i < s.size(); ++i)
        ASSERT_TRUE(Same(got[i], want[i])) << causal << " " << i;
    }
  }
}

// The fused attention-dropout kernels against the default's passes (MaskedScale,
// AddRowsBf16; MaskedScale, SoftmaxBackward, ToBf16), with and without the mask.
TEST_F(CpuBf16, AttentionDropoutKernelsAreTheirPassesBitForBit) {
  const int t = 29, blocks = 6, rows = blocks * t;
  const size_t n = size_t(rows) * t;
  std::vector<float> p = RandomNormal(n, 12);
  ASSERT_OK(NewCpuBackend(1)->AttentionSoftmaxBf16(rows, t, true, p.data()));
  const std::vector<float> dp = RandomNormal(n, 13);
  std::vector<uint8_t> mask(size_t(t) * t);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i * 7919) % 10 < 8;
  const float scale = RoundBf16(1.0f / RoundBf16(0.8f));
  for (int threads : {1, 2}) {
    auto be = NewCpuBackend(threads);
    std::vector<float> room(n), want(n);
    std::vector<Bf16> got16(n), want16(n);
    ASSERT_OK(be->MaskedScaleBf16(blocks, t * t, mask.data(), scale, p.data(), room.data(),
                                  got16.data()));
    ASSERT_OK(be->Backend::MaskedScaleBf16(blocks, t * t, mask.data(), scale, p.data(), want.data(),
                                           want16.data()));
    EXPECT_EQ(0, std::memcmp(got16.data(), want16.data(), n * sizeof(Bf16)));
    // p is causal: summing each row's first r % t + 1 products alone gives the same bits.
    for (const uint8_t* m : std::vector<const uint8_t*>{nullptr, mask.data()}) {
      for (const bool causal : {false, true}) {
        std::vector<float> got_room = dp, want_room = dp;
        ASSERT_OK(be->SoftmaxBackwardBf16(rows, t, causal, p.data(), m, scale, got_room.data(),
                                          got16.data()));
        ASSERT_OK(be->Backend::SoftmaxBackwardBf16(rows, t, false, p.data(), m, scale,
                                                   want_room.data(), want16.data()));
        EXPECT_EQ(0, std::memcmp(got16.data(), want16.data(), n * sizeof(Bf16)))
            << (m != nullptr) << causal;
      }
    }
  }
}

TEST_F(CpuBf16, BiasGradWithItsBf16GradientIsTheTwoPassesBitForBit) {
  for (const int rows : {7, 3001}) {  // one block of sums, then eight
    const int cols = 37;
    const std::vector<float> dy = RandomNormal(size_t(rows) * cols, 14);
    for (int threads : {1, 2}) {
      auto be = NewCpuBackend(threads);
      std::vector<float> db(cols), want(cols);
      std::vector<Bf16> dy16(dy.size()), want16(dy.size());
      ASSERT_OK(be->BiasGradBf16(rows, cols, dy.data(), db.data(), dy16.data()));
      ASSERT_OK(be->Backend::BiasGradBf16(rows, cols, dy.data(), want.data(), want16.data()));
      EXPECT_EQ(db, want);
      EXPECT_EQ(0, std::memcmp(dy16.data(), want16.data(), dy.size() * sizeof(Bf16)));
      std::fill(dy16.begin(), dy16.end(), Bf16{0});
      ASSERT_OK(be->BiasGradBf16(rows, cols, dy.data(), nullptr, dy16.data()));  // no bias
      EXPECT_EQ(0, std::memcmp(dy16.data(), want16.data(), dy.size() * sizeof(Bf16)));
    }
  }
}

TEST_F(CpuBf16, DivideBf16IsDivideThenToBf16BitForBit) {
  for (const size_t n : {size_t{1001}, size_t{100003}}) {  // one thread, then split
    const std::vector<float> x = Rounded(RandomNormal(n, 19));
    const float d = RoundBf16(std::sqrt(32.0f));
    for (int threads : {1, 2}) {
      auto be = NewCpuBackend(threads);
      std::vector<float> room = x, want = x;
      std::vector<Bf16> y16(n), want16(n);
      ASSERT_OK(be->DivideBf16(n, d, room.data(), y16.data()));
      ASSERT_OK(be->Backend::DivideBf16(n, d, want.data(), want16.data()));
      EXPECT_EQ(0, std::memcmp(y16.data(), want16.data(), n * sizeof(Bf16)));
    }
  }
}

TEST_F(CpuBf16, ReluKeepsItsBf16Twin) {
  const std::vector<float> x = Rounded(RandomNormal(70001, 11));
  std::vector<float> y = x;
  std::vector<Bf16> twin(x.size());
  ASSERT_OK(NewCpuBackend(2)->ReluBf16(y.size(), y.data(), twin.data()));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], std::max(x[i], 0.0f)) << i;
    ASSERT_EQ(twin[i].bits, Bf16Bits(y[i])) << i;
  }
}

TEST_F(CpuBf16, FusedBatchNormAndAddAreTheirPassesBitForBit) {
  // BatchNormApplyBf16 and AddBf16 in one pass against Backend's defaults (the float32
  // kernel, AddRowsBf16, then ReluBf16 or Relu), with and without the ReLU and the twin,
  // on 1 and 2 threads, past kParallelMin elements.
  const int rows = 1031, cols = 48;
  const size_t n = size_t(rows) * cols;
  const std::vector<float> x = Rounded(RandomNormal(n, 14)), r = Rounded(RandomNormal(n, 15));
  const std::vector<float> mean = RandomNormal(cols, 16), scale = RandomNormal(cols, 17);
  const std::vector<float> bias = RandomNormal(cols, 18);
  std::vector<float> var = RandomNormal(cols, 19);
  for (float& v : var) v = v * v;
  for (int threads : {1, 2}) {
    auto be = NewCpuBackend(threads);
    for (bool relu : {false, true}) {
      for (bool twin : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << threads << " threads, relu " << relu << ", twin " << twin);
        std::vector<float> y(n), want(n);
        std::vector<Bf16> y16(n), want16(n);
        Bf16* t = twin ? y16.data() : nullptr;
        Bf16* wt = twin ? want16.data() : nullptr;
        ASSERT_OK(be->BatchNormApplyBf16(rows, cols, 1e-5f, x.data(), mean.data(), var.data(),
                                         scale.data(), bias.data(), relu, y.data(), t));
        ASSERT_OK(be->Backend::BatchNormApplyBf16(rows, cols, 1e-5f, x.data(), mean.data(),
                                                  var.data(), scale.data(), bias.data(), relu,
                                                  want.data(), wt));
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), n * sizeof(float)));
        EXPECT_EQ(0, std::memcmp(y16.data(), want16.data(), n * sizeof(Bf16)));
        ASSERT_OK(be->AddBf16(rows, cols, x.data(), r.data(), relu, y.data(), t));
        ASSERT_OK(be->Backend::AddBf16(rows, cols, x.data(), r.data(), relu, want.data(), wt));
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), n * sizeof(float)));
        EXPECT_EQ(0, std::memcmp(y16.data(), want16.data(), n * sizeof(Bf16)));
        if (relu) {
          EXPECT_EQ(*std::min_element(y.begin(), y.end()), 0.0f);
        }
      }
    }
  }
}

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
  // Attention's products: h heads of [t, d] inside rows of h * d; at t = 33 a small product
  // (GemmStridedSmallBf16), at t = 80 oneDNN's.
  for (const int t : {33, 80}) {
    SCOPED_TRACE(::testing::Message() << "t " << t);
    ExpectOneGemmPerHead(t);
  }
}

// Every sample's and head's products in one call: w = q k^T into [b, h, t, t], then
// o = w^T q back into q's layout ([b, t, h * d]), against float64 sums of the exact products.
TEST_F(CpuBf16, GemmHeadsIsOneGemmPerSampleAndHead) {
  const int b = 3, d = 16, h = 4, hd = h * d;
  for (const int t : {33, 80}) {  // a small product, then oneDNN's
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

TEST_F(CpuBf16, SmallStridedGemmSumsInOrderOnAnyThreadCount) {
  // A ViT's per-head products (17 tokens, 16 features), 8 of them, every transpose: each
  // element the float32 sum of its exact products in k order, whatever the thread count.
  const int m = 17, n = 17, k = 16, count = 8;
  ASSERT_TRUE(cpu::IsSmallGemmBf16(m, n, k));
  const int64_t stride = int64_t{m} * k + 5;  // operands apart, not packed
  const std::vector<Bf16> a = ToBf16(RandomNormal(size_t(stride) * count, 11));
  const std::vector<Bf16> b = ToBf16(RandomNormal(size_t(stride) * count, 12));
  const std::vector<float> c0 = RandomNormal(size_t(m) * n * count, 13);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        SCOPED_TRACE(::testing::Message() << "ta " << ta << ", tb " << tb << ", beta " << beta);
        const int lda = ta ? m : k, ldb = tb ? k : n;
        std::vector<float> want = c0;
        for (int i = 0; i < count; ++i) {
          for (int r = 0; r < m; ++r) {
            for (int j = 0; j < n; ++j) {
              float sum = 0.0f;
              for (int p = 0; p < k; ++p) {
                const Bf16 x = a[i * stride + (ta ? p * lda + r : r * lda + p)];
                const Bf16 y = b[i * stride + (tb ? j * ldb + p : p * ldb + j)];
                sum += Bf16Float(x.bits) * Bf16Float(y.bits);
              }
              float& out = want[(size_t(i) * m + r) * n + j];
              out = beta == 0.0f ? 2.0f * sum : 2.0f * sum + beta * out;
            }
          }
        }
        for (int threads : {1, 2}) {
          std::vector<float> c = c0;
          if (beta == 0.0f) std::fill(c.begin(), c.end(), std::nanf(""));  // never read
          ASSERT_OK(NewCpuBackend(threads)->GemmStridedBf16(ta, tb, m, n, k, 2.0f, a.data(), lda,
                                                            stride, b.data(), ldb, stride, beta,
                                                            c.data(), n, int64_t{m} * n, count));
          EXPECT_EQ(c, want) << threads << " threads";
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

// XLA's bfloat16 results (bf16_math.safetensors).
class CpuBf16Math : public CpuBf16 {
 protected:
  void SetUp() override {
    CpuBf16::SetUp();
    if (IsSkipped()) return;
    ASSERT_OK_AND_ASSIGN(golden_, SafeTensors::Read(testing::GoldenPath("bf16_math.safetensors")));
  }
  std::vector<float> Bits(const std::string& name) const {
    const SafeTensor& t = golden_.tensors().at(name);
    std::vector<float> out(t.data.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, t.data.data() + 2 * i, 2);
      out[i] = Bf16Float(b);
    }
    return out;
  }
  // The elements where got and want differ (NaNs equal).
  static int Mismatches(const std::vector<float>& got, const std::vector<float>& want) {
    int n = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      n += !(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])));
    }
    return n;
  }
  SafeTensors golden_;
};

TEST_F(CpuBf16Math, ActivationsRoundEveryOpAsXla) {
  const std::vector<float> x = Bits("act.x");
  const std::pair<const char*, Activation> acts[] = {{"gelu_tanh", Activation::kGeluTanh},
                                                     {"gelu_erf", Activation::kGeluErf},
                                                     {"tanh", Activation::kTanh},
                                                     {"sigmoid", Activation::kSigmoid},
                                                     {"silu", Activation::kSilu}};
  auto be = NewCpuBackend(2);
  for (const auto& [name, a] : acts) {
    std::vector<float> y(x.size());
    std::vector<Bf16> twin(x.size());
    ASSERT_OK(be->ActivateBf16(a, x.size(), x.data(), y.data(), twin.data()));
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(twin[i].bits, Bf16Bits(y[i])) << name << i;
    const int wrong = Mismatches(y, Bits(std::string("act.") + name));
    std::printf("  %-9s %d of %zu differ from XLA's\n", name, wrong, x.size());
    // XLA's float32 exp, tanh and erfc round an ulp otherwise than libm now and then, and
    // a bfloat16 rounding of such a result can differ: at most 1 in 200.
    EXPECT_LE(wrong, static_cast<int>(x.size() / 200)) << name;
  }
}

TEST_F(CpuBf16Math, SoftmaxPoolsAndDenseAsXla) {
  auto be = NewCpuBackend(2);
  for (bool causal : {false, true}) {
    std::vector<float> s = *golden_.F32("softmax.x");
    ASSERT_OK(be->AttentionSoftmaxBf16(64, 40, causal, s.data()));
    const int wrong = Mismatches(s, Bits(causal ? "softmax.causal" : "softmax.y"));
    std::printf("  softmax%s %d of %zu differ from XLA's\n", causal ? " (causal)" : "", wrong,
                s.size());
    EXPECT_LE(wrong, static_cast<int>(s.size() / 50));
  }
  const std::vector<float> p = *golden_.F32("pool.x");
  ConvGeometry three{2, 9, 9, 4, 4, 3, 3};
  three.stride_h = three.stride_w = 3;
  std::vector<float> y(2 * 3 * 3 * 4);
  ASSERT_OK(be->AvgPoolBf16(three, true, p.data(), y.data()));
  EXPECT_EQ(Mismatches(y, Bits("pool.avg3")), 0);
  ConvGeometry two{2, 9, 9, 4, 4, 2, 2};  // SAME, stride 1: padding after
  two.pad_bottom = two.pad_right = 1;
  y.resize(2 * 9 * 9 * 4);
  ASSERT_OK(be->AvgPoolBf16(two, true, p.data(), y.data()));
  EXPECT_EQ(Mismatches(y, Bits("pool.avg2")), 0);

  const std::vector<float> x = *golden_.F32("dense.x"), k = *golden_.F32("dense.kernel");
  const std::vector<float> bias = *golden_.F32("dense.bias");
  const std::vector<Bf16> x16 = ToBf16(x), k16 = ToBf16(k);
  std::vector<float> d(64 * 48);
  ASSERT_OK(be->GemmBf16(false, false, 64, 48, 96, 1.0f, x16.data(), k16.data(), 0.0f, d.data()));
  ASSERT_OK(be->AddRowsBf16(64, 48, d.data(), bias.data(), d.data(), nullptr));
  const int wrong = Mismatches(d, Bits("dense.y"));
  std::printf("  dense     %d of %zu differ from XLA's\n", wrong, d.size());
  // The float32 sums' order differs from XLA's: their bfloat16 roundings rarely do.
  EXPECT_LE(wrong, static_cast<int>(d.size() / 100));
}

}  // namespace
}  // namespace lockstep
