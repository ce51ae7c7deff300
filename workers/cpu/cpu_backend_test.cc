#include "workers/cpu/cpu_backend.h"

#include <cmath>
#include <numeric>
#include <random>

#include "core/testing.h"

namespace lockstep {
namespace {

std::vector<float> Random(size_t n, int seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double{a[i]} * b[i];
  return s;
}

TEST(CpuBackend, Col2ImIsTheAdjointOfIm2Col) {
  auto be = NewCpuBackend();
  const ConvGeometry g{2, 5, 4, 3, 3};
  const size_t nx = 2 * 5 * 4 * 3, ncols = 2 * 5 * 4 * 27;
  auto x = Random(nx, 1), y = Random(ncols, 2);
  std::vector<float> cols(ncols), dx(nx);
  be->Im2Col(g, x.data(), cols.data());
  be->Col2Im(g, y.data(), dx.data());
  EXPECT_NEAR(Dot(cols, y), Dot(x, dx), 1e-3);
}

TEST(CpuBackend, Im2ColPadsWithZeros) {
  auto be = NewCpuBackend();
  const ConvGeometry g{1, 2, 2, 1, 3};
  std::vector<float> x = {1, 2, 3, 4}, cols(4 * 9);
  be->Im2Col(g, x.data(), cols.data());
  // Pixel (0,0): patch rows -1..1, cols -1..1.
  EXPECT_EQ(std::vector<float>(cols.begin(), cols.begin() + 9),
            (std::vector<float>{0, 0, 0, 0, 1, 2, 0, 3, 4}));
}

TEST(CpuBackend, AvgPoolAndBackward) {
  auto be = NewCpuBackend();
  std::vector<float> x = {1, 2, 3, 4}, y(1), dx(4);
  be->AvgPool(1, 2, 2, 1, x.data(), y.data());
  EXPECT_FLOAT_EQ(y[0], 2.5f);
  std::vector<float> dy = {4};
  be->AvgPoolBackward(1, 2, 2, 1, dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{1, 1, 1, 1}));
}

TEST(CpuBackend, SoftmaxCrossEntropy) {
  auto be = NewCpuBackend();
  std::vector<float> logits = {1, 2, 3, 0, 0, 0};
  std::vector<int32_t> labels = {2, 1};
  std::vector<float> loss(2), dl(6), correct(2);
  be->SoftmaxCrossEntropy(2, 3, logits.data(), labels.data(), loss.data(), dl.data(),
                          correct.data());
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(loss[0], lse - 3.0, 1e-6);
  EXPECT_NEAR(loss[1], std::log(3.0), 1e-6);
  EXPECT_EQ(correct, (std::vector<float>{1, 0}));  // a tie picks the first maximum
  EXPECT_NEAR(dl[2], (std::exp(3.0 - lse) - 1) / 2, 1e-6);
  EXPECT_NEAR(dl[3] + dl[4] + dl[5], 0.0, 1e-6);
}

TEST(CpuBackend, AdamMatchesOptaxFormula) {
  auto be = NewCpuBackend();
  std::vector<float> p = {1.0f}, g = {0.5f}, mu = {0}, nu = {0};
  AdamScalars s{0.1f, 0.9f, 0.999f, 0.1f, 0.001f, 0.1f, 0.001f, 1e-8f, 0.0f};
  be->AdamUpdate(1, &s, g.data(), mu.data(), nu.data(), p.data());
  EXPECT_FLOAT_EQ(mu[0], 0.05f);
  EXPECT_NEAR(p[0], 1.0f - 0.1f, 1e-6);  // first adam step moves by lr * sign(g)
}

}  // namespace
}  // namespace lockstep
