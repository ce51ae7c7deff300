// Models written as layer lists (model.layers) against Flax building the same spec
// (tools/reference/golden_layers.py): initial params, loss and every gradient, and 20
// training steps with dropout and the same masks. Together the files use every layer and
// option the spec offers on images, vision transformers included (golden_vit.py); the
// presets keep their own golden_test.
#include "core/io/safetensors.h"
#include "core/plan.h"
#include "core/testing.h"
#include "tests/golden.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

using testing::GoldenParams;

class LayersGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(LayersGolden, InitMatchesFlaxWithin1e6) {
  ASSERT_OK_AND_ASSIGN(testing::SpecGolden g, testing::ReadLayersGolden(GetParam()));
  int init_tensors = 0;
  for (const auto& [name, t] : g.st.tensors()) init_tensors += name.rfind("init.", 0) == 0;
  EXPECT_EQ(init_tensors, static_cast<int>(g.setup.model.layout().entries().size()));
  testing::ExpectInitWithin1e6(g);
}

TEST_P(LayersGolden, LossAndEveryGradientWithin1e5) {
  auto backend = NewCpuBackend(DefaultCpuThreads());
  testing::ExpectLayersGradientsMatchJax(backend.get(), GetParam());
}

TEST_P(LayersGolden, TwentyStepsWithDropoutMatchOptax) {
  auto backend = NewCpuBackend(DefaultCpuThreads());
  testing::ExpectLayersTrainingMatchesOptax(backend.get(), GetParam());
}

// vit_token and vit_gap: vision transformers (tools/reference/golden_vit.py).
INSTANTIATE_TEST_SUITE_P(Models, LayersGolden,
                         ::testing::Values("conv", "dense", "pool", "vit_token", "vit_gap"));

}  // namespace
}  // namespace lockstep
