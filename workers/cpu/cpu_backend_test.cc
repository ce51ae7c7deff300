#include "workers/cpu/cpu_backend.h"

#include <dirent.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

#include "absl/base/casts.h"
#include "core/rng/random.h"
#include "core/testing.h"
#include "workers/cpu/cpu_testing.h"

// OpenBLAS's own count (its process-wide blas_cpu_number), declared here so that the test
// needs no OpenBLAS include path.
extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

namespace lockstep {
namespace {

using testing::RandomNormal;

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double{a[i]} * b[i];
  return s;
}

TEST(CpuBackend, Col2ImIsTheAdjointOfIm2Col) {
  auto be = NewCpuBackend(2);
  // SAME stride 1; SAME stride 2 (padding after only); VALID stride 2 (columns unread);
  // a 2x3 kernel at strides 3x1, padded unevenly.
  for (const ConvGeometry g : {ConvGeometry{2, 5, 4, 3, 4, 3, 3, 1, 1, 1, 1, 1, 1},
                               ConvGeometry{2, 6, 7, 2, 4, 3, 3, 2, 2, 0, 1, 1, 1},
                               ConvGeometry{1, 7, 8, 3, 2, 3, 3, 2, 2},
                               ConvGeometry{3, 8, 5, 2, 1, 2, 3, 3, 1, 0, 1, 1, 1}}) {
    const size_t nx = size_t(g.b) * g.h * g.w * g.c;
    const size_t ncols = size_t(g.b) * g.oh() * g.ow() * g.kh * g.kw * g.c;
    auto x = RandomNormal(nx, 1), y = RandomNormal(ncols, 2);
    std::vector<float> cols(ncols), dx(nx);
    EXPECT_OK(be->Im2Col(g, x.data(), cols.data()));
    EXPECT_OK(be->Col2Im(g, y.data(), dx.data()));
    EXPECT_NEAR(Dot(cols, y), Dot(x, dx), 1e-3) << g.kh << "x" << g.kw << " / " << g.stride_h;
  }
}

TEST(CpuBackend, Im2ColPlacesStridedPatches) {
  auto be = NewCpuBackend(2);
  // 3x3 image, 2x2 kernel, stride 2, SAME: out 2x2, padding 0 before and 1 after.
  const ConvGeometry g{1, 3, 3, 1, 1, 2, 2, 2, 2, 0, 1, 0, 1};
  ASSERT_EQ(g.oh(), 2);
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, cols(4 * 4);
  EXPECT_OK(be->Im2Col(g, x.data(), cols.data()));
  EXPECT_EQ(cols, (std::vector<float>{1, 2, 4, 5, 3, 0, 6, 0, 7, 8, 0, 0, 9, 0, 0, 0}));
}

TEST(CpuBackend, Im2ColPadsWithZeros) {
  auto be = NewCpuBackend(2);
  const ConvGeometry g{1, 2, 2, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1};
  std::vector<float> x = {1, 2, 3, 4}, cols(4 * 9);
  EXPECT_OK(be->Im2Col(g, x.data(), cols.data()));
  // Pixel (0,0): patch rows -1..1, cols -1..1.
  EXPECT_EQ(std::vector<float>(cols.begin(), cols.begin() + 9),
            (std::vector<float>{0, 0, 0, 0, 1, 2, 0, 3, 4}));
}

TEST(CpuBackend, AvgPoolAndBackward) {
  auto be = NewCpuBackend(2);
  std::vector<float> x = {1, 2, 3, 4}, y(1), dx(4);
  const ConvGeometry g{1, 2, 2, 1, 1, 2, 2, 2, 2};
  EXPECT_OK(be->AvgPool(g, true, x.data(), y.data()));
  EXPECT_FLOAT_EQ(y[0], 2.5f);
  std::vector<float> dy = {4};
  EXPECT_OK(be->AvgPoolBackward(g, true, dy.data(), dx.data()));
  EXPECT_EQ(dx, (std::vector<float>{1, 1, 1, 1}));
}

TEST(CpuBackend, SoftmaxCrossEntropy) {
  auto be = NewCpuBackend(2);
  std::vector<float> logits = {1, 2, 3, 0, 0, 0};
  std::vector<int32_t> labels = {2, 1};
  std::vector<float> loss(2), dl(6), correct(2);
  EXPECT_OK(be->SoftmaxCrossEntropy(2, 3, logits.data(), labels.data(), loss.data(), dl.data(),
                                    correct.data()));
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(loss[0], lse - 3.0, 1e-6);
  EXPECT_NEAR(loss[1], std::log(3.0), 1e-6);
  EXPECT_EQ(correct, (std::vector<float>{1, 0}));  // a tie picks the first maximum
  EXPECT_NEAR(dl[2], (std::exp(3.0 - lse) - 1) / 2, 1e-6);
  EXPECT_NEAR(dl[3] + dl[4] + dl[5], 0.0, 1e-6);
}

// A residual connection's kernels: Add (into either operand) and Copy, over more elements
// than one thread takes.
TEST(CpuBackend, AddIntoEitherOperandAndCopy) {
  auto be = NewCpuBackend(2);
  const size_t n = 100003;
  std::vector<float> a(n), b(n), y(n);
  for (size_t i = 0; i < n; ++i) a[i] = 0.5f * i, b[i] = 1.0f - i;
  EXPECT_OK(be->Add(n, a.data(), b.data(), y.data()));
  for (size_t i = 0; i < n; i += 9973) EXPECT_EQ(y[i], 0.5f * i + (1.0f - i)) << i;
  std::vector<float> c = b;
  EXPECT_OK(be->Add(n, a.data(), c.data(), c.data()));  // y == b
  EXPECT_EQ(c, y);
  EXPECT_OK(be->Add(n, a.data(), b.data(), a.data()));  // y == a
  EXPECT_EQ(a, y);
  std::vector<float> copy(n, -1.0f);
  EXPECT_OK(be->Copy(n, b.data(), copy.data()));
  EXPECT_EQ(copy, b);
}

// Dropout against its per-element formula (mask = uniform(bits of element i) < keep, y =
// x / keep or +0.0), both key modes, 1 and 2 threads, a size that is no multiple of the
// kernel's blocks; and its backward (dy / keep or +0.0, negative values and NaN included).
TEST(CpuBackend, DropoutIsItsElementFormulaBitForBit) {
  const size_t n = 100003;
  std::vector<float> x = RandomNormal(n, 5);
  x[7] = std::numeric_limits<float>::quiet_NaN();
  const float keep = 0.9f;
  const rng::Key key{11, 4};
  for (rng::Impl impl : {rng::Impl::kPartitionable, rng::Impl::kLegacy}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, impl " << int(impl));
      auto be = NewCpuBackend(threads);
      std::vector<float> y(n), dx(n);
      std::vector<uint8_t> mask(n);
      ASSERT_OK(be->Dropout(n, keep, &key, impl, x.data(), y.data(), mask.data()));
      ASSERT_OK(be->DropoutBackward(n, keep, mask.data(), x.data(), dx.data()));
      for (size_t i = 0; i < n; ++i) {
        const bool kept = rng::BitsToUnitFloat(rng::RandomBitsAt(key, impl, i, n)) < keep;
        ASSERT_EQ(mask[i], kept ? 1 : 0) << i;
        const uint32_t want = kept ? absl::bit_cast<uint32_t>(x[i] / keep) : 0u;
        ASSERT_EQ(absl::bit_cast<uint32_t>(y[i]), want) << i;
        ASSERT_EQ(absl::bit_cast<uint32_t>(dx[i]), want) << i;
      }
    }
  }
}

// BiasGrad against its formula: each column summed in double over eight fixed blocks of
// rows (one below the parallel cutoff), each top to bottom, the blocks combined in order
// and rounded once; 77 columns take every width of the kernel's column blocks (32, 8, 1).
TEST(CpuBackend, BiasGradIsItsBlockSumFormulaBitForBit) {
  const int cols = 77;
  for (const int rows : {7, 3001}) {
    const std::vector<float> dy = RandomNormal(size_t(rows) * cols, 15);
    const int blocks = rows == 7 ? 1 : 8;
    std::vector<float> want(cols);
    for (int c = 0; c < cols; ++c) {
      double total = 0;
      for (int blk = 0; blk < blocks; ++blk) {
        double sum = 0;
        for (int r = rows * blk / blocks; r < rows * (blk + 1) / blocks; ++r) {
          sum += dy[size_t(r) * cols + c];
        }
        total += sum;
      }
      want[c] = static_cast<float>(total);
    }
    for (int threads : {1, 2}) {
      std::vector<float> db(cols);
      ASSERT_OK(NewCpuBackend(threads)->BiasGrad(rows, cols, dy.data(), db.data()));
      EXPECT_EQ(db, want) << rows << " rows, " << threads << " threads";
    }
  }
}

TEST(CpuBackend, AdamMatchesOptaxFormula) {
  auto be = NewCpuBackend(2);
  std::vector<float> p = {1.0f}, g = {0.5f}, mu = {0}, nu = {0};
  UpdateScalars s{0.1f, 0.9f, 0.999f, 0.1f, 0.001f, 0.1f, 0.001f, 1e-8f, 0.0f};
  EXPECT_OK(be->AdamUpdate(1, &s, g.data(), mu.data(), nu.data(), p.data()));
  EXPECT_FLOAT_EQ(mu[0], 0.05f);
  EXPECT_NEAR(p[0], 1.0f - 0.1f, 1e-6);  // first adam step moves by lr * sign(g)
}

TEST(CpuBackend, SgdNesterovMatchesOptaxFormula) {
  auto be = NewCpuBackend(1);
  // optax.trace(decay=0.5, nesterov=True): trace = g + 0.5 trace; update = g + 0.5 trace.
  std::vector<float> p = {1.0f}, g = {0.25f}, trace = {1.0f};
  const UpdateScalars lr{0.125f};
  EXPECT_OK(be->SgdUpdate(1, &lr, 0.5f, /*nesterov=*/true, g.data(), trace.data(), p.data()));
  EXPECT_EQ(trace[0], 0.75f);
  EXPECT_EQ(p[0], 1.0f - 0.125f * (0.25f + 0.5f * 0.75f));
  EXPECT_OK(be->SgdUpdate(1, &lr, 0.5f, /*nesterov=*/false, g.data(), trace.data(), p.data()));
  EXPECT_EQ(trace[0], 0.625f);
  EXPECT_EQ(p[0], 1.0f - 0.125f * 0.625f - 0.125f * 0.625f);
}

// The fixed order of Backend::SumSquares: the same bits whatever the thread count, at
// one, two and three levels; close to the exact sum.
TEST(CpuBackend, SumSquaresIsTheSameWithAnyThreadsAndNearlyExact) {
  for (const size_t n : {size_t{0}, size_t{5}, size_t{kSumChunk} * 40 + 3,
                         size_t{kSumChunk} * kSumChunk + 2 * kSumChunk + 5}) {
    const std::vector<float> x = RandomNormal(n, 7);
    std::vector<double> partials(SumSquaresPartials(n));
    double sums[3];
    for (int i = 0; i < 3; ++i) {
      EXPECT_OK(NewCpuBackend(1 << i)->SumSquares(n, x.data(), partials.data(), &sums[i]));
    }
    EXPECT_EQ(std::memcmp(&sums[0], &sums[1], sizeof(double)), 0) << n;
    EXPECT_EQ(std::memcmp(&sums[0], &sums[2], sizeof(double)), 0) << n;
    long double exact = 0;
    for (float v : x) exact += static_cast<long double>(v) * v;
    EXPECT_NEAR(sums[0], static_cast<double>(exact), 1e-12 * static_cast<double>(exact)) << n;
  }
}

TEST(CpuBackend, ClipByGlobalNormScalesOnlyFromMaxNormOn) {
  auto be = NewCpuBackend(1);
  const double sum_squares = 25;  // norm 5
  for (const float max_norm : {10.0f, 5.0f, 2.5f}) {
    std::vector<float> g = {3, -4};
    EXPECT_OK(be->ClipByGlobalNorm(g.size(), max_norm, &sum_squares, g.data()));
    const float scale = max_norm > 5 ? 1 : max_norm / 5;  // optax: norm < max keeps g
    EXPECT_FLOAT_EQ(g[0], 3 * scale) << max_norm;
    EXPECT_FLOAT_EQ(g[1], -4 * scale) << max_norm;
  }
}

struct GemmShape {
  int m, n, k;
};

// Products with a dimension under 32 (the first conv's K = 9, the 10-class layer; the
// 128 x 10 x 128 one is small enough to run on one thread), and a large square one.
constexpr GemmShape kShapes[] = {{4096, 32, 9},  {9, 32, 4096},  {128, 10, 128},
                                 {128, 10, 256}, {128, 256, 10}, {256, 256, 256}};

// Random a (m*k), b (k*n) and c0 (m*n) for a shape.
struct GemmInputs {
  explicit GemmInputs(GemmShape s)
      : shape(s),
        a(RandomNormal(static_cast<size_t>(s.m) * s.k, 1)),
        b(RandomNormal(static_cast<size_t>(s.k) * s.n, 2)),
        c0(RandomNormal(static_cast<size_t>(s.m) * s.n, 3)) {}
  GemmShape shape;
  std::vector<float> a, b, c0;
};

constexpr float kAlpha = 0.5f, kBeta = 0.25f;

// c = alpha * op(a) * op(b) + beta * c0 in double, and sum |alpha * a * b| + |beta * c0|
// per element, the scale a float result's rounding error grows with.
void ReferenceGemm(bool ta, bool tb, const GemmInputs& in, std::vector<double>* c,
                   std::vector<double>* scale) {
  const GemmShape s = in.shape;
  const std::vector<float>&a = in.a, &b = in.b, &c0 = in.c0;
  const double alpha = kAlpha, beta = kBeta;
  c->assign(c0.size(), 0.0);
  scale->assign(c0.size(), 0.0);
  for (int i = 0; i < s.m; ++i) {
    for (int j = 0; j < s.n; ++j) {
      double sum = 0, abs = 0;
      for (int l = 0; l < s.k; ++l) {
        const double x =
            a[ta ? static_cast<size_t>(l) * s.m + i : static_cast<size_t>(i) * s.k + l];
        const double y =
            b[tb ? static_cast<size_t>(j) * s.k + l : static_cast<size_t>(l) * s.n + j];
        sum += x * y;
        abs += std::fabs(x * y);
      }
      const size_t e = static_cast<size_t>(i) * s.n + j;
      (*c)[e] = alpha * sum + beta * c0[e];
      (*scale)[e] = alpha * abs + beta * std::fabs(c0[e]);
    }
  }
}

std::vector<float> RunGemm(Backend& be, bool ta, bool tb, const GemmInputs& in) {
  std::vector<float> c = in.c0;
  const GemmShape s = in.shape;
  EXPECT_OK(be.Gemm(ta, tb, s.m, s.n, s.k, kAlpha, in.a.data(), in.b.data(), kBeta, c.data()));
  return c;
}

bool SameBits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

class CpuBackendThreads : public ::testing::TestWithParam<int> {};

TEST_P(CpuBackendThreads, GemmIsBitwiseReproducible) {
  auto be = NewCpuBackend(GetParam());
  for (const GemmShape s : kShapes) {
    const GemmInputs in(s);
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        const auto first = RunGemm(*be, ta, tb, in);
        EXPECT_TRUE(SameBits(first, RunGemm(*be, ta, tb, in)))
            << s.m << "x" << s.n << "x" << s.k << " ta=" << ta << " tb=" << tb;
      }
    }
  }
}

// One conv layer forward and backward, with the parallel paths of every kernel it uses
// (sizes above the one-thread cutoff), and a sgd update; returns all the outputs.
std::vector<float> ConvStep(Backend& be) {
  const ConvGeometry g{16, 14, 14, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1};
  const ConvGeometry pool_g{16, 14, 14, 16, 16, 2, 2, 2, 2};
  const int rows = g.b * g.h * g.w, patch = g.kh * g.kw * g.c, f = 16;
  const auto x = RandomNormal(rows * g.c, 4), w = RandomNormal(patch * f, 5),
             bias = RandomNormal(f, 6), dpool = RandomNormal(rows / 4 * f, 7);
  std::vector<float> cols(rows * patch), y(rows * f), pool(y.size() / 4), dy(y.size()), db(f),
      dw(w.size()), dcols(cols.size()), dx(x.size()), p = w, trace(w.size());
  EXPECT_OK(be.Im2Col(g, x.data(), cols.data()));
  EXPECT_OK(be.Gemm(false, false, rows, f, patch, 1.0f, cols.data(), w.data(), 0.0f, y.data()));
  EXPECT_OK(be.BiasAdd(rows, f, bias.data(), y.data()));
  EXPECT_OK(be.Relu(y.size(), y.data()));
  EXPECT_OK(be.AvgPool(pool_g, true, y.data(), pool.data()));
  EXPECT_OK(be.AvgPoolBackward(pool_g, true, dpool.data(), dy.data()));
  EXPECT_OK(be.ReluBackward(y.size(), y.data(), dy.data()));
  EXPECT_OK(be.BiasGrad(rows, f, dy.data(), db.data()));
  EXPECT_OK(be.Gemm(true, false, patch, f, rows, 1.0f, cols.data(), dy.data(), 0.0f, dw.data()));
  EXPECT_OK(be.Gemm(false, true, rows, patch, f, 1.0f, dy.data(), w.data(), 0.0f, dcols.data()));
  EXPECT_OK(be.Col2Im(g, dcols.data(), dx.data()));
  EXPECT_OK(be.Divide(dw.size(), 2.0f, dw.data()));
  const UpdateScalars lr{0.1f};
  EXPECT_OK(
      be.SgdUpdate(p.size(), &lr, 0.9f, /*nesterov=*/false, dw.data(), trace.data(), p.data()));
  std::vector<float> out;
  for (const auto* v : {&y, &pool, &dy, &db, &dw, &dx, &p, &trace}) {
    out.insert(out.end(), v->begin(), v->end());
  }
  return out;
}

TEST_P(CpuBackendThreads, KernelsAreBitwiseReproducible) {
  auto be = NewCpuBackend(GetParam());
  const std::vector<float> first = ConvStep(*be);
  EXPECT_TRUE(SameBits(first, ConvStep(*be)));
}

// 4: blocks in two dimensions (a 2 x 2 grid for square products).
INSTANTIATE_TEST_SUITE_P(Counts, CpuBackendThreads, ::testing::Values(1, 2, 4));

TEST(CpuBackend, BackendsWithDifferentThreadCountsInterleaved) {
  struct Counted {
    int threads;
    std::unique_ptr<Backend> backend;
  };
  const Counted backends[] = {{1, NewCpuBackend(1)}, {2, NewCpuBackend(2)}, {4, NewCpuBackend(4)}};
  for (const GemmShape s : kShapes) {
    const GemmInputs in(s);
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        std::vector<double> want, scale;
        ReferenceGemm(ta, tb, in, &want, &scale);
        for (int round = 0; round < 2; ++round) {
          for (const Counted& b : backends) {
            const auto c = RunGemm(*b.backend, ta, tb, in);
            size_t bad = 0;
            for (size_t e = 0; e < c.size(); ++e)
              bad += std::fabs(c[e] - want[e]) > 1e-5 * scale[e];
            EXPECT_EQ(bad, 0u) << s.m << "x" << s.n << "x" << s.k << " ta=" << ta << " tb=" << tb
                               << " on " << b.threads << " threads";
          }
        }
      }
    }
  }
}

// The threads of this process. libgomp (GCC's OpenMP) keeps a team's worker threads per
// thread that forked it until that thread exits, so a fresh thread's first team of N
// adds N - 1.
int ProcessThreads() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* d = readdir(dir)) n += d->d_name[0] != '.';
  closedir(dir);
  return n;
}

TEST(CpuBackend, TwoThreadBackendStillUsesTwoThreadsAfterAOneThreadBackend) {
  const GemmInputs large({256, 256, 256});
  auto one = NewCpuBackend(1), two = NewCpuBackend(2);
  const int blas_threads = openblas_get_num_threads();
  // On a fresh thread, so that every team forked shows up as new threads.
  std::thread([&] {
    const int before = ProcessThreads();
    for (const GemmShape s : kShapes) RunGemm(*one, false, false, GemmInputs(s));
    EXPECT_EQ(ProcessThreads(), before) << "the 1-thread backend forked a team";
    EXPECT_EQ(openblas_get_num_threads(), blas_threads) << "OpenBLAS's global count changed";
    // Even with OpenBLAS's own count left at 1 by some other caller.
    openblas_set_num_threads(1);
    RunGemm(*two, false, false, large);
    EXPECT_EQ(ProcessThreads(), before + 1) << "the 2-thread GEMM did not fork a team of 2";
    EXPECT_EQ(openblas_get_num_threads(), 1) << "OpenBLAS's global count changed";
    openblas_set_num_threads(blas_threads);
  }).join();
}

}  // namespace
}  // namespace lockstep
