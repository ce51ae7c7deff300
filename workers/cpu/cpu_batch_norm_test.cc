// The CPU BatchNorm kernels: against a float64 reference of the textbook formulas, two
// replicas' halves (their sums added, as the all-reduce does) against one replica holding
// all rows, and the same bits on any thread count.
#include <cmath>
#include <cstring>
#include <random>

#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

std::vector<float> Random(size_t n, int seed, float mean = 0.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(mean, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Forward and backward on `rows` rows of one replica.
struct Result {
  std::vector<float> moments, var, y, sums, dscale, dbias, dx;
};

Result RunBatchNorm(Backend& be, int rows, int cols, const float* x, const float* dy,
                    const float* scale, const float* bias) {
  const float eps = 1e-3f;
  std::vector<float> partials(BatchNormPartials(cols));
  Result r{std::vector<float>(2 * cols),
           std::vector<float>(cols),
           std::vector<float>(size_t(rows) * cols),
           std::vector<float>(2 * cols),
           std::vector<float>(cols),
           std::vector<float>(cols),
           std::vector<float>(size_t(rows) * cols)};
  EXPECT_OK(be.BatchNormMoments(rows, cols, x, partials.data(), r.moments.data()));
  EXPECT_OK(be.BatchNormVariance(cols, r.moments.data(), r.var.data()));
  EXPECT_OK(be.BatchNormApply(rows, cols, eps, x, r.moments.data(), r.var.data(), scale, bias,
                              r.y.data()));
  EXPECT_OK(be.BatchNormBackwardReduce(rows, cols, eps, x, dy, r.moments.data(), r.var.data(),
                                       partials.data(), r.sums.data(), r.dscale.data(),
                                       r.dbias.data()));
  EXPECT_OK(be.BatchNormBackwardApply(rows, cols, eps, 1, x, dy, r.moments.data(), r.var.data(),
                                      scale, r.sums.data(), r.dx.data()));
  return r;
}

// 127 columns: the kernels' column blocks of every width (64, 32, 16, 8, then one at a time).
class CpuBatchNormColumns : public ::testing::TestWithParam<int> {};

TEST_P(CpuBatchNormColumns, MatchesTheTextbookFormulasInDouble) {
  auto be = NewCpuBackend(2);
  const int rows = 300, cols = GetParam();
  const std::vector<float> x = Random(rows * cols, 1, 3.0f), dy = Random(rows * cols, 2);
  const std::vector<float> scale = Random(cols, 3), bias = Random(cols, 4);
  const Result r = RunBatchNorm(*be, rows, cols, x.data(), dy.data(), scale.data(), bias.data());
  for (int c = 0; c < cols; ++c) {
    double mean = 0, var = 0, sum_dy = 0, sum_dy_xhat = 0;
    for (int i = 0; i < rows; ++i) mean += x[i * cols + c];
    mean /= rows;
    for (int i = 0; i < rows; ++i) var += (x[i * cols + c] - mean) * (x[i * cols + c] - mean);
    var /= rows;
    const double rs = 1.0 / std::sqrt(var + 1e-3f);
    for (int i = 0; i < rows; ++i) {
      sum_dy += dy[i * cols + c];
      sum_dy_xhat += dy[i * cols + c] * (x[i * cols + c] - mean) * rs;
    }
    EXPECT_NEAR(r.moments[c], mean, 1e-5);
    EXPECT_NEAR(r.var[c], var, 1e-4 * var);
    EXPECT_NEAR(r.dbias[c], sum_dy, 1e-4);
    EXPECT_NEAR(r.dscale[c], sum_dy_xhat, 1e-3);
    for (int i = 0; i < rows; ++i) {
      const double xhat = (x[i * cols + c] - mean) * rs;
      EXPECT_NEAR(r.y[i * cols + c], xhat * scale[c] + bias[c], 1e-4) << i << "," << c;
      const double dx =
          scale[c] * rs * (dy[i * cols + c] - sum_dy / rows - xhat * sum_dy_xhat / rows);
      EXPECT_NEAR(r.dx[i * cols + c], dx, 1e-4) << i << "," << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, CpuBatchNormColumns, ::testing::Values(5, 127));

TEST(CpuBatchNorm, TwoReplicasHalvesMatchOneReplicaWithAllRows) {
  auto be = NewCpuBackend(1);
  const int rows = 64, cols = 3, half = rows / 2;
  const float eps = 1e-3f;
  const std::vector<float> x = Random(rows * cols, 5, 1.0f), dy = Random(rows * cols, 6);
  const std::vector<float> scale = Random(cols, 7);
  const Result all = RunBatchNorm(*be, rows, cols, x.data(), dy.data(), scale.data(), nullptr);
  // Each replica's half, with the all-reduces done by hand: moments summed and divided by
  // 2, backward sums summed.
  std::vector<float> m[2], sums[2], moments(2 * cols, 0.0f), total(2 * cols, 0.0f), var(cols);
  std::vector<float> partials(BatchNormPartials(cols));
  for (int r = 0; r < 2; ++r) {
    m[r].resize(2 * cols);
    EXPECT_OK(
        be->BatchNormMoments(half, cols, x.data() + r * half * cols, partials.data(), m[r].data()));
  }
  for (int k = 0; k < 2 * cols; ++k) moments[k] = m[0][k] + m[1][k];
  EXPECT_OK(be->Divide(2 * cols, 2.0f, moments.data()));
  EXPECT_OK(be->BatchNormVariance(cols, moments.data(), var.data()));
  std::vector<float> y(rows * cols), dx(rows * cols);
  for (int r = 0; r < 2; ++r) {
    const size_t at = size_t(r) * half * cols;
    EXPECT_OK(be->BatchNormApply(half, cols, eps, x.data() + at, moments.data(), var.data(),
                                 scale.data(), nullptr, y.data() + at));
    sums[r].resize(2 * cols);
    EXPECT_OK(be->BatchNormBackwardReduce(half, cols, eps, x.data() + at, dy.data() + at,
                                          moments.data(), var.data(), partials.data(),
                                          sums[r].data(), nullptr, nullptr));
  }
  for (int k = 0; k < 2 * cols; ++k) total[k] = sums[0][k] + sums[1][k];
  for (int r = 0; r < 2; ++r) {
    const size_t at = size_t(r) * half * cols;
    EXPECT_OK(be->BatchNormBackwardApply(half, cols, eps, 2, x.data() + at, dy.data() + at,
                                         moments.data(), var.data(), scale.data(), total.data(),
                                         dx.data() + at));
  }
  EXPECT_LE(testing::MaxAbsDiff(moments, all.moments), 1e-6);
  EXPECT_LE(testing::MaxAbsDiff(y, all.y), 1e-5);
  EXPECT_LE(testing::MaxAbsDiff(dx, all.dx), 1e-5);
  EXPECT_GT(testing::MaxAbsDiff(dx, std::vector<float>(dx.size(), 0.0f)), 1e-2);
}

TEST(CpuBatchNorm, SameBitsOnAnyThreadCount) {
  const int rows = 9000, cols = 7;  // past the single-thread threshold
  const std::vector<float> x = Random(rows * cols, 8, 2.0f), dy = Random(rows * cols, 9);
  const std::vector<float> bias = Random(cols, 10);
  auto one = NewCpuBackend(1), three = NewCpuBackend(3);
  const Result a = RunBatchNorm(*one, rows, cols, x.data(), dy.data(), nullptr, bias.data());
  const Result b = RunBatchNorm(*three, rows, cols, x.data(), dy.data(), nullptr, bias.data());
  for (auto [u, v] : {std::pair{&a.moments, &b.moments},
                      {&a.y, &b.y},
                      {&a.sums, &b.sums},
                      {&a.dx, &b.dx},
                      {&a.dbias, &b.dbias},
                      {&a.dscale, &b.dscale}}) {
    EXPECT_EQ(std::memcmp(u->data(), v->data(), u->size() * sizeof(float)), 0);
  }
}

TEST(CpuBatchNorm, Bf16FormsReadAConvsUnroundedSumsAsTheirRoundingBitForBit) {
  // A bfloat16 conv's sums left unrounded (Backend::TakesUnroundedBatchNormInput): the
  // Bf16 forms on them give the bits the plain kernels give on bf16(x), the input
  // gradient rounded as ToBf16 rounds it; and ApplyBf16 rounds x as it reads it.
  const int rows = 9000, cols = 24;  // past the single-thread threshold; a ragged last block
  const std::vector<float> x = Random(rows * cols, 11, 1.5f), dy = Random(rows * cols, 12);
  const std::vector<float> scale = Random(cols, 13), bias = Random(cols, 14);
  std::vector<float> rounded(x.size());
  for (size_t i = 0; i < x.size(); ++i) rounded[i] = RoundBf16(x[i]);
  ASSERT_NE(std::memcmp(x.data(), rounded.data(), x.size() * sizeof(float)), 0);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    auto be = NewCpuBackend(threads);
    ASSERT_TRUE(be->TakesUnroundedBatchNormInput());
    const float eps = 1e-3f;
    std::vector<float> partials(BatchNormPartials(cols)), var(cols);
    std::vector<float> want_moments(2 * cols), moments(2 * cols);
    ASSERT_OK(
        be->BatchNormMoments(rows, cols, rounded.data(), partials.data(), want_moments.data()));
    ASSERT_OK(be->BatchNormMomentsBf16(rows, cols, x.data(), partials.data(), moments.data()));
    EXPECT_EQ(std::memcmp(moments.data(), want_moments.data(), moments.size() * sizeof(float)), 0);
    ASSERT_OK(be->BatchNormVariance(cols, moments.data(), var.data()));

    std::vector<float> want_y(x.size()), y(x.size());
    std::vector<Bf16> want_y16(x.size()), y16(x.size());
    ASSERT_OK(be->BatchNormApplyBf16(rows, cols, eps, rounded.data(), moments.data(), var.data(),
                                     scale.data(), bias.data(), true, want_y.data(),
                                     want_y16.data()));
    ASSERT_OK(be->BatchNormApplyBf16(rows, cols, eps, x.data(), moments.data(), var.data(),
                                     scale.data(), bias.data(), true, y.data(), y16.data()));
    EXPECT_EQ(std::memcmp(y.data(), want_y.data(), y.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(y16.data(), want_y16.data(), y16.size() * sizeof(Bf16)), 0);

    std::vector<float> want_sums(2 * cols), sums(2 * cols), want_d(2 * cols), d(2 * cols);
    ASSERT_OK(be->BatchNormBackwardReduce(rows, cols, eps, rounded.data(), dy.data(),
                                          moments.data(), var.data(), partials.data(),
                                          want_sums.data(), want_d.data(), want_d.data() + cols));
    ASSERT_OK(be->BatchNormBackwardReduceBf16(rows, cols, eps, x.data(), dy.data(), moments.data(),
                                              var.data(), partials.data(), sums.data(), d.data(),
                                              d.data() + cols));
    EXPECT_EQ(std::memcmp(sums.data(), want_sums.data(), sums.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(d.data(), want_d.data(), d.size() * sizeof(float)), 0);

    std::vector<float> dx(x.size());
    std::vector<Bf16> want_dx16(x.size()), dx16(x.size());
    ASSERT_OK(be->BatchNormBackwardApply(rows, cols, eps, 2, rounded.data(), dy.data(),
                                         moments.data(), var.data(), scale.data(), sums.data(),
                                         dx.data()));
    ASSERT_OK(be->ToBf16(dx.size(), dx.data(), want_dx16.data()));
    ASSERT_OK(be->BatchNormBackwardApplyBf16(rows, cols, eps, 2, x.data(), dy.data(),
                                             moments.data(), var.data(), scale.data(), sums.data(),
                                             dx16.data()));
    EXPECT_EQ(std::memcmp(dx16.data(), want_dx16.data(), dx16.size() * sizeof(Bf16)), 0);
  }
}

TEST(CpuBatchNorm, RunningAveragesAsFlaxWritesThem) {
  auto be = NewCpuBackend(1);
  const std::vector<float> mean = {1.0f, -2.0f}, var = {4.0f, 0.5f};
  std::vector<float> ra_mean = {0.0f, 0.0f}, ra_var = {1.0f, 1.0f};
  const float m = 0.9f, om = static_cast<float>(1.0 - 0.9);
  EXPECT_OK(
      be->BatchNormUpdateStats(2, m, om, mean.data(), var.data(), ra_mean.data(), ra_var.data()));
  for (int c = 0; c < 2; ++c) {
    EXPECT_EQ(ra_mean[c], m * 0.0f + om * mean[c]);
    EXPECT_EQ(ra_var[c], m * 1.0f + om * var[c]);
  }
}

}  // namespace
}  // namespace lockstep
