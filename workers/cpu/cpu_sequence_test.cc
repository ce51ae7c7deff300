// The CPU kernels for the sequence layers: against plain loops (strided GEMMs, the
// embedding's scatter-add, the masked softmax and its gradient against finite
// differences), Flax's broadcast dropout scaling, a vision transformer's class token and
// sequence pooling, and the same bits on any thread count.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/cpu/cpu_testing.h"

namespace lockstep {
namespace {

using testing::RandomNormal;

TEST(CpuSequence, GemmStridedComputesEachHeadsProductInPlace) {
  // Two heads of depth 3 interleaved in rows of 6 (as [T, H, D]): c_h = a_h b_h^T.
  const int t = 4, h = 2, d = 3, hd = h * d;
  const std::vector<float> a = RandomNormal(t * hd, 1), b = RandomNormal(t * hd, 2);
  std::vector<float> c(h * t * t, -1.0f);
  auto be = NewCpuBackend(2);
  ASSERT_OK(be->GemmStrided(false, true, t, t, d, 1.0f, a.data(), hd, d, b.data(), hd, d, 0.0f,
                            c.data(), t, t * t, h));
  for (int head = 0; head < h; ++head) {
    for (int i = 0; i < t; ++i) {
      for (int j = 0; j < t; ++j) {
        float want = 0;
        for (int k = 0; k < d; ++k) want += a[i * hd + head * d + k] * b[j * hd + head * d + k];
        EXPECT_NEAR(c[head * t * t + i * t + j], want, 1e-5) << head << " " << i << " " << j;
      }
    }
  }
}

TEST(CpuSequence, EmbedGathersRowsAndItsGradientSumsRepeatedIds) {
  const std::vector<float> table = {0, 1, 10, 11, 20, 21};  // 3 x 2
  const std::vector<float> ids = {2, 0, 2};
  std::vector<float> out(6);
  auto be = NewCpuBackend(2);
  ASSERT_OK(be->Embed(3, 2, ids.data(), table.data(), out.data()));
  EXPECT_EQ(out, (std::vector<float>{20, 21, 0, 1, 20, 21}));
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6};
  std::vector<float> dtable(6, 99.0f);
  ASSERT_OK(be->EmbedBackward(3, 2, 3, ids.data(), dy.data(), dtable.data()));
  EXPECT_EQ(dtable, (std::vector<float>{3, 4, 0, 0, 6, 8}));
}

TEST(CpuSequence, CausalSoftmaxZeroesTheFutureAndRowsSumToOne) {
  const int t = 5, rows = 2 * t;  // two heads' rows: query position r % t
  std::vector<float> s = RandomNormal(rows * t, 3);
  auto be = NewCpuBackend(2);
  ASSERT_OK(be->AttentionSoftmax(rows, t, true, s.data()));
  for (int r = 0; r < rows; ++r) {
    float sum = 0;
    for (int k = 0; k < t; ++k) {
      if (k > r % t) EXPECT_EQ(s[r * t + k], 0.0f) << r << " " << k;
      sum += s[r * t + k];
    }
    EXPECT_NEAR(sum, 1.0f, 1e-6) << r;
  }
}

TEST(CpuSequence, SoftmaxBackwardMatchesFiniteDifferences) {
  const int cols = 6;
  const std::vector<float> x = RandomNormal(cols, 4), g = RandomNormal(cols, 5);
  auto be = NewCpuBackend(1);
  auto f = [&](std::vector<float> v) {  // sum(g * softmax(v)) in double
    EXPECT_OK(be->AttentionSoftmax(1, cols, false, v.data()));
    double out = 0;
    for (int i = 0; i < cols; ++i) out += double{g[i]} * v[i];
    return out;
  };
  std::vector<float> p = x, dp = g;
  ASSERT_OK(be->AttentionSoftmax(1, cols, false, p.data()));
  ASSERT_OK(be->SoftmaxBackward(1, cols, p.data(), dp.data()));
  for (int i = 0; i < cols; ++i) {
    std::vector<float> hi = x, lo = x;
    hi[i] += 1e-2f, lo[i] -= 1e-2f;
    EXPECT_NEAR(dp[i], (f(hi) - f(lo)) / 2e-2, 1e-3) << i;
  }
}

// Where the incoming gradient is nearly level across a row (g = 1000 + u, u in [0, 1)),
// g - sum(g * y) cancels: its float32 dot's rounding (an ulp of 1000 is 6e-5, against a
// difference of ~0.5) made the result ~1e-4 off; with the dot in double it is float
// rounding of g - dot and of the product, within 1e-6 of float64's.
TEST(CpuSequence, SoftmaxBackwardKeepsLevelGradientsPrecise) {
  const int rows = 16, cols = 128;
  std::vector<float> p = RandomNormal(rows * cols, 6), g = RandomNormal(rows * cols, 7);
  auto be = NewCpuBackend(1);
  ASSERT_OK(be->AttentionSoftmax(rows, cols, false, p.data()));
  for (float& v : g) v = 1000.0f + std::fabs(v) / 4;
  std::vector<double> want(g.size());
  for (int r = 0; r < rows; ++r) {
    double dot = 0;
    for (int c = 0; c < cols; ++c) dot += double{g[r * cols + c]} * p[r * cols + c];
    for (int c = 0; c < cols; ++c) {
      want[r * cols + c] = p[r * cols + c] * (g[r * cols + c] - dot);
    }
  }
  ASSERT_OK(be->SoftmaxBackward(rows, cols, p.data(), g.data()));
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    num += (g[i] - want[i]) * (g[i] - want[i]);
    den += want[i] * want[i];
  }
  EXPECT_LE(std::sqrt(num / den), 1e-6);
}

TEST(CpuSequence, MaskedScaleBroadcastsOneMaskOverRows) {
  const std::vector<uint8_t> mask = {1, 0, 1};
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  std::vector<float> y(6);
  auto be = NewCpuBackend(2);
  ASSERT_OK(be->MaskedScale(2, 3, mask.data(), 0.8f, x.data(), y.data()));
  const float m = 1.0f / 0.8f;  // keep / keep_prob, then a product, as Flax computes it
  EXPECT_EQ(y, (std::vector<float>{1 * m, 0, 3 * m, 4 * m, 0, 6 * m}));
}

TEST(CpuSequence, SameBitsOnAnyThreadCount) {
  const int n = 5000, f = 16, vocab = 37;
  std::vector<float> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = static_cast<float>((i * 7919) % vocab);
  const std::vector<float> dy = RandomNormal(size_t(n) * f, 6);
  std::vector<float> one(vocab * f), four(vocab * f);
  ASSERT_OK(NewCpuBackend(1)->EmbedBackward(n, f, vocab, ids.data(), dy.data(), one.data()));
  ASSERT_OK(NewCpuBackend(4)->EmbedBackward(n, f, vocab, ids.data(), dy.data(), four.data()));
  EXPECT_EQ(std::memcmp(one.data(), four.data(), one.size() * sizeof(float)), 0);
}

TEST(CpuSequence, ClassTokenGoesFirstAndItsGradientSumsTheSamples) {
  const int b = 2, t = 2, f = 3;
  const std::vector<float> cls = {7, 8, 9}, x = {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60};
  std::vector<float> y(b * (t + 1) * f, -1.0f);
  auto be = NewCpuBackend(2);
  ASSERT_OK(be->ClassToken(b, t, f, cls.data(), x.data(), y.data()));
  EXPECT_EQ(y, (std::vector<float>{7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 40, 50, 60}));
  std::vector<float> dy(y.size());
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>(i);
  std::vector<float> dx(x.size(), -1.0f), dcls(f, -1.0f);
  ASSERT_OK(be->ClassTokenBackward(b, t, f, dy.data(), dx.data(), dcls.data()));
  EXPECT_EQ(dx, (std::vector<float>{3, 4, 5, 6, 7, 8, 12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(dcls, (std::vector<float>{0 + 9, 1 + 10, 2 + 11}));
  ASSERT_OK(be->ClassTokenBackward(b, t, f, dy.data(), nullptr, dcls.data()));  // dx not wanted
  EXPECT_EQ(dcls, (std::vector<float>{9, 11, 13}));
}

TEST(CpuSequence, ClassTokensGradientIsTheSamplesSumRoundedOnce) {
  // 1 + 300 samples of 2^-24: in float32 each addition to 1 would round away; in double
  // the sum is exact, then rounded once.
  const int b = 301, t = 1, f = 1;
  std::vector<float> dy(b * (t + 1) * f, 0.0f);
  dy[0] = 1.0f;
  for (int i = 1; i < b; ++i) dy[i * (t + 1)] = std::ldexp(1.0f, -24);
  float dcls = 0;
  auto be = NewCpuBackend(2);
  ASSERT_OK(be->ClassTokenBackward(b, t, f, dy.data(), nullptr, &dcls));
  EXPECT_EQ(dcls, static_cast<float>(1.0 + 300 * std::ldexp(1.0, -24)));
  EXPECT_GT(dcls, 1.0f);
}

TEST(CpuSequence, SequencePoolTakesTheFirstRowOrTheMean) {
  const int b = 2, t = 3, f = 2;
  const std::vector<float> x = {1, 2, 3, 4, 5, 7, -1, 0, 0, 0, 0, 1};
  std::vector<float> y(b * f);
  auto be = NewCpuBackend(2);
  ASSERT_OK(be->SequencePool(false, b, t, f, x.data(), y.data()));
  EXPECT_EQ(y, (std::vector<float>{1, 2, -1, 0}));
  ASSERT_OK(be->SequencePool(true, b, t, f, x.data(), y.data()));
  // jnp.mean: the sum divided by float32(T).
  EXPECT_EQ(y, (std::vector<float>{9.0f / 3.0f, 13.0f / 3.0f, -1.0f / 3.0f, 1.0f / 3.0f}));
  const std::vector<float> dy = {3, 6, 9, 12};
  std::vector<float> dx(x.size(), -1.0f);
  ASSERT_OK(be->SequencePoolBackward(false, b, t, f, dy.data(), dx.data()));
  EXPECT_EQ(dx, (std::vector<float>{3, 6, 0, 0, 0, 0, 9, 12, 0, 0, 0, 0}));
  ASSERT_OK(be->SequencePoolBackward(true, b, t, f, dy.data(), dx.data()));
  EXPECT_EQ(dx, (std::vector<float>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
}

TEST(CpuSequence, ClassTokenAndPoolingGiveTheSameBitsOnAnyThreadCount) {
  const int b = 130, t = 49, f = 64;  // past kParallelMin: threaded
  const auto x = RandomNormal(size_t(b) * t * f, 70), cls = RandomNormal(f, 71);
  const auto dy = RandomNormal(size_t(b) * (t + 1) * f, 72);
  auto run = [&](int threads) {
    auto be = NewCpuBackend(threads);
    std::vector<float> out(size_t(b) * (t + 1) * f), dx(x.size()), dcls(f), pooled(size_t(b) * f);
    EXPECT_OK(be->ClassToken(b, t, f, cls.data(), x.data(), out.data()));
    EXPECT_OK(be->ClassTokenBackward(b, t, f, dy.data(), dx.data(), dcls.data()));
    EXPECT_OK(be->SequencePool(true, b, t + 1, f, out.data(), pooled.data()));
    out.insert(out.end(), dx.begin(), dx.end());
    out.insert(out.end(), dcls.begin(), dcls.end());
    out.insert(out.end(), pooled.begin(), pooled.end());
    return out;
  };
  const std::vector<float> one = run(1), two = run(2), three = run(3);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace lockstep
