// The CPU backend's convolutions (oneDNN, and the im2col + GEMM defaults of
// core/backend.cc) against a float64 reference, over strides, uneven padding, one input
// channel and missing biases; and bitwise reproducible run to run.
#include "workers/cpu/dnnl_conv.h"

#include <dirent.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"
#include "workers/cpu/cpu_testing.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using testing::RandomNormal;
using testing::StatusIs;

size_t XSize(const ConvGeometry& g) { return size_t(g.b) * g.h * g.w * g.c; }
size_t YSize(const ConvGeometry& g) { return size_t(g.b) * g.oh() * g.ow() * g.f; }
size_t WSize(const ConvGeometry& g) { return size_t(g.kh) * g.kw * g.c * g.f; }

// Values in float64 and the sum of the absolute terms each is made of (the scale its
// float rounding error grows with).
struct Ref {
  std::vector<double> v, scale;
  explicit Ref(size_t n) : v(n), scale(n) {}
  void Add(size_t e, double t) {
    v[e] += t;
    scale[e] += std::fabs(t);
  }
};

struct ConvRef {
  Ref y, dw, db, dx;
};

ConvRef Reference(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& w,
                  const float* bias, const std::vector<float>& dy) {
  ConvRef r{Ref(YSize(g)), Ref(WSize(g)), Ref(g.f), Ref(XSize(g))};
  const int oh = g.oh(), ow = g.ow();
  for (int n = 0; n < g.b; ++n) {
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox) {
        const size_t out = ((size_t(n) * oh + oy) * ow + ox) * g.f;
        for (int f = 0; f < g.f; ++f) {
          if (bias != nullptr) r.y.Add(out + f, bias[f]);
          r.db.Add(f, dy[out + f]);
        }
        for (int i = 0; i < g.kh; ++i) {
          const int yy = oy * g.stride_h - g.pad_top + i;
          if (yy < 0 || yy >= g.h) continue;
          for (int j = 0; j < g.kw; ++j) {
            const int xx = ox * g.stride_w - g.pad_left + j;
            if (xx < 0 || xx >= g.w) continue;
            for (int c = 0; c < g.c; ++c) {
              const size_t in = ((size_t(n) * g.h + yy) * g.w + xx) * g.c + c;
              const size_t k = ((size_t(i) * g.kw + j) * g.c + c) * g.f;
              for (int f = 0; f < g.f; ++f) {
                r.y.Add(out + f, double{x[in]} * w[k + f]);
                r.dw.Add(k + f, double{x[in]} * dy[out + f]);
                r.dx.Add(in, double{dy[out + f]} * w[k + f]);
              }
            }
          }
        }
      }
    }
  }
  return r;
}

// The elements farther from the reference than 1e-5 of their scale (plus a hair for
// values that cancel to about 0).
size_t Bad(const std::vector<float>& got, const Ref& want) {
  size_t bad = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    bad += std::fabs(got[e] - want.v[e]) > 1e-5 * want.scale[e] + 1e-30;
  }
  return bad;
}

struct ConvOut {
  std::vector<float> y, dw, db, dx;
};

// Forward, backward-weights, backward-data on one scratch, as StepExecutor runs them.
ConvOut RunConv(Backend& be, const ConvGeometry& g, const std::vector<float>& x,
                const std::vector<float>& w, const float* bias, const std::vector<float>& dy,
                bool with_dbias) {
  ConvOut o{std::vector<float>(YSize(g)), std::vector<float>(WSize(g)),
            std::vector<float>(g.f, -1.0f), std::vector<float>(XSize(g), -1.0f)};
  std::fill(o.y.begin(), o.y.end(), -1.0f);  // everything overwritten
  std::fill(o.dw.begin(), o.dw.end(), -1.0f);
  auto scratch = be.Allocate(be.ConvScratchBytes(g));
  EXPECT_TRUE(scratch.ok());
  void* s = be.ConvScratchBytes(g) > 0 ? scratch->as<void>() : nullptr;
  EXPECT_OK(be.ConvForward(g, x.data(), w.data(), bias, o.y.data(), s));
  EXPECT_OK(be.ConvBackwardWeights(g, x.data(), dy.data(), o.dw.data(),
                                   with_dbias ? o.db.data() : nullptr, s));
  EXPECT_OK(be.ConvBackwardData(g, w.data(), dy.data(), o.dx.data(), s));
  return o;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// SAME 3x3 (the CNN's, small); one input channel (its first layer); SAME stride 2,
// padding after only; VALID stride 2; a 2x3 kernel at strides 3x1 padded unevenly; 1x1.
const ConvGeometry kGeometries[] = {
    {4, 14, 14, 32, 64, 3, 3, 1, 1, 1, 1, 1, 1}, {8, 28, 28, 1, 32, 3, 3, 1, 1, 1, 1, 1, 1},
    {2, 6, 7, 2, 4, 3, 3, 2, 2, 0, 1, 1, 1},     {1, 7, 8, 3, 5, 3, 3, 2, 2},
    {3, 8, 5, 2, 3, 2, 3, 3, 1, 0, 1, 1, 1},     {2, 5, 5, 16, 8, 1, 1},
};

struct Case {
  int threads;
  CpuKernels kernels;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.kernels == CpuKernels::kOneDnn ? "oneDNN" : "OpenBLAS") << " on " << c.threads;
}

class CpuConv : public ::testing::TestWithParam<Case> {};

TEST_P(CpuConv, MatchesFloat64Reference) {
  auto be = NewCpuBackend(GetParam().threads, GetParam().kernels);
  for (const ConvGeometry& g : kGeometries) {
    const auto x = RandomNormal(XSize(g), 1), w = RandomNormal(WSize(g), 2),
               bias = RandomNormal(g.f, 3), dy = RandomNormal(YSize(g), 4);
    for (const bool with_bias : {true, false}) {
      const ConvRef want = Reference(g, x, w, with_bias ? bias.data() : nullptr, dy);
      const ConvOut got = RunConv(*be, g, x, w, with_bias ? bias.data() : nullptr, dy, with_bias);
      const std::string what = ::testing::PrintToString(
          std::vector<int>{g.b, g.h, g.w, g.c, g.f, g.kh, g.kw, g.stride_h, g.stride_w, with_bias});
      EXPECT_EQ(Bad(got.y, want.y), 0u) << "y " << what;
      EXPECT_EQ(Bad(got.dw, want.dw), 0u) << "dw " << what;
      EXPECT_EQ(Bad(got.dx, want.dx), 0u) << "dx " << what;
      if (with_bias) {
        EXPECT_EQ(Bad(got.db, want.db), 0u) << "db " << what;
      } else {
        EXPECT_EQ(got.db, std::vector<float>(g.f, -1.0f)) << "dbias written though null";
      }
    }
  }
}

TEST_P(CpuConv, IsBitwiseReproducible) {
  auto be = NewCpuBackend(GetParam().threads, GetParam().kernels);
  for (const ConvGeometry& g : kGeometries) {
    const auto x = RandomNormal(XSize(g), 5), w = RandomNormal(WSize(g), 6),
               bias = RandomNormal(g.f, 7), dy = RandomNormal(YSize(g), 8);
    const ConvOut a = RunConv(*be, g, x, w, bias.data(), dy, true);
    const ConvOut b = RunConv(*be, g, x, w, bias.data(), dy, true);
    EXPECT_TRUE(SameBits(a.y, b.y) && SameBits(a.dw, b.dw) && SameBits(a.db, b.db) &&
                SameBits(a.dx, b.dx))
        << g.b << "x" << g.h << "x" << g.w << "x" << g.c << " -> " << g.f;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, CpuConv,
    ::testing::Values(Case{1, CpuKernels::kOneDnn}, Case{2, CpuKernels::kOneDnn},
                      Case{1, CpuKernels::kOpenBlas}, Case{2, CpuKernels::kOpenBlas}),
    [](const auto& info) {
      return std::string(info.param.kernels == CpuKernels::kOneDnn ? "OneDnn" : "OpenBlas") +
             std::to_string(info.param.threads);
    });

// A geometry's smaller batches run on the workspace's scratch: oneDNN's needs none.
TEST(CpuConv, OneDnnNeedsNoScratch) {
  auto be = NewCpuBackend(2);
  for (const ConvGeometry& g : kGeometries) EXPECT_EQ(be->ConvScratchBytes(g), 0u);
  auto blas = NewCpuBackend(2, CpuKernels::kOpenBlas);
  const ConvGeometry& g = kGeometries[0];
  EXPECT_EQ(blas->ConvScratchBytes(g), size_t(g.b) * g.oh() * g.ow() * 9 * g.c * sizeof(float));
}

// The threads of this process (libgomp keeps a team's threads per forking thread, so a
// fresh thread's first team of N adds N - 1).
int ProcessThreads() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* d = readdir(dir)) n += d->d_name[0] != '.';
  closedir(dir);
  return n;
}

// --threads holds for oneDNN too: whatever the calling thread's OpenMP setting, a 1-thread
// backend's convolutions fork no team and a 2-thread one's a team of 2.
TEST(CpuConv, OneDnnRunsOnTheBackendsThreads) {
  const ConvGeometry g = kGeometries[0];
  const auto x = RandomNormal(XSize(g), 1), w = RandomNormal(WSize(g), 2),
             dy = RandomNormal(YSize(g), 3);
  auto one = NewCpuBackend(1), two = NewCpuBackend(2);
  std::thread([&] {
    omp_set_num_threads(4);  // the caller's own setting, which the backend must not use
    const int before = ProcessThreads();
    RunConv(*one, g, x, w, nullptr, dy, false);
    EXPECT_EQ(ProcessThreads(), before) << "the 1-thread backend forked a team";
    RunConv(*two, g, x, w, nullptr, dy, false);
    EXPECT_EQ(ProcessThreads(), before + 1) << "the 2-thread backend's team is not 2";
  }).join();
}

// A primitive oneDNN fails to run (dnnl::error, as the test hook throws it) is a Status
// naming the primitive and the geometry, not an abort; the convolutions run again after.
TEST(DnnlConv, AFailedPrimitiveIsAStatusNamingIt) {
  const ConvGeometry g = kGeometries[0];
  const auto x = RandomNormal(XSize(g), 1), w = RandomNormal(WSize(g), 2),
             dy = RandomNormal(YSize(g), 3);
  std::vector<float> y(YSize(g)), dw(WSize(g)), db(g.f), dx(XSize(g));
  cpu::DnnlConv conv(1);
  ASSERT_TRUE(conv.Supports(g));
  std::string failing;
  dnnl_status_t fault = dnnl_success;
  conv.set_fault_for_testing(
      [&](const char* primitive) { return failing == primitive ? fault : dnnl_success; });
  const std::string geometry =
      absl::StrFormat("(b=%d h=%d w=%d c=%d f=%d %dx%d)", g.b, g.h, g.w, g.c, g.f, g.kh, g.kw);

  failing = "convolution_forward";
  fault = dnnl_out_of_memory;
  EXPECT_THAT(conv.Forward(g, x.data(), w.data(), nullptr, y.data()),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("dnnl_conv: convolution_forward " + geometry + " failed")));
  failing = "convolution_backward_weights";
  fault = dnnl_runtime_error;
  EXPECT_THAT(conv.BackwardWeights(g, x.data(), dy.data(), dw.data(), db.data()),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("dnnl_conv: convolution_backward_weights " + geometry)));
  failing = "convolution_backward_data";
  fault = dnnl_invalid_arguments;
  EXPECT_THAT(conv.BackwardData(g, w.data(), dy.data(), dx.data()),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("dnnl_conv: convolution_backward_data " + geometry)));

  failing.clear();
  EXPECT_OK(conv.Forward(g, x.data(), w.data(), nullptr, y.data()));
  EXPECT_OK(conv.BackwardWeights(g, x.data(), dy.data(), dw.data(), db.data()));
  EXPECT_OK(conv.BackwardData(g, w.data(), dy.data(), dx.data()));
}

}  // namespace
}  // namespace lockstep
