// Mixed precision against JAX on the CPU backend (tests/golden_bf16.h): each model
// family's bfloat16 step within bfloat16 rounding of JAX's and no less precise than it,
// at 1 and 2 threads. Skipped where the CPU has no bfloat16 kernels (avx512_bf16, AMX).
#include "tests/golden_bf16.h"

#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

class Bf16Golden : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const absl::Status bf16 = NewCpuBackend(1)->Bf16Support();
    if (!bf16.ok()) GTEST_SKIP() << bf16.message();
  }
};

TEST_P(Bf16Golden, StepWithinBf16RoundingOfJaxAndNoLessPrecise) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    auto backend = NewCpuBackend(threads);
    testing::ExpectBf16StepMatchesJax(backend.get(), GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Bf16Golden,
                         ::testing::Values("cnn", "bn_convnet", "resnet", "decoder", "vit",
                                           "vit_gap"));

}  // namespace
}  // namespace lockstep
