// Every CUDA kernel against the CPU backend (workers/cpu) on random data: bitwise where
// the arithmetic is elementwise, within 1e-5 (relative L2) where a reduction's order
// differs (GEMM, bias gradient, softmax's exp/log). The bias gradient is also bitwise
// equal to the host reference of its own order (bias_plan.h). TF32 is off.
#include "workers/cuda/cuda_backend.h"

#include <numeric>

#include "workers/cuda/bias_plan.h"
#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::Bitwise;
using testing::CudaTest;
using ::testing::HasSubstr;
using testing::RandomFloats;
using testing::RelativeL2;
using testing::StatusIs;

TEST(CudaBackendNoGpu, RefusesToStartWithoutAGpu) {
  if (testing::NoGpuReason().empty()) GTEST_SKIP() << "a GPU is present";
  EXPECT_THAT(NewCudaBackend(0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
  EXPECT_THAT(CudaDeviceCount(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device: ")));
}

TEST(CudaBackendNoGpu, RejectsBadDeviceNumbers) {
  EXPECT_THAT(NewCudaBackend(-1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
  EXPECT_THAT(NewCudaBackend(4096),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
}

TEST_F(CudaTest, NameAndZeroFilledAllocation) {
  EXPECT_EQ(cuda_->Name(), "cuda:0");
  ASSERT_OK_AND_ASSIGN(Buffer b, cuda_->Allocate(3 << 20));
  const std::vector<float> host = ToHost(b, (3 << 20) / sizeof(float));
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](float x) { return x == 0.0f; }));
}

TEST_F(CudaTest, OutOfMemoryIsResourceExhaustedAndNotSticky) {
  EXPECT_THAT(cuda_->Allocate(size_t{1} << 50),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("cudaMalloc")));
  Buffer x = ToDevice(std::vector<float>{-1, 2});
  EXPECT_OK(cuda_->Relu(2, x.as()));
  EXPECT_EQ(ToHost(x, 2), (std::vector<float>{0, 2}));
}

// A launch refused outside a capture (cuBLAS rejecting k = -1) is the kernel's own Status,
// naming the call, and Synchronize reports it too: the step fails, not the process.
TEST_F(CudaTest, AnEagerLaunchFailureIsTheKernelsStatus) {
  Buffer a = ToDevice(std::vector<float>(4, 1.0f)), c = ToDevice(std::vector<float>(4, 0.0f));
  EXPECT_THAT(cuda_->Gemm(false, false, 2, 2, -1, 1.0f, a.as(), a.as(), 0.0f, c.as()),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("cublasSgemm")));
  EXPECT_THAT(cuda_->Synchronize(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("cublasSgemm")));
}

TEST_F(CudaTest, GemmMatchesCpuInEveryTransposition) {
  for (const auto& [m, n, k] :
       {std::tuple{67, 45, 129}, std::tuple{33, 17, 4099}, std::tuple{1, 300, 7}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        const auto a = RandomFloats(size_t(m) * k, 1), b = RandomFloats(size_t(k) * n, 2);
        auto want = RandomFloats(size_t(m) * n, 3);
        Buffer da = ToDevice(a), db = ToDevice(b), dc = ToDevice(want);
        EXPECT_OK(cpu_->Gemm(ta, tb, m, n, k, 0.7f, a.data(), b.data(), 0.5f, want.data()));
        EXPECT_OK(cuda_->Gemm(ta, tb, m, n, k, 0.7f, da.as(), db.as(), 0.5f, dc.as()));
        EXPECT_LE(RelativeL2(ToHost(dc, want.size()), want), 1e-5)
            << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb;
      }
    }
  }
}

TEST_F(CudaTest, Im2ColAndCol2ImAreBitwiseEqualToCpu) {
  // SAME stride 1 (3x3, 5x5, the CNN's first layer); VALID stride 2; SAME stride 2 with
  // padding after only; a 2x3 kernel at strides 3x1.
  for (const ConvGeometry g : {ConvGeometry{3, 7, 6, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1},
                               ConvGeometry{2, 9, 4, 3, 4, 5, 5, 1, 1, 2, 2, 2, 2},
                               ConvGeometry{4, 28, 28, 1, 32, 3, 3, 1, 1, 1, 1, 1, 1},
                               ConvGeometry{2, 9, 8, 3, 4, 3, 3, 2, 2},
                               ConvGeometry{2, 6, 7, 2, 4, 3, 3, 2, 2, 0, 1, 1, 1},
                               ConvGeometry{3, 8, 5, 2, 1, 2, 3, 3, 1, 0, 1, 1, 1}}) {
    const size_t nx = size_t(g.b) * g.h * g.w * g.c;
    const size_t ncols = size_t(g.b) * g.oh() * g.ow() * g.kh * g.kw * g.c;
    const auto x = RandomFloats(nx, 4), dcols = RandomFloats(ncols, 5);
    std::vector<float> cols(ncols), dx(nx);
    EXPECT_OK(cpu_->Im2Col(g, x.data(), cols.data()));
    EXPECT_OK(cpu_->Col2Im(g, dcols.data(), dx.data()));
    Buffer d_x = ToDevice(x), d_dcols = ToDevice(dcols);
    ASSERT_OK_AND_ASSIGN(Buffer d_cols, cuda_->Allocate(ncols * sizeof(float)));
    ASSERT_OK_AND_ASSIGN(Buffer d_dx, cuda_->Allocate(nx * sizeof(float)));
    EXPECT_OK(cuda_->Im2Col(g, d_x.as(), d_cols.as()));
    EXPECT_OK(cuda_->Col2Im(g, d_dcols.as(), d_dx.as()));
    EXPECT_TRUE(Bitwise(ToHost(d_cols, ncols), cols)) << "im2col " << g.kh << "x" << g.kw;
    EXPECT_TRUE(Bitwise(ToHost(d_dx, nx), dx)) << "col2im " << g.kh << "x" << g.kw;
  }
}

TEST_F(CudaTest, BiasAddIsBitwiseAndBiasGradWithin1e5) {
  const int rows = 12544, cols = 70;
  const auto bias = RandomFloats(cols, 6), dy = RandomFloats(size_t(rows) * cols, 7);
  auto y = RandomFloats(size_t(rows) * cols, 8);
  Buffer d_bias = ToDevice(bias), d_dy = ToDevice(dy), d_y = ToDevice(y);
  ASSERT_OK_AND_ASSIGN(Buffer d_db, cuda_->Allocate(cols * sizeof(float)));
  std::vector<float> db(cols);
  EXPECT_OK(cpu_->BiasAdd(rows, cols, bias.data(), y.data()));
  EXPECT_OK(cpu_->BiasGrad(rows, cols, dy.data(), db.data()));
  EXPECT_OK(cuda_->BiasAdd(rows, cols, d_bias.as(), d_y.as()));
  EXPECT_OK(cuda_->BiasGrad(rows, cols, d_dy.as(), d_db.as()));
  EXPECT_TRUE(Bitwise(ToHost(d_y, y.size()), y));
  const std::vector<float> got = ToHost(d_db, cols);
  EXPECT_LE(RelativeL2(got, db), 1e-5);
  // Deterministic: the same reduction again gives the same bits.
  EXPECT_OK(cuda_->BiasGrad(rows, cols, d_dy.as(), d_db.as()));
  EXPECT_TRUE(Bitwise(ToHost(d_db, cols), got));
}

// The kernels sum in bias_plan.h's order, which its host reference reproduces bit for
// bit: one pass (few rows, or too many columns for the scratch) and two (the CNN's
// convolutions at batch 128 and 1024, where many chunks spread the work over the GPU).
TEST_F(CudaTest, BiasGradIsBitwiseEqualToItsOrdersReference) {
  for (const auto& [rows, cols] :
       {std::pair{0, 5}, std::pair{1, 33}, std::pair{128, 10}, std::pair{4096, 512},
        std::pair{12544, 70}, std::pair{25088, 64}, std::pair{100352, 32}, std::pair{802816, 32},
        std::pair{3, (1 << 20) + 5}}) {
    const auto dy = RandomFloats(size_t(rows) * cols, rows + cols);
    std::vector<float> want(cols);
    cuda::BiasGradReference(rows, cols, dy.data(), want.data());
    Buffer d_dy = ToDevice(dy), d_db = ToDevice(std::vector<float>(cols, 7.0f));
    EXPECT_OK(cuda_->BiasGrad(rows, cols, d_dy.as(), d_db.as()));
    EXPECT_TRUE(Bitwise(ToHost(d_db, cols), want)) << rows << "x" << cols;
  }
}

TEST_F(CudaTest, ReluAndDivideAreBitwiseBeyondOneGrid) {
  const size_t n = (size_t{3} << 20) + 7;  // more elements than one launch's threads
  auto x = RandomFloats(n, 9), dy = RandomFloats(n, 10);
  Buffer d_x = ToDevice(x), d_dy = ToDevice(dy);
  EXPECT_OK(cpu_->Relu(n, x.data()));
  EXPECT_OK(cpu_->ReluBackward(n, x.data(), dy.data()));
  EXPECT_OK(cpu_->Divide(n, 3.0f, dy.data()));
  EXPECT_OK(cuda_->Relu(n, d_x.as()));
  EXPECT_OK(cuda_->ReluBackward(n, d_x.as(), d_dy.as()));
  EXPECT_OK(cuda_->Divide(n, 3.0f, d_dy.as()));
  EXPECT_TRUE(Bitwise(ToHost(d_x, n), x));
  EXPECT_TRUE(Bitwise(ToHost(d_dy, n), dy));
}

TEST_F(CudaTest, AddAndCopyAreBitwiseBeyondOneGrid) {
  const size_t n = (size_t{3} << 20) + 7;
  auto a = RandomFloats(n, 11), b = RandomFloats(n, 12);
  Buffer d_a = ToDevice(a), d_b = ToDevice(b);
  ASSERT_OK_AND_ASSIGN(Buffer d_y, cuda_->Allocate(n * sizeof(float)));
  std::vector<float> y(n);
  EXPECT_OK(cpu_->Add(n, a.data(), b.data(), y.data()));
  EXPECT_OK(cuda_->Add(n, d_a.as(), d_b.as(), d_y.as()));
  EXPECT_TRUE(Bitwise(ToHost(d_y, n), y));
  EXPECT_OK(cuda_->Add(n, d_a.as(), d_b.as(), d_b.as()));  // into an operand
  EXPECT_TRUE(Bitwise(ToHost(d_b, n), y));
  EXPECT_OK(cuda_->Copy(n, d_a.as(), d_y.as()));
  EXPECT_TRUE(Bitwise(ToHost(d_y, n), a));
}

// Pools' geometries: 2x2/2 VALID on odd sizes (the last row and column unread), 3x3/2
// SAME (overlapping, padded), 3x2 at strides 1x2 SAME (padding before and after).
std::vector<ConvGeometry> PoolGeometries() {
  return {ConvGeometry{3, 7, 9, 5, 5, 2, 2, 2, 2},
          ConvGeometry{2, 9, 8, 4, 4, 3, 3, 2, 2, 1, 1, 0, 1},
          ConvGeometry{2, 6, 7, 3, 3, 3, 2, 1, 2, 1, 1, 0, 1}};
}

TEST_F(CudaTest, PoolsAndTheirBackwardAreBitwise) {
  for (const ConvGeometry& g : PoolGeometries()) {
    const size_t nx = size_t(g.b) * g.h * g.w * g.c, ny = size_t(g.b) * g.oh() * g.ow() * g.c;
    auto x = RandomFloats(nx, 11);
    for (size_t i = 0; i < nx; i += 7) x[i] = x[i + 1 < nx ? i + 1 : i];  // ties for max_pool
    const auto dy = RandomFloats(ny, 12);
    Buffer d_x = ToDevice(x), d_dy = ToDevice(dy);
    ASSERT_OK_AND_ASSIGN(Buffer d_y, cuda_->Allocate(ny * sizeof(float)));
    ASSERT_OK_AND_ASSIGN(Buffer d_dx, cuda_->Allocate(nx * sizeof(float)));
    std::vector<float> y(ny), dx(nx, 1.0f);
    for (const bool include : {true, false}) {
      EXPECT_OK(cpu_->AvgPool(g, include, x.data(), y.data()));
      EXPECT_OK(cpu_->AvgPoolBackward(g, include, dy.data(), dx.data()));
      EXPECT_OK(cuda_->AvgPool(g, include, d_x.as(), d_y.as()));
      EXPECT_OK(cuda_->AvgPoolBackward(g, include, d_dy.as(), d_dx.as()));
      EXPECT_TRUE(Bitwise(ToHost(d_y, ny), y)) << "avg " << g.kh << "x" << g.kw << " " << include;
      EXPECT_TRUE(Bitwise(ToHost(d_dx, nx), dx)) << "avg backward " << g.kh << "x" << g.kw;
    }
    EXPECT_OK(cpu_->MaxPool(g, x.data(), y.data()));
    EXPECT_OK(cpu_->MaxPoolBackward(g, x.data(), dy.data(), dx.data()));
    EXPECT_OK(cuda_->MaxPool(g, d_x.as(), d_y.as()));
    EXPECT_OK(cuda_->MaxPoolBackward(g, d_x.as(), d_dy.as(), d_dx.as()));
    EXPECT_TRUE(Bitwise(ToHost(d_y, ny), y)) << "max " << g.kh << "x" << g.kw;
    EXPECT_TRUE(Bitwise(ToHost(d_dx, nx), dx)) << "max backward " << g.kh << "x" << g.kw;
  }
}

TEST_F(CudaTest, ActivationsAndTheirBackwardWithin1e6) {
  const size_t n = (size_t{1} << 20) + 3;
  const auto x = RandomFloats(n, 15, 3.0f), dy0 = RandomFloats(n, 16);
  for (const Activation a : {Activation::kGeluTanh, Activation::kGeluErf, Activation::kTanh,
                             Activation::kSigmoid, Activation::kSilu}) {
    std::vector<float> y(n), dy = dy0;
    EXPECT_OK(cpu_->Activate(a, n, x.data(), y.data()));
    EXPECT_OK(cpu_->ActivateBackward(a, n, x.data(), dy.data()));
    Buffer d_x = ToDevice(x), d_dy = ToDevice(dy0);
    ASSERT_OK_AND_ASSIGN(Buffer d_y, cuda_->Allocate(n * sizeof(float)));
    EXPECT_OK(cuda_->Activate(a, n, d_x.as(), d_y.as()));
    EXPECT_OK(cuda_->ActivateBackward(a, n, d_x.as(), d_dy.as()));
    // CUDA's tanhf, expf and erfcf are within a few ulps of glibc's.
    EXPECT_LE(RelativeL2(ToHost(d_y, n), y), 1e-6) << static_cast<int>(a);
    EXPECT_LE(RelativeL2(ToHost(d_dy, n), dy), 1e-6) << static_cast<int>(a);
  }
}

TEST_F(CudaTest, LayerNormAndBackwardAreBitwise) {
  for (const auto& [rows, cols] : {std::pair{3000, 24}, std::pair{7, 1000}, std::pair{5, 1}}) {
    const size_t n = size_t(rows) * cols;
    const auto x = RandomFloats(n, 17, 2.0f), dy = RandomFloats(n, 18),
               scale = RandomFloats(cols, 19), bias = RandomFloats(cols, 20);
    Buffer d_x = ToDevice(x), d_dy = ToDevice(dy), d_scale = ToDevice(scale),
           d_bias = ToDevice(bias);
    ASSERT_OK_AND_ASSIGN(Buffer d_y, cuda_->Allocate(n * sizeof(float)));
    ASSERT_OK_AND_ASSIGN(Buffer d_dx, cuda_->Allocate(n * sizeof(float)));
    ASSERT_OK_AND_ASSIGN(Buffer d_stats, cuda_->Allocate(2 * rows * sizeof(float)));
    ASSERT_OK_AND_ASSIGN(Buffer d_grads, cuda_->Allocate(2 * cols * sizeof(float)));
    for (const bool params : {true, false}) {
      const float* s = params ? scale.data() : nullptr;
      const float* b = params ? bias.data() : nullptr;
      std::vector<float> y(n), stats(2 * rows), dx(n), grads(2 * cols);
      EXPECT_OK(cpu_->LayerNorm(rows, cols, 1e-6f, x.data(), s, b, y.data(), stats.data(),
                                stats.data() + rows));
      EXPECT_OK(cpu_->LayerNormBackward(rows, cols, x.data(), s, stats.data(), stats.data() + rows,
                                        dy.data(), dx.data(), grads.data(), grads.data() + cols));
      const float* ds = params ? d_scale.as() : nullptr;
      const float* db = params ? d_bias.as() : nullptr;
      float* st = d_stats.as();
      EXPECT_OK(cuda_->LayerNorm(rows, cols, 1e-6f, d_x.as(), ds, db, d_y.as(), st, st + rows));
      EXPECT_OK(cuda_->LayerNormBackward(rows, cols, d_x.as(), ds, st, st + rows, d_dy.as(),
                                         d_dx.as(), d_grads.as(), d_grads.as() + cols));
      EXPECT_TRUE(Bitwise(ToHost(d_y, n), y)) << rows << "x" << cols;
      EXPECT_TRUE(Bitwise(ToHost(d_stats, 2 * rows), stats)) << rows << "x" << cols;
      EXPECT_TRUE(Bitwise(ToHost(d_dx, n), dx)) << rows << "x" << cols;
      EXPECT_TRUE(Bitwise(ToHost(d_grads, 2 * cols), grads)) << rows << "x" << cols;
    }
  }
}

TEST_F(CudaTest, BatchNormAndBackwardAreBitwise) {
  for (const auto& [rows, cols] : {std::pair{5000, 24}, std::pair{9, 300}, std::pair{3, 1}}) {
    const size_t n = size_t(rows) * cols, parts = BatchNormPartials(cols);
    const auto x = RandomFloats(n, 21, 2.0f), dy = RandomFloats(n, 22),
               scale = RandomFloats(cols, 23), bias = RandomFloats(cols, 24);
    Buffer d_x = ToDevice(x), d_dy = ToDevice(dy), d_scale = ToDevice(scale),
           d_bias = ToDevice(bias);
    ASSERT_OK_AND_ASSIGN(Buffer d_y, cuda_->Allocate(n * sizeof(float)));
    ASSERT_OK_AND_ASSIGN(Buffer d_dx, cuda_->Allocate(n * sizeof(float)));
    // moments (2c), var (c), sums (2c), running mean and var (2c), dscale and dbias (2c).
    ASSERT_OK_AND_ASSIGN(Buffer d_small, cuda_->Allocate(9 * cols * sizeof(float)));
    ASSERT_OK_AND_ASSIGN(Buffer d_parts, cuda_->Allocate(parts * sizeof(float)));
    for (const bool params : {true, false}) {
      const float* s = params ? scale.data() : nullptr;
      const float* b = params ? bias.data() : nullptr;
      std::vector<float> y(n), dx(n), small(9 * cols, 0.0f), partials(parts);
      for (int c = 0; c < cols; ++c) small[6 * cols + c] = 1.0f;  // running var
      float *m = small.data(), *v = m + 2 * cols, *sums = v + cols, *ra = sums + 2 * cols,
            *grads = ra + 2 * cols;
      EXPECT_OK(cpu_->BatchNormMoments(rows, cols, x.data(), partials.data(), m));
      EXPECT_OK(cpu_->BatchNormVariance(cols, m, v));
      EXPECT_OK(cpu_->BatchNormApply(rows, cols, 1e-5f, x.data(), m, v, s, b, y.data()));
      EXPECT_OK(cpu_->BatchNormUpdateStats(cols, 0.9f, 0.1f, m, v, ra, ra + cols));
      EXPECT_OK(cpu_->BatchNormBackwardReduce(rows, cols, 1e-5f, x.data(), dy.data(), m, v,
                                              partials.data(), sums, params ? grads : nullptr,
                                              grads + cols));
      EXPECT_OK(cpu_->BatchNormBackwardApply(rows, cols, 1e-5f, 2, x.data(), dy.data(), m, v, s,
                                             sums, dx.data()));
      std::vector<float> init(9 * cols, 0.0f);
      for (int c = 0; c < cols; ++c) init[6 * cols + c] = 1.0f;
      ASSERT_OK(cuda_->CopyToDevice(d_small.as(), init.data(), init.size() * sizeof(float)));
      float *dm = d_small.as(), *dv = dm + 2 * cols, *ds = dv + cols, *dra = ds + 2 * cols,
            *dg = dra + 2 * cols;
      const float* dsc = params ? d_scale.as() : nullptr;
      const float* dbi = params ? d_bias.as() : nullptr;
      EXPECT_OK(cuda_->BatchNormMoments(rows, cols, d_x.as(), d_parts.as(), dm));
      EXPECT_OK(cuda_->BatchNormVariance(cols, dm, dv));
      EXPECT_OK(cuda_->BatchNormApply(rows, cols, 1e-5f, d_x.as(), dm, dv, dsc, dbi, d_y.as()));
      EXPECT_OK(cuda_->BatchNormUpdateStats(cols, 0.9f, 0.1f, dm, dv, dra, dra + cols));
      EXPECT_OK(cuda_->BatchNormBackwardReduce(rows, cols, 1e-5f, d_x.as(), d_dy.as(), dm, dv,
                                               d_parts.as(), ds, params ? dg : nullptr, dg + cols));
      EXPECT_OK(cuda_->BatchNormBackwardApply(rows, cols, 1e-5f, 2, d_x.as(), d_dy.as(), dm, dv,
                                              dsc, ds, d_dx.as()));
      EXPECT_TRUE(Bitwise(ToHost(d_small, 9 * cols), small)) << rows << "x" << cols;
      EXPECT_TRUE(Bitwise(ToHost(d_y, n), y)) << rows << "x" << cols;
      EXPECT_TRUE(Bitwise(ToHost(d_dx, n), dx)) << rows << "x" << cols;
    }
  }
}

TEST_F(CudaTest, DropoutMasksAndValuesAreBitwiseInBothRngModes) {
  for (const rng::Impl impl : {rng::Impl::kPartitionable, rng::Impl::kLegacy}) {
    for (const size_t n : {size_t{1001}, size_t{1} << 21}) {
      const float keep = n == 1001 ? 0.5f : 0.9f;
      const rng::Key key{0x12345678u, static_cast<uint32_t>(n)};
      const auto x = RandomFloats(n, 13), dy = RandomFloats(n, 14);
      std::vector<float> y(n), dx(n);
      std::vector<uint8_t> mask(n);
      EXPECT_OK(cpu_->Dropout(n, keep, &key, impl, x.data(), y.data(), mask.data()));
      EXPECT_OK(cpu_->DropoutBackward(n, keep, mask.data(), dy.data(), dx.data()));
      Buffer d_key = ToDevice(std::vector<rng::Key>{key});
      Buffer d_x = ToDevice(x), d_dy = ToDevice(dy);
      ASSERT_OK_AND_ASSIGN(Buffer d_y, cuda_->Allocate(n * sizeof(float)));
      ASSERT_OK_AND_ASSIGN(Buffer d_dx, cuda_->Allocate(n * sizeof(float)));
      ASSERT_OK_AND_ASSIGN(Buffer d_mask, cuda_->Allocate(n));
      EXPECT_OK(cuda_->Dropout(n, keep, d_key.as<rng::Key>(), impl, d_x.as(), d_y.as(),
                               d_mask.as<uint8_t>()));
      EXPECT_OK(cuda_->DropoutBackward(n, keep, d_mask.as<uint8_t>(), d_dy.as(), d_dx.as()));
      const std::string what = std::string(rng::ImplName(impl)) + " n=" + std::to_string(n);
      EXPECT_EQ(ToHost<uint8_t>(d_mask, n), mask) << what;
      EXPECT_TRUE(Bitwise(ToHost(d_y, n), y)) << what;
      EXPECT_TRUE(Bitwise(ToHost(d_dx, n), dx)) << what;
    }
  }
}

TEST_F(CudaTest, SoftmaxCrossEntropyWithin1e5AndSameArgmax) {
  const int b = 300, classes = 10;
  auto logits = RandomFloats(size_t(b) * classes, 15, 3.0f);
  for (int c = 0; c < classes; ++c) logits[c] = 1.0f;  // a tie: the first maximum wins
  std::vector<int32_t> labels(b);
  for (int i = 0; i < b; ++i) labels[i] = (i * 7) % classes;
  std::vector<float> loss(b), dlogits(logits.size()), correct(b);
  EXPECT_OK(cpu_->SoftmaxCrossEntropy(b, classes, logits.data(), labels.data(), loss.data(),
                                      dlogits.data(), correct.data()));
  Buffer d_logits = ToDevice(logits), d_labels = ToDevice(labels);
  ASSERT_OK_AND_ASSIGN(Buffer d_loss, cuda_->Allocate(b * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(Buffer d_dlogits, cuda_->Allocate(logits.size() * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(Buffer d_correct, cuda_->Allocate(b * sizeof(float)));
  EXPECT_OK(cuda_->SoftmaxCrossEntropy(b, classes, d_logits.as(), d_labels.as<int32_t>(),
                                       d_loss.as(), d_dlogits.as(), d_correct.as()));
  EXPECT_LE(RelativeL2(ToHost(d_loss, b), loss), 1e-5);
  EXPECT_LE(RelativeL2(ToHost(d_dlogits, logits.size()), dlogits), 1e-5);
  EXPECT_EQ(ToHost(d_correct, b), correct);
}

TEST_F(CudaTest, GathersAreExact) {
  const size_t row = 784;
  const int rows = 50, n = 37;
  const auto table = RandomFloats(row * rows, 16);
  std::vector<int32_t> labels(rows), idx(n);
  std::iota(labels.begin(), labels.end(), 100);
  for (int i = 0; i < n; ++i) idx[i] = (i * 13) % rows;  // repeats
  std::vector<float> out(row * n);
  std::vector<int32_t> out_labels(n);
  EXPECT_OK(cpu_->GatherRows(row, n, idx.data(), table.data(), out.data()));
  EXPECT_OK(cpu_->GatherLabels(n, idx.data(), labels.data(), out_labels.data()));
  Buffer d_table = ToDevice(table), d_labels = ToDevice(labels), d_idx = ToDevice(idx);
  ASSERT_OK_AND_ASSIGN(Buffer d_out, cuda_->Allocate(out.size() * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(Buffer d_out_labels, cuda_->Allocate(n * sizeof(int32_t)));
  EXPECT_OK(cuda_->GatherRows(row, n, d_idx.as<int32_t>(), d_table.as(), d_out.as()));
  EXPECT_OK(cuda_->GatherLabels(n, d_idx.as<int32_t>(), d_labels.as<int32_t>(),
                                d_out_labels.as<int32_t>()));
  EXPECT_TRUE(Bitwise(ToHost(d_out, out.size()), out));
  EXPECT_EQ(ToHost<int32_t>(d_out_labels, n), out_labels);
}

TEST_F(CudaTest, SgdUpdatesAreBitwise) {
  const size_t n = 100003;
  const auto g = RandomFloats(n, 17);
  const UpdateScalars s{0.05f};
  Buffer d_s = ToDevice(std::vector<UpdateScalars>{s});
  for (const auto& [momentum, nesterov] :
       {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}}) {
    auto p = RandomFloats(n, 18), trace = RandomFloats(n, 19);
    Buffer d_g = ToDevice(g), d_p = ToDevice(p), d_trace = ToDevice(trace);
    EXPECT_OK(cpu_->SgdUpdate(n, &s, 0.9f, nesterov, g.data(), momentum ? trace.data() : nullptr,
                              p.data()));
    EXPECT_OK(cuda_->SgdUpdate(n, d_s.as<UpdateScalars>(), 0.9f, nesterov, d_g.as(),
                               momentum ? d_trace.as() : nullptr, d_p.as()));
    EXPECT_TRUE(Bitwise(ToHost(d_p, n), p)) << "momentum " << momentum << " nesterov " << nesterov;
    EXPECT_TRUE(Bitwise(ToHost(d_trace, n), trace)) << "momentum " << momentum;
  }
}

// Sizes of one partial chunk, one level, two levels and three (over kSumChunk^2 values).
TEST_F(CudaTest, SumSquaresIsBitwiseAtEveryLevelCount) {
  for (const size_t n : {size_t{0}, size_t{1000}, size_t{kSumChunk}, size_t{3 * kSumChunk + 77},
                         size_t{kSumChunk} * kSumChunk + 2 * kSumChunk + 5}) {
    const auto x = RandomFloats(n, 30);
    std::vector<double> partials(SumSquaresPartials(n));
    double want = -1;
    EXPECT_OK(cpu_->SumSquares(n, x.data(), partials.data(), &want));
    Buffer d_x = ToDevice(x);
    ASSERT_OK_AND_ASSIGN(Buffer d_sums, cuda_->Allocate((partials.size() + 1) * sizeof(double)));
    double* d_partials = d_sums.as<double>();
    EXPECT_OK(cuda_->SumSquares(n, d_x.as(), d_partials, d_partials + partials.size()));
    const double got = ToHost<double>(d_sums, partials.size() + 1).back();
    EXPECT_EQ(std::memcmp(&got, &want, sizeof(double)), 0) << n << ": " << got << " vs " << want;
  }
}

TEST_F(CudaTest, ClipByGlobalNormIsBitwiseClippedOrNot) {
  const size_t n = 100003;
  const auto g = RandomFloats(n, 31);
  double sum_squares = 0;
  for (float v : g) sum_squares += double{v} * v;
  const float norm = static_cast<float>(std::sqrt(sum_squares));
  Buffer d_sum = ToDevice(std::vector<double>{sum_squares});
  for (const float max_norm : {norm * 0.5f, norm, norm * 2.0f}) {
    auto want = g;
    EXPECT_OK(cpu_->ClipByGlobalNorm(n, max_norm, &sum_squares, want.data()));
    Buffer d_g = ToDevice(g);
    EXPECT_OK(cuda_->ClipByGlobalNorm(n, max_norm, d_sum.as<double>(), d_g.as()));
    EXPECT_TRUE(Bitwise(ToHost(d_g, n), want)) << max_norm;
    if (max_norm != norm) {
      EXPECT_EQ(Bitwise(want, g), max_norm > norm) << max_norm;  // unchanged below the max
    }
  }
}

TEST_F(CudaTest, AdamAndAdamWUpdatesAreBitwise) {
  const size_t n = 100003;
  const auto g = RandomFloats(n, 20, 1e-3f);
  for (const float weight_decay : {0.0f, 1e-4f}) {
    const UpdateScalars s{1e-3f, 0.9f, 0.999f, 0.1f, 0.001f, 0.271f, 0.00299f, 1e-8f, weight_decay};
    auto p = RandomFloats(n, 21), mu = RandomFloats(n, 22, 1e-3f), nu = RandomFloats(n, 23);
    for (float& v : nu) v = v * v * 1e-6f;
    Buffer d_s = ToDevice(std::vector<UpdateScalars>{s}), d_g = ToDevice(g), d_p = ToDevice(p),
           d_mu = ToDevice(mu), d_nu = ToDevice(nu);
    EXPECT_OK(cpu_->AdamUpdate(n, &s, g.data(), mu.data(), nu.data(), p.data()));
    EXPECT_OK(
        cuda_->AdamUpdate(n, d_s.as<UpdateScalars>(), d_g.as(), d_mu.as(), d_nu.as(), d_p.as()));
    EXPECT_TRUE(Bitwise(ToHost(d_p, n), p)) << "weight decay " << weight_decay;
    EXPECT_TRUE(Bitwise(ToHost(d_mu, n), mu));
    EXPECT_TRUE(Bitwise(ToHost(d_nu, n), nu));
  }
}

}  // namespace
}  // namespace lockstep
