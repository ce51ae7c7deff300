// optax beyond constant learning rates against optax itself, from the golden files
// tools/reference/golden_optax.py wrote: every schedule's learning rate over its counts
// (bitwise), the global norm clipping computes (within 1e-6), and 20 training steps of
// the dropout MLP with schedules, Nesterov and clip_by_global_norm (losses and params
// within 1e-5).
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/io/safetensors.h"
#include "core/model_spec.h"
#include "core/optimizer.h"
#include "core/optimizer_spec.h"
#include "core/spec/spec.h"
#include "core/testing.h"
#include "tests/golden.h"
#include "workers/cpu/cpu_backend.h"

namespace lockstep {
namespace {

using testing::GoldenPath;

TEST(OptaxScheduleGolden, EveryLearningRateIsBitwiseOptaxs) {
  ASSERT_OK_AND_ASSIGN(SafeTensors st,
                       SafeTensors::Read(GoldenPath("optax_schedules.safetensors")));
  const auto schedules = nlohmann::json::parse(st.metadata().at("schedules"));
  ASSERT_GE(schedules.size(), 10u);
  for (const auto& [name, optimizer] : schedules.items()) {
    SCOPED_TRACE(name);
    ASSERT_OK_AND_ASSIGN(v1::JobSpec spec,
                         ParseSpec(nlohmann::json{{"optimizer", optimizer}}.dump(), name));
    ASSERT_OK_AND_ASSIGN(Optimizer opt, OptimizerFromSpec(spec.optimizer()));
    ASSERT_OK_AND_ASSIGN(std::vector<int32_t> counts, st.I32(name + ".count"));
    ASSERT_OK_AND_ASSIGN(std::vector<float> want, st.F32(name + ".lr"));
    ASSERT_EQ(counts.size(), want.size());
    int differ = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      const float got = opt.learning_rate()(counts[i]);
      if (std::memcmp(&got, &want[i], sizeof(float)) != 0 && ++differ <= 3) {
        ADD_FAILURE() << "count " << counts[i] << ": " << got << " vs optax's " << want[i];
      }
    }
    EXPECT_EQ(differ, 0) << "of " << counts.size() << " counts";
  }
}

// clip_by_global_norm's norm: the backend's double sums in their fixed order against
// optax's float32 global norm of the golden gradients (824,458 of the CNN's).
TEST(OptaxNormGolden, GlobalNormIsOptaxsWithin1e6) {
  ASSERT_OK_AND_ASSIGN(SafeTensors norms,
                       SafeTensors::Read(GoldenPath("optax_schedules.safetensors")));
  ASSERT_OK_AND_ASSIGN(SafeTensors grads, SafeTensors::Read(GoldenPath("grads.safetensors")));
  auto backend = NewCpuBackend(DefaultCpuThreads());
  for (const std::string model : {"cnn", "mlp"}) {
    const Model m = model == "cnn"
                        ? Model::Cnn()
                        : *ModelFromSpec(testing::GoldenModelSpec(grads.metadata().at("mlp")));
    std::vector<float> g = testing::GoldenParams(grads, m, model + ".grads.");
    std::vector<double> sums(SumSquaresPartials(g.size()) + 1);
    EXPECT_OK(backend->SumSquares(g.size(), g.data(), sums.data(), &sums.back()));
    const float norm = static_cast<float>(std::sqrt(sums.back()));
    ASSERT_OK_AND_ASSIGN(std::vector<float> want, norms.F32(model + ".grads_norm"));
    EXPECT_NEAR(norm, want[0], 1e-6 * want[0]) << model;
    // Clipped to half the norm, every gradient halves.
    std::vector<float> clipped = g;
    EXPECT_OK(backend->ClipByGlobalNorm(g.size(), norm / 2, &sums.back(), clipped.data()));
    EXPECT_NEAR(clipped[0], g[0] / 2, 1e-6 * std::fabs(g[0])) << model;
  }
}

class OptaxTrainGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(OptaxTrainGolden, TwentyDropoutStepsMatchOptax) {
  auto backend = NewCpuBackend(DefaultCpuThreads());
  testing::ExpectTrainingMatchesGolden(backend.get(),
                                       std::string("optax_train_") + GetParam() + ".safetensors");
}

INSTANTIATE_TEST_SUITE_P(Options, OptaxTrainGolden,
                         ::testing::Values("sgd_nesterov_cosine", "adam_warmup_cosine_clip",
                                           "adamw_piecewise", "sgd_exponential_staircase",
                                           "sgd_clipped"));

}  // namespace
}  // namespace lockstep
