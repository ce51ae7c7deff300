// The CPU kernels for activations, pools and layer norm: known values (max pool's
// routing as XLA's select-and-scatter does it, checked with JAX), gradients against finite
// differences, and the same bits on any thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "core/layer_math.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/cpu/cpu_testing.h"

namespace lockstep {
namespace {

using testing::RandomNormal;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A pool's geometry with lax's SAME or VALID padding.
ConvGeometry Pool(int b, int h, int w, int c, int kh, int kw, int sh, int sw, bool same) {
  ConvGeometry g{b, h, w, c, c, kh, kw, sh, sw};
  if (same) {
    const int th = std::max(((h + sh - 1) / sh - 1) * sh + kh - h, 0);
    const int tw = std::max(((w + sw - 1) / sw - 1) * sw + kw - w, 0);
    g.pad_top = th / 2, g.pad_bottom = th - th / 2, g.pad_left = tw / 2, g.pad_right = tw - tw / 2;
  }
  return g;
}

TEST(CpuLayers, MaxPoolRoutesEachWindowToItsFirstMaximumAsJaxDoes) {
  auto be = NewCpuBackend(2);
  const std::vector<float> x = {1, 3, 3, 0, 3, 2, 1, 3, 0, 0, 5, 5, 0, 0, 5, 5};
  // nn.max_pool(x, (2, 2), (2, 2)); the gradient of sum(y * [1, 2, 3, 4]) in JAX 0.10.
  const ConvGeometry g = Pool(1, 4, 4, 1, 2, 2, 2, 2, false);
  std::vector<float> y(4), dx(16);
  EXPECT_OK(be->MaxPool(g, x.data(), y.data()));
  EXPECT_EQ(y, (std::vector<float>{3, 3, 0, 5}));
  const std::vector<float> dy = {1, 2, 3, 4};
  EXPECT_OK(be->MaxPoolBackward(g, x.data(), dy.data(), dx.data()));
  EXPECT_EQ(dx, (std::vector<float>{0, 1, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0}));
  // Overlapping windows: nn.max_pool(x, (3, 3), (1, 1), 'SAME'), gradient of sum(y).
  const ConvGeometry same = Pool(1, 4, 4, 1, 3, 3, 1, 1, true);
  std::vector<float> y2(16), dx2(16), ones(16, 1.0f);
  EXPECT_OK(be->MaxPool(same, x.data(), y2.data()));
  EXPECT_EQ(y2, (std::vector<float>{3, 3, 3, 3, 3, 5, 5, 5, 3, 5, 5, 5, 0, 5, 5, 5}));
  EXPECT_OK(be->MaxPoolBackward(same, x.data(), ones.data(), dx2.data()));
  EXPECT_EQ(dx2, (std::vector<float>{0, 4, 1, 0, 1, 0, 0, 0, 1, 0, 9, 0, 0, 0, 0, 0}));
}

// By max_pool's definition, one element at a time: calls f(arg, out) for each output
// element `out` (index into y) with `arg` the index into x of the first element of its
// window (row-major) holding the window's maximum, windows in output order.
template <typename F>
void ForEachWindowMax(const ConvGeometry& g, const std::vector<float>& x, F f) {
  for (int n = 0; n < g.b; ++n)
    for (int oy = 0; oy < g.oh(); ++oy)
      for (int ox = 0; ox < g.ow(); ++ox)
        for (int k = 0; k < g.c; ++k) {
          size_t arg = 0;
          bool first = true;
          for (int ky = 0; ky < g.kh; ++ky)
            for (int kx = 0; kx < g.kw; ++kx) {
              const int yy = oy * g.stride_h - g.pad_top + ky,
                        xx = ox * g.stride_w - g.pad_left + kx;
              if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w) continue;
              const size_t at = ((size_t(n) * g.h + yy) * g.w + xx) * g.c + k;
              if (first || x[at] > x[arg]) arg = at;
              first = false;
            }
          f(arg, ((size_t(n) * g.oh() + oy) * g.ow() + ox) * g.c + k);
        }
}

std::vector<float> MaxPoolByDefinition(const ConvGeometry& g, const std::vector<float>& x) {
  std::vector<float> y(size_t(g.b) * g.oh() * g.ow() * g.c);
  ForEachWindowMax(g, x, [&](size_t arg, size_t out) { y[out] = x[arg]; });
  return y;
}

// Each window's dy added to its max_pool argmax.
std::vector<float> MaxPoolBackwardByScatter(const ConvGeometry& g, const std::vector<float>& x,
                                            const std::vector<float>& dy) {
  std::vector<float> dx(x.size(), 0.0f);
  ForEachWindowMax(g, x, [&](size_t arg, size_t out) { dx[arg] += dy[out]; });
  return dx;
}

TEST(CpuLayers, MaxPoolAndItsGradientHaveTheDefinitionsBitsWithTiesZerosAndNans) {
  // Odd channel counts (vector tails), 2x2 windows (the fast path), overlapping and padded
  // windows, values drawn from a
  // few levels (many ties), dy with -0 and NaN, x with NaN.
  for (const ConvGeometry& g :
       {Pool(3, 6, 7, 37, 2, 2, 2, 2, false), Pool(64, 28, 28, 32, 2, 2, 2, 2, false),
        Pool(16, 14, 14, 64, 2, 2, 2, 2, false), Pool(2, 5, 6, 19, 3, 3, 1, 1, true),
        Pool(2, 7, 5, 33, 3, 2, 2, 1, true)}) {
    const size_t nx = size_t(g.b) * g.h * g.w * g.c, ny = size_t(g.b) * g.oh() * g.ow() * g.c;
    std::mt19937 rng(7);
    std::vector<float> x(nx), dy(ny);
    for (float& v : x) v = static_cast<float>(rng() % 4) - 1.5f;
    for (float& v : dy) v = static_cast<float>(static_cast<int>(rng() % 7) - 3) / 3.0f;
    x[5] = std::nanf("");
    dy[1] = -0.0f, dy[2] = std::nanf(""), dy[ny - 1] = -0.0f;
    for (int threads : {1, 2}) {
      auto be = NewCpuBackend(threads);
      std::vector<float> y(ny, 123.0f), dx(nx, 123.0f);
      EXPECT_OK(be->MaxPool(g, x.data(), y.data()));
      const std::vector<float> want_y = MaxPoolByDefinition(g, x);
      ASSERT_EQ(0, std::memcmp(y.data(), want_y.data(), ny * sizeof(float)))
          << "window " << g.kh << "x" << g.kw << " stride " << g.stride_h << "x" << g.stride_w;
      EXPECT_OK(be->MaxPoolBackward(g, x.data(), dy.data(), dx.data()));
      const std::vector<float> want = MaxPoolBackwardByScatter(g, x, dy);
      ASSERT_EQ(0, std::memcmp(dx.data(), want.data(), nx * sizeof(float)))
          << "window " << g.kh << "x" << g.kw << " stride " << g.stride_h << "x" << g.stride_w;
    }
  }
}

TEST(CpuLayers, AvgPoolCountsPaddingOnlyWhenAsked) {
  auto be = NewCpuBackend(2);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  // 2x2 windows at stride 1, SAME on 3x3: padding one row and column after.
  const ConvGeometry g = Pool(1, 3, 3, 1, 2, 2, 1, 1, true);
  ASSERT_EQ(g.pad_bottom, 1);
  std::vector<float> with(9), without(9);
  EXPECT_OK(be->AvgPool(g, true, x.data(), with.data()));
  EXPECT_OK(be->AvgPool(g, false, x.data(), without.data()));
  EXPECT_FLOAT_EQ(with[0], 3.0f);  // (1 + 2 + 4 + 5) / 4
  EXPECT_FLOAT_EQ(with[8], 9.0f / 4);
  EXPECT_FLOAT_EQ(without[8], 9.0f);
  EXPECT_FLOAT_EQ(without[2], (3.0f + 6.0f) / 2);
}

// sum(r * f(x)) and its gradient through `backward`, against central differences.
void ExpectGradient(const std::function<void(const std::vector<float>&, std::vector<float>&)>& f,
                    const std::vector<float>& x, size_t ny,
                    const std::function<std::vector<float>(const std::vector<float>&)>& backward,
                    double tolerance = 2e-2) {
  const std::vector<float> r = RandomNormal(ny, 99);
  auto loss = [&](const std::vector<float>& at) {
    std::vector<float> y(ny);
    f(at, y);
    double s = 0;
    for (size_t i = 0; i < ny; ++i) s += double{r[i]} * y[i];
    return s;
  };
  const std::vector<float> got = backward(r);
  ASSERT_EQ(got.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float h = 1e-2f;
    std::vector<float> plus = x, minus = x;
    plus[i] += h;
    minus[i] -= h;
    const double want = (loss(plus) - loss(minus)) / (2 * h);
    EXPECT_NEAR(got[i], want, tolerance * std::max(1.0, std::fabs(want))) << "element " << i;
  }
}

TEST(CpuLayers, ActivationGradientsMatchFiniteDifferences) {
  auto be = NewCpuBackend(1);
  const std::vector<float> x = RandomNormal(64, 1);
  for (Activation a : {Activation::kGeluTanh, Activation::kGeluErf, Activation::kTanh,
                       Activation::kSigmoid, Activation::kSilu}) {
    SCOPED_TRACE(static_cast<int>(a));
    auto f = [&](const std::vector<float>& in, std::vector<float>& y) {
      EXPECT_OK(be->Activate(a, in.size(), in.data(), y.data()));
    };
    ExpectGradient(f, x, x.size(), [&](const std::vector<float>& dy) {
      std::vector<float> y(x.size()), d = dy;
      EXPECT_OK(be->Activate(a, x.size(), x.data(), y.data()));
      EXPECT_OK(be->ActivateBackward(a, x.size(), x.data(), d.data()));
      return d;
    });
  }
  std::vector<float> y(1);
  const float one = 1.0f;
  EXPECT_OK(be->Activate(Activation::kGeluTanh, 1, &one, y.data()));
  EXPECT_NEAR(y[0], 0.841192f, 1e-6);  // jax.nn.gelu(1.0)
  EXPECT_OK(be->Activate(Activation::kSilu, 1, &one, y.data()));
  EXPECT_NEAR(y[0], 0.7310586f, 1e-6);
}

// math::Tanh is XLA's rational tanh, not libm's: within 7 ulp of tanh in float64 over
// every 97th float in (0, 10] and its negation (XLA's is as close), exact at the ends, NaN
// kept; the backend's vectorized loops (two threads, AVX-512 where the host has it) give
// the scalar's bits.
TEST(CpuLayers, TanhIsXlasRationalTanhWithinSevenUlp) {
  double worst = 0.0;
  uint32_t last;
  const float ten = 10.0f;
  std::memcpy(&last, &ten, sizeof last);
  for (uint32_t bits = 1; bits <= last; bits += 97) {
    float x;
    std::memcpy(&x, &bits, sizeof x);
    const double want = std::tanh(static_cast<double>(x));
    const float rounded = static_cast<float>(want);
    const float ulp = std::nextafter(rounded, 2.0f) - rounded;
    worst = std::max(worst, std::fabs(math::Tanh(x) - want) / ulp);
    worst = std::max(worst, std::fabs(math::Tanh(-x) + want) / ulp);
  }
  EXPECT_LE(worst, 7.0);
  EXPECT_EQ(math::Tanh(INFINITY), 1.0f);
  EXPECT_EQ(math::Tanh(-INFINITY), -1.0f);
  EXPECT_EQ(math::Tanh(9.0f), 1.0f);
  EXPECT_EQ(math::Tanh(1e-5f), 1e-5f);
  EXPECT_TRUE(std::isnan(math::Tanh(NAN)));

  auto be = NewCpuBackend(2);
  std::vector<float> x = RandomNormal(size_t{1} << 17, 7);
  for (float& v : x) v *= 4.0f;
  for (Activation a : {Activation::kTanh, Activation::kGeluTanh}) {
    SCOPED_TRACE(static_cast<int>(a));
    std::vector<float> y(x.size()), d(x.size(), 1.0f), want_y(x.size()), want_d(x.size());
    ASSERT_OK(be->Activate(a, x.size(), x.data(), y.data()));
    ASSERT_OK(be->ActivateBackward(a, x.size(), x.data(), d.data()));
    for (size_t i = 0; i < x.size(); ++i) {
      want_y[i] = math::Activate(a, x[i]);
      want_d[i] = math::ActivationDerivative(a, x[i]);
    }
    EXPECT_TRUE(SameBits(y, want_y));
    EXPECT_TRUE(SameBits(d, want_d));
  }
}

TEST(CpuLayers, PoolGradientsMatchFiniteDifferences) {
  auto be = NewCpuBackend(1);
  const ConvGeometry g = Pool(2, 5, 6, 3, 3, 2, 2, 1, true);
  const size_t nx = size_t(g.b) * g.h * g.w * g.c, ny = size_t(g.b) * g.oh() * g.ow() * g.c;
  const std::vector<float> x = RandomNormal(nx, 2);
  for (bool include : {true, false}) {
    ExpectGradient(
        [&](const std::vector<float>& in, std::vector<float>& y) {
          EXPECT_OK(be->AvgPool(g, include, in.data(), y.data()));
        },
        x, ny,
        [&](const std::vector<float>& dy) {
          std::vector<float> dx(nx);
          EXPECT_OK(be->AvgPoolBackward(g, include, dy.data(), dx.data()));
          return dx;
        });
  }
  // Distinct values 0.1 apart, so that no difference step crosses a tie.
  std::vector<float> spread(nx);
  for (size_t i = 0; i < nx; ++i) spread[i] = 0.1f * static_cast<float>(i);
  std::shuffle(spread.begin(), spread.end(), std::mt19937(3));
  ExpectGradient([&](const std::vector<float>& in,
                     std::vector<float>& y) { EXPECT_OK(be->MaxPool(g, in.data(), y.data())); },
                 spread, ny,
                 [&](const std::vector<float>& dy) {
                   std::vector<float> dx(nx);
                   EXPECT_OK(be->MaxPoolBackward(g, spread.data(), dy.data(), dx.data()));
                   return dx;
                 });
}

// Rows of a large mean and a small spread (0.5 + u / 100, as after a sigmoid): the fast
// variance E[x^2] - E[x]^2 cancels 1 - 1e-4 of itself, so float32 sums left y 2.6e-4 off
// (relative L2); summed in double, y is within 3e-6 of float64's, most of which is the
// float32 mean's own rounding (3e-8 against a spread of 0.01).
TEST(CpuLayers, LayerNormKeepsOffsetRowsPrecise) {
  auto be = NewCpuBackend(1);
  const int rows = 8, cols = 64;
  std::vector<float> x = RandomNormal(rows * cols, 8);
  for (float& v : x) v = 0.5f + v / 100;
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  ASSERT_OK(be->LayerNorm(rows, cols, 1e-6f, x.data(), nullptr, nullptr, y.data(), mean.data(),
                          rstd.data()));
  double num = 0, den = 0;
  for (int r = 0; r < rows; ++r) {
    double m = 0, m2 = 0;
    for (int c = 0; c < cols; ++c)
      m += x[r * cols + c], m2 += double{x[r * cols + c]} * x[r * cols + c];
    m /= cols, m2 /= cols;
    for (int c = 0; c < cols; ++c) {
      const double want = (x[r * cols + c] - m) / std::sqrt(m2 - m * m + 1e-6);
      num += (y[r * cols + c] - want) * (y[r * cols + c] - want);
      den += want * want;
    }
  }
  EXPECT_LE(std::sqrt(num / den), 3e-6);
}

// The kernels take rows four at a time (their sums interleaved): every row, the last odd
// ones included, is math::LayerNormRow's and LayerNormDxRow's bit for bit, with and
// without scale and bias, on 1 and 2 threads.
TEST(CpuLayers, LayerNormIsItsRowFormulaBitForBit) {
  const int rows = 4 * 301 + 3, cols = 75;  // row groups of 8 and 4 with a rest; columns 16, 8, 1
  std::vector<float> x = RandomNormal(rows * cols, 11);
  const std::vector<float> dy = RandomNormal(rows * cols, 12), scale = RandomNormal(cols, 13),
                           bias = RandomNormal(cols, 14);
  std::fill_n(x.begin() + 2 * cols, cols, 0.3f);   // a constant row: its variance clamped to 0
  std::fill_n(x.begin() + 9 * cols, cols, 1e30f);  // x^2 past float's range (not double's)
  x[5 * cols + 7] = std::numeric_limits<float>::quiet_NaN();
  for (const bool affine : {false, true}) {
    const float* sc = affine ? scale.data() : nullptr;
    const float* bi = affine ? bias.data() : nullptr;
    std::vector<float> want(x.size()), want_dx(x.size()), want_mean(rows), want_rstd(rows);
    for (int r = 0; r < rows; ++r) {
      const size_t at = size_t(r) * cols;
      math::LayerNormRow(cols, 1e-5f, x.data() + at, sc, bi, want.data() + at, &want_mean[r],
                         &want_rstd[r]);
      math::LayerNormDxRow(cols, x.data() + at, sc, want_mean[r], want_rstd[r], dy.data() + at,
                           want_dx.data() + at);
    }
    // dscale, dbias: column sums of dy * xhat and dy in double over 8 fixed row blocks, each
    // top to bottom, the blocks added in order and rounded once.
    std::vector<float> want_dscale(cols), want_dbias(cols);
    for (int c = 0; c < cols; ++c) {
      double total_s = 0, total_b = 0;
      for (int blk = 0; blk < 8; ++blk) {
        double s = 0, b = 0;
        for (int r = rows * blk / 8; r < rows * (blk + 1) / 8; ++r) {
          const size_t at = size_t(r) * cols + c;
          s += double{dy[at]} * ((x[at] - want_mean[r]) * want_rstd[r]);
          b += dy[at];
        }
        total_s += s;
        total_b += b;
      }
      want_dscale[c] = static_cast<float>(total_s);
      want_dbias[c] = static_cast<float>(total_b);
    }
    for (const int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "affine " << affine << " threads " << threads);
      auto be = NewCpuBackend(threads);
      std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dscale(cols),
          dbias(cols);
      ASSERT_OK(
          be->LayerNorm(rows, cols, 1e-5f, x.data(), sc, bi, y.data(), mean.data(), rstd.data()));
      EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(mean.data(), want_mean.data(), rows * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(rstd.data(), want_rstd.data(), rows * sizeof(float)));
      ASSERT_OK(be->LayerNormBackward(rows, cols, x.data(), sc, mean.data(), rstd.data(), dy.data(),
                                      dx.data(), dscale.data(), dbias.data()));
      EXPECT_EQ(0, std::memcmp(dx.data(), want_dx.data(), dx.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(dscale.data(), want_dscale.data(), cols * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(dbias.data(), want_dbias.data(), cols * sizeof(float)));
    }
  }
}

TEST(CpuLayers, LayerNormMatchesItsDefinitionAndFiniteDifferences) {
  auto be = NewCpuBackend(1);
  const int rows = 3, cols = 7;
  const std::vector<float> x = RandomNormal(rows * cols, 3), scale = RandomNormal(cols, 4),
                           bias = RandomNormal(cols, 5);
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  EXPECT_OK(be->LayerNorm(rows, cols, 1e-6f, x.data(), scale.data(), bias.data(), y.data(),
                          mean.data(), rstd.data()));
  for (int r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < cols; ++c) m += x[r * cols + c] / double{cols};
    for (int c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m) / cols;
    for (int c = 0; c < cols; ++c) {
      const double want = (x[r * cols + c] - m) / std::sqrt(v + 1e-6) * scale[c] + bias[c];
      EXPECT_NEAR(y[r * cols + c], want, 1e-5);
    }
  }
  for (bool with_params : {true, false}) {
    const float* s = with_params ? scale.data() : nullptr;
    const float* b = with_params ? bias.data() : nullptr;
    auto f = [&](const std::vector<float>& in, std::vector<float>& out) {
      std::vector<float> m(rows), rs(rows);
      EXPECT_OK(be->LayerNorm(rows, cols, 1e-6f, in.data(), s, b, out.data(), m.data(), rs.data()));
    };
    ExpectGradient(f, x, x.size(), [&](const std::vector<float>& dy) {
      std::vector<float> out(x.size()), m(rows), rs(rows), dx(x.size()), ds(cols), db(cols);
      EXPECT_OK(be->LayerNorm(rows, cols, 1e-6f, x.data(), s, b, out.data(), m.data(), rs.data()));
      EXPECT_OK(be->LayerNormBackward(rows, cols, x.data(), s, m.data(), rs.data(), dy.data(),
                                      dx.data(), ds.data(), db.data()));
      return dx;
    });
  }
  // The parameters' gradients, through the same finite differences over scale and bias.
  const std::vector<float> dy = RandomNormal(x.size(), 6);
  std::vector<float> dx(x.size()), ds(cols), db(cols);
  EXPECT_OK(be->LayerNormBackward(rows, cols, x.data(), scale.data(), mean.data(), rstd.data(),
                                  dy.data(), dx.data(), ds.data(), db.data()));
  for (int c = 0; c < cols; ++c) {
    double want_s = 0, want_b = 0;
    for (int r = 0; r < rows; ++r) {
      want_s += double{dy[r * cols + c]} * (x[r * cols + c] - mean[r]) * rstd[r];
      want_b += dy[r * cols + c];
    }
    EXPECT_NEAR(ds[c], want_s, 1e-5);
    EXPECT_NEAR(db[c], want_b, 1e-5);
  }
}

// Every new kernel at sizes past the one-thread cutoff: all outputs, concatenated.
std::vector<float> LayerKernels(Backend& be) {
  const ConvGeometry g = Pool(16, 20, 20, 16, 3, 3, 2, 2, true);
  const size_t nx = size_t(g.b) * g.h * g.w * g.c, ny = size_t(g.b) * g.oh() * g.ow() * g.c;
  const auto x = RandomNormal(nx, 7), dy = RandomNormal(ny, 8), scale = RandomNormal(g.c, 9),
             bias = RandomNormal(g.c, 10);
  std::vector<float> out;
  auto keep = [&](const std::vector<float>& v) { out.insert(out.end(), v.begin(), v.end()); };
  std::vector<float> y(ny), dx(nx);
  EXPECT_OK(be.AvgPool(g, false, x.data(), y.data()));
  EXPECT_OK(be.AvgPoolBackward(g, true, dy.data(), dx.data()));
  keep(y), keep(dx);
  EXPECT_OK(be.MaxPool(g, x.data(), y.data()));
  EXPECT_OK(be.MaxPoolBackward(g, x.data(), dy.data(), dx.data()));
  keep(y), keep(dx);
  const int rows = g.b * g.h * g.w;
  std::vector<float> z(nx), mean(rows), rstd(rows), ds(g.c), db(g.c), dz = RandomNormal(nx, 11);
  EXPECT_OK(be.LayerNorm(rows, g.c, 1e-6f, x.data(), scale.data(), bias.data(), z.data(),
                         mean.data(), rstd.data()));
  EXPECT_OK(be.LayerNormBackward(rows, g.c, x.data(), scale.data(), mean.data(), rstd.data(),
                                 dz.data(), dx.data(), ds.data(), db.data()));
  keep(z), keep(mean), keep(rstd), keep(dx), keep(ds), keep(db);
  EXPECT_OK(be.Activate(Activation::kGeluTanh, nx, x.data(), z.data()));
  EXPECT_OK(be.ActivateBackward(Activation::kGeluTanh, nx, x.data(), dz.data()));
  keep(z), keep(dz);
  return out;
}

TEST(CpuLayers, KernelsGiveTheSameBitsOnAnyThreadCount) {
  const std::vector<float> one = LayerKernels(*NewCpuBackend(1));
  EXPECT_TRUE(SameBits(one, LayerKernels(*NewCpuBackend(2))));
  EXPECT_TRUE(SameBits(one, LayerKernels(*NewCpuBackend(4))));
}

}  // namespace
}  // namespace lockstep
