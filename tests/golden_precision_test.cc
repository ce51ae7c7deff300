// The precision of one BatchNorm-convnet gradient against a float64 reference
// (tools/reference/golden_precision.py): 64 Fashion-MNIST images, so that each
// convolution's kernel gradient is a sum over 50,176 positions, and the biases before a
// BatchNorm have a true gradient of 0 (BatchNorm subtracts any shift), so that what they
// hold is rounding noise. Every parameter's gradient must be no further from float64's
// than XLA's float32 gradient is (absolute L2 error, per tensor; within kSlack), at 1 and
// 2 threads.
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/testing.h"
#include "tests/golden.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

constexpr char kFile[] = "precision_bn_convnet.safetensors";

// XLA's error times this, at most. Where both are a few float32 ulps (most tensors here)
// the two are different roundings of the same sums: ours comes out 0.34-1.72x XLA's
// since the column sums accumulate in double (0.7-1.9x, and 2.6x on the first conv's
// bias, whose true gradient is 0, with float blocks). A sequential float sum over the
// positions (the kernel's 6.6x XLA's error, the bias's 71x before cpu_sums.h) fails.
constexpr double kSlack = 3.0;

TEST(PrecisionGolden, EveryGradientAsCloseToFloat64AsXlas) {
  ASSERT_OK_AND_ASSIGN(testing::SpecGolden g, testing::ReadSpecGolden(kFile));
  const Model& m = g.setup.model;
  const int b = static_cast<int>(g.spec.global_batch_size());
  const std::vector<float> hi = testing::GoldenParams(g.st, m, "ref_hi.");
  const std::vector<float> lo = testing::GoldenParams(g.st, m, "ref_lo.");
  for (int threads : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    auto backend = NewCpuBackend(threads);
    ASSERT_OK_AND_ASSIGN(auto exec, StepExecutor::Create(m, g.setup.optimizer, g.setup.impl, b,
                                                         backend.get(), nullptr));
    const Dataset data = testing::GoldenDataset(g.st, "data");  // Upload may keep a view of it
    ASSERT_OK_AND_ASSIGN(DeviceDataset d, exec->Upload(data));
    ASSERT_OK(exec->SetState(TrainState::Create(testing::GoldenParams(g.st, m, "init."),
                                                g.setup.optimizer, m.InitStats())));
    std::vector<int32_t> idx(b);
    std::iota(idx.begin(), idx.end(), 0);
    ASSERT_OK_AND_ASSIGN(StepMetrics metrics, exec->ComputeGradients(d, idx, {}));
    const std::vector<float> loss = *g.st.F32("ref_loss");
    EXPECT_NEAR(metrics.loss, double{loss[0]} + loss[1], 1e-6);
    ASSERT_OK_AND_ASSIGN(std::vector<float> grads, exec->Gradients());
    for (const ParamEntry& e : m.layout().entries()) {
      double err = 0, ref = 0;
      for (size_t i = e.offset; i < e.offset + e.size; ++i) {
        const double want = double{hi[i]} + double{lo[i]};
        err += (grads[i] - want) * (grads[i] - want);
        ref += want * want;
      }
      err = std::sqrt(err);
      const double xla = (*g.st.F32("xla_error." + e.name))[0];
      std::printf("  %-18s |g| %.3e  error %.3e  XLA's %.3e  (%.2fx)\n", e.name.c_str(),
                  std::sqrt(ref), err, xla, err / xla);
      EXPECT_LE(err, kSlack * xla) << e.name << ": |g| " << std::sqrt(ref);
    }
  }
}

}  // namespace
}  // namespace lockstep
