// The CUDA backend's bfloat16 kernels (cuda_backend_bf16.cc) against the CPU backend's
// (workers/cpu/cpu_bf16.cc, dnnl_matmul.cc): the casts, the bias epilogue, ReLU, im2col
// and avg_pool bit for bit; the activations and the attention softmax within a bfloat16
// ulp where CUDA's expf, tanhf or erfcf round differently from glibc's, on few elements;
// the GEMMs and convolutions (on cuDNN where it takes them: also against the im2col +
// GemmBf16 path) within 1e-5 (relative L2, as cuda_conv_test's) of the CPU's
// float32 GEMM and convolution on the same bfloat16 values (their products are exact in
// float32, so only the sums differ: their order, and tensor cores' accumulation) and of
// the CPU's bfloat16 kernels where this CPU has them. Every result the same bits when run again.
// Skipped without a GPU.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "workers/cuda/cuda_backend_impl.h"
#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::Bitwise;
using testing::CudaTest;
using testing::RandomFloats;
using testing::RelativeL2;

std::vector<float> Rounded(std::vector<float> v) {
  for (float& x : v) x = RoundBf16(x);
  return v;
}

std::vector<Bf16> AsBf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i].bits = Bf16Bits(v[i]);
  return out;
}

std::vector<uint16_t> Bits(const std::vector<Bf16>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i].bits;
  return out;
}

// The elements of `cuda` more than a bfloat16 ulp (relative 2^-7) from `cpu`, and how many
// differ at all: CUDA's transcendental functions are a few float32 ulps from glibc's, so a
// value near a bfloat16 rounding boundary may land on the neighbour.
struct Differences {
  size_t beyond_an_ulp = 0, any = 0;
};
Differences Compare(const std::vector<float>& cuda, const std::vector<float>& cpu) {
  Differences d;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::memcmp(&cuda[i], &cpu[i], sizeof(float)) == 0) continue;
    ++d.any;
    if (!(std::fabs(cuda[i] - cpu[i]) <= std::ldexp(std::fabs(cpu[i]), -7) + 1e-30f)) {
      ++d.beyond_an_ulp;
    }
  }
  return d;
}

class CudaBf16Test : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    const absl::Status bf16 = cuda_->Bf16Support();
    if (!bf16.ok()) GTEST_SKIP() << bf16.message();
    cpu_bf16_ = cpu_->Bf16Support().ok();
  }
  Buffer Allocate(size_t bytes) {
    absl::StatusOr<Buffer> b = cuda_->Allocate(bytes);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? std::move(b).value() : Buffer();
  }
  // Whether the CPU backend's bfloat16 GEMMs and convolutions run here (avx512_bf16, AMX).
  bool cpu_bf16_ = false;
};

TEST_F(CudaBf16Test, ToBf16IsBitwiseTheCpus) {
  std::vector<float> x = RandomFloats(100003, 1);
  for (uint32_t u : {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x80000000u, 0x7f800000u,
                     0x7f7fffffu, 0x00018000u, 0x7fc00000u, 0x7f800001u, 0xff800000u}) {
    float f;
    std::memcpy(&f, &u, sizeof(f));
    x.push_back(f);
  }
  std::vector<Bf16> cpu(x.size());
  ASSERT_OK(cpu_->ToBf16(x.size(), x.data(), cpu.data()));
  Buffer dx = ToDevice(x), dy = Allocate(x.size() * sizeof(Bf16));
  ASSERT_OK(cuda_->ToBf16(x.size(), dx.as(), dy.as<Bf16>()));
  EXPECT_EQ(Bits(ToHost<Bf16>(dy, x.size())), Bits(cpu));
}

TEST_F(CudaBf16Test, AddRowsBf16IsBitwiseTheCpus) {
  const int rows = 257, cols = 384;
  const size_t n = size_t(rows) * cols;
  const auto x = RandomFloats(n, 2, 3.0f), bias = RandomFloats(cols, 3);
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "a bias" : "no bias");
    std::vector<float> cpu(n);
    std::vector<Bf16> cpu16(n);
    ASSERT_OK(cpu_->AddRowsBf16(rows, cols, x.data(), with_bias ? bias.data() : nullptr, cpu.data(),
                                cpu16.data()));
    Buffer dx = ToDevice(x), db = ToDevice(bias), dy = Allocate(n * sizeof(float)),
           dy16 = Allocate(n * sizeof(Bf16));
    const float* b = with_bias ? db.as() : nullptr;
    ASSERT_OK(cuda_->AddRowsBf16(rows, cols, dx.as(), b, dy.as(), dy16.as<Bf16>()));
    EXPECT_TRUE(Bitwise(ToHost(dy, n), cpu));
    EXPECT_EQ(Bits(ToHost<Bf16>(dy16, n)), Bits(cpu16));
    // In place, without the Bf16 twin.
    ASSERT_OK(cuda_->AddRowsBf16(rows, cols, dx.as(), b, dx.as(), nullptr));
    EXPECT_TRUE(Bitwise(ToHost(dx, n), cpu));
  }
}

TEST_F(CudaBf16Test, ReluBf16IsBitwiseTheCpus) {
  const size_t n = 70001;
  const auto x = Rounded(RandomFloats(n, 4));
  std::vector<float> cpu = x;
  std::vector<Bf16> cpu16(n);
  ASSERT_OK(cpu_->ReluBf16(n, cpu.data(), cpu16.data()));
  Buffer dx = ToDevice(x), dx16 = Allocate(n * sizeof(Bf16));
  ASSERT_OK(cuda_->ReluBf16(n, dx.as(), dx16.as<Bf16>()));
  EXPECT_TRUE(Bitwise(ToHost(dx, n), cpu));
  EXPECT_EQ(Bits(ToHost<Bf16>(dx16, n)), Bits(cpu16));
}

TEST_F(CudaBf16Test, ActivateBf16IsTheCpusWithinAnUlpOnFewElements) {
  const size_t n = 100000;
  const auto x = Rounded(RandomFloats(n, 5, 3.0f));
  for (const Activation a : {Activation::kGeluTanh, Activation::kGeluErf, Activation::kTanh,
                             Activation::kSigmoid, Activation::kSilu}) {
    SCOPED_TRACE(absl::StrCat("activation ", static_cast<int>(a)));
    std::vector<float> cpu(n);
    ASSERT_OK(cpu_->ActivateBf16(a, n, x.data(), cpu.data(), nullptr));
    Buffer dx = ToDevice(x), dy = Allocate(n * sizeof(float)), again = Allocate(n * sizeof(float)),
           dy16 = Allocate(n * sizeof(Bf16));
    ASSERT_OK(cuda_->ActivateBf16(a, n, dx.as(), dy.as(), dy16.as<Bf16>()));
    ASSERT_OK(cuda_->ActivateBf16(a, n, dx.as(), again.as(), nullptr));
    const auto y = ToHost(dy, n);
    const Differences d = Compare(y, cpu);
    EXPECT_EQ(d.beyond_an_ulp, 0u);
    EXPECT_LE(d.any, n / 1000) << d.any << " of " << n << " differ";
    EXPECT_TRUE(Bitwise(y, ToHost(again, n))) << "not the same bits again";
    EXPECT_EQ(Bits(ToHost<Bf16>(dy16, n)), Bits(AsBf16(y))) << "the Bf16 twin";
  }
}

TEST_F(CudaBf16Test, AttentionSoftmaxBf16IsTheCpusWithinAnUlpOnFewElements) {
  const int t = 67, rows = 4 * 3 * t;  // (batch, heads, queries) of t keys
  const size_t n = size_t(rows) * t;
  const auto s = RandomFloats(n, 6, 4.0f);
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    std::vector<float> cpu = s;
    ASSERT_OK(cpu_->AttentionSoftmaxBf16(rows, t, causal, cpu.data()));
    Buffer ds = ToDevice(s), again = ToDevice(s);
    ASSERT_OK(cuda_->AttentionSoftmaxBf16(rows, t, causal, ds.as()));
    ASSERT_OK(cuda_->AttentionSoftmaxBf16(rows, t, causal, again.as()));
    const auto p = ToHost(ds, n);
    const Differences d = Compare(p, cpu);
    EXPECT_EQ(d.beyond_an_ulp, 0u);
    EXPECT_LE(d.any, n / 1000) << d.any << " of " << n << " differ";
    EXPECT_TRUE(Bitwise(p, ToHost(again, n))) << "not the same bits again";
  }
}

// The CNN's convolutions, a SAME stride-2 one with its padding after only, a 1x1
// projection, a VALID 5x5, a ViT's patch step (kernel = stride = 4).
std::vector<ConvGeometry> Geometries() {
  return {ConvGeometry{16, 28, 28, 1, 32, 3, 3, 1, 1, 1, 1, 1, 1},
          ConvGeometry{16, 14, 14, 32, 64, 3, 3, 1, 1, 1, 1, 1, 1},
          ConvGeometry{8, 28, 28, 16, 32, 3, 3, 2, 2, 0, 1, 0, 1},
          ConvGeometry{8, 28, 28, 16, 32, 1, 1, 2, 2},
          ConvGeometry{8, 12, 10, 3, 8, 5, 5},
          ConvGeometry{8, 28, 28, 1, 64, 4, 4, 4, 4}};
}

TEST_F(CudaBf16Test, Im2ColBf16IsBitwiseTheCpus) {
  for (const ConvGeometry& g : Geometries()) {
    SCOPED_TRACE(absl::StrCat(g.h, "x", g.w, "x", g.c, " kernel ", g.kh, "x", g.kw));
    const auto x = AsBf16(RandomFloats(size_t(g.b) * g.h * g.w * g.c, 7));
    const size_t n = size_t(g.b) * g.oh() * g.ow() * g.kh * g.kw * g.c;
    std::vector<Bf16> cpu(n);
    ASSERT_OK(cpu_->Im2ColBf16(g, x.data(), cpu.data()));
    Buffer dx = ToDevice(x), cols = Allocate(n * sizeof(Bf16));
    ASSERT_OK(cuda_->Im2ColBf16(g, dx.as<Bf16>(), cols.as<Bf16>()));
    EXPECT_EQ(Bits(ToHost<Bf16>(cols, n)), Bits(cpu));
  }
}

TEST_F(CudaBf16Test, AvgPoolBf16IsBitwiseTheCpus) {
  // SAME 2x2 and 3x2 windows at stride 1 on an odd width (padding after only: XLA's
  // column-major order), 2x2 at stride 2, VALID 3x3 at stride 2, padding on both sides.
  for (const ConvGeometry& g : {ConvGeometry{4, 7, 7, 24, 24, 2, 2, 1, 1, 0, 1, 0, 1},
                                ConvGeometry{4, 7, 7, 24, 24, 3, 2, 1, 1, 1, 1, 0, 1},
                                ConvGeometry{4, 7, 7, 24, 24, 2, 2, 2, 2, 0, 1, 0, 1},
                                ConvGeometry{4, 9, 9, 24, 24, 3, 3, 2, 2},
                                ConvGeometry{4, 8, 8, 24, 24, 3, 3, 1, 1, 1, 1, 1, 1}}) {
    const auto x = Rounded(RandomFloats(size_t(g.b) * g.h * g.w * g.c, 8, 2.0f));
    const size_t n = size_t(g.b) * g.oh() * g.ow() * g.c;
    for (const bool count_include_pad : {true, false}) {
      SCOPED_TRACE(absl::StrCat(g.kh, "x", g.kw, " stride ", g.stride_h, " padding ", g.pad_top,
                                g.pad_bottom, g.pad_left, g.pad_right,
                                count_include_pad ? ", count_include_pad" : ""));
      std::vector<float> cpu(n);
      ASSERT_OK(cpu_->AvgPoolBf16(g, count_include_pad, x.data(), cpu.data()));
      Buffer dx = ToDevice(x), dy = Allocate(n * sizeof(float));
      ASSERT_OK(cuda_->AvgPoolBf16(g, count_include_pad, dx.as(), dy.as()));
      EXPECT_TRUE(Bitwise(ToHost(dy, n), cpu));
    }
  }
}

struct GemmShape {
  int m, n, k;
};

TEST_F(CudaBf16Test, GemmBf16IsTheCpusFloat32GemmOnTheSameValues) {
  for (const GemmShape s : {GemmShape{128, 512, 784}, GemmShape{999, 384, 128},
                            GemmShape{64, 1536, 384}, GemmShape{1, 7, 5}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        SCOPED_TRACE(absl::StrCat(s.m, " x ", s.n, " x ", s.k, ta ? " a^T" : "", tb ? " b^T" : ""));
        const auto a = Rounded(RandomFloats(size_t(s.m) * s.k, 9)),
                   b = Rounded(RandomFloats(size_t(s.k) * s.n, 10)),
                   c0 = RandomFloats(size_t(s.m) * s.n, 11);
        const size_t n = c0.size();
        // beta = 1: the products added to c, as the step's accumulating GEMMs do.
        std::vector<float> cpu = c0;
        ASSERT_OK(cpu_->Gemm(ta, tb, s.m, s.n, s.k, 0.5f, a.data(), b.data(), 1.0f, cpu.data()));
        Buffer da = ToDevice(AsBf16(a)), db = ToDevice(AsBf16(b)), dc = ToDevice(c0),
               again = ToDevice(c0);
        ASSERT_OK(cuda_->GemmBf16(ta, tb, s.m, s.n, s.k, 0.5f, da.as<Bf16>(), db.as<Bf16>(), 1.0f,
                                  dc.as()));
        ASSERT_OK(cuda_->GemmBf16(ta, tb, s.m, s.n, s.k, 0.5f, da.as<Bf16>(), db.as<Bf16>(), 1.0f,
                                  again.as()));
        const auto c = ToHost(dc, n);
        EXPECT_LE(RelativeL2(c, cpu), 1e-5) << "vs the CPU's float32 GEMM";
        EXPECT_TRUE(Bitwise(c, ToHost(again, n))) << "not the same bits again";
        if (cpu_bf16_) {
          std::vector<float> bf16 = c0;
          const auto a16 = AsBf16(a), b16 = AsBf16(b);
          ASSERT_OK(cpu_->GemmBf16(ta, tb, s.m, s.n, s.k, 0.5f, a16.data(), b16.data(), 1.0f,
                                   bf16.data()));
          EXPECT_LE(RelativeL2(c, bf16), 1e-5) << "vs the CPU's bfloat16 GEMM";
        }
      }
    }
  }
}

// Attention's batched products: scores q k^T and the weighted values p v over (batch x
// heads) of (t, d) slices of a (t, 3 * features) projection, as step_attention_bf16.cc
// strides them.
TEST_F(CudaBf16Test, GemmStridedBf16IsTheCpusFloat32GemmStridedOnTheSameValues) {
  const int batch = 3, heads = 4, t = 33, d = 16, f = heads * d, count = batch * heads;
  const auto qkv = Rounded(RandomFloats(size_t(batch) * t * 3 * f, 12));
  const size_t ns = size_t(count) * t * t;
  // Each (sample, head) slice: rows of stride 3f, heads d apart, samples t * 3f apart; the
  // count runs over heads fastest, which one stride cannot express, so per sample.
  std::vector<float> cpu(ns);
  for (int s = 0; s < batch; ++s) {
    const float* q = qkv.data() + size_t(s) * t * 3 * f;
    ASSERT_OK(cpu_->GemmStrided(false, true, t, t, d, 0.25f, q, 3 * f, d, q + f, 3 * f, d, 0.0f,
                                cpu.data() + size_t(s) * heads * t * t, t, int64_t{t} * t, heads));
  }
  Buffer dqkv = ToDevice(AsBf16(qkv)), ds = Allocate(ns * sizeof(float)),
         again = Allocate(ns * sizeof(float));
  for (Buffer* out : {&ds, &again}) {
    for (int s = 0; s < batch; ++s) {
      const Bf16* q = dqkv.as<Bf16>() + size_t(s) * t * 3 * f;
      ASSERT_OK(cuda_->GemmStridedBf16(false, true, t, t, d, 0.25f, q, 3 * f, d, q + f, 3 * f, d,
                                       0.0f, out->as() + size_t(s) * heads * t * t, t,
                                       int64_t{t} * t, heads));
    }
  }
  const auto scores = ToHost(ds, ns);
  EXPECT_LE(RelativeL2(scores, cpu), 1e-5);
  EXPECT_TRUE(Bitwise(scores, ToHost(again, ns))) << "not the same bits again";
  // p (count, t, t) times v: (t, d) slices of the values, into a (t, f) output per sample.
  const auto p = Rounded(RandomFloats(ns, 13));
  const size_t no = size_t(batch) * t * f;
  std::vector<float> cpu_o(no);
  for (int s = 0; s < batch; ++s) {
    ASSERT_OK(cpu_->GemmStrided(false, false, t, d, t, 1.0f, p.data() + size_t(s) * heads * t * t,
                                t, int64_t{t} * t, qkv.data() + size_t(s) * t * 3 * f + 2 * f,
                                3 * f, d, 0.0f, cpu_o.data() + size_t(s) * t * f, f, d, heads));
  }
  Buffer dp = ToDevice(AsBf16(p)), dout = Allocate(no * sizeof(float));
  for (int s = 0; s < batch; ++s) {
    ASSERT_OK(cuda_->GemmStridedBf16(false, false, t, d, t, 1.0f,
                                     dp.as<Bf16>() + size_t(s) * heads * t * t, t, int64_t{t} * t,
                                     dqkv.as<Bf16>() + size_t(s) * t * 3 * f + 2 * f, 3 * f, d,
                                     0.0f, dout.as() + size_t(s) * t * f, f, d, heads));
  }
  EXPECT_LE(RelativeL2(ToHost(dout, no), cpu_o), 1e-5);
}

// One bfloat16 convolution's forward pass and gradients on a CUDA backend.
struct ConvBf16Results {
  std::vector<float> y, dw, dx;
};
ConvBf16Results RunConvBf16(Backend& cuda, const ConvGeometry& g, const std::vector<Bf16>& x,
                            const std::vector<Bf16>& w, const std::vector<Bf16>& dy) {
  auto up = [&](const std::vector<Bf16>& v) {
    return std::move(cuda.Upload(v.data(), v.size() * sizeof(Bf16))).value();
  };
  auto down = [&](const Buffer& b, size_t n) {
    std::vector<float> v(n);
    EXPECT_OK(cuda.CopyToHost(v.data(), b.as<void>(), n * sizeof(float)));
    return v;
  };
  const size_t ny = size_t(g.b) * g.oh() * g.ow() * g.f;
  Buffer dx16 = up(x), dw16 = up(w), ddy16 = up(dy), y = *cuda.Allocate(ny * sizeof(float)),
         dw = *cuda.Allocate(w.size() * sizeof(float)),
         dx = *cuda.Allocate(x.size() * sizeof(float)),
         scratch = *cuda.Allocate(cuda.ConvScratchBytesBf16(g));
  EXPECT_OK(cuda.ConvForwardBf16(g, dx16.as<Bf16>(), dw16.as<Bf16>(), y.as(), scratch.as<void>()));
  EXPECT_OK(cuda.ConvBackwardWeightsBf16(g, dx16.as<Bf16>(), ddy16.as<Bf16>(), dw.as(),
                                         scratch.as<void>()));
  EXPECT_OK(
      cuda.ConvBackwardDataBf16(g, dw16.as<Bf16>(), ddy16.as<Bf16>(), dx.as(), scratch.as<void>()));
  EXPECT_OK(cuda.Synchronize());
  return {down(y, ny), down(dw, w.size()), down(dx, x.size())};
}

// The convolutions (cuDNN's bfloat16 engines where cuDNN takes the geometry, else
// Backend's im2col + GemmBf16) against the CPU's float32 convolution of the same bfloat16
// values, forward and both gradients; where cuDNN is in use, also against the im2col +
// GemmBf16 path of the same GPU (a backend without cuDNN), which it must take for the
// geometries whose channels are multiples of 8; the same bits when run again.
TEST_F(CudaBf16Test, ConvolutionsAreTheCpusFloat32OnesOnTheSameValues) {
  CudaBackend* cuda = CudaBackend::From(cuda_.get());
  std::unique_ptr<Backend> im2col;
  if (cuda->cudnn_off().empty()) {
    ASSERT_OK_AND_ASSIGN(im2col, NewCudaBackend(0, {.cudnn = false}));
  }
  for (const ConvGeometry& g : Geometries()) {
    SCOPED_TRACE(absl::StrCat(g.h, "x", g.w, "x", g.c, " -> ", g.f, " kernel ", g.kh, "x", g.kw,
                              " stride ", g.stride_h));
    const size_t nx = size_t(g.b) * g.h * g.w * g.c, nw = size_t(g.kh) * g.kw * g.c * g.f,
                 ny = size_t(g.b) * g.oh() * g.ow() * g.f;
    const auto x = Rounded(RandomFloats(nx, 14)), w = Rounded(RandomFloats(nw, 15, 0.2f)),
               dy = Rounded(RandomFloats(ny, 16));
    const std::vector<float> zero_bias(g.f, 0.0f);
    std::vector<float> y(ny), dx(nx), dw(nw), db(g.f);
    std::vector<char> scratch(cpu_->ConvScratchBytes(g));
    ASSERT_OK(cpu_->ConvForward(g, x.data(), w.data(), zero_bias.data(), y.data(), scratch.data()));
    ASSERT_OK(
        cpu_->ConvBackwardWeights(g, x.data(), dy.data(), dw.data(), db.data(), scratch.data()));
    ASSERT_OK(cpu_->ConvBackwardData(g, w.data(), dy.data(), dx.data(), scratch.data()));

    const ConvBf16Results got = RunConvBf16(*cuda_, g, AsBf16(x), AsBf16(w), AsBf16(dy));
    EXPECT_LE(RelativeL2(got.y, y), 1e-5) << "forward";
    EXPECT_LE(RelativeL2(got.dw, dw), 1e-5) << "kernel gradient";
    EXPECT_LE(RelativeL2(got.dx, dx), 1e-5) << "data gradient";
    const ConvBf16Results again = RunConvBf16(*cuda_, g, AsBf16(x), AsBf16(w), AsBf16(dy));
    EXPECT_TRUE(Bitwise(again.y, got.y) && Bitwise(again.dw, got.dw) && Bitwise(again.dx, got.dx))
        << "not the same bits when run again";
    if (im2col == nullptr) continue;
    std::string why;
    const bool cudnn = cuda->CudnnTakes(g, &why, true);
    if (g.c % 8 == 0 && g.f % 8 == 0) {
      EXPECT_TRUE(cudnn) << "cuDNN refused: " << why;
    }
    const ConvBf16Results ref = RunConvBf16(*im2col, g, AsBf16(x), AsBf16(w), AsBf16(dy));
    EXPECT_LE(RelativeL2(got.y, ref.y), 1e-5) << "forward vs im2col + GemmBf16";
    EXPECT_LE(RelativeL2(got.dw, ref.dw), 1e-5) << "kernel gradient vs im2col + GemmBf16";
    EXPECT_LE(RelativeL2(got.dx, ref.dx), 1e-5) << "data gradient vs im2col + GemmBf16";
  }
}

}  // namespace
}  // namespace lockstep
