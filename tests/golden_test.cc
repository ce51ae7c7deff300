// The C++ core against JAX/Flax/optax: initial params, loss and gradients of both
// models, and 20 training steps with dropout (adam and sgd with momentum), from the
// golden files tools/reference/make_golden.py wrote.
#include "tests/golden.h"

#include "core/io/safetensors.h"
#include "core/model_spec.h"
#include "core/plan.h"
#include "core/testing.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

using testing::GoldenModelSpec;
using testing::GoldenParams;
using testing::GoldenPath;

class InitGolden : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(InitGolden, MatchesFlaxWithin1e6) {
  const auto [model_name, seed] = GetParam();
  ASSERT_OK_AND_ASSIGN(SafeTensors st,
                       SafeTensors::Read(GoldenPath(std::string("init_") + model_name + "_seed" +
                                                    std::to_string(seed) + ".safetensors")));
  ASSERT_OK_AND_ASSIGN(Model m, ModelFromSpec(GoldenModelSpec(st.metadata().at("model"))));
  EXPECT_EQ(st.tensors().size(), m.layout().entries().size());
  const auto impl = rng::Impl::kPartitionable;
  TrainingPlan plan(seed, seed, impl, 60000, 128, 1);
  const std::vector<float> mine = m.Init(plan.init_key(), impl);
  const std::vector<float> want = GoldenParams(st, m, "");
  for (const ParamEntry& e : m.layout().entries()) {
    std::span<const float> a(mine.data() + e.offset, e.size), b(want.data() + e.offset, e.size);
    EXPECT_LE(testing::MaxAbsDiff(a, b), 1e-6) << e.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, InitGolden,
                         ::testing::Combine(::testing::Values("cnn", "mlp"),
                                            ::testing::Values(0, 42)));

TEST(Golden, CnnCountsFlaxParams) { EXPECT_EQ(Model::Cnn().layout().total(), 824458u); }

class GradGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(GradGolden, LossAndEveryGradientWithin1e5) {
  auto backend = NewCpuBackend(DefaultCpuThreads());
  testing::ExpectGradientsMatchJax(backend.get(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, GradGolden, ::testing::Values("cnn", "mlp"));

class TrainGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(TrainGolden, TwentyDropoutStepsMatchOptax) {
  auto backend = NewCpuBackend(DefaultCpuThreads());
  testing::ExpectTrainingMatchesOptax(backend.get(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TrainGolden, ::testing::Values("adam", "sgd"));

}  // namespace
}  // namespace lockstep
