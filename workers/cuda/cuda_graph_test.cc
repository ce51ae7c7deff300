// CUDA graph capture (Backend::Capture) and the TF32 option.
#include <cmath>

#include "workers/cuda/cuda_testing.h"

namespace lockstep {
namespace {

using testing::Bitwise;
using testing::CudaTest;
using ::testing::HasSubstr;
using testing::RandomFloats;
using testing::RelativeL2;
using testing::StatusIs;

// A replayed graph reads per-step values from device memory: each launch sees the
// scalars copied in just before it, and equals running the same kernels eagerly.
TEST_F(CudaTest, GraphReplayEqualsEagerAndReadsDeviceScalars) {
  const size_t n = 4099;
  const auto g = RandomFloats(n, 1), p0 = RandomFloats(n, 2);
  UpdateScalars s{1e-2f, 0.9f, 0.999f, 0.1f, 0.001f, 0.1f, 0.001f, 1e-8f, 0.0f};
  Buffer d_g = ToDevice(g), d_s = ToDevice(std::vector<UpdateScalars>{s});
  Buffer graph_p = ToDevice(p0), eager_p = ToDevice(p0);
  ASSERT_OK_AND_ASSIGN(Buffer graph_mu, cuda_->Allocate(n * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(Buffer graph_nu, cuda_->Allocate(n * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(Buffer eager_mu, cuda_->Allocate(n * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(Buffer eager_nu, cuda_->Allocate(n * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(Buffer grads, cuda_->Allocate(n * sizeof(float)));
  // grads = g / 2, then an adam update; grads is refilled from g before each run.
  auto step = [&](float* p, float* mu, float* nu) {
    EXPECT_OK(cuda_->Divide(n, 2.0f, grads.as()));
    EXPECT_OK(cuda_->AdamUpdate(n, d_s.as<UpdateScalars>(), grads.as(), mu, nu, p));
  };
  ASSERT_OK_AND_ASSIGN(auto graph, cuda_->Capture([&] {
    step(graph_p.as(), graph_mu.as(), graph_nu.as());
    return absl::OkStatus();
  }));
  for (int t = 0; t < 3; ++t) {
    s.bias_correction1 = 1.0f - std::pow(0.9f, t + 1.0f);
    s.bias_correction2 = 1.0f - std::pow(0.999f, t + 1.0f);
    ASSERT_OK(cuda_->CopyToDevice(d_s.as<void>(), &s, sizeof(s)));
    ASSERT_OK(cuda_->CopyToDevice(grads.as(), g.data(), n * sizeof(float)));
    ASSERT_OK(graph->Launch());
    ASSERT_OK(cuda_->CopyToDevice(grads.as(), g.data(), n * sizeof(float)));
    step(eager_p.as(), eager_mu.as(), eager_nu.as());
    ASSERT_OK(cuda_->Synchronize());
  }
  const std::vector<float> graph_result = ToHost(graph_p, n);
  EXPECT_TRUE(Bitwise(graph_result, ToHost(eager_p, n)));
  EXPECT_FALSE(Bitwise(graph_result, p0));  // the updates did happen
}

// The optimizer's other per-step value: sgd's (scheduled) learning rate, read from device
// memory by a replayed clip + Nesterov update, bitwise the CPU backend's steps.
TEST_F(CudaTest, GraphReplayReadsEachStepsLearningRate) {
  const size_t n = 3 * kSumChunk + 5;
  const auto g = RandomFloats(n, 3), p0 = RandomFloats(n, 4);
  const size_t parts = SumSquaresPartials(n);
  Buffer d_s = ToDevice(std::vector<UpdateScalars>{{}}), d_p = ToDevice(p0);
  ASSERT_OK_AND_ASSIGN(Buffer d_trace, cuda_->Allocate(n * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(Buffer d_grads, cuda_->Allocate(n * sizeof(float)));
  ASSERT_OK_AND_ASSIGN(Buffer d_sums, cuda_->Allocate((parts + 1) * sizeof(double)));
  double* partials = d_sums.as<double>();
  ASSERT_OK_AND_ASSIGN(auto graph, cuda_->Capture([&] {
    EXPECT_OK(cuda_->SumSquares(n, d_grads.as(), partials, partials + parts));
    EXPECT_OK(cuda_->ClipByGlobalNorm(n, 10.0f, partials + parts, d_grads.as()));
    EXPECT_OK(cuda_->SgdUpdate(n, d_s.as<UpdateScalars>(), 0.9f, true, d_grads.as(), d_trace.as(),
                               d_p.as()));
    return absl::OkStatus();
  }));
  auto p = p0, trace = std::vector<float>(n), grads = g;
  std::vector<double> host_partials(parts + 1);
  for (const float lr : {0.1f, 0.05f, 0.0125f}) {
    const UpdateScalars s{lr};
    ASSERT_OK(cuda_->CopyToDevice(d_s.as<void>(), &s, sizeof(s)));
    ASSERT_OK(cuda_->CopyToDevice(d_grads.as(), g.data(), n * sizeof(float)));
    ASSERT_OK(graph->Launch());
    grads = g;
    EXPECT_OK(cpu_->SumSquares(n, grads.data(), host_partials.data(), &host_partials[parts]));
    EXPECT_OK(cpu_->ClipByGlobalNorm(n, 10.0f, &host_partials[parts], grads.data()));
    EXPECT_OK(cpu_->SgdUpdate(n, &s, 0.9f, true, grads.data(), trace.data(), p.data()));
  }
  EXPECT_TRUE(Bitwise(ToHost(d_p, n), p));
  EXPECT_TRUE(Bitwise(ToHost(d_trace, n), trace));
  EXPECT_FALSE(Bitwise(grads, g));  // the norm (about 111) was clipped to 10
}

TEST_F(CudaTest, CaptureReturnsTheBodysErrorAndTheBackendStaysUsable) {
  Buffer x = ToDevice(std::vector<float>{-1, 4});
  EXPECT_THAT(cuda_->Capture([&] {
    EXPECT_OK(cuda_->Relu(2, x.as()));
    return absl::AbortedError("body failed");
  }),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("body failed")));
  ASSERT_OK(cuda_->Synchronize());
  // The failed capture ran nothing; eager work still runs.
  EXPECT_OK(cuda_->Divide(2, 2.0f, x.as()));
  EXPECT_EQ(ToHost(x, 2), (std::vector<float>{-0.5f, 2.0f}));
}

// A launch refused while capturing (here cuBLAS rejecting k = -1) fails that capture
// only: nothing captured ran, so the backend is not failed and the same work can then
// run eagerly (what StepExecutor does).
TEST_F(CudaTest, ALaunchFailingDuringCaptureFailsTheCaptureNotTheBackend) {
  Buffer x = ToDevice(std::vector<float>{-1, 4});
  Buffer a = ToDevice(std::vector<float>(4, 1.0f)), c = ToDevice(std::vector<float>(4, 0.0f));
  EXPECT_THAT(cuda_->Capture([&] {
    EXPECT_OK(cuda_->Relu(2, x.as()));
    EXPECT_OK(cuda_->Gemm(false, false, 2, 2, -1, 1.0f, a.as(), a.as(), 0.0f, c.as()));
    EXPECT_OK(cuda_->Divide(2, 2.0f, x.as()));
    return absl::OkStatus();
  }),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("cublasSgemm")));
  ASSERT_OK(cuda_->Synchronize());
  EXPECT_EQ(ToHost(x, 2), (std::vector<float>{-1.0f, 4.0f}));  // the capture ran nothing
  EXPECT_OK(cuda_->Relu(2, x.as()));
  EXPECT_OK(cuda_->Divide(2, 2.0f, x.as()));
  EXPECT_EQ(ToHost(x, 2), (std::vector<float>{0.0f, 2.0f}));
  // And a later capture works.
  ASSERT_OK_AND_ASSIGN(auto graph, cuda_->Capture([&] {
    EXPECT_OK(cuda_->Divide(2, 2.0f, x.as()));
    return absl::OkStatus();
  }));
  ASSERT_OK(graph->Launch());
  EXPECT_EQ(ToHost(x, 2), (std::vector<float>{0.0f, 1.0f}));
}

class CudaTf32Test : public CudaTest {
 protected:
  CudaBackendOptions Options() const override { return {.tf32 = true}; }
};

// TF32 rounds GEMM inputs to 10 mantissa bits: close to float32, within about 1e-3.
TEST_F(CudaTf32Test, GemmIsCloseToFloat32) {
  const int m = 256, n = 256, k = 512;
  const auto a = RandomFloats(size_t(m) * k, 3), b = RandomFloats(size_t(k) * n, 4);
  std::vector<float> want(size_t(m) * n);
  EXPECT_OK(cpu_->Gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, want.data()));
  Buffer da = ToDevice(a), db = ToDevice(b);
  ASSERT_OK_AND_ASSIGN(Buffer dc, cuda_->Allocate(want.size() * sizeof(float)));
  EXPECT_OK(cuda_->Gemm(false, false, m, n, k, 1.0f, da.as(), db.as(), 0.0f, dc.as()));
  EXPECT_LE(RelativeL2(ToHost(dc, want.size()), want), 5e-3);
}

}  // namespace
}  // namespace lockstep
