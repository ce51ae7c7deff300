// The convolutions on cuDNN (cudnn_conv.h) against the CPU backend (within 1e-5, relative
// L2: another summation order) and against the im2col + cuBLAS path of the same GPU: the
// forward pass with and without bias, with the fused ReLU, the data and the kernel
// gradients, at the geometries the examples use (SAME stride 1 and 2 with padding after
// only, VALID, a 1x1 projection); every result the same bits when run again (the
// deterministic engines a replayed step relies on). The kernel layout transposes against
// their host reference. Where the build has no cuDNN these tests say so and skip.
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "workers/cuda/conv_layout.cuh"
#include "workers/cuda/cuda_backend_impl.h"
#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::Bitwise;
using testing::CudaTest;
using testing::RandomFloats;
using testing::RelativeL2;

// The CNN's two convolutions at batch 128, the ResNet's stem, a stride-2 block's 3x3 and
// its 1x1 projection (SAME, padding after only), a VALID 5x5.
std::vector<ConvGeometry> Geometries() {
  return {ConvGeometry{128, 28, 28, 1, 32, 3, 3, 1, 1, 1, 1, 1, 1},
          ConvGeometry{128, 14, 14, 32, 64, 3, 3, 1, 1, 1, 1, 1, 1},
          ConvGeometry{16, 28, 28, 16, 32, 3, 3, 2, 2, 0, 1, 0, 1},
          ConvGeometry{16, 28, 28, 16, 32, 1, 1, 2, 2}, ConvGeometry{8, 12, 10, 3, 8, 5, 5}};
}

class CudnnConvTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    CudaBackend* cuda = CudaBackend::From(cuda_.get());
    if (!cuda->cudnn_off().empty()) GTEST_SKIP() << "cuDNN not in use: " << cuda->cudnn_off();
    ASSERT_OK_AND_ASSIGN(im2col_, NewCudaBackend(0, {.cudnn = false}));
  }
  std::unique_ptr<Backend> im2col_;
};

// One layer's four results on `backend` (device memory unless it is the CPU backend).
struct ConvResults {
  std::vector<float> y, y_relu, dx, dw, dbias;
};

ConvResults RunConv(Backend& backend, const ConvGeometry& g, const std::vector<float>& x,
                    const std::vector<float>& w, const std::vector<float>& bias,
                    const std::vector<float>& dy) {
  const size_t ny = size_t(g.b) * g.oh() * g.ow() * g.f;
  auto up = [&](const std::vector<float>& v) {
    return std::move(backend.Upload(v.data(), v.size() * 4)).value();
  };
  auto down = [&](const Buffer& b, size_t n) {
    std::vector<float> v(n);
    EXPECT_OK(backend.CopyToHost(v.data(), b.as<void>(), n * 4));
    return v;
  };
  Buffer dx_ = up(x), dw_ = up(w), db_ = up(bias), ddy = up(dy);
  Buffer y = *backend.Allocate(ny * 4), y_relu = *backend.Allocate(ny * 4),
         dx = *backend.Allocate(x.size() * 4), dw = *backend.Allocate(w.size() * 4),
         dbias = *backend.Allocate(bias.size() * 4),
         scratch = *backend.Allocate(backend.ConvScratchBytes(g));
  EXPECT_OK(backend.ConvForward(g, dx_.as(), dw_.as(), db_.as(), y.as(), scratch.as<void>()));
  EXPECT_OK(
      backend.ConvForwardRelu(g, dx_.as(), dw_.as(), db_.as(), y_relu.as(), scratch.as<void>()));
  EXPECT_OK(
      backend.ConvBackwardWeights(g, dx_.as(), ddy.as(), dw.as(), dbias.as(), scratch.as<void>()));
  EXPECT_OK(backend.ConvBackwardData(g, dw_.as(), ddy.as(), dx.as(), scratch.as<void>()));
  EXPECT_OK(backend.Synchronize());
  return {down(y, ny), down(y_relu, ny), down(dx, x.size()), down(dw, w.size()),
          down(dbias, bias.size())};
}

TEST_F(CudnnConvTest, MatchesTheCpuAndIm2ColAndRepeatsBitwise) {
  CudaBackend* cuda = CudaBackend::From(cuda_.get());
  for (const ConvGeometry& g : Geometries()) {
    const std::string name = absl::StrCat(g.b, "x", g.h, "x", g.w, "x", g.c, " -> ", g.f, " ", g.kh,
                                          "x", g.kw, " stride ", g.stride_h);
    std::string why;
    ASSERT_TRUE(cuda->CudnnTakes(g, &why)) << name << ": " << why;
    const auto x = RandomFloats(size_t(g.b) * g.h * g.w * g.c, 1),
               w = RandomFloats(size_t(g.kh) * g.kw * g.c * g.f, 2, 0.1f),
               bias = RandomFloats(g.f, 3),
               dy = RandomFloats(size_t(g.b) * g.oh() * g.ow() * g.f, 4);
    const ConvResults want = RunConv(*cpu_, g, x, w, bias, dy);
    const ConvResults got = RunConv(*cuda_, g, x, w, bias, dy);
    const ConvResults ref = RunConv(*im2col_, g, x, w, bias, dy);
    for (const auto& [what, a, b, c] : {std::tuple{"y", &got.y, &want.y, &ref.y},
                                        {"relu(y)", &got.y_relu, &want.y_relu, &ref.y_relu},
                                        {"dx", &got.dx, &want.dx, &ref.dx},
                                        {"dw", &got.dw, &want.dw, &ref.dw},
                                        {"dbias", &got.dbias, &want.dbias, &ref.dbias}}) {
      EXPECT_LE(RelativeL2(*a, *b), 1e-5) << name << ": " << what << " vs the CPU";
      EXPECT_LE(RelativeL2(*a, *c), 1e-5) << name << ": " << what << " vs im2col + cuBLAS";
    }
    const ConvResults again = RunConv(*cuda_, g, x, w, bias, dy);
    EXPECT_TRUE(Bitwise(again.y, got.y) && Bitwise(again.y_relu, got.y_relu) &&
                Bitwise(again.dx, got.dx) && Bitwise(again.dw, got.dw))
        << name << ": not the same bits when run again";
  }
}

using ConvLayoutTest = CudaTest;

TEST_F(ConvLayoutTest, HwioToKrscAndBackAgainstTheHostReference) {
  const int kh = 3, kw = 2, c = 5, f = 7;
  const auto hwio = RandomFloats(size_t(kh) * kw * c * f, 9);
  std::vector<float> krsc(hwio.size());
  for (int r = 0; r < kh; ++r) {
    for (int s = 0; s < kw; ++s) {
      for (int i = 0; i < c; ++i) {
        for (int k = 0; k < f; ++k) {
          krsc[((size_t(k) * kh + r) * kw + s) * c + i] =
              hwio[((size_t(r) * kw + s) * c + i) * f + k];
        }
      }
    }
  }
  CudaBackend* cuda = CudaBackend::From(cuda_.get());
  Buffer d_hwio = ToDevice(hwio), d_krsc = ToDevice(std::vector<float>(hwio.size())),
         d_back = ToDevice(std::vector<float>(hwio.size()));
  ASSERT_EQ(cuda::HwioToKrsc(kh, kw, c, f, d_hwio.as(), d_krsc.as(), cuda->stream()), cudaSuccess);
  ASSERT_EQ(cuda::KrscToHwio(kh, kw, c, f, d_krsc.as(), d_back.as(), cuda->stream()), cudaSuccess);
  EXPECT_TRUE(Bitwise(ToHost(d_krsc, krsc.size()), krsc));
  EXPECT_TRUE(Bitwise(ToHost(d_back, hwio.size()), hwio));
}

}  // namespace
}  // namespace lockstep
